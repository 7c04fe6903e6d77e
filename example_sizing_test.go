package shmarena_test

import (
	"fmt"

	"github.com/shmarena/shmarena"
)

// Sizing the README's quick-start arena: MinSize for the header, then
// MapBytes, RingBytes and TypedMapBytes for each region with the options
// it will be opened with. An arena of exactly the total holds them all.
func ExampleMapBytes() {
	cache, _ := shmarena.MapBytes(shmarena.WithSlots(1<<16), shmarena.WithSlotSize(128),
		shmarena.WithBytes(64<<20), shmarena.WithEviction())
	counters, _ := shmarena.MapBytes(shmarena.WithSlots(16384), shmarena.WithSlotSize(64))
	ring, _ := shmarena.RingBytes(shmarena.WithSlots(4096), shmarena.WithSlotSize(512))
	routes, _ := shmarena.TypedMapBytes()
	total := shmarena.MinSize + cache + counters + ring + routes
	fmt.Println(cache, counters, ring, routes)
	fmt.Printf("%d bytes (%.1f MiB)\n", total, float64(total)/(1<<20))
	// Output:
	// 76428160 1078144 2289920 279872
	// 80092480 bytes (76.4 MiB)
}
