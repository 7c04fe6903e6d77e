package mem

// prefetchW hints that the cache line at p is about to be written; it
// never faults and changes no memory. A CPU without PREFETCHW treats it as
// a no-op (it is in the x86-64 NOP space of 0F 0D on every AMD and on
// Intel since Broadwell).
//
//go:noescape
func prefetchW(p *byte)

// PrefetchW asks for the cache line holding b[off] in a state ready for a
// write, so that a later store does not stall on taking it from another
// core. Out-of-range offsets are ignored.
func PrefetchW(b []byte, off int) {
	if uint(off) < uint(len(b)) {
		prefetchW(&b[off])
	}
}
