//go:build !amd64 || race

package mem

func appendBytes(dst, b []byte, off, n int) []byte { return atomicAppendBytes(dst, b, off, n) }

func equal[S ~string | ~[]byte](b []byte, off int, s S) bool { return atomicEqual(b, off, s) }

func write[S ~string | ~[]byte](b []byte, off int, s S) { atomicWrite(b, off, s) }
