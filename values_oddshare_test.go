package shmarena

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A plain map's cleaning (cleanAhead, lift then move) loses and duplicates
// nothing, refuses only when live bytes fill the share less the reserve,
// and its live bytes match the slots, over shares of odd sizes.
func TestValuesPlainCleaningModelOddShares(t *testing.T) {
	for _, share := range []int64{4160, 8192, 12352, 66112} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%d/%d", share, seed), func(t *testing.T) {
				m := valueMap(t, WithSlots(2048), WithSlotSize(64), WithStripes(1), WithBytes(share))
				r := rand.New(rand.NewPCG(seed, uint64(share)))
				model := map[string][]byte{}
				liveBytes := func() uint64 {
					var n uint64
					for k, v := range model {
						if m.external(len(k), len(v)) {
							n += recordSize(len(v))
						}
					}
					return n
				}
				for i := range 6000 {
					k := "k" + strconv.Itoa(r.IntN(60))
					n := 1 + r.IntN(int(share)/8)
					switch r.IntN(20) {
					case 0:
						n = m.MaxValue() - r.IntN(64)
					case 1, 2:
						n = int(share) / 3
					}
					if r.IntN(6) == 0 {
						m.Delete(k)
						delete(model, k)
						continue
					}
					v := sealedValue(r, k, n)
					err := m.Store(k, v)
					if errors.Is(err, ErrFull) {
						old := uint64(0)
						if o, ok := model[k]; ok && m.external(len(k), len(o)) {
							old = recordSize(len(o))
						}
						lb := liveBytes() - old + recordSize(len(v))
						require.Greater(t, lb, uint64(share)-uint64(share)/32, "step %d: refused %d bytes with %d live of %d", i, len(v), liveBytes(), share)
						continue
					}
					require.NoError(t, err, "step %d", i)
					model[k] = v
					if i%50 == 0 {
						for k, v := range model {
							got, ok := m.Load(k)
							require.True(t, ok, "step %d: %s", i, k)
							require.True(t, bytes.Equal(v, got), "step %d: %s", i, k)
						}
						requireValueBytes(t, m, model)
					}
				}
				require.Equal(t, model, maps.Collect(m.All()))
				requireValueBytes(t, m, model)
				t.Logf("moved %d", m.Stats().BytesMoved)
			})
		}
	}
}

func TestValuesEvictingModelOddShares(t *testing.T) {
	for _, share := range []int64{4160, 8192, 12352, 66112, 200000 &^ 63} {
		t.Run(fmt.Sprint(share), func(t *testing.T) {
			m := valueMap(t, WithSlots(2048), WithSlotSize(64), WithStripes(1), WithBytes(share), WithEviction())
			r := rand.New(rand.NewPCG(7, uint64(share)))
			model := map[string][]byte{}
			for i := range 6000 {
				k := "k" + strconv.Itoa(r.IntN(200))
				n := 1 + r.IntN(int(share)/16)
				if r.IntN(30) == 0 {
					n = m.MaxValue() - 16 - r.IntN(200)
				}
				v := sealedValue(r, k, n)
				require.NoError(t, m.Store(k, v), "step %d, %d bytes", i, n)
				model[k] = v
				if r.IntN(3) == 0 {
					k := "k" + strconv.Itoa(r.IntN(200))
					if got, ok := m.Load(k); ok {
						require.True(t, bytes.Equal(model[k], got), "step %d: %s", i, k)
					}
				}
			}
			got := maps.Collect(m.All())
			for k, v := range got {
				require.Equal(t, model[k], v)
			}
			requireValueBytes(t, m, got)
		})
	}
}
