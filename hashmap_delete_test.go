package shmarena

// Deletes without tombstones: the entries that deletes and collections
// of lapsed entries move back stay visible to lock-free readers and
// counters, and no tombstone is left at rest.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A present key is never reported absent by a lock-free read while
// deletes move entries in its segment, unless the read gave up and
// counted Busy.
func TestLockFreeReadsDuringMoves(t *testing.T) {
	m, stable, churn := denseSegment(t)
	busy0 := m.Stats().Busy
	stop := churnUntilStopped(1, func(_, i int) { deleteAndRestore(m, churn, i) })
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
func TestAddsDuringMovesLoseNothing(t *testing.T) {
	m, stable, churn := denseSegment(t)
	var counters []string
	want := map[string]int64{}
	for i, k := range stable {
		if i%2 == 0 {
			counters = append(counters, k)
			want[k] = int64(i)
		}
	}
	stopChurn := churnUntilStopped(1, func(_, i int) { deleteAndRestore(m, churn, i) })
	defer stopChurn()
	var added [3][]int64
	for g := range added {
		added[g] = make([]int64, len(counters))
	}
	var bad atomic.Value
	stopAdd := churnUntilStopped(len(added), func(g, i int) {
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
// slot to end its run at. docs/guarantees.md: "Deletes leave no tombstones ...
// Stats().Tombstones is 0 at rest"; and Stats must agree with the slots.
func TestDeleteInFullSegmentLeavesNoTombstone(t *testing.T) {
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

// Lapsed entries collected by inserts (collectPath) move live ones back;
// readers of keys with no deadline never miss them without counting Busy.
func TestTTLCollectionMovesKeepStableKeys(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64))
	var stable []string
	for i := range 450 {
		k := "stable" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, []byte(k)))
		stable = append(stable, k)
	}
	busy0 := m.Stats().Busy
	stop := churnUntilStopped(1, func(_, i int) {
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
	checkMapAtRest(t, m, nil)
}

// A quiet map whose segment's move version reads odd with no writer (a
// crafted or damaged file): a miss should not stall for oddPatience and
// count Busy on every read until some delete happens to end the moves.
func TestOddMoveVersionWithNoWriterDoesNotStallMisses(t *testing.T) {
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

// A reader whose first question about the writer comes after its patience
// has run out (a machine so busy that its yields took that long) repairs
// the dead writer's odd move version and reads on; it does not report busy.
func TestOddMoveVersionRepairedLateIsNotBusy(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64))
	defer func(p, c time.Duration) { oddPatience, oddCheckAfter = p, c }(oddPatience, oddCheckAfter)
	oddPatience, oddCheckAfter = time.Nanosecond, 0
	require.NoError(t, m.Store("present", []byte("v")))
	mem.Store64(m.mem, m.lockOff(0)+stMoveVer, 7)
	busy0 := m.Stats().Busy
	for i := range 50 {
		require.False(t, m.Exists("absent"+strconv.Itoa(i)))
	}
	require.True(t, m.Exists("present"))
	require.Zero(t, m.Stats().Busy-busy0, "a reader that repaired the stripe counted busy")
	require.Zero(t, mem.Load64(m.mem, m.lockOff(0)+stMoveVer)&1, "the move version was left odd")
}
