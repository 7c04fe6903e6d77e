package shmarena

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// Lock-free Adds (addInPlace) race with the writes that read a counter and
// decide by its value: LoadAndDelete, Swap, CompareAndSwap and
// CompareAndDelete. Each of those takes the value it read out of the map,
// so every successful Add must be counted exactly once in what they took
// plus what is left: an Add that landed between such a write's read and
// its write would be lost (or counted twice) without the pin.
func TestAddRacesWithValueDecidingWrites(t *testing.T) {
	for _, slotSize := range []int{256, 264} { // 16-aligned slots, and half misaligned
		t.Run(fmt.Sprintf("slot%d", slotSize), func(t *testing.T) {
			m := testMap(t, WithSlots(64), WithSlotSize(slotSize))
			const key = "hits"
			var added atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						_, err := m.Add(key, 1)
						switch {
						case err == nil:
							added.Add(1)
						case !errors.Is(err, ErrNotCounter):
							t.Error(err)
							return
						}
					}
				}()
			}
			var taken int64
			le := func(n int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(n)) }
			take := func(b []byte) {
				require.Len(t, b, 8, "took %q, not a counter", b)
				taken += int64(binary.LittleEndian.Uint64(b))
			}
			for added.Load() == 0 {
				runtime.Gosched() // let the adders start
			}
			for i := 0; i < 20000; i++ {
				switch i % 4 {
				case 0:
					if v, ok := m.LoadAndDelete(key); ok {
						take(v)
					}
				case 1:
					prev, loaded, err := m.Swap(key, []byte("not a counter"))
					require.NoError(t, err)
					if loaded {
						take(prev)
					}
					m.Delete(key)
				case 2:
					if n, ok := m.Counter(key); ok {
						swapped, err := m.CompareAndSwap(key, le(n), []byte("not a counter"))
						require.NoError(t, err)
						if swapped {
							taken += n
							m.Delete(key)
						}
					}
				case 3:
					if n, ok := m.Counter(key); ok && m.CompareAndDelete(key, le(n)) {
						taken += n
					}
				}
			}
			stop.Store(true)
			wg.Wait()
			left, _ := m.Counter(key)
			require.Positive(t, taken, "the writers never took a count: the race was not run")
			require.Equal(t, added.Load(), taken+left, "Adds lost or counted twice")
		})
	}
}

// A hint (see hintEntries) is only a guess: one that names another key's
// slot, a tombstone or no slot at all must leave Add exactly as correct.
func TestAddStaleHints(t *testing.T) {
	if !mem.HasCAS128 {
		t.Skip("Add always takes the stripe lock here, and uses no hints")
	}
	m := testMap(t, WithSlots(64))
	n, err := m.Add("a", 1) // creates, under the lock
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = m.Add("a", 0) // finds it, and leaves a hint
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	ha, hb := m.hashKey("a"), m.hashKey("b")
	slotOf := func(key string) uint64 {
		v, _, ok := m.readKey(key, m.hashKey(key), nil, false)
		require.True(t, ok, key)
		return uint64(v.off-m.slotBase) / uint64(m.slotSize)
	}
	require.Equal(t, hintOf(ha, slotOf("a")), mem.Load64(m.counterHints, int(hintIndex(ha)*8)), "Add left no hint")

	// The key deleted: its hint names a tombstone.
	require.True(t, m.Delete("a"))
	n, err = m.Add("a", 5)
	require.NoError(t, err)
	require.Equal(t, int64(5), n, "a deleted counter restarts")

	// The hint names another key's slot, a counter too.
	_, err = m.Add("b", 100)
	require.NoError(t, err)
	mem.Store64(m.counterHints, int(hintIndex(ha)*8), hintOf(ha, slotOf("b")))
	n, err = m.Add("a", 1)
	require.NoError(t, err)
	require.Equal(t, int64(6), n)
	c, _ := m.Counter("b")
	require.Equal(t, int64(100), c, "Add through a stale hint changed another key")

	// A hint whose hash bits match but whose slot is out of range, and one
	// for another hash.
	mem.Store64(m.counterHints, int(hintIndex(ha)*8), hintOf(ha, m.slots+5))
	n, err = m.Add("a", 1)
	require.NoError(t, err)
	require.Equal(t, int64(7), n)
	mem.Store64(m.counterHints, int(hintIndex(ha)*8), hintOf(hb, slotOf("b")))
	n, err = m.Add("a", 1)
	require.NoError(t, err)
	require.Equal(t, int64(8), n)
	c, _ = m.Counter("b")
	require.Equal(t, int64(100), c)

	// A key that became a plain value is refused, not added to.
	require.NoError(t, m.Store("a", []byte("plain")))
	_, err = m.Add("a", 1)
	require.ErrorIs(t, err, ErrNotCounter)
	v, _ := m.Load("a")
	require.Equal(t, "plain", string(v))
}
