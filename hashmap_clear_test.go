package shmarena

// Clear, alone and racing every kind of write, in one process and in
// several.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["clear-churn"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := clearChurnMap(a)
		if err != nil {
			return err
		}
		id := envInt("SHMARENA_ID")
		end := time.Now().Add(700 * time.Millisecond)
		for i := 0; time.Now().Before(end); i++ {
			k := "k" + strconv.Itoa(rand.IntN(1500))
			switch r := rand.IntN(100); {
			case r < 50:
				if err := m.Store(k, churnValue(k)); err != nil && !errors.Is(err, ErrFull) {
					return err
				}
			case r < 75:
				m.Delete(k)
			case r < 97:
				c := "c" + strconv.Itoa(rand.IntN(50))
				if n, err := m.Add(c, 1); err != nil && !errors.Is(err, ErrFull) {
					return err
				} else if err == nil && n < 1 {
					return fmt.Errorf("Add(%s, 1) = %d", c, n)
				}
			default:
				if id == 0 {
					m.Clear()
				}
			}
			if v, ok := m.Load(k); ok && !bytes.Equal(v, churnValue(k)) {
				return fmt.Errorf("Load(%s) = %q", k, v)
			}
		}
		return nil
	}
}

// Clear races TypedMap.Update, Map.Add and LoadOrStore on an evicting map
// of several segments: each goroutine's operations keep working, and the
// map is sound afterwards.
func TestClearRacesTypedWrites(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	tm, err := OpenTypedMap[testRoute](a, "routes", WithSlots(8193), WithEviction(), WithStripes(3))
	require.NoError(t, err)
	cm, err := a.Map("counters", WithSlots(4096), WithEviction())
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	run := func(f func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	run(func(i int) error {
		_, err := tm.Update("u"+strconv.Itoa(i%500), func(o testRoute, _ bool) (testRoute, bool) { o.Weight++; return o, true })
		return err
	})
	run(func(i int) error {
		_, _, err := tm.LoadOrStore("l"+strconv.Itoa(i%9000), testRoute{"x", i})
		return err
	})
	run(func(i int) error {
		n, err := cm.Add("c"+strconv.Itoa(i%300), 1)
		if err == nil && n < 1 {
			return errors.New("Add returned " + strconv.FormatInt(n, 10))
		}
		return err
	})
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		tm.Clear()
		cm.Clear()
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	fs, err := a.Check()
	require.NoError(t, err)
	assert.Empty(t, fs)
	for k, v := range tm.All() {
		if k[0] == 'l' {
			assert.Equal(t, "x", v.Upstream)
		}
	}
}

// One goroutine per counter Adds 1 while Clear runs: each Add returns
// either one more than the last, or 1 (the counter was cleared or evicted
// meanwhile), never anything else; lock-free Adds (16-byte CAS) included.
func TestClearRacesLockFreeAdd(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []RegionOption
	}{
		{"plain-2-segments", []RegionOption{WithSlots(8192), WithSlotSize(64)}},
		{"evict-3-segments", []RegionOption{WithSlots(12288), WithSlotSize(64), WithEviction()}},
		{"evict-odd-slot-size", []RegionOption{WithSlots(8193), WithSlotSize(72), WithEviction()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tempArena(t, 8<<20)
			m, err := a.Map("m", tc.opts...)
			require.NoError(t, err)
			var stop atomic.Bool
			var wg sync.WaitGroup
			errs := make(chan string, 4)
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					last := map[string]int64{}
					for i := 0; !stop.Load(); i++ {
						k := "g" + strconv.Itoa(g) + ":" + strconv.Itoa(i%64)
						n, err := m.Add(k, 1)
						if err != nil {
							errs <- err.Error()
							return
						}
						if n != last[k]+1 && n != 1 {
							errs <- k + ": Add returned " + strconv.FormatInt(n, 10) + " after " + strconv.FormatInt(last[k], 10)
							return
						}
						last[k] = n
					}
				}()
			}
			for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
				m.Clear()
				time.Sleep(100 * time.Microsecond)
			}
			stop.Store(true)
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			fs, err := a.Check()
			require.NoError(t, err)
			assert.Empty(t, fs)
			m.Clear()
			assert.Zero(t, m.Len())
		})
	}
}

// Clear of a closed map does nothing and does not panic; Clear of an
// evicting map empties the queues and ghost; the map works after.
func TestClearClosedAndAfter(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	m, err := a.Map("m", WithSlots(2048), WithSlotSize(64), WithEviction())
	require.NoError(t, err)
	for i := range 3000 {
		k := "k" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, []byte(k)))
	}
	require.Positive(t, m.Stats().Evicted)
	m.Clear()
	require.Zero(t, m.Len())
	for s := uint64(0); s < m.stripes; s++ {
		n, ok := m.small(s).len(m.mem)
		require.True(t, ok)
		require.Zero(t, n)
		n, ok = m.main(s).len(m.mem)
		require.True(t, ok)
		require.Zero(t, n)
	}
	for k := range m.Keys() {
		t.Fatalf("key %s after Clear", k)
	}
	require.NoError(t, m.Store("x", []byte("y")))
	require.NoError(t, a.Close())
	require.NotPanics(t, m.Clear)
	require.Zero(t, m.Len())
}

// A Clear racing with Store, Delete and Add of keys in every segment, in
// several processes: at rest nothing is torn or doubled, counts agree.
func TestClearRacingWritersProcesses(t *testing.T) {
	a, path := tempArena(t, 8<<20)
	m, err := clearChurnMap(a)
	require.NoError(t, err)
	runChildren(t, "clear-churn", 3, "SHMARENA_PATH="+path)
	checkMapAtRest(t, m, func(k string) []byte {
		if k[0] == 'c' {
			return nil
		}
		return churnValue(k)
	})
	// Counters only ever had +1s: each is between 1 and the adds made.
	for k := range m.Keys() {
		if k[0] == 'c' {
			n, ok := m.Counter(k)
			require.True(t, ok, k)
			require.Positive(t, n, k)
		}
	}
}

func clearChurnMap(a *Arena) (*Map, error) {
	return a.Map("clear", WithSlots(2048), WithSlotSize(96), WithStripes(2))
}
