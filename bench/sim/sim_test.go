package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// naiveLRU is LRU the obvious way: a slice, most recent last.
type naiveLRU struct {
	cap  int
	keys []uint32
}

func (c *naiveLRU) Access(k uint32) (bool, error) {
	if i := slices.Index(c.keys, k); i >= 0 {
		c.keys = append(slices.Delete(c.keys, i, i+1), k)
		return true, nil
	}
	if len(c.keys) == c.cap {
		c.keys = c.keys[1:]
	}
	c.keys = append(c.keys, k)
	return false, nil
}

func TestLRUMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, capacity := range []int{1, 2, 7, 50} {
		fast, slow := NewLRU(capacity), &naiveLRU{cap: capacity}
		for i := range 20_000 {
			k := uint32(rng.IntN(120))
			h1, _ := fast.Access(k)
			h2, _ := slow.Access(k)
			require.Equal(t, h2, h1, "capacity %d, request %d (key %d)", capacity, i, k)
			require.Equal(t, len(slow.keys), fast.Len())
		}
	}
}

func access(t *testing.T, c Cache, keys ...uint32) []bool {
	t.Helper()
	var hits []bool
	for _, k := range keys {
		h, err := c.Access(k)
		require.NoError(t, err)
		hits = append(hits, h)
	}
	return hits
}

func TestS3FIFOByHand(t *testing.T) {
	// Capacity 10: small 1, main 9, ghost 9; worked by hand from
	// libCacheSim's S3FIFO.c.
	s := NewS3FIFO(S3Config{Capacity: 10})
	// Before any eviction, keys past the small queue's one place go to
	// main: 1 in small, 2..10 in main.
	access(t, s, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	assert.Equal(t, 1, s.segs[0].small.n)
	assert.Equal(t, 9, s.segs[0].main.n)
	// 11 evicts the small queue's 1 (never read: to the ghost) and takes
	// its place. 1 is then a ghost hit: a miss that enters main, evicting
	// 11 from small (to the ghost).
	assert.Equal(t, []bool{false, false}, access(t, s, 11, 1))
	assert.Equal(t, 0, s.segs[0].small.n)
	assert.Equal(t, 10, s.segs[0].main.n)
	// 11, a ghost hit, enters main; main is over its 9, so 2 (never
	// read) goes. 2 is no ghost: it enters small, evicting main's 3.
	assert.Equal(t, []bool{false, false, true}, access(t, s, 11, 2, 2))
	// 4 is read twice: main's 2-bit clock will send it around twice.
	assert.Equal(t, []bool{true, true}, access(t, s, 4, 4))
	// 12 evicts small's 2, read only once (< 2): out, to the ghost. The
	// ghost hit on 2 puts it in main after evicting 12 from small.
	assert.Equal(t, []bool{false, false}, access(t, s, 12, 2))
	// Main is 4..10, 1, 11, 2 (10, over its 9): 13 evicts from main; 4
	// goes around (count 2 -> 1), 5 goes.
	assert.Equal(t, []bool{false, true, false}, access(t, s, 13, 4, 5))
	assert.Equal(t, 10, s.Len())
}

func TestS3FIFOThreshold(t *testing.T) {
	// A key read once in the small queue leaves it for good under the
	// reference (threshold 2) but moves to main under threshold 1.
	for thr, wantHit := range map[int]bool{2: false, 1: true} {
		s := NewS3FIFO(S3Config{Capacity: 20, NoGhost: true, Threshold: thr})
		access(t, s, 1000) // fills main until the first eviction: 0..18 in main
		for k := uint32(0); k < 19; k++ {
			access(t, s, k)
		}
		access(t, s, 100, 100) // the small queue's key, read once
		for k := uint32(200); k < 230; k++ {
			access(t, s, k) // churn: evictions from small and main
		}
		assert.Equal(t, []bool{wantHit}, access(t, s, 100), "threshold %d", thr)
	}
}

func TestS3FIFOBeatsLRUOnZipf(t *testing.T) {
	tr, err := Generate(Spec{Name: "z", Kind: Zipf, Alpha: 1, Keys: 10_000, Requests: 100_000, WarmupFrac: 0.2, Seed: 9})
	require.NoError(t, err)
	for _, c := range []int{100, 1000} {
		lru, err := Run(tr, NewLRU(c))
		require.NoError(t, err)
		s3 := NewS3FIFO(S3Config{Capacity: c})
		r, err := Run(tr, s3)
		require.NoError(t, err)
		assert.Greater(t, r.Ratio(), lru.Ratio()+0.03, "C=%d", c)
		assert.Equal(t, c, s3.Len())
		seg := NewS3FIFO(S3Config{SegmentSlots: c * 8 / 7, Segments: 3, NoGhost: true, Threshold: 1})
		_, err = Run(tr, seg)
		require.NoError(t, err)
		assert.Equal(t, seg.Capacity(), seg.Len())
		assert.InDelta(t, c, seg.Capacity(), 3)
	}
}

func TestGenerate(t *testing.T) {
	base := Spec{Name: "t", Keys: 1000, Requests: 50_000, WarmupFrac: 0.2, Alpha: 1, Seed: 5}
	z := base
	z.Kind = Zipf
	a, err := Generate(z)
	require.NoError(t, err)
	b, err := Generate(z)
	require.NoError(t, err)
	assert.Equal(t, a.Keys, b.Keys, "same spec, same trace")
	assert.Equal(t, 10_000, a.Warmup)
	counts := map[uint32]int{}
	for _, k := range a.Keys {
		require.Less(t, k, uint32(1000))
		counts[k]++
	}
	top := 0
	for _, n := range counts {
		top = max(top, n)
	}
	h := 0.0
	for k := 1; k <= 1000; k++ {
		h += 1 / float64(k)
	}
	assert.InDelta(t, 1/h, float64(top)/50_000, 0.01, "the top key's share is 1/H(n)")

	o := base
	o.Kind, o.OneHitFrac = OneHit, 0.3
	tr, err := Generate(o)
	require.NoError(t, err)
	seen, cold := map[uint32]bool{}, 0
	for _, k := range tr.Keys {
		if k >= 1000 {
			cold++
			require.False(t, seen[k], "a one-hit wonder came back")
			seen[k] = true
		}
	}
	assert.InDelta(t, 0.3, float64(cold)/50_000, 0.01)

	s := base
	s.Kind, s.ScanEvery, s.ScanLen = Scan, 10_000, 2_000
	tr, err = Generate(s)
	require.NoError(t, err)
	for i, k := range tr.Keys {
		inScan := i%10_000 >= 8_000
		require.Equal(t, inScan, k >= 1000, "request %d", i)
		if inScan && i%10_000 > 8_000 {
			require.Equal(t, tr.Keys[i-1]+1, k, "scans are sequential")
		}
	}

	_, err = Generate(Spec{Name: "bad", Kind: Zipf, Alpha: 1, Keys: 0, Requests: 1})
	assert.Error(t, err)
	_, err = Generate(Spec{Name: "bad", Kind: "nope", Alpha: 1, Keys: 10, Requests: 1})
	assert.Error(t, err)
	_, err = Generate(Spec{Name: "bad", Kind: Scan, Alpha: 1, Keys: 10, Requests: 1, ScanEvery: 5, ScanLen: 6})
	assert.Error(t, err)
}

func TestMapCache(t *testing.T) {
	c, err := NewMapCache(16384)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, []bool{false, true, false}, access(t, c, 42, 42, 43))
	for k := uint32(0); k < 160_000; k++ {
		_, err := c.Access(k)
		require.NoError(t, err)
	}
	st := c.Map.Stats()
	assert.Equal(t, 4*MapCapacity(4096), st.Used, "7/8 of each of its four segments")
	assert.Positive(t, st.Evicted)
	assert.Equal(t, 4, Segments(16384))
	assert.Equal(t, 1, Segments(2047))
	assert.Equal(t, 64, Segments(1<<20))
	assert.False(t, math.IsNaN(Result{}.Ratio()))
}

func TestFingerprintGhost(t *testing.T) {
	// Capacity 20, one segment: small 2, main 18, a table of 18
	// fingerprints. Before the first eviction 0 and 1 fill the small
	// queue and 2..19 go to main.
	s := NewS3FIFO(S3Config{Capacity: 20, Threshold: 1, FingerprintGhost: true})
	g := &s.segs[0]
	require.Len(t, g.fps, 18)
	access(t, s, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
	// 100 evicts small's 0, unread: remembered. 0 then evicts small's 1
	// (remembered) and, recalled, enters the main queue; its entry is
	// cleared, so it is recalled once.
	assert.Equal(t, []bool{false, false}, access(t, s, 100, 0))
	assert.Zero(t, s.obj[0]&s3InSmall, "0 went to the main queue")
	assert.NotZero(t, s.obj[100]&s3InSmall)
	i0, _ := g.fingerprint(mix64(0))
	assert.Zero(t, g.fps[i0], "0's entry cleared")
	assert.False(t, g.recalled(mix64(0)))
	assert.True(t, g.recalled(mix64(1)), "1 evicted unread from small: remembered")
	assert.False(t, g.recalled(mix64(1)), "and recalled once")

	// A newer fingerprint replaces an older one at the same entry.
	var a, b uint32 = 1000, 1001
	ia, fa := g.fingerprint(mix64(uint64(a)))
	for {
		ib, fb := g.fingerprint(mix64(uint64(b)))
		if ib == ia && fb != fa {
			break
		}
		b++
	}
	g.forget(mix64(uint64(a)))
	g.forget(mix64(uint64(b)))
	assert.False(t, g.recalled(mix64(uint64(a))), "a's fingerprint was replaced")
	assert.True(t, g.recalled(mix64(uint64(b))))

	// Without a ghost, a key evicted from small comes back to small.
	n := NewS3FIFO(S3Config{Capacity: 20, Threshold: 1, NoGhost: true})
	access(t, n, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 100, 0)
	assert.NotZero(t, n.obj[0]&s3InSmall)
	assert.Nil(t, n.segs[0].fps)

	// With the map's segments, every table is sized for the longest
	// segment, as the map sizes its ghost: 9/10 of its capacity.
	// 16,387 slots: segments of 4,096, the last 4,099, holding 3,584 and
	// 3,587; 3,228 fingerprints each (9/10 of the longest's 3,587).
	m := NewS3FIFO(MapModel(16387, true))
	require.Len(t, m.segs, 4)
	for i := range m.segs {
		assert.Equal(t, 3228, len(m.segs[i].fps), "segment %d", i)
	}
	assert.Equal(t, 3*3584+3587, m.Capacity())
}
