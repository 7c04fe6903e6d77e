package mem

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteAppendEqual(t *testing.T) {
	for off := 0; off < 16; off++ {
		for n := 0; n < 40; n++ {
			b := bytes.Repeat([]byte{0xAA}, 64)
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i + 1)
			}
			Write(b, off, src)
			require.Equal(t, src, AppendBytes([]byte{}, b, off, n), "off %d n %d", off, n)
			require.True(t, Equal(b, off, string(src)))
			if n > 0 {
				src[n-1] ^= 0xff
				require.False(t, Equal(b, off, src))
			}
			for i := 0; i < off; i++ {
				require.Equal(t, byte(0xAA), b[i], "byte before the run changed")
			}
			for i := off + n; i < 64; i++ {
				require.Equal(t, byte(0xAA), b[i], "byte after the run changed")
			}
		}
	}
}

// The atomic variants are what weakly ordered and race builds use; test
// them on every build.
func TestAtomicVariants(t *testing.T) {
	for off := 0; off < 16; off++ {
		for n := 0; n < 40; n++ {
			b := bytes.Repeat([]byte{0xAA}, 64)
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i + 1)
			}
			atomicWrite(b, off, src)
			require.Equal(t, src, atomicAppendBytes([]byte{}, b, off, n))
			require.True(t, atomicEqual(b, off, string(src)))
			require.Equal(t, bytes.Repeat([]byte{0xAA}, off), b[:off])
			require.Equal(t, bytes.Repeat([]byte{0xAA}, 64-off-n), b[off+n:])
		}
	}
}
