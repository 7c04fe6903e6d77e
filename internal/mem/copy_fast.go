//go:build amd64 && !race

package mem

import "unsafe"

func appendBytes(dst, b []byte, off, n int) []byte { return append(dst, b[off:off+n]...) }

func equal[S ~string | ~[]byte](b []byte, off int, s S) bool {
	return string(b[off:off+len(s)]) == string(s)
}

// equalString compares keys of 8 to 32 bytes (most keys) a word at a time
// inline, the last word overlapping the one before, rather than calling
// the runtime's memequal: a hit's key check is on every lookup. The words'
// differences are or-ed together, so the compare has one branch.
func equalString(b []byte, off int, s string) bool {
	n := len(s)
	p := b[off : off+n]
	if n < 8 || n > 32 {
		return string(p) == s
	}
	pb, ps := unsafe.Pointer(unsafe.SliceData(p)), unsafe.Pointer(unsafe.StringData(s))
	word := func(i int) uint64 {
		return *(*uint64)(unsafe.Add(pb, i)) ^ *(*uint64)(unsafe.Add(ps, i))
	}
	// Words at 0, at n-8 and, past 16 bytes, at 8 and 16 clamped to n-8:
	// every byte is covered, some twice.
	diff := word(0) | word(n-8)
	if n > 16 {
		diff |= word(8) | word(min(16, n-8))
	}
	return diff == 0
}

// EqualMid is EqualString for a string of 8 to 32 bytes (the caller
// checks), the lengths of most keys, small enough to be inlined: a read
// path that compares a key then spills no registers around a call. It
// reads four words, at 0, j, n-8-j and n-8 with j = ceil((n-8)/3), so no
// two are more than 8 bytes apart and every byte is covered, and or-s
// their differences: one bounds check, no branch.
func EqualMid(b []byte, off int, s string) bool {
	x, y := unsafe.Pointer(&b[off : off+len(s)][0]), unsafe.Pointer(unsafe.StringData(s))
	l := uintptr(len(s) - 8)
	j := (l + 2) / 3
	// (^ and | bind alike: each difference in its parentheses.)
	return (*(*uint64)(x)^*(*uint64)(y))|
		(*(*uint64)(unsafe.Add(x, j))^*(*uint64)(unsafe.Add(y, j)))|
		(*(*uint64)(unsafe.Add(x, l-j))^*(*uint64)(unsafe.Add(y, l-j)))|
		(*(*uint64)(unsafe.Add(x, l))^*(*uint64)(unsafe.Add(y, l))) == 0
}

// load8 reads the 8 bytes at off, at any alignment, with one plain load:
// an x86 load never tears a byte, which is all Load8's callers rely on.
func load8(b []byte, off int) uint64 {
	return *(*uint64)(unsafe.Pointer(&b[off : off+8][0]))
}

func write[S ~string | ~[]byte](b []byte, off int, s S) { copy(b[off:off+len(s)], s) }

// Put64 stores v at off with a plain store. It is for a word that only its
// writer changes (it holds a lock) and that readers load atomically and
// validate with a seqlock: on amd64 an aligned 8-byte store is atomic, and
// the atomic operations before and after it keep the compiler and the CPU
// from moving it out of its critical section. It saves the full fence of an
// atomic store. It also suits a word whose writers may race when any of
// their values will do (a hint that readers check before use).
func Put64(b []byte, off int, v uint64) { *p64(b, off) = v }

// Inc64 adds 1 to the word at off with a plain load and store, and
// returns the new value: for a word that only the caller writes (a
// per-CPU count, under a pin), which others load atomically, as Put64.
func Inc64(b []byte, off int) uint64 {
	p := p64(b, off)
	*p++
	return *p
}

// StoreRelease64 stores v at off with release ordering: earlier loads and
// stores are visible before it, which is all a lock release needs. On amd64
// every store is a release store (TSO), so a plain store does it without
// the full fence of an atomic store.
func StoreRelease64(b []byte, off int, v uint64) { *p64(b, off) = v }

func move(b []byte, dst, src, n int) { copy(b[dst:dst+n], b[src:src+n]) }
