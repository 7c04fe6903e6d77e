package shmarena_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shmarena/shmarena"
)

func ExampleOpenTypedMap() {
	dir, err := os.MkdirTemp("", "shmarena-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	a, err := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	if err != nil {
		panic(err)
	}
	defer a.Close()

	type Route struct {
		Upstream string `msgpack:"upstream"`
		Weight   int    `msgpack:"weight"`
	}
	// Every process that opens the arena and asks for "routes" as a
	// TypedMap[Route] sees the same entries.
	routes, err := shmarena.OpenTypedMap[Route](a, "routes", shmarena.WithSlots(64))
	if err != nil {
		panic(err)
	}
	if err := routes.Store("example.org", Route{"10.0.0.1:80", 3}, shmarena.WithTTL(time.Minute)); err != nil {
		panic(err)
	}
	r, ok, err := routes.Load("example.org")
	fmt.Println(r, ok, err)

	// Update is a read-modify-write that no other process can interleave.
	r, err = routes.Update("example.org", func(old Route, ok bool) (Route, bool) {
		old.Weight++
		return old, true
	})
	fmt.Println(r, err)

	// CompareAndSwap compares encodings: equal values, equal bytes.
	swapped, err := routes.CompareAndSwap("example.org", Route{"10.0.0.1:80", 4}, Route{"10.0.0.2:80", 1})
	fmt.Println(swapped, err)

	for host, route := range routes.All() {
		fmt.Println(host, route.Upstream, route.Weight)
	}
	// Output:
	// {10.0.0.1:80 3} true <nil>
	// {10.0.0.1:80 4} <nil>
	// true <nil>
	// example.org 10.0.0.2:80 1
}
