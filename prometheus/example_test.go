package prometheus_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	shmprom "github.com/shmarena/shmarena/prometheus"

	"github.com/shmarena/shmarena"
)

// A sidecar that exports an arena's counters: it attaches read-only and
// registers one collector; serve the registry with promhttp.HandlerFor as
// usual. Dashboards aggregate with max, not sum: every process of the
// arena exports the same file-wide figures. Every metric has an arena
// label, the file's base name.
func ExampleNewCollector() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "arena")
	w, _ := shmarena.Open(path, shmarena.WithSize(1<<20))
	defer w.Close()
	m, _ := w.Map("sessions", shmarena.WithSlots(64))
	_ = m.Store("s1", []byte("ada"))

	a, err := shmarena.Open(path, shmarena.ReadOnly())
	if err != nil {
		panic(err)
	}
	defer a.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(shmprom.NewCollector(a))

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "shmarena_map_used" {
			for _, m := range f.GetMetric() {
				fmt.Println(f.GetName(), labels(m.GetLabel()), m.GetGauge().GetValue())
			}
		}
	}
	// Output: shmarena_map_used arena=arena region=sessions 1
}

// One process serving two arenas: one collector each, told apart by their
// arena labels (here the files' base names, "cache" and "queue").
func ExampleWithArenaLabel() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	reg := prometheus.NewRegistry()
	for _, name := range []string{"cache", "queue"} {
		a, err := shmarena.Open(filepath.Join(dir, name), shmarena.WithSize(1<<20))
		if err != nil {
			panic(err)
		}
		defer a.Close()
		reg.MustRegister(shmprom.NewCollector(a))
	}
	// The alternative: no arena label from the collector, one from the
	// registerer.
	c, _ := shmarena.Open(filepath.Join(dir, "other"), shmarena.WithSize(1<<20))
	defer c.Close()
	prometheus.WrapRegistererWith(prometheus.Labels{"arena": "third"}, reg).
		MustRegister(shmprom.NewCollector(c, shmprom.WithArenaLabel("")))

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "shmarena_size_bytes" {
			for _, m := range f.GetMetric() {
				fmt.Println(f.GetName(), labels(m.GetLabel()), m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// shmarena_size_bytes arena=cache 1.048576e+06
	// shmarena_size_bytes arena=queue 1.048576e+06
	// shmarena_size_bytes arena=third 1.048576e+06
}

func labels(ls []*dto.LabelPair) string {
	var out []string
	for _, l := range ls {
		out = append(out, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(out, " ")
}
