package shmarena

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Cleaning a plain map's value space moves each live byte it passes once
// per turn of the log, so at steady state of random deletes and inserts a
// byte stored costs a few bytes moved, not tens: the records a lift
// compacts in place must not stay at the head to be lifted again by the
// next writes, which made the cost grow with the share (here 40 bytes
// moved per byte stored at 94% full).
func TestValuesPlainCleaningCost(t *testing.T) {
	const share = 8 << 20
	m := valueMap(t, WithSlots(16384), WithSlotSize(64), WithStripes(1), WithBytes(share))
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 256<<10)
	keys := 16384
	churn := func(n int64) {
		for done := int64(0); done < n; {
			k := "k" + strconv.Itoa(r.IntN(keys))
			size := min(int(1024*math.Exp(r.NormFloat64())), len(buf))
			for err := m.Store(k, buf[:size]); err != nil; err = m.Store(k, buf[:size]) {
				require.ErrorIs(t, err, ErrFull)
				m.Delete("k" + strconv.Itoa(r.IntN(keys)))
			}
			done += int64(size)
		}
	}
	churn(3 * share) // to steady state
	before := m.Stats()
	churn(4 * share)
	after := m.Stats()
	moved := float64(after.BytesMoved-before.BytesMoved) / (4 * share)
	live := float64(after.BytesUsed) / share
	t.Logf("moved %.1f bytes per byte stored, %.3f of the share live", moved, live)
	require.Greater(t, live, 0.9, "the churn keeps the share about full")
	require.Less(t, moved, 1.5*live/(1-live), "bytes moved per byte stored, against u/(1-u) for a log at the fill it has")
}

// A plain map takes values until live bytes reach 31/32 of its segment's
// share: the reserve it keeps free for cleaning is 1/32, and the refusal
// names the figures.
func TestValuesPlainReserve(t *testing.T) {
	const share = 256 << 10
	m := valueMap(t, WithSlots(4096), WithSlotSize(64), WithStripes(1), WithBytes(share))
	v := make([]byte, 1008) // a 1,024-byte record
	var err error
	n := 0
	for ; err == nil; n++ {
		err = m.Store("k"+strconv.Itoa(n), v)
	}
	require.ErrorIs(t, err, ErrFull)
	require.Equal(t, share-share/32, (n-1)*1024, "live records at the first refusal")
	require.Contains(t, err.Error(), strconv.Itoa(share-share/32))
	require.Equal(t, share-share/32-recHeader, m.MaxValue())
	require.True(t, errors.Is(m.Store("k0", make([]byte, 2000)), ErrFull), "an overwrite that would pass the limit")
}
