package mem

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// EqualMid, at every length it takes and every alignment, on bytes that
// end where a mapping does (the next page inaccessible), reads nothing
// past them and sees a difference at each byte, first and last included.
func TestEqualMidAtMappingEnd(t *testing.T) {
	page := unix.Getpagesize()
	m, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	defer func() { require.NoError(t, unix.Munmap(m)) }()
	require.NoError(t, unix.Mprotect(m[page:], unix.PROT_NONE))
	b := m[:page]
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	for n := 8; n <= 32; n++ {
		for back := n; back < n+8; back++ { // the last byte at the end, then up to 7 before it
			off := page - back
			s := string(b[off : off+n])
			require.True(t, EqualMid(b, off, s), "n %d off %d", n, off)
			for _, i := range []int{0, n / 2, n - 1} {
				d := []byte(s)
				d[i] ^= 1
				require.False(t, EqualMid(b, off, string(d)), "n %d off %d byte %d", n, off, i)
			}
		}
	}
}
