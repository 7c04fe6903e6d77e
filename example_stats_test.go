package shmarena_test

import (
	"encoding/json"
	"expvar"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shmarena/shmarena"
)

// Every region's counters in one value: published with expvar, they appear
// at /debug/vars under "shmarena" in a program that serves
// http.DefaultServeMux. A monitoring sidecar opens the arena ReadOnly().
func ExampleArena_Stats() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "arena")
	w, err := shmarena.Open(path, shmarena.WithSize(4<<20))
	if err != nil {
		panic(err)
	}
	defer w.Close()
	m, _ := w.Map("sessions", shmarena.WithSlots(256))
	_ = m.Store("s1", []byte("ada"))
	r, _ := w.Ring("events", shmarena.WithSlots(64))
	_, _ = r.Publish("login", []byte("s1"))

	a, err := shmarena.Open(path, shmarena.ReadOnly())
	if err != nil {
		panic(err)
	}
	defer a.Close()

	expvar.Publish("shmarena", expvar.Func(func() any { s, _ := a.Stats(); return s }))

	var vars struct{ Regions []shmarena.RegionStats }
	if err := json.NewDecoder(strings.NewReader(expvar.Get("shmarena").String())).Decode(&vars); err != nil {
		panic(err)
	}
	for _, rs := range vars.Regions {
		switch rs.Kind {
		case shmarena.KindMap:
			fmt.Printf("%s: map, %d of %d slots used\n", rs.Name, rs.Map.Used, rs.Map.Capacity)
		case shmarena.KindRing:
			fmt.Printf("%s: ring, %d published\n", rs.Name, rs.Ring.Published)
		}
	}
	// Output:
	// sessions: map, 1 of 256 slots used
	// events: ring, 1 published
}
