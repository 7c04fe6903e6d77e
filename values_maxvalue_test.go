package shmarena

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// MaxValue is storable on every share size, not only on shares that are
// multiples of 512: a share whose 1/32 reserve is not a multiple of 16
// gave a MaxValue whose record (rounded up to 16 bytes) passed the share
// less the reserve, so an empty plain map refused it (ErrFull), and an
// evicting map, asking for the record plus its move slack, evicted the
// whole segment and then reported it corrupt.
func TestValuesMaxValueFitsEveryShare(t *testing.T) {
	for _, share := range []int64{4160, 4096 + 3*64, 4288, 8192 + 64, 65536 + 64} {
		for _, evict := range []bool{false, true} {
			opts := []RegionOption{WithSlots(64), WithSlotSize(64), WithStripes(1), WithBytes(share)}
			if evict {
				opts = append(opts, WithEviction())
			}
			m := valueMap(t, opts...)
			if evict {
				require.NoError(t, m.Store("a", make([]byte, 1000)))
			}
			require.NoError(t, m.Store("k", make([]byte, m.MaxValue())), "share %d, evicting %v, MaxValue %d", share, evict, m.MaxValue())
			v, ok := m.Load("k")
			require.True(t, ok)
			require.Len(t, v, m.MaxValue())
			problems, _ := m.checkInvariants()
			require.Empty(t, problems)
		}
	}
}
