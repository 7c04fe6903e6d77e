package prometheus

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape gathers c through a pedantic registry and returns each sample's
// value by "name{region}".
func scrape(t *testing.T, c prometheus.Collector) map[string]float64 {
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "region" {
					k += "{" + l.GetValue() + "}"
				}
			}
			if m.GetCounter() != nil {
				out[k] = m.GetCounter().GetValue()
			} else {
				out[k] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// The collector on a read-only handle exports an evicting map's and a
// typed map's eviction figures, its counters never go down across Clear,
// and a scrape writes nothing.
func TestReview3CollectorEvictingMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "arena")
	w, err := shmarena.Open(path, shmarena.WithSize(4<<20))
	require.NoError(t, err)
	defer w.Close()
	m, err := w.Map("cache", shmarena.WithSlots(1024), shmarena.WithSlotSize(64), shmarena.WithEviction())
	require.NoError(t, err)
	tm, err := shmarena.OpenTypedMap[struct{ A int }](w, "typed", shmarena.WithSlots(64), shmarena.WithEviction())
	require.NoError(t, err)
	for i := range 5000 {
		require.NoError(t, m.Store("k"+strconv.Itoa(i), []byte("v"), shmarena.WithTTL(time.Hour)))
		if i%3 == 0 {
			m.Delete("k" + strconv.Itoa(i-1))
		}
		require.NoError(t, tm.Store("t"+strconv.Itoa(i), struct{ A int }{i}))
	}
	require.NoError(t, w.Sync())
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	ro, err := shmarena.Open(path, shmarena.ReadOnly())
	require.NoError(t, err)
	defer ro.Close()
	c := NewCollector(ro)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)

	s1 := scrape(t, NewCollector(ro))
	st := m.Stats()
	assert.Equal(t, float64(st.Evicted), s1["shmarena_map_evicted_total{cache}"])
	assert.Positive(t, s1["shmarena_map_evicted_total{cache}"])
	assert.Positive(t, s1["shmarena_map_evicted_total{typed}"])
	assert.Equal(t, float64(st.Moved), s1["shmarena_map_moved_total{cache}"])
	assert.Equal(t, float64(st.Used), s1["shmarena_map_used{cache}"])
	assert.Equal(t, float64(1024), s1["shmarena_map_capacity{cache}"])
	assert.Equal(t, float64(st.MaxProbe), s1["shmarena_map_longest_probe_slots{cache}"])

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, sha256.Sum256(before), sha256.Sum256(after), "scrapes wrote to the file")

	m.Clear()
	tm.Clear()
	s2 := scrape(t, NewCollector(ro))
	assert.Zero(t, s2["shmarena_map_used{cache}"])
	assert.Zero(t, s2["shmarena_map_used{typed}"])
	for k, v := range s1 {
		if strings.Contains(k, "_total") {
			assert.GreaterOrEqual(t, s2[k], v, "counter %s went down across Clear", k)
		}
	}
}
