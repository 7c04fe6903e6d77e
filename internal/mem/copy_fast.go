//go:build amd64 && !race

package mem

func appendBytes(dst, b []byte, off, n int) []byte { return append(dst, b[off:off+n]...) }

func equal[S ~string | ~[]byte](b []byte, off int, s S) bool {
	return string(b[off:off+len(s)]) == string(s)
}

func write[S ~string | ~[]byte](b []byte, off int, s S) { copy(b[off:off+len(s)], s) }
