package shmarena_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/shmarena/shmarena"
)

// A worker that has just attached pays the first touch of each page of
// the mapping up front, before it serves requests.
func ExampleArena_Prefault() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)

	a, err := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(8<<20))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	took, err := a.Prefault()
	if err != nil {
		panic(err)
	}
	fmt.Println("prefaulted:", took > 0)
	// Output: prefaulted: true
}
