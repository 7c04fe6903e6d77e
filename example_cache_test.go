package shmarena_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/shmarena/shmarena"
)

// A cache shared by every process: it evicts instead of filling up, keeps
// what is read, and Clear empties it everywhere.
func ExampleWithEviction() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, err := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(4<<20))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	cache, err := a.Map("pages", shmarena.WithSlots(1024), shmarena.WithSlotSize(128), shmarena.WithEviction())
	if err != nil {
		panic(err)
	}
	cache.Store("home", []byte("<html>home</html>"))
	for i := range 5000 { // far more pages than slots: never ErrFull
		if err := cache.Store("page:"+strconv.Itoa(i), []byte("...")); err != nil {
			panic(err)
		}
		cache.Load("home") // read often: it stays
	}
	_, ok := cache.Load("home")
	st := cache.Stats()
	fmt.Println("home cached:", ok)
	fmt.Println("live:", st.Used, "of", st.Capacity, "slots; evicted:", st.Evicted)

	cache.Clear()
	fmt.Println("after Clear:", cache.Len())
	// Output:
	// home cached: true
	// live: 896 of 1024 slots; evicted: 4105
	// after Clear: 0
}
