package prometheus

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"crypto/sha256"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// live opens a writable arena with a map and a ring with an acking group,
// and a read-only handle on it for the collector.
func live(t *testing.T) (w, ro *shmarena.Arena, m *shmarena.Map, r *shmarena.Ring, g *shmarena.Group) {
	path := filepath.Join(t.TempDir(), "arena")
	w, err := shmarena.Open(path, shmarena.WithSize(1<<20))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	m, err = w.Map("cache", shmarena.WithSlots(64), shmarena.WithStripes(2))
	require.NoError(t, err)
	r, err = w.Ring("jobs", shmarena.WithSlots(16), shmarena.WithSlotSize(64), shmarena.WithMaxInFlight(4))
	require.NoError(t, err)
	g, err = r.Group("workers", shmarena.WithAck(time.Minute), shmarena.WithTopic("job"))
	require.NoError(t, err)
	ro, err = shmarena.Open(path, shmarena.ReadOnly())
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	return w, ro, m, r, g
}

func TestCollectorReadsAtScrapeTime(t *testing.T) {
	_, ro, m, r, g := live(t)
	c := NewCollector(ro, WithArenaLabel(""))
	require.NoError(t, m.Store("a", []byte("1")))
	require.NoError(t, m.Store("b", []byte("2")))
	m.Delete("b")
	for i := 0; i < 3; i++ {
		_, err := r.Publish("job", []byte{byte(i)})
		require.NoError(t, err)
	}
	_, err := r.Publish("other", nil)
	require.NoError(t, err)
	recs := g.Claim(2)
	require.Len(t, recs, 2)
	require.NoError(t, g.Ack(recs[0]))

	const head = `
# HELP shmarena_map_used MapStats.Used (see the shmarena package documentation).
# TYPE shmarena_map_used gauge
shmarena_map_used{region="cache"} %d
# HELP shmarena_map_tombstones MapStats.Tombstones (see the shmarena package documentation).
# TYPE shmarena_map_tombstones gauge
shmarena_map_tombstones{region="cache"} 0
# HELP shmarena_ring_published_total RingStats.Published (see the shmarena package documentation).
# TYPE shmarena_ring_published_total counter
shmarena_ring_published_total{region="jobs"} %d
# HELP shmarena_ring_slot_size_bytes RingStats.SlotSize (see the shmarena package documentation).
# TYPE shmarena_ring_slot_size_bytes gauge
shmarena_ring_slot_size_bytes{region="jobs"} 64
# HELP shmarena_group_delivered_total Records claimed by any member (first deliveries).
# TYPE shmarena_group_delivered_total counter
shmarena_group_delivered_total{group="workers",region="jobs",topic="job"} %d
# HELP shmarena_group_pending Records delivered and not finished (acking groups).
# TYPE shmarena_group_pending gauge
shmarena_group_pending{group="workers",region="jobs",topic="job"} %d
# HELP shmarena_processes Handles attached to the arena (read-only ones not counted).
# TYPE shmarena_processes gauge
shmarena_processes 1
# HELP shmarena_scrape_errors 1 when the last scrape could not read every region (a closed arena, a damaged ring).
# TYPE shmarena_scrape_errors gauge
shmarena_scrape_errors 0
`
	names := []string{"shmarena_map_used", "shmarena_map_tombstones", "shmarena_ring_published_total", "shmarena_ring_slot_size_bytes",
		"shmarena_group_delivered_total", "shmarena_group_pending", "shmarena_processes", "shmarena_scrape_errors"}
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(head, 1, 4, 2, 1)), names...))

	// The next scrape sees what was written since: nothing is cached.
	require.NoError(t, m.Store("c", []byte("3")))
	_, err = r.Publish("job", nil)
	require.NoError(t, err)
	require.NoError(t, g.Ack(recs[1]))
	require.NotEmpty(t, g.Claim(2))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(head, 2, 5, 4, 2)), names...))

	assert.InDelta(t, 0.0, testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		collectOnly(c, ch, "shmarena_group_oldest_pending_seconds")
	})), 5)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	assert.Greater(t, n, 20)
}

func TestCollectorAfterClose(t *testing.T) {
	_, ro, _, _, _ := live(t)
	c := NewCollector(ro, WithArenaLabel(""))
	require.NoError(t, ro.Close())
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP shmarena_scrape_errors 1 when the last scrape could not read every region (a closed arena, a damaged ring).
# TYPE shmarena_scrape_errors gauge
shmarena_scrape_errors 1
`)))
}

// collectOnly sends the metrics of c whose description names name.
func collectOnly(c prometheus.Collector, out chan<- prometheus.Metric, name string) {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	for m := range ch {
		if strings.Contains(m.Desc().String(), `"`+name+`"`) {
			out <- m
		}
	}
}

// Two arenas in one registry: their collectors differ by the arena label,
// and two collectors with one label are refused as duplicates.
func TestCollectorsOfTwoArenasInOneRegistry(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	var arenas []*shmarena.Arena
	for _, name := range []string{"a1", "a2"} {
		a, err := shmarena.Open(filepath.Join(dir, name), shmarena.WithSize(1<<20))
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Close() })
		arenas = append(arenas, a)
		require.NoError(t, reg.Register(NewCollector(a)))
	}
	require.Error(t, reg.Register(NewCollector(arenas[0], WithArenaLabel("a2"))), "a second collector with label a2")
	require.NoError(t, reg.Register(NewCollector(arenas[0], WithArenaLabel("again"))))
	n, err := testutil.GatherAndCount(reg, "shmarena_size_bytes")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shmarena_processes Handles attached to the arena (read-only ones not counted).
# TYPE shmarena_processes gauge
shmarena_processes{arena="a1"} 1
shmarena_processes{arena="a2"} 1
shmarena_processes{arena="again"} 1
`), "shmarena_processes")
	require.NoError(t, err)
}

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
func TestCollectorEvictingMap(t *testing.T) {
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
