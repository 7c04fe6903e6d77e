// Package percpu names the processor (the runtime's P) a goroutine runs
// on, and keeps it there for a few instructions, so that a counter can be
// split into one shard per P that only the goroutine on that P writes: no
// locked instruction, and no cache line that two cores write.
package percpu

import _ "unsafe" // go:linkname

// Pin keeps the calling goroutine on its P until Unpin and returns the P's
// id, in [0, GOMAXPROCS). Between the two the goroutine must not block.
// The runtime keeps this function for packages that link to it.
//
//go:linkname Pin runtime.procPin
func Pin() int

// Unpin ends a Pin.
//
//go:linkname Unpin runtime.procUnpin
func Unpin()
