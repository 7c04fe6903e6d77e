package shmarena

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Lapsed values in the value space and lapsed counters are not returned by
// the fast path, on plain and evicting maps; Persist/Expire on a counter
// leave its value alone.
func TestValuesLapsedNotReturned(t *testing.T) {
	for _, evict := range []bool{false, true} {
		t.Run(fmt.Sprint(evict), func(t *testing.T) {
			opts := []RegionOption{WithSlots(1024), WithSlotSize(64), WithStripes(1), WithBytes(64 << 10)}
			if evict {
				opts = append(opts, WithEviction())
			}
			m := valueMap(t, opts...)
			for i := range 50 {
				k := "e" + strconv.Itoa(i)
				require.NoError(t, m.Store(k, make([]byte, 200), WithTTL(time.Hour)))
				c := "c" + strconv.Itoa(i)
				_, err := m.Add(c, 41, WithTTL(time.Hour))
				require.NoError(t, err)
				n, err := m.Add(c, 1)
				require.NoError(t, err)
				require.Equal(t, int64(42), n)
			}
			for i := range 50 {
				k, c := "e"+strconv.Itoa(i), "c"+strconv.Itoa(i)
				if i%2 == 0 {
					require.True(t, m.Persist(c))
					n, ok := m.Counter(c)
					require.True(t, ok)
					require.Equal(t, int64(42), n, "Persist changed the counter")
					ttl, ok := m.TTL(c)
					require.True(t, ok)
					require.Zero(t, ttl)
					require.True(t, m.Expire(c, time.Minute))
					ttl, _ = m.TTL(c)
					require.InDelta(t, float64(time.Minute), float64(ttl), float64(time.Second))
					n, _ = m.Counter(c)
					require.Equal(t, int64(42), n, "Expire changed the counter")
				}
				lapseNow(t, m, k)
				lapseNow(t, m, c)
				_, ok := m.Load(k)
				require.False(t, ok, "%s lapsed but loads", k)
				_, ok = m.Counter(c)
				require.False(t, ok, "%s lapsed but counts", c)
				n, err := m.Add(c, 5)
				require.NoError(t, err)
				require.Equal(t, int64(5), n, "an add to a lapsed counter starts over")
			}
			var keys []string
			for k := range m.Keys() {
				keys = append(keys, k)
			}
			require.Len(t, keys, 50, "only the 50 new counters: %v", keys)
		})
	}
}
