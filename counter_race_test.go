package shmarena

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

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
