package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func accessSized(t *testing.T, c SizedCache, entry int, keys ...uint32) []bool {
	t.Helper()
	var out []bool
	for _, k := range keys {
		hit, err := c.Access(k, entry, entry)
		require.NoError(t, err)
		out = append(out, hit)
	}
	return out
}

func TestLRUBytes(t *testing.T) {
	c := NewLRUBytes(300)
	assert.Equal(t, []bool{false, false, false, true}, accessSized(t, c, 100, 1, 2, 3, 1))
	// 4 evicts 2, the least recent; 1 was read after 3.
	assert.Equal(t, []bool{false, true, true, false}, accessSized(t, c, 100, 4, 1, 3, 2))
	assert.LessOrEqual(t, c.Used(), int64(300))
	// An entry larger than the budget is not admitted and evicts nothing.
	assert.Equal(t, []bool{false, false}, accessSized(t, c, 301, 9, 9))
	assert.Equal(t, 3, c.Len())
	// A 250-byte entry evicts until it fits: all three go.
	accessSized(t, c, 250, 10)
	assert.Equal(t, 1, c.Len())
	assert.Equal(t, int64(250), c.Used())
}

func TestS3FIFOBytes(t *testing.T) {
	// 1,000 bytes: small 100, main 900, ghost 900.
	s := NewS3FIFOBytes(1000)
	// An entry the size of the small queue or more is not admitted.
	assert.Equal(t, []bool{false, false}, accessSized(t, s, 100, 1, 1))
	assert.Zero(t, s.Len())
	// Fill: 0 enters small (50 of 100 bytes), 1 fills it, the rest go to
	// main before the first eviction.
	for k := uint32(0); k < 20; k++ {
		accessSized(t, s, 50, k)
	}
	assert.Equal(t, int64(1000), s.Used())
	// 100 evicts 0, unread, from small to the ghost; 0 comes back into
	// main (a ghost hit), evicting 1 from small.
	assert.Equal(t, []bool{false, false}, accessSized(t, s, 50, 100, 0))
	assert.False(t, s.obj[0].inSmall)
	assert.True(t, s.obj[100].inSmall)
	assert.LessOrEqual(t, s.Used(), int64(1000))
	// A key read twice in small moves to main when its turn comes.
	accessSized(t, s, 50, 100, 100, 101, 102, 103)
	_, in := s.obj[100]
	assert.True(t, in)
	assert.False(t, s.obj[100].inSmall)
}

func TestClockBytes(t *testing.T) {
	c := NewClockBytes(300)
	accessSized(t, c, 100, 1, 2, 3, 1)
	// 4: 1 was read, goes round; 2 is evicted.
	assert.Equal(t, []bool{false, true, false}, accessSized(t, c, 100, 4, 1, 2))
	// MoveNeedsRoom: a read entry larger than the free space is evicted.
	m := NewClockBytes(300)
	m.MoveNeedsRoom = true
	accessSized(t, m, 150, 1)
	accessSized(t, m, 150, 1)
	accessSized(t, m, 100, 2)
	assert.Equal(t, []bool{false, false}, accessSized(t, m, 100, 3, 1))
}

func TestSized(t *testing.T) {
	tr, err := Generate(Spec{Name: "z", Kind: OneHit, Alpha: 1, OneHitFrac: 0.3, Keys: 1000, Requests: 20_000, Seed: 3})
	require.NoError(t, err)
	a, b := Sized(tr, Bimodal, 7), Sized(tr, Bimodal, 7)
	assert.Equal(t, a.Sizes, b.Sizes, "the same seed, the same sizes")
	for _, k := range tr.Keys {
		require.Less(t, int(k), len(a.Sizes))
	}
	big := 0
	for _, n := range a.Sizes {
		switch {
		case n >= 100 && n <= 400:
		case n >= 8<<10 && n <= 32<<10:
			big++
		default:
			t.Fatalf("bimodal size %d", n)
		}
	}
	assert.InDelta(t, 0.2, float64(big)/float64(len(a.Sizes)), 0.02)
	l := Sized(tr, LogNormal, 7)
	below := 0
	for _, n := range l.Sizes {
		if n < 1024 {
			below++
		}
	}
	assert.InDelta(t, 0.5, float64(below)/float64(len(l.Sizes)), 0.03, "median 1 KiB")
	assert.Equal(t, 3, keyLen(999))
	assert.Equal(t, 4, keyLen(1000))
	assert.Equal(t, 1, keyLen(0))
}
