package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmarena/shmarena/bench/sim"
)

// TestHitRatioShort is the CI check of the evicting map's hit-ratio target, on a
// small Zipf 1.0 trace (20,000 keys, 200,000 requests, a few seconds): an
// evicting Map of C slots beats an exact LRU of C entries, and scores
// what its simulated model (sim.MapModel: S3-FIFO moving an entry read
// once, 7/8 of each segment's slots live, the map's segments, the map's
// fingerprint ghost) scores, within 1 point.
func TestHitRatioShort(t *testing.T) {
	spec := sim.ShortSpecs()[0]
	require.Equal(t, sim.Zipf, spec.Kind)
	tr, err := sim.Generate(spec)
	require.NoError(t, err)
	for _, c := range sim.ShortSizes() {
		lru, err := sim.Run(tr, sim.NewLRU(c))
		require.NoError(t, err)
		s3, err := sim.Run(tr, sim.NewS3FIFO(sim.S3Config{Capacity: c}))
		require.NoError(t, err)
		mc := sim.NewS3FIFO(sim.MapModel(c, true))
		model, err := sim.Run(tr, mc)
		require.NoError(t, err)
		m, st, err := sim.RunMap(tr, c)
		require.NoError(t, err)
		t.Logf("C=%d: LRU %.4f, S3-FIFO %.4f, model %.4f, map %.4f (%d live of %d slots, %d evicted)",
			c, lru.Ratio(), s3.Ratio(), model.Ratio(), m.Ratio(), st.Used, st.Capacity, st.Evicted)
		assert.Greater(t, m.Ratio(), lru.Ratio(), "C=%d: the map must beat exact LRU", c)
		assert.InDelta(t, model.Ratio(), m.Ratio(), 0.01, "C=%d: the map strays from its S3-FIFO model", c)
		assert.Greater(t, s3.Ratio(), lru.Ratio(), "C=%d: the S3-FIFO reference must beat LRU on Zipf", c)
		assert.Equal(t, mc.Capacity(), st.Used, "C=%d: every segment full at 7/8 of its slots", c)
	}
}

// TestHitRatio is the evicting map's full hit-ratio benchmark: four traces of
// 5,000,000 requests over 1,000,000 keys at C = 0.1%, 1% and 10% of the
// keys; it checks both targets (the map beats exact LRU; it is within 2
// points of the S3-FIFO reference) at every point, and logs the tables of
// results.md. About four minutes; skipped with -short. The same tables:
// go run ./cmd/hitratio.
func TestHitRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("about four minutes: run without -short, or go run ./cmd/hitratio")
	}
	rows, err := sim.Measure(sim.FullSpecs(), sim.FullSizes(), nil)
	require.NoError(t, err)
	t.Logf("\n%s", sim.Markdown(rows))
	for _, r := range rows {
		assert.Greater(t, r.Map, r.LRU, "%s, C=%d: the map must beat exact LRU", r.Trace, r.C)
		assert.GreaterOrEqual(t, r.Map, r.S3-sim.S3Tolerance, "%s, C=%d: the map must be within 2 points of S3-FIFO", r.Trace, r.C)
		assert.InDelta(t, r.Model, r.Map, 0.01, "%s, C=%d: the map strays from its model", r.Trace, r.C)
	}
}
