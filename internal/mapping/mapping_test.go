package mapping

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// mapsLine returns the line of /proc/self/maps for the range b exactly,
// or "".
func mapsLine(t *testing.T, b []byte) string {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	start := uintptr(unsafe.Pointer(&b[0]))
	prefix := fmt.Sprintf("%x-%x ", start, start+uintptr(len(b)))
	for _, l := range strings.Split(string(maps), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// mappedFile creates a file of size bytes filled with 0xAB and maps it.
func mappedFile(t *testing.T, size int) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("\xab", size)), 0o600))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b, err := Map(int(f.Fd()), size)
	require.NoError(t, err)
	return path, b
}

// checkRetired checks that b reads zeros, takes writes, and no longer
// maps the file at path, which kept its bytes.
func checkRetired(t *testing.T, path string, b []byte) {
	t.Helper()
	for i := 0; i < len(b); i += 4096 {
		require.Zero(t, b[i], "byte %d", i)
	}
	b[0], b[len(b)-1] = 1, 2 // a write racing with Close lands here
	require.NotContains(t, mapsLine(t, b), path)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("\xab", len(b)), string(got), "the file was written")
}

func TestRetireAndRelease(t *testing.T) {
	const size = 1 << 20
	path, b := mappedFile(t, size)
	require.Contains(t, mapsLine(t, b), path)
	n0, bytes0 := Pending()
	r, err := Retire(b)
	require.NoError(t, err)
	checkRetired(t, path, b)
	require.Contains(t, mapsLine(t, b), " rw-p ", "private zero pages")
	n, bytes := Pending()
	require.Equal(t, n0+1, n)
	require.Equal(t, bytes0+size, bytes)
	require.NoError(t, r.Release())
	require.Empty(t, mapsLine(t, b), "the range is unmapped")
	n, bytes = Pending()
	require.Equal(t, n0, n)
	require.Equal(t, bytes0, bytes)
	require.NoError(t, r.Release(), "a second Release does nothing")
	n, _ = Pending()
	require.Equal(t, n0, n)
}

// Strict overcommit ignores MAP_NORESERVE and may refuse the private
// pages; Retire then maps a sparse memfd, which reserves nothing.
func TestRetireByMemfd(t *testing.T) {
	const size = 1 << 20
	path, b := mappedFile(t, size)
	require.NoError(t, replaceMemfd(b))
	checkRetired(t, path, b)
	require.Contains(t, mapsLine(t, b), "/memfd:shmarena-retired")
	require.NoError(t, (&Retired{b: b}).Release())
	require.Empty(t, mapsLine(t, b))
}

// anon maps n bytes of private anonymous memory, reserving nothing.
func anon(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	require.NoError(t, err)
	return b
}

// CollectDue asks for a collection when more than BudgetRanges ranges, or
// BudgetBytes, await release beyond the low point since it last asked.
func TestCollectDue(t *testing.T) {
	retire := func(n int) *Retired {
		r, err := Retire(anon(t, n))
		require.NoError(t, err)
		return r
	}
	CollectDue() // start from a mark at the present count
	var rs []*Retired
	for range BudgetRanges {
		rs = append(rs, retire(4096))
		require.False(t, CollectDue())
	}
	rs = append(rs, retire(4096))
	require.True(t, CollectDue(), "%d ranges await release", BudgetRanges+1)
	require.False(t, CollectDue(), "asked once")
	// The collection released all but one: the next asks after as many
	// more as the budget again, not at once.
	for _, r := range rs[1:] {
		require.NoError(t, r.Release())
	}
	for range BudgetRanges {
		rs = append(rs, retire(4096))
		require.False(t, CollectDue())
	}
	rs = append(rs, retire(4096))
	require.True(t, CollectDue())
	// Ranges that stay unreleased do not make every later call ask.
	rs = append(rs, retire(4096))
	require.False(t, CollectDue())
	// Bytes count too.
	big := retire(BudgetBytes + 4096)
	require.True(t, CollectDue())
	for _, r := range append(rs, big) {
		require.NoError(t, r.Release())
	}
}
