package owner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func header(t *testing.T) (path string, b []byte) {
	path = filepath.Join(t.TempDir(), "arena")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(layout.HeaderSize))
	b, err = unix.Mmap(int(f.Fd()), 0, layout.HeaderSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return path, b
}

func open(t *testing.T, path string) int {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	return fd
}

func TestTokens(t *testing.T) {
	for _, tc := range []struct {
		i   int
		gen uint64
	}{{0, 1}, {Entries - 1, 1}, {7, genMask}} {
		tok := Token(tc.i, tc.gen)
		require.NotZero(t, tok)
		i, gen := Split(tok)
		require.Equal(t, tc.i, i)
		require.Equal(t, tc.gen, gen)
	}
	for _, bad := range []uint64{0, 1 << indexBits, Token(Entries, 3), 0xffff} {
		i, _ := Split(bad)
		require.Equal(t, -1, i, "%#x", bad)
	}
}

func TestRegisterAliveClose(t *testing.T) {
	path, b := header(t)
	a, err := Register(b, open(t, path), 11, 1)
	require.NoError(t, err)
	c, err := Register(b, open(t, path), 12, 2)
	require.NoError(t, err)
	require.NotEqual(t, a.Index(), c.Index(), "a held entry is not taken again")
	require.True(t, a.Alive(c.Token()))
	require.True(t, c.Alive(a.Token()))
	require.True(t, a.Alive(a.Token()), "its own token, whose lock its description cannot see")

	require.NoError(t, c.Close())
	require.False(t, a.Alive(c.Token()), "closed: its lock is gone")

	// The entry is taken again with a new generation; the old token stays
	// dead although the entry's byte is locked again.
	d, err := Register(b, open(t, path), 13, 3)
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, c.Index(), d.Index())
	require.NotEqual(t, c.Token(), d.Token())
	require.False(t, a.Alive(c.Token()))
	require.True(t, a.Alive(d.Token()))

	list := a.List()
	require.Len(t, list, 2)
	for _, e := range list {
		require.True(t, e.Alive)
		require.Contains(t, []int{11, 13}, e.Pid)
		require.Equal(t, e.Pid == 11, e.Self)
	}
	require.True(t, a.AnyAlive())
	require.NoError(t, d.Close())
	require.False(t, a.AnyAlive())
	require.NoError(t, a.Close())
}

// One description, shared (as a descriptor inherited across exec is), keeps
// the lock while any holder keeps it open: that is why each handle reopens.
func TestSharedDescriptionOutlivesOneHolder(t *testing.T) {
	path, b := header(t)
	fd := open(t, path)
	dup, err := unix.Dup(fd)
	require.NoError(t, err)
	h, err := Register(b, fd, 1, 1)
	require.NoError(t, err)
	watcher, err := Register(b, open(t, path), 2, 2)
	require.NoError(t, err)
	defer watcher.Close()
	require.NoError(t, h.Close())
	require.True(t, watcher.Alive(h.Token()), "the duplicate still holds the description's lock")
	require.NoError(t, unix.Close(dup))
	require.False(t, watcher.Alive(h.Token()))
}

func TestTableFull(t *testing.T) {
	path, b := header(t)
	var hs []*Handle
	defer func() {
		for _, h := range hs {
			h.Close()
		}
	}()
	for range Entries {
		h, err := Register(b, open(t, path), 1, 1)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	fd := open(t, path)
	_, err := Register(b, fd, 1, 1)
	require.True(t, errors.Is(err, ErrTableFull), "%v", err)
	require.Contains(t, err.Error(), "256")
	unix.Close(fd)
	require.NoError(t, hs[5].Close())
	h, err := Register(b, open(t, path), 1, 1)
	require.NoError(t, err, "a closed handle's entry is reused")
	require.Equal(t, 5, h.Index())
	hs[5] = h
}

func TestReopen(t *testing.T) {
	path, _ := header(t)
	fd := open(t, path)
	defer unix.Close(fd)
	for _, p := range []string{path, ""} {
		nfd, err := Reopen(fd, p)
		require.NoError(t, err, "path %q", p)
		var a, c unix.Stat_t
		require.NoError(t, unix.Fstat(fd, &a))
		require.NoError(t, unix.Fstat(nfd, &c))
		require.Equal(t, a.Ino, c.Ino)
		unix.Close(nfd)
	}
	// A path that now names another file is refused.
	require.NoError(t, os.Rename(path, path+".old"))
	require.NoError(t, os.WriteFile(path, make([]byte, 64), 0o600))
	var want unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &want))
	_, err := sameFile(open(t, path), want, path)
	require.ErrorContains(t, err, "replaced")
	// Through /proc the descriptor's own file is found all the same.
	nfd, err := Reopen(fd, path)
	require.NoError(t, err)
	unix.Close(nfd)

	// Without /proc: the path, checked; or an error naming both.
	defer func(p string) { procSelfFd = p }(procSelfFd)
	procSelfFd = "/nonexistent/fd/"
	_, err = Reopen(fd, path)
	require.ErrorContains(t, err, "replaced")
	nfd, err = Reopen(fd, path+".old")
	require.NoError(t, err, "reopened by its path")
	var a, c unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &a))
	require.NoError(t, unix.Fstat(nfd, &c))
	require.Equal(t, a.Ino, c.Ino)
	unix.Close(nfd)
	_, err = Reopen(fd, "")
	require.ErrorContains(t, err, "/nonexistent/fd/")
}

func TestBootID(t *testing.T) {
	id, ok := BootID()
	require.True(t, ok)
	require.NotEqual(t, [16]byte{}, id)
	fake := [16]byte{1}
	SetBootIDForTest(&fake)
	got, _ := BootID()
	require.Equal(t, fake, got)
	SetBootIDForTest(nil)
	got, _ = BootID()
	require.Equal(t, id, got)
}
