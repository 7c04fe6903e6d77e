package shmarena

// Walks (Keys, All) under concurrent writes: every key present for the
// whole walk is yielded exactly once.

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// Keys and All promise (docs/guarantees.md "Deletes leave no tombstones", All's doc)
// every key present for the whole walk exactly once, even while deletes
// move entries in the walked segment.
func TestKeysYieldStableKeysOnceUnderMoves(t *testing.T) {
	m, stable, churn := denseSegment(t)
	stop := churnUntilStopped(1, func(_, i int) { deleteAndRestore(m, churn, i) })
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

// A key deleted and stored again while Keys walks its segment is yielded
// twice. Two keys X and Y share the segment's last slot as home; the
// segment wraps, so whichever comes second sits in slot 0. Deleting both
// (slot 0's first) and storing them in the other order swaps them
// between slot 0 and the last slot, and each delete is the last entry of
// its run, so nothing moves and the move version the walk validates
// against never changes. A walk that reads slot 0 before a swap and the
// last slot after it yields the same key twice. sync.Map.Range, whose
// promise All's doc cites, never visits a key more than once.
func TestKeysNeverYieldAKeyTwice(t *testing.T) {
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
	stop := churnUntilStopped(1, func(_, i int) {
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
