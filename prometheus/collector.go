// Package prometheus exports a shmarena arena's shared counters to
// Prometheus, in a module of its own so that the core keeps its four
// dependencies:
//
//	c := prometheus.NewCollector(arena)       // this package
//	registry.MustRegister(c)                  // client_golang's
//
// The collector reads the counters at scrape time (Arena.Stats), the
// pattern of client_golang's collectors.NewDBStatsCollector: nothing runs
// between scrapes. Open the arena ReadOnly in a sidecar that only exports,
// or pass the handle a worker already has.
//
// Every figure is file-wide: each process attached to the arena sees, and
// so exports, the same numbers. When several workers of one arena are
// scraped, aggregate with max (or pick one instance), never sum:
//
//	max by (arena, region) (rate(shmarena_map_expired_total[5m]))
//
// Every metric carries an arena label, the arena file's base name by
// default, so one process can serve several arenas: register one
// collector per arena. WithArenaLabel sets the value; WithArenaLabel("")
// leaves the label out, for a registry that adds its own, as
// prometheus.WrapRegistererWith does:
//
//	reg := prometheus.WrapRegistererWith(prometheus.Labels{"arena": "sessions"}, registry)
//	reg.MustRegister(prometheus.NewCollector(arena, prometheus.WithArenaLabel("")))
//
// A cache's hit ratio, from MapStats.Hits and Misses:
//
//	rate(shmarena_map_hits_total[5m]) / (rate(shmarena_map_hits_total[5m]) + rate(shmarena_map_misses_total[5m]))
//
// Metrics (arena, region and, for groups, group labels; counters end in _total):
//
//	shmarena_size_bytes, shmarena_used_bytes, shmarena_processes      gauges
//	shmarena_file_removed, shmarena_file_truncated   gauges, 1 when the file was
//	                                      removed or replaced at its path, or
//	                                      shrunk under the arena (alert on them)
//	shmarena_map_<field>                  a MapStats field: ints are gauges
//	                                      (used, capacity, ...), uint64s are
//	                                      counters (busy_total, full_total,
//	                                      expired_total, recoveries_total, ...)
//	shmarena_map_longest_probe_slots      gauge (MapStats.MaxProbe)
//	shmarena_ring_<field>                 a RingStats field, the same way
//	                                      (published_total, slots, ...)
//	shmarena_group_position, _lag, _pending, _floor, _oldest_pending_seconds  gauges
//	shmarena_group_delivered_total, _lapped_total, _skipped_total,
//	_abandoned_total, _redelivered_total, _dead_lettered_total             counters
package prometheus

import (
	"path/filepath"
	"reflect"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shmarena/shmarena"
)

// A Collector is a prometheus.Collector of one arena's statistics. It is
// safe for concurrent use (Prometheus may scrape it from several
// goroutines); each Collect reads the counters once.
type Collector struct {
	a *shmarena.Arena

	size, used, procs  *prometheus.Desc
	removed, truncated *prometheus.Desc
	probe              *prometheus.Desc
	mapFields          []field
	ringFields         []field
	groups             []groupMetric
	errors             *prometheus.Desc
}

// field is one numeric field of a Stats struct and its metric.
type field struct {
	index int
	desc  *prometheus.Desc
	typ   prometheus.ValueType
}

type groupMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(g shmarena.GroupStats) float64
}

// An Option configures NewCollector.
type Option func(*config)

type config struct {
	arena    string
	arenaSet bool
}

// WithArenaLabel sets the value of the arena label every metric carries
// (default: the base name of the arena's file, or "memfd" for an arena
// without a path). An empty value leaves the label out, for a registerer
// that adds its own (prometheus.WrapRegistererWith). Two collectors in
// one registry need different values, or registration fails as a
// duplicate.
func WithArenaLabel(value string) Option {
	return func(c *config) { c.arena, c.arenaSet = value, true }
}

// NewCollector returns a collector of a's statistics (every region's,
// every ring's groups included). It only reads, so a may be ReadOnly.
// After a's Close a scrape reports shmarena_scrape_errors 1 and nothing
// else.
func NewCollector(a *shmarena.Arena, opts ...Option) *Collector {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.arenaSet {
		cfg.arena = "memfd"
		if a.Path() != "" {
			cfg.arena = filepath.Base(a.Path())
		}
	}
	var constLabels prometheus.Labels
	if cfg.arena != "" {
		constLabels = prometheus.Labels{"arena": cfg.arena}
	}
	desc := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, constLabels)
	}
	c := &Collector{
		a:     a,
		size:  desc("shmarena_size_bytes", "The arena file's size.", nil),
		used:  desc("shmarena_used_bytes", "Bytes carved into regions, the header included.", nil),
		procs: desc("shmarena_processes", "Handles attached to the arena (read-only ones not counted).", nil),
		probe: desc("shmarena_map_longest_probe_slots", "Longest distance any insert went from a key's home slot.", []string{"region"}),
		removed: desc("shmarena_file_removed", "1 when the arena's file was removed, or its path names another file now: "+
			"processes still attached share no data with those that open the path (Stats.Removed).", nil),
		truncated: desc("shmarena_file_truncated", "1 when another process shrank the arena's file: its regions are gone "+
			"(Stats.Truncated).", nil),
		errors: desc("shmarena_scrape_errors", "1 when the last scrape could not read every region (a closed arena, a damaged ring).", nil),
	}
	c.mapFields = fields("shmarena_map_", reflect.TypeFor[shmarena.MapStats](), []string{"region"}, constLabels)
	c.ringFields = fields("shmarena_ring_", reflect.TypeFor[shmarena.RingStats](), []string{"region"}, constLabels)
	lbl := []string{"region", "group", "topic"}
	gauge := func(name, help string, f func(g shmarena.GroupStats) float64) groupMetric {
		return groupMetric{desc("shmarena_group_"+name, help, lbl), prometheus.GaugeValue, f}
	}
	counter := func(name, help string, f func(g shmarena.GroupStats) uint64) groupMetric {
		return groupMetric{desc("shmarena_group_"+name+"_total", help, lbl), prometheus.CounterValue,
			func(g shmarena.GroupStats) float64 { return float64(f(g)) }}
	}
	c.groups = []groupMetric{
		gauge("position", "The sequence number the group looks at next.", func(g shmarena.GroupStats) float64 { return float64(g.Position) }),
		gauge("lag", "Records the group has not looked at yet.", func(g shmarena.GroupStats) float64 { return float64(g.Lag) }),
		gauge("pending", "Records delivered and not finished (acking groups).", func(g shmarena.GroupStats) float64 { return float64(g.Pending) }),
		gauge("floor", "The oldest record not finished (acking groups).", func(g shmarena.GroupStats) float64 { return float64(g.Floor) }),
		gauge("oldest_pending_seconds", "Age of the oldest pending record's first delivery.", func(g shmarena.GroupStats) float64 { return g.OldestPending.Seconds() }),
		counter("delivered", "Records claimed by any member (first deliveries).", func(g shmarena.GroupStats) uint64 { return g.Delivered }),
		counter("lapped", "Records overwritten before any member claimed them.", func(g shmarena.GroupStats) uint64 { return g.Lapped }),
		counter("skipped", "Records of other topics a bound group stepped over.", func(g shmarena.GroupStats) uint64 { return g.Skipped }),
		counter("abandoned", "Holes and damaged slots the group stepped over.", func(g shmarena.GroupStats) uint64 { return g.Abandoned }),
		counter("redelivered", "Deliveries after the first.", func(g shmarena.GroupStats) uint64 { return g.Redelivered }),
		counter("dead_lettered", "Records given up after the maximum deliveries.", func(g shmarena.GroupStats) uint64 { return g.DeadLettered }),
	}
	return c
}

// fields makes a metric of every integer field of a Stats struct: signed
// ones are gauges, unsigned ones counters (the convention of MapStats and
// RingStats), so a field a later version adds is exported too.
func fields(prefix string, t reflect.Type, labels []string, constLabels prometheus.Labels) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Name == "MaxProbe" {
			continue // shmarena_map_longest_probe_slots, with its unit
		}
		name := prefix + snake(f.Name)
		var typ prometheus.ValueType
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Int32:
			typ = prometheus.GaugeValue
			if strings.HasSuffix(name, "_size") {
				name += "_bytes"
			}
		case reflect.Uint, reflect.Uint64, reflect.Uint32:
			typ = prometheus.CounterValue
			name += "_total"
		default:
			continue
		}
		help := "MapStats." + f.Name + " (see the shmarena package documentation)."
		if strings.HasPrefix(prefix, "shmarena_ring_") {
			help = "RingStats." + f.Name + " (see the shmarena package documentation)."
		}
		out = append(out, field{index: i, typ: typ, desc: prometheus.NewDesc(name, help, labels, constLabels)})
	}
	return out
}

// snake turns "SlotSize" into "slot_size".
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.size, c.used, c.procs, c.probe, c.errors, c.removed, c.truncated} {
		ch <- d
	}
	for _, f := range append(append([]field(nil), c.mapFields...), c.ringFields...) {
		ch <- f.desc
	}
	for _, g := range c.groups {
		ch <- g.desc
	}
}

// Collect reads the arena's statistics once and sends them.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.a.Stats()
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.GaugeValue, failed)
	if err == nil || st.Truncated {
		ch <- prometheus.MustNewConstMetric(c.removed, prometheus.GaugeValue, flag(st.Removed))
		ch <- prometheus.MustNewConstMetric(c.truncated, prometheus.GaugeValue, flag(st.Truncated))
	}
	if err != nil && len(st.Regions) == 0 {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(st.Size))
	ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(st.Used))
	ch <- prometheus.MustNewConstMetric(c.procs, prometheus.GaugeValue, float64(st.Processes))
	for _, r := range st.Regions {
		switch {
		case r.Map != nil:
			emit(ch, c.mapFields, reflect.ValueOf(*r.Map), r.Name)
			ch <- prometheus.MustNewConstMetric(c.probe, prometheus.GaugeValue, float64(r.Map.MaxProbe), r.Name)
		case r.Ring != nil:
			emit(ch, c.ringFields, reflect.ValueOf(*r.Ring), r.Name)
			for _, g := range r.Groups {
				for _, m := range c.groups {
					ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(g), r.Name, g.Name, g.Topic)
				}
			}
		}
	}
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func emit(ch chan<- prometheus.Metric, fs []field, v reflect.Value, region string) {
	for _, f := range fs {
		fv := v.Field(f.index)
		var x float64
		if fv.CanInt() {
			x = float64(fv.Int())
		} else {
			x = float64(fv.Uint())
		}
		ch <- prometheus.MustNewConstMetric(f.desc, f.typ, x, region)
	}
}
