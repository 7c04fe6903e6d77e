package mem

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// HasCAS128 reports whether CAS128 may be called: amd64 CPUs with
// CMPXCHG16B, which is all but the first x86-64 generation.
var HasCAS128 = cpu.X86.HasCX16

//go:noescape
func cas128(p *uint64, old0, old1, new0, new1 uint64) bool

// CAS128 atomically compares the words at off and off+8 with old0 and old1
// and, only if both are equal, stores new0 and new1 there; it reports
// whether it stored. b[off] must be 16-aligned in memory (in a page-aligned
// mapping, off a multiple of 16) and HasCAS128 true; otherwise it panics (a
// caller's bug, never bad data). It is a full barrier, like every locked x86 instruction. The
// race detector does not see it: use it only on words that every other
// access reads or writes atomically.
func CAS128(b []byte, off int, old0, old1, new0, new1 uint64) bool {
	p := unsafe.Pointer(&b[off : off+16][0])
	if !HasCAS128 || uintptr(p)&15 != 0 {
		panic("mem: CAS128 unavailable or misaligned")
	}
	return cas128((*uint64)(p), old0, old1, new0, new1)
}
