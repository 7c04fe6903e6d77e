package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmarena/shmarena/bench/sim"
)

// TestHitRatioBytesShort is the CI check of the hit ratio by bytes, on the
// small Zipf 1.0 trace (20,000 keys, 200,000 requests) with both size
// mixes at budgets of 1% and 10% of the key space's bytes (a few
// seconds): the map WithBytes(budget) beats an exact LRU of the same
// budget by at least a point, and scores what its model (sim.ClockBytes,
// a CLOCK over the bytes) scores, within 1.5 points. The hit ratios are
// counts of hits, not timings.
func TestHitRatioBytesShort(t *testing.T) {
	spec := sim.ShortSpecs()[0]
	require.Equal(t, sim.Zipf, spec.Kind)
	tr, err := sim.Generate(spec)
	require.NoError(t, err)
	for mi, x := range sim.Mixes() {
		st := sim.Sized(tr, x, spec.Seed*100+uint64(mi))
		for _, share := range sim.ShortSizedShares() {
			budget := int64(float64(st.Bytes) * share)
			lru, err := sim.RunSized(st, sim.NewLRUBytes(budget))
			require.NoError(t, err)
			s3, err := sim.RunSized(st, sim.NewS3FIFOBytes(budget))
			require.NoError(t, err)
			model, err := sim.RunSized(st, sim.NewClockBytes(budget))
			require.NoError(t, err)
			slots := sim.SizedSlots(budget, st.MeanEntry())
			m, ms, err := sim.RunSizedMap(st, slots, budget)
			require.NoError(t, err)
			t.Logf("%s, %d of %d bytes: LRU %.4f, S3-FIFO %.4f, model %.4f, map %.4f (%d of %d slots, %d of %d bytes)",
				x.Name, budget, st.Bytes, lru.Ratio(), s3.Ratio(), model.Ratio(), m.Ratio(),
				ms.Used, slots, ms.BytesUsed, ms.BytesCapacity)
			assert.Greater(t, m.Ratio(), lru.Ratio()+0.01, "%s, %d bytes: the map must beat exact LRU by bytes", x.Name, budget)
			assert.InDelta(t, model.Ratio(), m.Ratio(), 0.015, "%s, %d bytes: the map strays from its CLOCK-by-bytes model", x.Name, budget)
			assert.Greater(t, s3.Ratio(), lru.Ratio(), "%s: S3-FIFO by bytes must beat LRU by bytes on Zipf", x.Name)
			assert.Less(t, ms.Used, slots*7/8*9/10, "%s: the slots bound the map, not the bytes", x.Name)
		}
	}
}

// TestHitRatioBytes is the full hit ratio by bytes: four traces of
// 2,000,000 requests over 200,000 keys, two size mixes, budgets of 0.1%,
// 1% and 10% of the key space's bytes, with ristretto v2 and otter v2 as
// in-process references; it logs the table of results.md and checks that
// the map beats exact LRU by bytes everywhere and tracks its model within
// 2 points. The other target, within 2 points of S3-FIFO by bytes, is
// missed (by 2.5 to 10.3 points: the map's eviction by bytes is a CLOCK over
// one log; see docs/cache.md): the table marks it, and this test does not
// assert it until the eviction changes. A few minutes; skipped with
// -short. The same table: go run ./cmd/hitratio -bytes.
func TestHitRatioBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("a few minutes: run without -short, or go run ./cmd/hitratio -bytes")
	}
	rows, err := sim.MeasureSized(sim.SizedSpecs(), sim.Mixes(), sim.SizedShares(), nil)
	require.NoError(t, err)
	t.Logf("\n%s", sim.SizedMarkdown(rows))
	for _, r := range rows {
		assert.Greater(t, r.Map, r.LRU, "%s, %s, %d bytes: the map must beat exact LRU by bytes", r.Trace, r.Mix, r.Budget)
		assert.InDelta(t, r.Clock, r.Map, 0.02, "%s, %s, %d bytes: the map strays from its model", r.Trace, r.Mix, r.Budget)
	}
}
