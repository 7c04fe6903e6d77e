package mem

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"unsafe"

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
			require.True(t, EqualString(b, off, string(src)))
			mid := n >= 8 && n <= 32
			if mid {
				require.True(t, EqualMid(b, off, string(src)), "off %d n %d", off, n)
			}
			for i := range src { // a difference at each byte is seen
				diff := []byte(string(src))
				diff[i] ^= 0x40
				require.False(t, EqualString(b, off, string(diff)), "off %d n %d byte %d", off, n, i)
				if mid {
					require.False(t, EqualMid(b, off, string(diff)), "off %d n %d byte %d", off, n, i)
				}
				require.False(t, Equal(b, off, string(diff)), "off %d n %d byte %d", off, n, i)
			}
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

// Inc64 counts up from what the word holds, and touches no other byte.
func TestInc64(t *testing.T) {
	b := bytes.Repeat([]byte{0xAA}, 24)
	Put64(b, 8, 41)
	require.EqualValues(t, 42, Inc64(b, 8))
	require.EqualValues(t, 42, Load64(b, 8))
	Put64(b, 8, 1<<64-1)
	require.EqualValues(t, 0, Inc64(b, 8), "wraps")
	require.Equal(t, bytes.Repeat([]byte{0xAA}, 8), b[:8])
	require.Equal(t, bytes.Repeat([]byte{0xAA}, 8), b[16:])
}

func TestCAS128(t *testing.T) {
	if !HasCAS128 {
		t.Skip("no 16-byte compare-and-swap on this CPU or architecture")
	}
	b := make([]byte, 64)
	off := aligned16(b)
	Store64(b, off, 7)
	Store64(b, off+8, 9)
	require.False(t, CAS128(b, off, 7, 8, 1, 2), "second word differs")
	require.False(t, CAS128(b, off, 6, 9, 1, 2), "first word differs")
	require.Equal(t, []uint64{7, 9}, []uint64{Load64(b, off), Load64(b, off+8)}, "a failed swap stores nothing")
	require.True(t, CAS128(b, off, 7, 9, 1, 2))
	require.Equal(t, []uint64{1, 2}, []uint64{Load64(b, off), Load64(b, off+8)})
	require.Panics(t, func() { CAS128(b, off+8, 1, 2, 3, 4) }, "misaligned")
}

func TestCAS128Concurrent(t *testing.T) {
	if !HasCAS128 {
		t.Skip("no 16-byte compare-and-swap on this CPU or architecture")
	}
	b := make([]byte, 64)
	off := aligned16(b)
	const workers, each = 4, 20000
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					lo, hi := Load64(b, off), Load64(b, off+8)
					if CAS128(b, off, lo, hi, lo+1, hi+2) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, uint64(workers*each), Load64(b, off))
	require.Equal(t, uint64(2*workers*each), Load64(b, off+8), "the two words moved together")
}

// aligned16 returns an offset in b (at least 32 bytes long) that is
// 16-aligned in memory, as CAS128 needs.
func aligned16(b []byte) int { return 16 - int(uintptr(unsafe.Pointer(&b[0]))&15) }

// Load8 reads eight bytes at every alignment, the same in the plain-load
// and the two-aligned-words builds (run the tests with -race for the
// latter).
func TestLoad8(t *testing.T) {
	b := make([]byte, 48)
	for i := range b {
		b[i] = byte(i*37 + 11)
	}
	for off := 0; off+8 <= 40; off++ {
		require.Equal(t, binary.LittleEndian.Uint64(b[off:]), Load8(b, off), "off %d", off)
	}
}
