//go:build !amd64

package mem

// PrefetchW is a no-op on this architecture (see the amd64 version).
func PrefetchW(b []byte, off int) {}
