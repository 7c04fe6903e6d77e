package shmarena

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

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/rlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review of the segmented map (issue 13): tests that try to break the
// lock-free reads, the moves of backward-shift deletion, eviction, Clear,
// iteration and repair.

// reviewChurn runs fn in g goroutines until stop is called, which waits
// for them.
func reviewChurn(g int, fn func(g, i int)) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				fn(w, i)
			}
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}

// reviewDenseSegment returns a one-segment plain map of 1,024 slots with
// stable keys (half of them counters) and churn keys filling it to about
// 85%, so nearly every delete of a churn key moves entries, stable ones
// among them.
func reviewDenseSegment(t *testing.T) (m *Map, stable []string, churn []string) {
	m = testMap(t, WithSlots(1024), WithSlotSize(64))
	require.Equal(t, uint64(1), m.stripes)
	for i := range 400 {
		k := "stable" + strconv.Itoa(i)
		if i%2 == 0 {
			_, err := m.Add(k, int64(i))
			require.NoError(t, err)
		} else {
			require.NoError(t, m.Store(k, []byte(k)))
		}
		stable = append(stable, k)
	}
	for i := range 470 {
		k := "churn" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, []byte(k)))
		churn = append(churn, k)
	}
	return m, stable, churn
}

// deleteAndRestore deletes churn key i and stores it again: at 85% load
// the delete nearly always moves entries back.
func reviewDeleteAndRestore(m *Map, churn []string, i int) {
	k := churn[i%len(churn)]
	m.Delete(k)
	_ = m.Store(k, []byte(k))
}

// Keys and All promise (README "Deletes leave no tombstones", All's doc)
// every key present for the whole walk exactly once, even while deletes
// move entries in the walked segment.
func TestReviewKeysYieldStableKeysOnceUnderMoves(t *testing.T) {
	m, stable, churn := reviewDenseSegment(t)
	stop := reviewChurn(1, func(_, i int) { reviewDeleteAndRestore(m, churn, i) })
	defer stop()
	bad := ""
	deadline := time.Now().Add(2 * time.Second)
	walks := 0
	for ; time.Now().Before(deadline) && bad == ""; walks++ {
		seen := map[string]int{}
		if walks%2 == 0 {
			for k := range m.Keys() {
				seen[k]++
			}
		} else {
			for k := range m.All() {
				seen[k]++
			}
		}
		for _, k := range stable {
			if seen[k] != 1 && bad == "" {
				bad = fmt.Sprintf("walk %d: stable key %s yielded %d times", walks, k, seen[k])
			}
		}
	}
	stop()
	t.Logf("%d walks, %d moves", walks, m.Stats().Moved)
	require.Empty(t, bad)
}

// A present key is never reported absent by a lock-free read while
// deletes move entries in its segment, unless the read gave up and
// counted Busy.
func TestReviewLockFreeReadsDuringMoves(t *testing.T) {
	m, stable, churn := reviewDenseSegment(t)
	busy0 := m.Stats().Busy
	stop := reviewChurn(1, func(_, i int) { reviewDeleteAndRestore(m, churn, i) })
	defer stop()
	var misses atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(1500 * time.Millisecond)
			for round := 0; time.Now().Before(end); round++ {
				for i, k := range stable {
					ok := true
					var what string
					switch (round + r) % 4 {
					case 0:
						var v []byte
						v, ok = m.Load(k)
						if ok && i%2 == 1 && string(v) != k {
							first.CompareAndSwap(nil, fmt.Sprintf("Load(%s) = %q", k, v))
						}
						what = "Load"
					case 1:
						ok, what = m.Exists(k), "Exists"
					case 2:
						var n int64
						if i%2 == 0 {
							n, ok = m.Counter(k)
							if ok && n < int64(i) {
								first.CompareAndSwap(nil, fmt.Sprintf("Counter(%s) = %d < %d", k, n, i))
							}
						} else {
							ok = m.Exists(k)
						}
						what = "Counter"
					case 3:
						_, ok = m.TTL(k)
						what = "TTL"
					}
					if !ok {
						misses.Add(1)
						first.CompareAndSwap(nil, fmt.Sprintf("%s(%s) missed in round %d", what, k, round))
					}
				}
			}
		}()
	}
	wg.Wait()
	stop()
	busy := m.Stats().Busy - busy0
	t.Logf("misses %d, busy %d, moves %d, first: %v", misses.Load(), busy, m.Stats().Moved, first.Load())
	if s, ok := first.Load().(string); ok && misses.Load() == 0 {
		t.Fatal(s) // a wrong value
	}
	require.LessOrEqual(t, misses.Load(), int64(busy), "present keys reported absent without counting Busy; first: %v", first.Load())
}

// Many concurrent Adds (lock-free and locked) on counters that deletes
// keep moving: no increment is lost or doubled, and readers never see a
// counter go back.
func TestReviewAddsDuringMovesLoseNothing(t *testing.T) {
	m, stable, churn := reviewDenseSegment(t)
	var counters []string
	want := map[string]int64{}
	for i, k := range stable {
		if i%2 == 0 {
			counters = append(counters, k)
			want[k] = int64(i)
		}
	}
	stopChurn := reviewChurn(1, func(_, i int) { reviewDeleteAndRestore(m, churn, i) })
	defer stopChurn()
	var added [3][]int64
	for g := range added {
		added[g] = make([]int64, len(counters))
	}
	var bad atomic.Value
	stopAdd := reviewChurn(len(added), func(g, i int) {
		c := (i*7 + g) % len(counters)
		n, err := m.Add(counters[c], 1)
		if err != nil {
			bad.CompareAndSwap(nil, fmt.Sprintf("Add: %v", err))
			return
		}
		if n <= want[counters[c]] {
			bad.CompareAndSwap(nil, fmt.Sprintf("Add(%s) returned %d", counters[c], n))
		}
		added[g][c]++
	})
	defer stopAdd()
	time.Sleep(1500 * time.Millisecond)
	stopAdd()
	stopChurn()
	require.Nil(t, bad.Load())
	for c, k := range counters {
		var sum int64
		for g := range added {
			sum += added[g][c]
		}
		n, ok := m.Counter(k)
		require.True(t, ok, k)
		require.Equal(t, want[k]+sum, n, "counter %s: adds lost or doubled", k)
	}
	require.Positive(t, m.Stats().Moved)
}

// A plain segment filled to its last slot: a delete there has no empty
// slot to end its run at. README: "Deletes leave no tombstones ...
// Stats().Tombstones is 0 at rest"; and Stats must agree with the slots.
func TestReviewDeleteInFullSegmentLeavesNoTombstone(t *testing.T) {
	m := testMap(t, WithSlots(64), WithSlotSize(64))
	var keys []string
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		err := m.Store(k, []byte(k))
		if errors.Is(err, ErrFull) {
			break
		}
		require.NoError(t, err)
		keys = append(keys, k)
	}
	require.Len(t, keys, 64, "a one-segment map of 64 slots fills every slot")
	require.True(t, m.Delete(keys[10]))
	used, tomb := tableCounts(t, m)
	st := m.Stats()
	require.Equal(t, used, st.Used)
	assert.Equal(t, tomb, st.Tombstones, "Stats().Tombstones against the slots")
	assert.Zero(t, tomb, "a tombstone at rest after a delete")
	// The tombstone gets reused: the segment's tombstone count must not
	// go below zero.
	require.NoError(t, m.Store("again", []byte("x")))
	require.Zero(t, int64(mem.Load64(m.mem, m.lockOff(0)+stTomb)), "tombstone count of the segment")
}

// reviewCheckMap checks a map at rest: every slot even, tags agree, no key
// twice, every key loads its value (per valueOf, nil = any), counts agree
// with the slots and with Keys, no moves open, no lock held, eviction
// queues sane.
func reviewCheckMap(t *testing.T, m *Map, valueOf func(k string) []byte) map[string]bool {
	t.Helper()
	used, tomb := tableCounts(t, m)
	st := m.Stats()
	require.Equal(t, used, st.Used, "Stats().Used against the slots")
	require.Equal(t, tomb, st.Tombstones, "Stats().Tombstones against the slots")
	require.Zero(t, tomb, "tombstones at rest")
	seen := map[string]bool{}
	for i := uint64(0); i < m.slots; i++ {
		off := m.slotOff(i)
		meta := mem.Load64(m.mem, off+sMeta)
		if metaState(meta) != stateLive {
			continue
		}
		k := string(mem.AppendBytes(nil, m.mem, keyOff(off, meta), metaKeyLen(meta)))
		require.False(t, seen[k], "key %q in two slots", k)
		seen[k] = true
		h := m.hashKey(k)
		require.Equal(t, h, mem.Load64(m.mem, off+sHash), "slot %d: hash of %q", i, k)
		require.Equal(t, m.stripeOf(h), min(i/m.segLen, m.stripes-1), "slot %d: %q outside its segment", i, k)
		v, ok := m.Load(k)
		require.True(t, ok, "key %q in slot %d does not read", k, i)
		if valueOf != nil {
			if want := valueOf(k); want != nil {
				require.True(t, bytes.Equal(want, v), "key %q reads %q", k, v)
			}
		}
	}
	n := 0
	for k := range m.Keys() {
		require.True(t, seen[k], "Keys yields %q, in no slot", k)
		n++
	}
	require.Equal(t, used, n, "Keys against the slots")
	for s := uint64(0); s < m.stripes; s++ {
		lk := m.lockOff(s)
		require.Zero(t, mem.Load64(m.mem, lk+stMoveVer)&1, "segment %d: moves left open", s)
		require.Zero(t, mem.Load64(m.mem, lk+stMoveFrom), "segment %d: move-from left", s)
		require.Zero(t, rlock.Owner(m.mem, lk), "segment %d held", s)
		if m.q.on {
			ns, ok1 := m.small(s).len(m.mem)
			nm, ok2 := m.main(s).len(m.mem)
			require.True(t, ok1 && ok2, "segment %d: queue counters damaged", s)
			require.LessOrEqual(t, ns+nm, m.q.smallCap+m.q.mainCap)
		}
	}
	return seen
}

// Writers of every kind at once on an evicting map, Clear among them;
// after quiescence the map agrees with itself.
func TestReviewEvictingMapAgreesWithItselfAfterMixedChurn(t *testing.T) {
	for _, evict := range []bool{true, false} {
		t.Run(fmt.Sprintf("evict=%v", evict), func(t *testing.T) {
			opts := []RegionOption{WithSlots(4096), WithSlotSize(96), WithStripes(4)}
			if evict {
				opts = append(opts, WithEviction())
			}
			m := testMap(t, opts...)
			var bad atomic.Value
			stop := reviewChurn(3, func(g, i int) {
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
			reviewCheckMap(t, m, func(k string) []byte {
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

// Clear of a closed map does nothing and does not panic; Clear of an
// evicting map empties the queues and ghost; the map works after.
func TestReviewClearClosedAndAfter(t *testing.T) {
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
func TestReviewClearRacingWritersProcesses(t *testing.T) {
	a, path := tempArena(t, 8<<20)
	m, err := reviewClearMap(a)
	require.NoError(t, err)
	runChildren(t, "review-clear-churn", 3, "SHMARENA_PATH="+path)
	reviewCheckMap(t, m, func(k string) []byte {
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

func reviewClearMap(a *Arena) (*Map, error) {
	return a.Map("clear", WithSlots(2048), WithSlotSize(96), WithStripes(2))
}

func init() {
	childRoles["review-clear-churn"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := reviewClearMap(a)
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

// Lapsed entries collected by inserts (collectPath) move live ones back;
// readers of keys with no deadline never miss them without counting Busy.
func TestReviewTTLCollectionMovesKeepStableKeys(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64))
	var stable []string
	for i := range 450 {
		k := "stable" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, []byte(k)))
		stable = append(stable, k)
	}
	busy0 := m.Stats().Busy
	stop := reviewChurn(1, func(_, i int) {
		k := "ttl" + strconv.Itoa(i%400)
		_ = m.Store(k, []byte(k), WithTTL(time.Duration(1+rand.IntN(300))*time.Microsecond))
	})
	defer stop()
	var misses atomic.Int64
	var first atomic.Value
	end := time.Now().Add(1200 * time.Millisecond)
	for time.Now().Before(end) {
		for _, k := range stable {
			if v, ok := m.Load(k); !ok || string(v) != k {
				misses.Add(1)
				first.CompareAndSwap(nil, fmt.Sprintf("Load(%s) = %q, %v", k, v, ok))
			}
		}
	}
	stop()
	st := m.Stats()
	t.Logf("expired %d, moved %d, busy %d, misses %d", st.Expired, st.Moved, st.Busy-busy0, misses.Load())
	require.Positive(t, st.Expired)
	require.LessOrEqual(t, misses.Load(), int64(st.Busy-busy0), "first: %v", first.Load())
	time.Sleep(time.Millisecond)
	for i := range 400 {
		require.False(t, m.Exists("ttl"+strconv.Itoa(i))) // collects it
	}
	reviewCheckMap(t, m, nil)
}

// Crafted eviction state (queue heads, tails and entries, use bytes, the
// ghost, the move version and move-from word) never makes an evicting map
// panic, refuse a write or hang; a repair-free map goes on serving.
func TestReviewCraftedEvictionStateIsHarmless(t *testing.T) {
	m := testMap(t, WithSlots(2048), WithSlotSize(64), WithStripes(2), WithEviction())
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2200 {
		k := "k" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, []byte(k)))
	}
	interesting := []uint64{0, 1, 2, 3, ^uint64(0), ^uint64(0) - 1, 1 << 63, 1<<32 - 1, uint64(m.q.mainCap), uint64(m.q.mainCap) + 1, uint64(m.q.smallCap)}
	word := func() uint64 {
		if rng.IntN(2) == 0 {
			return interesting[rng.IntN(len(interesting))]
		}
		return rng.Uint64()
	}
	start := time.Now()
	for round := range 300 {
		s := uint64(rng.IntN(int(m.stripes)))
		lk := m.lockOff(s)
		switch rng.IntN(6) {
		case 0: // a queue counter
			mem.Store64(m.mem, lk+[]int{stSmallHead, stSmallTail, stMainHead, stMainTail}[rng.IntN(4)], word())
		case 1: // queue entries: hashes of nothing, of another segment, of a live key
			q := m.small(s)
			if rng.IntN(2) == 0 {
				q = m.main(s)
			}
			for range 16 {
				h := word()
				if rng.IntN(2) == 0 {
					h = m.hashKey("k" + strconv.Itoa(rng.IntN(3000)))
				}
				mem.Store64(m.mem, q.ring+rng.IntN(int(q.cap))*8, h)
			}
		case 2: // use bytes
			for range 64 {
				m.setUse(uint64(rng.IntN(int(m.slots))), byte(rng.Uint32()))
			}
		case 3: // ghost
			for range 64 {
				mem.Store32(m.mem, m.ghostBase(s)+4*rng.IntN(int(m.q.ghostCap)), rng.Uint32())
			}
		case 4: // move version: even or odd, no writer
			mem.Store64(m.mem, lk+stMoveVer, word())
		case 5: // move-from
			mem.Store64(m.mem, lk+stMoveFrom, word())
		}
		for j := range 20 {
			k := "n" + strconv.Itoa(round*20+j)
			require.NoError(t, m.Store(k, []byte(k)), "round %d", round)
			v, ok := m.Load(k)
			require.True(t, ok, "round %d: %s just stored", round, k)
			require.Equal(t, k, string(v))
			m.Delete("n" + strconv.Itoa(round*20+j-rng.IntN(40)))
			m.Exists("absent" + strconv.Itoa(j))
		}
		for range m.Keys() {
		}
	}
	d := time.Since(start)
	st := m.Stats()
	t.Logf("300 rounds in %v, %+v", d, st)
	require.Zero(t, st.Full)
	require.Less(t, d, 10*time.Second, "crafted state made operations crawl")
}

// A quiet map whose segment's move version reads odd with no writer (a
// crafted or damaged file): a miss should not stall for oddPatience and
// count Busy on every read until some delete happens to end the moves.
func TestReviewOddMoveVersionWithNoWriterStallsMisses(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64))
	require.NoError(t, m.Store("present", []byte("v")))
	mem.Store64(m.mem, m.lockOff(0)+stMoveVer, 7)
	busy0 := m.Stats().Busy
	start := time.Now()
	for i := range 50 {
		require.False(t, m.Exists("absent"+strconv.Itoa(i)))
	}
	d := time.Since(start)
	busy := m.Stats().Busy - busy0
	t.Logf("50 misses took %v, busy %d", d, busy)
	require.Zero(t, busy, "misses on a quiet map counted busy")
}

// reviewFillEvict fills the crash-evict map's segment to its capacity with
// k0, k1, ... and returns their set.
func reviewFillEvict(t *testing.T, m *Map) map[string]bool {
	before := map[string]bool{}
	for i := range int(capacity(m.span(0).len())) {
		k := "k" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, churnValue(k)))
		before[k] = true
	}
	return before
}

// Crashes at the points TestCrashInsideEvictionAndMoves leaves out, and a
// recoverer killed inside the moves of its own repair (reseat): the next
// writer repairs, and the map agrees with itself with no key lost but
// those the crashed operations could remove.
func TestReviewCrashPointsAndDeadRecoverer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   [][2]string // (op, point) per killed child, in order
		maxGone int         // keys of k0.. that may be gone
	}{
		{"clear", [][2]string{{"clear", "clear"}}, 0},
		{"overwrite", [][2]string{{"overwrite", "overwrite"}}, 1},
		{"add-insert", [][2]string{{"add", "insert"}}, 1},
		{"recover-in-reseat", [][2]string{{"delete", "move"}, {"store", "move"}}, 400},
		{"recover-dies-twice", [][2]string{{"delete", "move"}, {"store", "recover"}, {"store", "move"}}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, path := tempArena(t, 1<<20)
			m, err := crashEvictMap(a)
			require.NoError(t, err)
			before := reviewFillEvict(t, m)
			for _, st := range tc.steps {
				killParked(t, child(t, "crash-evict-op", "SHMARENA_PATH="+path,
					"SHMARENA_OP="+st[0], "SHMARENA_POINT="+st[1]), st[1])
				require.NotZero(t, rlock.Owner(m.mem, m.lockOff(0)), "the child died holding the segment")
			}
			require.NoError(t, m.Store("after", churnValue("after")))
			require.Positive(t, m.Stats().Recoveries)
			seen := reviewCheckMap(t, m, func(k string) []byte {
				if k == "ctr" {
					return nil
				}
				return churnValue(k)
			})
			require.True(t, seen["after"])
			gone := 0
			for k := range before {
				if !seen[k] {
					gone++
				}
			}
			// The store of "after" found the segment at capacity: it
			// evicted one more.
			require.LessOrEqual(t, gone, tc.maxGone+1, "keys lost")
			if tc.name == "recover-in-reseat" || tc.name == "recover-dies-twice" {
				// The deleter removed a prefix k0..; the recoverers
				// deleted nothing.
				for i := range gone {
					require.False(t, seen["k"+strconv.Itoa(i)], "k%d kept while a later key was lost", i)
				}
			}
			for i := range 300 {
				k := "later" + strconv.Itoa(i)
				require.NoError(t, m.Store(k, churnValue(k)))
				m.Delete("k" + strconv.Itoa(i))
			}
			reviewCheckMap(t, m, func(k string) []byte {
				if k == "ctr" {
					return nil
				}
				return churnValue(k)
			})
		})
	}
}

// A key deleted and stored again while Keys walks its segment is yielded
// twice. Two keys X and Y share the segment's last slot as home; the
// segment wraps, so whichever comes second sits in slot 0. Deleting both
// (slot 0's first) and storing them in the other order swaps them
// between slot 0 and the last slot, and each delete is the last entry of
// its run, so nothing moves and the move version the walk validates
// against never changes. A walk that reads slot 0 before a swap and the
// last slot after it yields the same key twice. sync.Map.Range, whose
// promise All's doc cites, never visits a key more than once.
func TestReviewKeysNeverYieldAKeyTwice(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64))
	sp := m.span(0)
	var xy []string
	for i := 0; len(xy) < 2; i++ {
		k := "w" + strconv.Itoa(i)
		if m.home(m.hashKey(k)) == sp.hi-1 {
			xy = append(xy, k)
		}
	}
	x, y := xy[0], xy[1]
	require.NoError(t, m.Store(x, []byte(x)))
	require.NoError(t, m.Store(y, []byte(y)))
	mv := mem.Load64(m.mem, m.lockOff(0)+stMoveVer)
	stop := reviewChurn(1, func(_, i int) {
		first, second := x, y
		if i%2 == 1 {
			first, second = y, x
		}
		// second sits in slot 0, first in the last slot.
		m.Delete(second)
		m.Delete(first)
		_ = m.Store(second, []byte(second))
		_ = m.Store(first, []byte(first))
	})
	defer stop()
	bad := ""
	deadline := time.Now().Add(time.Second)
	walks := 0
	for ; time.Now().Before(deadline) && bad == ""; walks++ {
		seen := map[string]int{}
		for k := range m.Keys() {
			if seen[k]++; seen[k] > 1 {
				bad = fmt.Sprintf("walk %d: %s yielded twice", walks, k)
			}
		}
	}
	stop()
	require.Equal(t, mv, mem.Load64(m.mem, m.lockOff(0)+stMoveVer), "the swaps moved entries")
	require.Empty(t, bad)
}
