package shmarena

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// Goroutines each own a set of keys (so each has a model) and run random
// operations in a small, nearly full table with few slots per stripe, so
// slots pass between keys of different stripes constantly and chains wrap
// at the end of the table. Each checks its own keys after every operation;
// at the end no key may appear twice and All must equal the models.
func churnAgainstModels(t *testing.T, slots, goroutines, keysEach, steps int, ttl bool) {
	m := testMap(t, WithSlots(slots), WithSlotSize(64), WithStripes(min(slots, 16)))
	if ttl {
		require.NoError(t, m.Store("ttl-switch", nil, WithTTL(time.Nanosecond)))
	}
	models := make([]map[string][]byte, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			model := map[string][]byte{}
			counters := map[string]bool{}
			defer func() { models[g] = model }()
			for step := 0; step < steps; step++ {
				k := fmt.Sprintf("g%d/%d", g, r.IntN(keysEach))
				val := []byte(fmt.Sprintf("%s#%d", k, step))
				var opts []WriteOption
				if ttl && r.IntN(4) == 0 {
					opts = append(opts, WithTTL(time.Hour))
				}
				switch r.IntN(6) {
				case 0, 1:
					if err := m.Store(k, val, opts...); err == nil {
						model[k] = val
						delete(counters, k)
					} else if _, ok := model[k]; ok || !errors.Is(err, ErrFull) {
						t.Errorf("store %s: %v", k, err)
						return
					}
				case 2:
					_, want := model[k]
					if got := m.Delete(k); got != want {
						t.Errorf("step %d delete %s: %v, model %v", step, k, got, want)
						return
					}
					delete(model, k)
				case 3:
					if _, ok := model[k]; ok && !counters[k] {
						continue
					}
					n, err := m.Add(k, 1, opts...)
					if err != nil {
						if !errors.Is(err, ErrFull) {
							t.Errorf("add %s: %v", k, err)
							return
						}
						continue
					}
					model[k] = leBytes(uint64(n))
					counters[k] = true
				default:
				}
				for kk, want := range model {
					got, ok := loadPatiently(m, kk)
					if !ok || !bytes.Equal(got, want) {
						t.Errorf("step %d: %s = %q %v, want %q", step, kk, got, ok, want)
						return
					}
				}
				if _, ok := model[k]; !ok && m.Exists(k) {
					t.Errorf("step %d: %s exists after delete", step, k)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	all := map[string][]byte{}
	seen := map[string]int{}
	for k := range m.Keys() {
		seen[k]++
		require.Equal(t, 1, seen[k], "key %s twice", k)
	}
	for k, v := range m.All() {
		if k != "ttl-switch" {
			all[k] = v
		}
	}
	union := map[string][]byte{}
	for _, mo := range models {
		maps.Copy(union, mo)
	}
	require.Equal(t, union, all)
}

// Several goroutines churn their own keys in small tables, with and
// without the deadline switch (which changes how inserts find a slot).
func TestMapChurnAgainstModels(t *testing.T) {
	for _, ttl := range []bool{false, true} {
		for _, slots := range []int{8, 9, 16, 61} {
			t.Run(fmt.Sprintf("slots%d-ttl%v", slots, ttl), func(t *testing.T) {
				churnAgainstModels(t, slots, 4, slots/4+1, 3000, ttl)
			})
		}
	}
}

// Random tags (padding past the last tag included), random slot headers
// and a random probe limit and deadline switch: no operation may panic.
func TestMapRandomCorruption(t *testing.T) {
	for _, slots := range []int{5, 8, 9, 16} {
		t.Run(strconv.Itoa(slots), func(t *testing.T) {
			sz, err := MapBytes(WithSlots(slots), WithSlotSize(48), WithStripes(2))
			require.NoError(t, err)
			a, _ := tempArena(t, MinSize+sz)
			m, err := a.Map("m", WithSlots(slots), WithSlotSize(48), WithStripes(2))
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(uint64(slots), 1))
			tags := []byte{0, 1, 2, 0xff}
			for _, k := range []string{"key", "n", "other", "k\x00"} {
				for _, kk := range []string{k, k + "2", k + "3"} {
					tags = append(tags, tagOf(m.hashKey(kk)))
				}
			}
			for round := 0; round < 300; round++ {
				for i := m.tagBase; i < m.slotBase; i++ {
					m.mem[i] = tags[r.IntN(len(tags))]
				}
				for i := uint64(0); i < m.slots; i++ {
					off := m.slotOff(i)
					mem.Store64(m.mem, off+sVersion, uint64(r.IntN(4))<<seqShift)
					mem.Store64(m.mem, off+sMeta, r.Uint64()&0xffff00ff0000ff03)
					mem.Store64(m.mem, off+sHash, r.Uint64())
				}
				mem.Store64(m.mem, m.base+mhMaxProbe, r.Uint64N(2*m.slots))
				mem.Store64(m.mem, m.base+mhDeadlines, uint64(r.IntN(2)))
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("slots %d round %d: %v", slots, round, p)
						}
					}()
					exercise(m)
				}()
			}
		})
	}
}

// Keys stored once stay visible to lock-free readers while other
// stripes' keys are stored, deleted and added to around and across their
// slots, and the counter counts every Add.
func TestMapStableKeysUnderChurn(t *testing.T) {
	for _, slots := range []int{16, 24, 64} {
		for _, ttl := range []bool{false, true} {
			m := testMap(t, WithSlots(slots), WithSlotSize(64), WithStripes(8))
			if ttl {
				require.NoError(t, m.Store("ttl-switch", nil, WithTTL(time.Nanosecond)))
			}
			stable := map[string]string{}
			for i := 0; len(stable) < slots/2; i++ {
				k := "stable" + strconv.Itoa(i)
				require.NoError(t, m.Store(k, []byte(k)))
				stable[k] = k
			}
			_, err := m.Add("ctr", 0)
			require.NoError(t, err)
			var stop atomic.Bool
			var wg sync.WaitGroup
			var adds atomic.Int64
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !stop.Load(); i++ {
						k := fmt.Sprintf("churn%d-%d", g, i%7)
						var opts []WriteOption
						if ttl && i%3 == 0 {
							opts = append(opts, WithTTL(time.Microsecond))
						}
						_ = m.Store(k, []byte(k), opts...)
						m.Delete(fmt.Sprintf("churn%d-%d", g, (i+3)%7))
						if _, err := m.Add("ctr", 1); err == nil {
							adds.Add(1)
						}
					}
				}()
			}
			var rwg sync.WaitGroup
			for range 2 {
				rwg.Add(1)
				go func() {
					defer rwg.Done()
					for round := 0; round < 3000; round++ {
						for k, want := range stable {
							if got, ok := loadPatiently(m, k); !ok || string(got) != want {
								t.Errorf("slots %d ttl %v round %d: %s = %q %v", slots, ttl, round, k, got, ok)
								return
							}
						}
					}
				}()
			}
			rwg.Wait()
			stop.Store(true)
			wg.Wait()
			n, ok := m.Counter("ctr")
			require.True(t, ok)
			require.Equal(t, adds.Load(), n)
		}
	}
}

// Writers of every kind at once on an evicting map, Clear among them;
// after quiescence the map agrees with itself.
func TestMapAgreesWithItselfAfterMixedChurn(t *testing.T) {
	for _, evict := range []bool{true, false} {
		t.Run(fmt.Sprintf("evict=%v", evict), func(t *testing.T) {
			opts := []RegionOption{WithSlots(4096), WithSlotSize(96), WithStripes(4)}
			if evict {
				opts = append(opts, WithEviction())
			}
			m := testMap(t, opts...)
			var bad atomic.Value
			stop := churnUntilStopped(3, func(g, i int) {
				r := rand.IntN(100)
				k := "k" + strconv.Itoa(rand.IntN(6000))
				var err error
				switch {
				case r < 45:
					var opts []WriteOption
					if r < 10 {
						opts = append(opts, WithTTL(time.Duration(1+rand.IntN(2000))*time.Microsecond))
					}
					err = m.Store(k, churnValue(k), opts...)
				case r < 65:
					m.Delete(k)
				case r < 80:
					k = "c" + strconv.Itoa(rand.IntN(300))
					_, err = m.Add(k, 1)
				case r < 95:
					if v, ok := m.Load(k); ok && !bytes.Equal(v, churnValue(k)) {
						bad.CompareAndSwap(nil, fmt.Sprintf("Load(%s) = %q", k, v))
					}
				case r < 99:
					_, _, err = m.Swap(k, churnValue(k))
				default:
					if g == 0 && i%20 == 0 {
						m.Clear()
					}
				}
				if err != nil && !(errors.Is(err, ErrFull) && !evict) {
					bad.CompareAndSwap(nil, fmt.Sprintf("op on %s: %v", k, err))
				}
			})
			time.Sleep(time.Second)
			stop()
			require.Nil(t, bad.Load())
			time.Sleep(3 * time.Millisecond) // let the TTLs lapse: Used counts them, Keys not
			for k := range m.Keys() {
				_ = k
			}
			// Collect what lapsed so Used and Keys can agree.
			for i := range 6000 {
				m.Exists("k" + strconv.Itoa(i))
			}
			checkMapAtRest(t, m, func(k string) []byte {
				if k[0] == 'c' {
					return nil
				}
				return churnValue(k)
			})
			st := m.Stats()
			t.Logf("%+v", st)
			if evict {
				require.Zero(t, st.Full, "an evicting map refused")
			}
		})
	}
}
