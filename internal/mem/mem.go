// Package mem gives atomic, bounds-checked views of words and byte runs in
// a shared mapping addressed by offset. It is the only place besides the
// other internal packages where unsafe is used.
//
// Every word offset must be 8-aligned relative to the start of the mapping,
// and the mapping itself page-aligned, so 64-bit atomics are aligned on
// every architecture (including 386). Out-of-range offsets panic through
// Go's ordinary bounds checks: callers validate offsets read from the file
// before calling, so a panic here is a bug in the caller, never bad data.
package mem

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// p64 and p32 bounds-check by slicing, which reads nothing (an index
// expression such as _ = b[off+7] is a read to the race detector).
func p64(b []byte, off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&b[off : off+8][0]))
}

func p32(b []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&b[off : off+4][0]))
}

// Words4 returns the four words (32 bytes) at off (8-aligned), for atomic
// loads with sync/atomic at constant indices, which need no bounds check
// each.
func Words4(b []byte, off int) *[4]uint64 {
	return (*[4]uint64)(unsafe.Pointer(&b[off : off+32][0]))
}

// Words5 returns the five words (40 bytes) at off (8-aligned): a lock word
// and the futex word 32 bytes after it, behind one bounds check.
func Words5(b []byte, off int) *[5]uint64 {
	return (*[5]uint64)(unsafe.Pointer(&b[off : off+40][0]))
}

// Load64 atomically loads the word at off.
func Load64(b []byte, off int) uint64 { return atomic.LoadUint64(p64(b, off)) }

// Store64 atomically stores v at off.
func Store64(b []byte, off int, v uint64) { atomic.StoreUint64(p64(b, off), v) }

// Swap64 atomically stores v at off and returns the old value. Unlike
// Store64 it is a full barrier in every build: the race runtime's atomic
// store is a release store, which a later load may pass.
func Swap64(b []byte, off int, v uint64) uint64 { return atomic.SwapUint64(p64(b, off), v) }

// CAS64 atomically compares and swaps the word at off.
func CAS64(b []byte, off int, old, new uint64) bool {
	return atomic.CompareAndSwapUint64(p64(b, off), old, new)
}

// Add64 atomically adds delta to the word at off and returns the new value.
func Add64(b []byte, off int, delta uint64) uint64 { return atomic.AddUint64(p64(b, off), delta) }

// Load32 atomically loads the 32-bit word at off (4-aligned).
func Load32(b []byte, off int) uint32 { return atomic.LoadUint32(p32(b, off)) }

// Store32 atomically stores the 32-bit word at off.
func Store32(b []byte, off int, v uint32) { atomic.StoreUint32(p32(b, off), v) }

// Add32 atomically adds delta to the 32-bit word at off.
func Add32(b []byte, off int, delta uint32) uint32 { return atomic.AddUint32(p32(b, off), delta) }

// CAS32 atomically compares and swaps the 32-bit word at off.
func CAS32(b []byte, off int, old, new uint32) bool {
	return atomic.CompareAndSwapUint32(p32(b, off), old, new)
}

// Ptr32 returns the address of the 32-bit word at off, for futex calls.
func Ptr32(b []byte, off int) *uint32 { return p32(b, off) }

// AppendBytes appends the n bytes at off to dst. The words covering
// [off, off+n) must lie inside b. A concurrent writer may change them: the
// caller detects that with a seqlock and discards the bytes.
//
// On amd64 (total store order, no load-load reordering) without the race
// detector this is a plain copy. Elsewhere it reads with atomic word loads,
// which keeps the race detector quiet and, on weakly ordered machines,
// keeps the seqlock's closing version load after the data loads.
func AppendBytes(dst, b []byte, off, n int) []byte { return appendBytes(dst, b, off, n) }

// Equal reports whether the len(s) bytes at off equal s (see AppendBytes
// for how they are read).
func Equal[S ~string | ~[]byte](b []byte, off int, s S) bool { return equal(b, off, s) }

// EqualString is Equal for a string, faster for the 8 to 32 bytes of most
// keys.
func EqualString(b []byte, off int, s string) bool { return equalString(b, off, s) }

// Load8 returns the 8 bytes at off, which need not be aligned, as a
// little-endian word. Each byte is one that was stored there, but the word
// as a whole is not read atomically. The aligned words covering
// [off, off+8) must lie inside b.
func Load8(b []byte, off int) uint64 { return load8(b, off) }

// Write stores s at off, preserving the bytes of the first and last words
// that lie outside [off, off+len(s)). The caller must be the only writer of
// those words (see AppendBytes for how they are written).
func Write[S ~string | ~[]byte](b []byte, off int, s S) { write(b, off, s) }

func atomicAppendBytes(dst, b []byte, off, n int) []byte {
	if n == 0 {
		return dst
	}
	start := off &^ 7
	end := (off + n + 7) &^ 7
	_ = b[start:end] // bounds check without a read
	skip := off - start
	if cap(dst)-len(dst) < n { // one allocation at most, not one per doubling
		dst = append(make([]byte, 0, len(dst)+n), dst...)
	}
	var w [8]byte
	for o := start; o < end; o += 8 {
		binary.LittleEndian.PutUint64(w[:], Load64(b, o))
		lo, hi := 0, 8
		if o == start {
			lo = skip
		}
		if o+8 > off+n {
			hi = off + n - o
		}
		dst = append(dst, w[lo:hi]...)
	}
	return dst
}

func atomicEqual[S ~string | ~[]byte](b []byte, off int, s S) bool {
	n := len(s)
	if n == 0 {
		return true
	}
	start := off &^ 7
	end := (off + n + 7) &^ 7
	_ = b[start:end] // bounds check without a read
	i := 0
	for o := start; o < end; o += 8 {
		v := Load64(b, o)
		lo := 0
		if o == start {
			lo = off - start
		}
		for k := lo; k < 8 && i < n; k++ {
			if byte(v>>(8*k)) != s[i] {
				return false
			}
			i++
		}
	}
	return true
}

func atomicWrite[S ~string | ~[]byte](b []byte, off int, s S) {
	n := len(s)
	if n == 0 {
		return
	}
	start := off &^ 7
	end := (off + n + 7) &^ 7
	_ = b[start:end] // bounds check without a read
	i := 0
	for o := start; o < end; o += 8 {
		lo, hi := 0, 8
		if o == start {
			lo = off - start
		}
		if o+8 > off+n {
			hi = off + n - o
		}
		var v uint64
		if lo != 0 || hi != 8 {
			v = Load64(b, o)
		}
		for k := lo; k < hi; k++ {
			v &^= 0xff << (8 * k)
			v |= uint64(s[i]) << (8 * k)
			i++
		}
		Store64(b, o, v)
	}
}

// Zero clears n bytes at off (both 8-aligned) with atomic stores.
func Zero(b []byte, off, n int) {
	for o := off; o < off+n; o += 8 {
		Store64(b, o, 0)
	}
}

// LoadByte atomically loads the byte at off (any alignment), as part of
// the aligned 32-bit word holding it.
func LoadByte(b []byte, off int) byte {
	w := Load32(b, off&^3)
	return byte(w >> ((off & 3) * 8))
}

// StoreByte atomically sets the byte at off to v, leaving its neighbours
// as concurrent writers of those bytes left them: a compare-and-swap of
// the aligned 32-bit word holding it, retried while a neighbour changes.
func StoreByte(b []byte, off int, v byte) {
	p := p32(b, off&^3)
	shift := uint(off&3) * 8
	for {
		w := atomic.LoadUint32(p)
		nw := w&^(0xff<<shift) | uint32(v)<<shift
		if w == nw || atomic.CompareAndSwapUint32(p, w, nw) {
			return
		}
	}
}

// CASByte atomically sets the byte at off to new if it holds old, and
// reports whether it did; a change to a neighbouring byte meanwhile makes
// it try again rather than fail.
func CASByte(b []byte, off int, old, new byte) bool {
	p := p32(b, off&^3)
	shift := uint(off&3) * 8
	for {
		w := atomic.LoadUint32(p)
		if byte(w>>shift) != old {
			return false
		}
		if atomic.CompareAndSwapUint32(p, w, w&^(0xff<<shift)|uint32(new)<<shift) {
			return true
		}
	}
}

// Move copies the n bytes at src to dst, as memmove does when the two
// overlap. dst, src and n are multiples of 8. The caller is the only
// writer of [dst, dst+n); readers of it validate what they copy (a
// seqlock), and race builds copy a word at a time with atomics.
func Move(b []byte, dst, src, n int) { move(b, dst, src, n) }
