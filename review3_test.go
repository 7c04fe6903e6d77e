package shmarena

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file: review 3 of the merged main (ReadOnly with evicting and
// typed maps, rings and groups; Check after churn; Clear racing typed
// writes; segment boundaries).

type r3Route struct {
	Upstream string
	Weight   int
}

// r3Regions opens (or creates) the regions the review's writer uses.
func r3Regions(a *Arena) (ev, pl *Map, tm *TypedMap[r3Route], r *Ring, err error) {
	if ev, err = a.Map("cache", WithSlots(8192), WithSlotSize(128), WithEviction()); err != nil {
		return
	}
	if pl, err = a.Map("plain", WithSlots(8193), WithSlotSize(128)); err != nil {
		return
	}
	if tm, err = OpenTypedMap[r3Route](a, "routes", WithSlots(1024), WithEviction()); err != nil {
		return
	}
	r, err = a.Ring("events", WithSlots(256), WithSlotSize(128), WithMaxInFlight(8))
	return
}

func init() {
	// r3-writer churns every kind of region until killed, printing
	// nothing; it sets up the regions and groups itself.
	childRoles["r3-writer"] = func() error {
		a, err := Open(os.Getenv("R3_PATH"))
		if err != nil {
			return err
		}
		ev, pl, tm, r, err := r3Regions(a)
		if err != nil {
			return err
		}
		g, err := r.Group("audit", WithTopic("t"))
		if err != nil {
			return err
		}
		q, err := r.Group("mailer", WithAck(time.Minute))
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
		for n := 0; ; n++ {
			k := strconv.Itoa(rng.IntN(20000))
			switch rng.IntN(10) {
			case 0, 1, 2:
				if err := ev.Store("e"+k, []byte("value-"+k), WithTTL(time.Duration(1+rng.IntN(50))*time.Millisecond)); err != nil {
					return err
				}
			case 3:
				ev.Delete("e" + k)
			case 4:
				if _, err := ev.Add("c"+strconv.Itoa(rng.IntN(300)), 1); err != nil {
					return err
				}
			case 5:
				_ = pl.Store("p"+strconv.Itoa(rng.IntN(6000)), []byte("v"+k))
				pl.Delete("p" + strconv.Itoa(rng.IntN(6000)))
			case 6:
				if err := tm.Store("r"+k, r3Route{"10.0.0." + k, n}); err != nil {
					return err
				}
			case 7:
				if _, err := tm.Update("r"+strconv.Itoa(rng.IntN(2000)), func(o r3Route, _ bool) (r3Route, bool) { o.Weight++; return o, true }); err != nil {
					return err
				}
			case 8:
				_, _ = r.Publish("t", []byte("rec "+k))
			case 9:
				g.Claim(4)
				if recs := q.Claim(4); len(recs) > 1 {
					_ = q.Ack(recs[1:]...)
				}
			}
		}
	}
}

// r3ReadAll calls every read method of a read-only handle on the
// review's regions and checks every write is refused with ErrReadOnly.
func r3ReadAll(t *testing.T, ro *Arena) {
	ev, pl, tm, r, err := r3Regions(ro)
	require.NoError(t, err)
	for _, m := range []*Map{ev, pl, tm.Bytes()} {
		for i := range 300 / raceSlowdown {
			k := strconv.Itoa(i)
			m.Load("e" + k)
			m.Exists("p" + k)
			m.Counter("c" + k)
			m.TTL("e" + k)
			m.AppendLoad(nil, "r"+k)
		}
		n := 0
		for range m.All() {
			n++
		}
		for range m.Keys() {
			n++
		}
		_ = m.Stats()
		_ = m.Len()
		m.Clear() // does nothing on a read-only handle
		require.ErrorIs(t, m.Store("x", []byte("y")), ErrReadOnly)
		_, err := m.Add("c1", 1)
		require.ErrorIs(t, err, ErrReadOnly)
		_, _, err = m.LoadOrStore("x", []byte("y"))
		require.ErrorIs(t, err, ErrReadOnly)
		assert.False(t, m.Delete("e1"))
		assert.False(t, m.Expire("e1", time.Second))
	}
	for i := range 100 {
		_, _, _ = tm.Load("r" + strconv.Itoa(i))
	}
	for range tm.All() {
	}
	_, err = tm.Update("r1", func(o r3Route, _ bool) (r3Route, bool) { return o, true })
	require.ErrorIs(t, err, ErrReadOnly)
	_ = tm.Len()
	_ = r.Stats()
	_ = r.Groups()
	_ = r.Head()
	c := r.Cursor(FromStart())
	c.Read(64)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	_ = c.Wait(ctx)
	cancel()
	_, err = r.Group("audit", WithTopic("t"))
	require.ErrorIs(t, err, ErrReadOnly)
	_, err = r.Publish("t", []byte("x"))
	require.ErrorIs(t, err, ErrReadOnly)
	_, err = ro.Check()
	require.NoError(t, err)
	_, err = ro.Locks()
	require.NoError(t, err)
	_, err = ro.Info()
	require.NoError(t, err)
	_, err = ro.Stats()
	require.NoError(t, err)
	_, err = ro.RecoverLocks()
	require.ErrorIs(t, err, ErrReadOnly)
}

// A read-only handle reads every region while a writer churns them, and
// after the writer is SIGKILLed mid-write reads them all again without
// writing a byte (no repair, no use count, no collection).
func TestReview3ReadOnlyAgainstKilledWriter(t *testing.T) {
	a, path := tempArena(t, 16<<20)
	_, _, _, _, err := r3Regions(a)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	for round := range 2 {
		w := child(t, "r3-writer", "R3_PATH="+path)
		require.NoError(t, w.Start())
		ro, err := Open(path, ReadOnly())
		require.NoError(t, err)
		ev, _, _, _, err := r3Regions(ro)
		require.NoError(t, err)
		moved0 := ev.Stats().Moved
		require.Eventually(t, func() bool { return ev.Stats().Moved > moved0+1000 }, 10*time.Second, time.Millisecond,
			"the writer churns the evicting map")
		r3ReadAll(t, ro) // while the writer runs: no panic, no fault
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		require.NoError(t, w.Process.Signal(syscall.SIGKILL))
		_ = w.Wait()
		before := fileHash(t, path)
		func() {
			defer func(d time.Duration) { oddPatience = d }(oddPatience)
			oddPatience = 2 * time.Millisecond
			r3ReadAll(t, ro)
			fs, err := ro.Check()
			require.NoError(t, err)
			assert.Empty(t, fs, "round %d: Check after a SIGKILL", round)
		}()
		require.NoError(t, ro.Close())
		require.Equal(t, before, fileHash(t, path), "round %d: a read-only handle wrote to the file", round)
	}
}

// Check on healthy maps left by heavy churn of evicting and plain maps
// (TTLs, deletes, counters, evictions, Clear) finds nothing, for several
// stripe counts and segment boundaries.
func TestReview3CheckAfterChurn(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []RegionOption
	}{
		{"evict-1", []RegionOption{WithSlots(1), WithSlotSize(64), WithEviction()}},
		{"evict-8191", []RegionOption{WithSlots(8191), WithSlotSize(64), WithEviction()}},
		{"evict-8192", []RegionOption{WithSlots(8192), WithSlotSize(64), WithEviction()}},
		{"evict-8193", []RegionOption{WithSlots(8193), WithSlotSize(64), WithEviction()}},
		{"evict-16384-stripes-3", []RegionOption{WithSlots(16384), WithSlotSize(64), WithEviction(), WithStripes(3)}},
		{"evict-20000-stripes-1", []RegionOption{WithSlots(20000), WithSlotSize(64), WithEviction(), WithStripes(1)}},
		{"plain-8191", []RegionOption{WithSlots(8191), WithSlotSize(64)}},
		{"plain-8193", []RegionOption{WithSlots(8193), WithSlotSize(64)}},
		{"plain-1", []RegionOption{WithSlots(1), WithSlotSize(64)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tempArena(t, 8<<20)
			m, err := a.Map("m", tc.opts...)
			require.NoError(t, err)
			evict := m.q.on
			rng := rand.New(rand.NewPCG(1, 2))
			keys := 3 * m.Capacity()
			for i := range 6 * m.Capacity() / raceSlowdown {
				k := strconv.Itoa(rng.IntN(keys))
				switch rng.IntN(6) {
				case 0, 1:
					err := m.Store("k"+k, []byte("v"+k), ttlOrNone(time.Duration(rng.IntN(3))*time.Millisecond)...)
					if evict {
						require.NoError(t, err)
					} else if err != nil {
						require.ErrorIs(t, err, ErrFull)
					}
				case 2:
					m.Delete("k" + k)
				case 3:
					if _, err := m.Add("c"+k, 1); err != nil && !evict {
						require.ErrorIs(t, err, ErrFull)
					} else {
						require.NoError(t, err)
					}
				case 4:
					m.Load("k" + k)
				case 5:
					if i%(2*m.Capacity()+1) == 0 {
						m.Clear()
					}
				}
			}
			fs, err := a.Check()
			require.NoError(t, err)
			assert.Empty(t, fs)
			n := 0
			for range m.Keys() {
				n++
			}
			assert.LessOrEqual(t, n, m.Len(), "Keys yields no more than Len counts")
			if evict {
				assert.LessOrEqual(t, m.Len(), max(1, m.Capacity()-m.Capacity()/8)*int(m.stripes), "7/8 of the slots at most")
			}
			m.Clear()
			assert.Zero(t, m.Len())
			fs, err = a.Check()
			require.NoError(t, err)
			assert.Empty(t, fs)
		})
	}
}

// Clear races TypedMap.Update, Map.Add and LoadOrStore on an evicting map
// of several segments: each goroutine's operations keep working, and the
// map is sound afterwards.
func TestReview3ClearRacesTypedWrites(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	tm, err := OpenTypedMap[r3Route](a, "routes", WithSlots(8193), WithEviction(), WithStripes(3))
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
		_, err := tm.Update("u"+strconv.Itoa(i%500), func(o r3Route, _ bool) (r3Route, bool) { o.Weight++; return o, true })
		return err
	})
	run(func(i int) error {
		_, _, err := tm.LoadOrStore("l"+strconv.Itoa(i%9000), r3Route{"x", i})
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

// checkWhileWriting runs Check (on a writable and a read-only handle)
// up to 300 times while goroutines churn an evicting, a plain and a typed
// map (TTLs, deletes, counters, Clear), and returns the findings whose
// text contains want (every finding when want is "").
func checkWhileWriting(t *testing.T, want string, skip string) []string {
	a, path := tempArena(t, 16<<20)
	m, err := a.Map("ev", WithSlots(8193), WithSlotSize(64), WithEviction(), WithStripes(2))
	require.NoError(t, err)
	p, err := a.Map("pl", WithSlots(8191), WithSlotSize(64))
	require.NoError(t, err)
	tm, err := OpenTypedMap[r3Route](a, "tm", WithSlots(4096), WithEviction())
	require.NoError(t, err)
	ro, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer ro.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for !stop.Load() {
				k := strconv.Itoa(rng.IntN(30000))
				switch rng.IntN(9) {
				case 0, 1:
					_ = m.Store("k"+k, []byte(k), ttlOrNone(time.Duration(rng.IntN(5))*time.Millisecond)...)
				case 2:
					m.Delete("k" + k)
				case 3:
					_, _ = m.Add("c"+k, 1)
				case 4:
					m.Load("k" + k)
				case 5:
					_ = p.Store("p"+strconv.Itoa(rng.IntN(7000)), []byte(k))
					p.Delete("p" + strconv.Itoa(rng.IntN(7000)))
				case 6:
					_, _ = tm.Update("u"+k, func(o r3Route, _ bool) (r3Route, bool) { o.Weight++; return o, true })
				case 7:
					if rng.IntN(2000) == 0 {
						m.Clear()
						tm.Clear()
						p.Clear()
					}
				case 8:
					tm.Delete("u" + k)
				}
			}
		}()
	}
	var findings []string
	for i := 0; i < 300 && len(findings) == 0; i++ {
		for _, h := range []*Arena{a, ro} {
			fs, err := h.Check()
			require.NoError(t, err)
			for _, f := range fs {
				if s := f.String(); strings.Contains(s, want) && (skip == "" || !strings.Contains(s, skip)) {
					findings = append(findings, s)
				}
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	fs, err := a.Check()
	require.NoError(t, err)
	require.Empty(t, fs, "the maps are healthy at rest")
	return findings
}

// Check reads the longest probe distance once, before its scan: a key
// inserted further from home during the scan raises it, and is then
// reported "beyond the longest probe distance".
func TestReview3CheckWhileWritersRunProbeDistance(t *testing.T) {
	assert.Empty(t, checkWhileWriting(t, "beyond the longest probe distance", ""), "Check while writers run")
}

// Check samples a segment's lock once, before scanning its slots: a
// delete that takes the lock after that leaves a hole (a tombstone while
// entries move back) that Check reports as "a tombstone at rest".
func TestReview3CheckWhileWritersRunOther(t *testing.T) {
	assert.Empty(t, checkWhileWriting(t, "", "beyond the longest probe distance"), "Check while writers run")
}

// One goroutine per counter Adds 1 while Clear runs: each Add returns
// either one more than the last, or 1 (the counter was cleared or evicted
// meanwhile), never anything else; lock-free Adds (16-byte CAS) included.
func TestReview3ClearRacesLockFreeAdd(t *testing.T) {
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

// Tiny evicting maps and ones at segment boundaries: Store and Add never
// fail, the key just written is present, Len never passes the capacity
// (n - n/8 per segment) and Check finds nothing.
func TestReview3TinyAndBoundaryEvictingMaps(t *testing.T) {
	a, _ := tempArena(t, 16<<20)
	for _, n := range []int{1, 2, 7, 8, 9, 4095, 4096, 4097, 8191, 8192, 8193} {
		m, err := a.Map("m"+strconv.Itoa(n), WithSlots(n), WithSlotSize(64), WithEviction())
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(uint64(n), 3))
		for range (8*n + 200) / raceSlowdown {
			k := "k" + strconv.Itoa(rng.IntN(3*n+3))
			switch rng.IntN(6) {
			case 0, 1:
				m.Load(k)
				continue
			case 2:
				k += "c"
				_, err = m.Add(k, 1)
			case 3:
				m.Delete(k)
				continue
			default:
				err = m.Store(k, []byte("v"), ttlOrNone(time.Duration(rng.IntN(2))*time.Hour)...)
			}
			require.NoError(t, err, "n=%d", n)
			require.True(t, m.Exists(k), "n=%d: %q just written is absent", n, k)
		}
		limit := 0
		for s := range m.stripes {
			sp := m.span(s)
			limit += int(max(1, sp.len()-sp.len()/8))
		}
		assert.LessOrEqual(t, m.Len(), limit, "n=%d", n)
	}
	fs, err := a.Check()
	require.NoError(t, err)
	assert.Empty(t, fs)
}

// Check compares a map's counts with its slots only when the counts held
// still during the scan; an evicting map at capacity keeps Used constant
// while every insert evicts another entry, so the counts "hold still"
// while the slots change under the scan.
func TestReview3CheckCountsOfAFullCache(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	m, err := a.Map("ev", WithSlots(8192), WithSlotSize(64), WithEviction())
	require.NoError(t, err)
	for i := range 3 * 8192 {
		require.NoError(t, m.Store("f"+strconv.Itoa(i), []byte("v")))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				_ = m.Store("g"+strconv.Itoa(g)+":"+strconv.Itoa(i), []byte("v"))
			}
		}()
	}
	var findings []string
	for i := 0; i < 500 && len(findings) == 0; i++ {
		fs, err := a.Check()
		require.NoError(t, err)
		for _, f := range fs {
			if strings.Contains(f.String(), "counts say") {
				findings = append(findings, f.String())
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	fs, err := a.Check()
	require.NoError(t, err)
	require.Empty(t, fs, "the map is healthy at rest")
	assert.Empty(t, findings, "Check while a full cache evicts")
}
