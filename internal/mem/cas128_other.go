//go:build !amd64

package mem

// HasCAS128 is false on this architecture: callers take their locked path.
const HasCAS128 = false

// CAS128 is unavailable here (see HasCAS128); it panics.
func CAS128(b []byte, off int, old0, old1, new0, new1 uint64) bool {
	panic("mem: CAS128 unavailable")
}
