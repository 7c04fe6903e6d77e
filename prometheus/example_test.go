package prometheus_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	shmprom "github.com/shmarena/shmarena/prometheus"

	"github.com/shmarena/shmarena"
)

// A sidecar that exports an arena's counters: it attaches read-only and
// registers one collector; serve the registry with promhttp.HandlerFor as
// usual. Dashboards aggregate with max, not sum: every process of the
// arena exports the same file-wide figures.
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
				fmt.Println(f.GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
			}
		}
	}
	// Output: shmarena_map_used sessions 1
}
