package shmarena_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shmarena/shmarena"
)

// A response cache shared by worker processes: when a popular key lapses,
// one worker on the host recomputes it and the others wait for its value
// instead of all hitting the backend at once. Stats reads the hit ratio.
func ExampleMap_LoadOrCompute() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, err := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(4<<20))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	cache, err := a.Map("responses", shmarena.WithSlots(1024), shmarena.WithEviction())
	if err != nil {
		panic(err)
	}
	render := func(ctx context.Context) ([]byte, error) {
		return []byte("<h1>front page</h1>"), nil // the expensive backend call
	}
	for range 4 {
		page, loaded, err := cache.LoadOrCompute(context.Background(), "/", render, shmarena.WithTTL(time.Minute))
		if err != nil {
			panic(err)
		}
		fmt.Println(string(page), loaded)
	}
	st := cache.Stats()
	fmt.Printf("hits %d, misses %d, loads %d, hit ratio %.0f%%\n",
		st.Hits, st.Misses, st.Loads, 100*float64(st.Hits)/float64(st.Hits+st.Misses))
	// Output:
	// <h1>front page</h1> false
	// <h1>front page</h1> true
	// <h1>front page</h1> true
	// <h1>front page</h1> true
	// hits 3, misses 1, loads 1, hit ratio 75%
}

// Sizing an arena for one typed map exactly: MinSize plus TypedMapBytes,
// which counts the record of the value type that every typed map keeps.
func ExampleTypedMapBytes() {
	type session struct{ User string }
	opts := []shmarena.RegionOption{shmarena.WithSlots(1024), shmarena.WithSlotSize(128)}
	n, err := shmarena.TypedMapBytes(opts...)
	if err != nil {
		panic(err)
	}
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, err := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(shmarena.MinSize+n))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	if _, err := shmarena.OpenTypedMap[session](a, "sessions", opts...); err != nil {
		panic(err)
	}
	st, _ := a.Stats()
	fmt.Println(st.Used == st.Size)
	// Output: true
}

// The TTL rules (docs/ttl.md): a TTL of zero or less on a write is refused,
// Expire with zero or less deletes, Persist removes a deadline.
func ExampleMap_Expire() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, _ := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	defer a.Close()
	m, _ := a.Map("m", shmarena.WithSlots(64))

	deadline := time.Now().Add(-time.Second) // already passed
	err := m.Store("k", []byte("v"), shmarena.WithTTL(time.Until(deadline)))
	fmt.Println(err != nil, m.Exists("k"))

	_ = m.Store("k", []byte("v"), shmarena.WithTTL(time.Hour))
	fmt.Println(m.Persist("k"))
	left, ok := m.TTL("k")
	fmt.Println(left, ok)
	fmt.Println(m.Expire("k", 0), m.Exists("k"))
	// Output:
	// true false
	// true
	// 0s true
	// true false
}
