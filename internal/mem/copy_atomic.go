//go:build !amd64 || race

package mem

func appendBytes(dst, b []byte, off, n int) []byte { return atomicAppendBytes(dst, b, off, n) }

func equal[S ~string | ~[]byte](b []byte, off int, s S) bool { return atomicEqual(b, off, s) }

func equalString(b []byte, off int, s string) bool { return atomicEqual(b, off, s) }

// EqualMid is EqualString for a string of 8 to 32 bytes (the caller
// checks); see the amd64 version.
func EqualMid(b []byte, off int, s string) bool { return atomicEqual(b, off, s) }

func load8(b []byte, off int) uint64 {
	lo := off &^ 7
	w := Load64(b, lo)
	if sh := uint(off-lo) * 8; sh != 0 {
		w = w>>sh | Load64(b, lo+8)<<(64-sh)
	}
	return w
}

func write[S ~string | ~[]byte](b []byte, off int, s S) { atomicWrite(b, off, s) }

// Put64 stores v at off (an atomic store in these builds).
func Put64(b []byte, off int, v uint64) { Store64(b, off, v) }

// Inc64 adds 1 to the word at off (an atomic load and store in these
// builds) and returns the new value; see the amd64 version.
func Inc64(b []byte, off int) uint64 {
	c := Load64(b, off) + 1
	Store64(b, off, c)
	return c
}

// StoreRelease64 stores v at off with release ordering; elsewhere it is an
// atomic store (see the amd64 version).
func StoreRelease64(b []byte, off int, v uint64) { Store64(b, off, v) }

func move(b []byte, dst, src, n int) {
	_, _ = b[dst:dst+n], b[src:src+n]
	if dst <= src {
		for k := 0; k < n; k += 8 {
			Store64(b, dst+k, Load64(b, src+k))
		}
		return
	}
	for k := n - 8; k >= 0; k -= 8 {
		Store64(b, dst+k, Load64(b, src+k))
	}
}
