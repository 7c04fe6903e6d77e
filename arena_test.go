package shmarena

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/owner"
	"github.com/shmarena/shmarena/internal/rlock"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestOpenCreateAttach(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a")
	_, err := Open(path)
	require.ErrorIs(t, err, os.ErrNotExist)
	a, err := Open(path, WithSize(1<<20))
	require.NoError(t, err)
	require.Equal(t, path, a.Path())
	require.Equal(t, int64(1<<20), a.Size())
	m, err := a.Map("m", WithSlots(16))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
	require.NoError(t, a.Sync())

	// Attach with size 0 or equal; another size is refused.
	b, err := Open(path)
	require.NoError(t, err)
	_, err = Open(path, WithSize(2<<20))
	require.ErrorIs(t, err, ErrSizeMismatch)
	mb, err := b.Map("m", WithSlots(16))
	require.NoError(t, err)
	v, ok := mb.Load("k")
	require.True(t, ok)
	require.Equal(t, "v", string(v))
	regions := b.Regions()
	require.Len(t, regions, 1)
	require.Equal(t, "m", regions[0].Name)
	require.Equal(t, KindMap, regions[0].Kind)
	require.Equal(t, "map", regions[0].Kind.String())
	pids, err := b.Processes()
	require.NoError(t, err)
	require.Contains(t, pids, os.Getpid())
	require.NoError(t, b.Close())
	require.NoError(t, a.Close())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, int64(1<<20), fi.Size(), "Close must not truncate")
}

// The same file mapped twice in one process works at both addresses.
func TestTwoMappingsOneProcess(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()
	ma, err := a.Map("m")
	require.NoError(t, err)
	mb, err := b.Map("m")
	require.NoError(t, err)
	for i := range 100 {
		_, err := ma.Add("n", 1)
		require.NoError(t, err)
		_, err = mb.Add("n", int64(i))
		require.NoError(t, err)
	}
	n, _ := ma.Counter("n")
	require.Equal(t, int64(100+4950), n)
}

func TestDefaultModeUnderUmask(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	dir := t.TempDir()
	a, err := Open(filepath.Join(dir, "default"), WithSize(MinSize))
	require.NoError(t, err)
	a.Close()
	fi, err := os.Stat(filepath.Join(dir, "default"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	unix.Umask(0o077)
	a, err = Open(filepath.Join(dir, "shared"), WithSize(MinSize), WithMode(0o660))
	require.NoError(t, err)
	a.Close()
	fi, err = os.Stat(filepath.Join(dir, "shared"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o660), fi.Mode().Perm(), "mode is exact whatever the umask")
}

func TestOpenRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "real"), WithSize(MinSize))
	require.NoError(t, err)
	require.NoError(t, os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "link")))
	_, err = Open(filepath.Join(dir, "link"))
	require.ErrorIs(t, err, ErrSymlink)
	// A dangling link is not followed to create a file either.
	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling")))
	_, err = Open(filepath.Join(dir, "dangling"), WithSize(MinSize))
	require.Error(t, err)
	_, err = os.Stat(filepath.Join(dir, "nowhere"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// corruptCopy makes an arena file, lets edit change its bytes, and
// returns the path and the file's bytes before the edit.
func corruptCopy(t *testing.T, edit func(b []byte) []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "a")
	a, err := Open(path, WithSize(1<<20))
	require.NoError(t, err)
	_, err = a.Map("m", WithSlots(16))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, edit(b), 0o600))
	return path
}

func TestBadFiles(t *testing.T) {
	cases := []struct {
		name string
		edit func(b []byte) []byte
		want error
	}{
		{"wrong magic", func(b []byte) []byte { b[0] ^= 1; return b }, ErrNotArena},
		{"wrong version", func(b []byte) []byte { b[layout.OffVersion]++; return b }, ErrIncompatible},
		{"byte-swapped probe", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[layout.OffProbe:], binary.LittleEndian.Uint32(b[layout.OffProbe:]))
			return b
		}, ErrIncompatible},
		{"size differs from header", func(b []byte) []byte { return append(b, make([]byte, 4096)...) }, ErrSizeMismatch},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, ErrSizeMismatch},
		{"shorter than a header", func(b []byte) []byte { return b[:100] }, ErrNotArena},
		{"region past the end", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[layout.OffDir+24:], 1<<40)
			return b
		}, ErrCorrupt},
		{"region shape disagrees with header", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[layout.OffDir+32:], 1<<20) // slots
			return b
		}, ErrCorrupt},
		{"unknown kind", func(b []byte) []byte { b[layout.OffDir+4] = 9; return b }, ErrCorrupt},
		{"not zero, no magic", func(b []byte) []byte { clear(b[:8]); return b }, ErrNotArena},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := corruptCopy(t, c.edit)
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			_, err = Open(path)
			require.ErrorIs(t, err, c.want)
			requireOnePrefix(t, err)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused file is left as it was")
		})
	}
}

func TestInterruptedCreate(t *testing.T) {
	dir := t.TempDir()
	// A creator that died after reserving leaves zeros of the asked size.
	zeros := filepath.Join(dir, "zeros")
	require.NoError(t, os.WriteFile(zeros, make([]byte, 1<<20), 0o600))
	_, err := Open(zeros)
	require.ErrorIs(t, err, ErrNotArena, "without a size nothing says it was ours")
	a, err := Open(zeros, WithSize(1<<20))
	require.NoError(t, err)
	_, err = a.Map("m")
	require.NoError(t, err)
	a.Close()
	// One that died before reserving leaves an empty file.
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	a, err = Open(empty, WithSize(1<<20))
	require.NoError(t, err)
	require.Equal(t, int64(1<<20), a.Size())
	a.Close()
}

func TestRegionShapes(t *testing.T) {
	a, _ := tempArena(t, 4<<20)
	_, err := a.Map("", WithSlots(4))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = a.Map(string(make([]byte, 49)), WithSlots(4))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = a.Map("\xff", WithSlots(4))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = a.Map("big", WithSlots(1<<20))
	require.ErrorIs(t, err, ErrArenaFull)
	require.ErrorContains(t, err, "free")
	for i := range MaxRegions {
		_, err := a.Map(string(rune('a'+i%26))+string(rune('0'+i/26)), WithSlots(1), WithSlotSize(48))
		require.NoError(t, err, "region %d", i)
	}
	_, err = a.Map("one-more", WithSlots(1), WithSlotSize(48))
	require.ErrorIs(t, err, ErrArenaFull)
	require.Len(t, a.Regions(), MaxRegions)
}

func TestFullFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	defer unix.Unmount(dir, 0)
	path := filepath.Join(dir, "a")
	_, err := Open(path, WithSize(8<<20))
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorContains(t, err, "tmpfs")
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "a failed create leaves no file")
	a, err := Open(path, WithSize(512<<10))
	require.NoError(t, err)
	a.Close()
}

func TestClose(t *testing.T) {
	a, _ := tempArena(t, 4<<20)
	m, err := a.Map("m")
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Close(), ErrClosed)
	require.ErrorIs(t, a.Sync(), ErrClosed)
	_, err = a.Map("m")
	require.ErrorIs(t, err, ErrClosed)
	require.Nil(t, a.Regions())
	require.Zero(t, a.Size())
	require.ErrorIs(t, m.Store("k", nil), ErrClosed)
	_, err = m.Add("k", 1)
	require.ErrorIs(t, err, ErrClosed)
	_, ok := m.Load("k")
	require.False(t, ok)
	require.False(t, m.Exists("k"))
	require.False(t, m.Delete("k"))
	require.Zero(t, m.Len())
	require.Equal(t, MapStats{}, m.Stats())
	for range m.All() {
		t.Fatal("All after Close yielded")
	}
}

// Operations racing with Close never crash the process.
func TestCloseRacingOperations(t *testing.T) {
	for range 20 {
		a, _ := tempArena(t, 4<<20)
		m, err := a.Map("m", WithSlots(64))
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 2000 {
					k := string(rune('a' + (i+g)%20))
					_ = m.Store(k, []byte("value"))
					m.Load(k)
					_, _ = m.Add("n", 1)
					m.Delete(k)
				}
			}()
		}
		_ = a.Close()
		wg.Wait()
	}
}

func init() {
	childRoles["memfd-child"] = func() error {
		a, err := OpenFile(os.NewFile(3, "arena"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := a.Map("m")
		if err != nil {
			return err
		}
		_, err = m.Add("children", 1)
		return err
	}
}

func TestMemfdSharedWithChildren(t *testing.T) {
	a, err := OpenMemfd("test", WithSize(1<<20))
	require.NoError(t, err)
	defer a.Close()
	require.Empty(t, a.Path())
	m, err := a.Map("m")
	require.NoError(t, err)
	var cmds []*exec.Cmd
	for range 3 {
		c := child(t, "memfd-child")
		c.ExtraFiles = []*os.File{a.File()}
		require.NoError(t, c.Start())
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		require.NoError(t, c.Wait())
	}
	n, ok := m.Counter("children")
	require.True(t, ok)
	require.Equal(t, int64(3), n)
	_, err = OpenMemfd("nosize")
	require.ErrorIs(t, err, ErrInvalid)
}

// A file whose boot id is not this boot's has no live owner: attaching
// clears its locks and half-done writes.
func TestRebootClearsLocks(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
	require.NoError(t, m.Store("x", []byte("w")))
	// Leave every stripe held by this handle, and "x" mid-write, as a
	// process of the previous boot would have; its operations do not
	// count as in flight, so Close detaches the handle (which dies).
	for s := uint64(0); s < 4; s++ {
		m.lock(s)
		a.exit(s)
	}
	v, found := m.find("x", m.hashKey("x"))
	require.True(t, found)
	m.begin(m.stripeOf(m.hashKey("x")), v)
	require.NoError(t, a.Close())

	fake, ok := owner.BootID()
	require.True(t, ok)
	fake[0] ^= 0xff
	owner.SetBootIDForTest(&fake)
	defer owner.SetBootIDForTest(nil)
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()
	mb, err := b.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
	require.NoError(t, err)
	require.NoError(t, mb.Store("k2", []byte("v2")), "stripes are free again")
	got, ok := mb.Load("k")
	require.True(t, ok)
	require.Equal(t, "v", string(got))
	require.False(t, mb.Exists("x"), "the half-written slot was cleared")
	require.Equal(t, 2, mb.Len())
	require.Zero(t, mb.Stats().Tombstones)
	require.Zero(t, mb.Stats().Recoveries, "reset on attach, not taken over")
}

// A boot id that differs while another handle is attached (a file copied
// from another machine's arena, say) clears nothing: the kernel proves the
// holder alive, and its lock stays its own.
func TestBootIDChangeKeepsLiveLocks(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
	require.NoError(t, err)
	require.True(t, m.lock(1))
	defer m.unlock(1)

	fake, ok := owner.BootID()
	require.True(t, ok)
	fake[0] ^= 0xff
	owner.SetBootIDForTest(&fake)
	defer owner.SetBootIDForTest(nil)
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()
	mb, err := b.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
	require.NoError(t, err)
	require.Equal(t, a.self, rlock.Owner(mb.mem, mb.lockOff(1)), "the live handle still holds its stripe")
	ok, _ = rlock.TryAcquire(mb.mem, mb.lockOff(1), b.own)
	require.False(t, ok)
}

func TestErrorsAreDistinct(t *testing.T) {
	all := []error{ErrClosed, ErrNotArena, ErrIncompatible, ErrSizeMismatch, ErrCorrupt, ErrSymlink,
		ErrShape, ErrArenaFull, ErrEmptyKey, ErrTooLarge, ErrFull, ErrNotCounter, ErrEncoded, ErrEncode,
		ErrTooManyGroups, ErrInvalid, ErrTooManyHandles, ErrLockLost}
	for i, a := range all {
		for j, b := range all {
			require.Equal(t, i == j, errors.Is(a, b))
		}
	}
}

// Close waits for a lock this process holds to be released, so the lock
// is not left held in the file by a live process.
func TestCloseWaitsForHeldLocks(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", fourSegments...)
	require.NoError(t, err)
	require.EqualValues(t, 4, m.stripes)
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()
	mb, err := b.Map("m", fourSegments...)
	require.NoError(t, err)
	m.lock(2)
	released := make(chan struct{})
	go func() {
		time.Sleep(5 * time.Millisecond)
		m.unlock(2)
		close(released)
	}()
	require.NoError(t, a.Close())
	<-released
	require.Zero(t, uint64(rlock.Owner(b.mem, mb.lockOff(2))), "the lock was released in the file")
	require.NoError(t, mb.Store("k", []byte("v")))
}

func init() {
	childRoles["racing-create"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"), WithSize(1<<20))
		if err != nil {
			return err
		}
		defer a.Close()
		name := "m" + os.Getenv("SHMARENA_ID")
		m, err := a.Map(name, WithSlots(16))
		if err != nil {
			return err
		}
		return m.Store("owner", []byte(name))
	}
}

// Processes creating the same arena at once all end up in one valid
// file, whoever wins the create: none rebuilds what another built.
func TestRacingCreate(t *testing.T) {
	rounds := 15
	if testing.Short() {
		rounds = 3
	}
	for r := range rounds {
		path := filepath.Join(t.TempDir(), "a")
		runChildren(t, "racing-create", 4, "SHMARENA_PATH="+path)
		a, err := Open(path)
		require.NoError(t, err, "round %d", r)
		require.Len(t, a.Regions(), 4)
		for i := range 4 {
			name := "m" + string(rune('0'+i))
			m, err := a.Map(name, WithSlots(16))
			require.NoError(t, err)
			v, ok := m.Load("owner")
			require.True(t, ok)
			require.Equal(t, name, string(v), "maps must not share bytes")
		}
		require.NoError(t, a.Close())
	}
}

// fourSegments are the options of a map of four segments, so that a test
// can hold a lock other than the first (a map has one segment per 4,096
// slots at most, whatever WithStripes asks).
var fourSegments = []RegionOption{WithSlots(4 * minSegmentSlots), WithSlotSize(64), WithStripes(4)}

// A write still holding its lock well into Close finishes in the file.
func TestCloseLetsSlowWriteFinish(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", fourSegments...)
	require.NoError(t, err)
	require.EqualValues(t, 4, m.stripes)
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()
	mb, err := b.Map("m", fourSegments...)
	require.NoError(t, err)
	m.lock(1)
	done := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		m.unlock(1)
		close(done)
	}()
	require.NoError(t, a.Close())
	<-done
	require.Zero(t, uint64(rlock.Owner(b.mem, mb.lockOff(1))))
	for i := range 64 {
		require.NoError(t, mb.Store(string(rune('a'+i)), []byte("v")), "every stripe is free")
	}
}

func TestOpenFileNil(t *testing.T) {
	_, err := OpenFile(nil)
	require.ErrorIs(t, err, ErrInvalid)
}

// MapBytes and RingBytes size an arena exactly: MinSize plus the regions.
func TestRegionBytesSizeAnArena(t *testing.T) {
	mopts := []RegionOption{WithSlots(1000), WithSlotSize(200), WithStripes(7)}
	ropts := []RegionOption{WithSlots(100), WithSlotSize(100)}
	mb, err := MapBytes(mopts...)
	require.NoError(t, err)
	rb, err := RingBytes(ropts...)
	require.NoError(t, err)
	size := (MinSize + mb + rb + 4095) &^ 4095
	a, err := Open(filepath.Join(t.TempDir(), "a"), WithSize(size))
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Map("m", mopts...)
	require.NoError(t, err)
	_, err = a.Ring("r", ropts...)
	require.NoError(t, err)
	free := size - MinSize - mb - rb
	_, err = a.Map("more", WithSlots(int(free/48)+1), WithSlotSize(48), WithStripes(1))
	require.ErrorIs(t, err, ErrArenaFull, "the sizes are not underestimates")
	_, err = MapBytes(WithSlots(0))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = RingBytes(WithStripes(2))
	require.ErrorIs(t, err, ErrInvalid)
}

// Writes that take their locks while Close is under way, with lock holds
// longer than Close's wait, never leave a lock held in the file, and a
// write reported done is in the file.
func TestCloseUnderContendedSlowWrites(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithStripes(2), WithSlots(8192), WithSlotSize(64))
	require.NoError(t, err)
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()
	mb, err := b.Map("m", WithStripes(2), WithSlots(8192), WithSlotSize(64))
	require.NoError(t, err)
	var wg sync.WaitGroup
	done := make(chan string, 64)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("g%d-%d", g, i)
				h := m.hashKey(key)
				s := m.stripeOf(h)
				if !m.lock(s) {
					return
				}
				time.Sleep(time.Duration(10+30*(g%3)) * time.Millisecond)
				err := m.storeLocked(s, key, h, []byte("v"), writeConfig{}, nil)
				m.unlock(s)
				if err == nil {
					done <- key
				}
			}
		}()
	}
	time.Sleep(40 * time.Millisecond)
	require.NoError(t, a.Close())
	wg.Wait()
	close(done)
	for s := uint64(0); s < 2; s++ {
		require.Zero(t, uint64(rlock.Owner(b.mem, mb.lockOff(s))), "stripe %d left held in the file", s)
	}
	for key := range done {
		require.True(t, mb.Exists(key), "write %s reported done but not in the file", key)
	}
}

// A creator whose build fails removes the file only while it holds the
// flock, and an opener that then finds the file unlinked starts again: an
// arena that Open returns always has a name.
func TestFailedCreatorNeverUnlinksABuiltArena(t *testing.T) {
	for i := range 300 {
		path := filepath.Join(t.TempDir(), "a")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a, err := Open(path, WithSize(1<<50)); err == nil {
				a.Close()
			}
		}()
		a, err := Open(path, WithSize(1<<20))
		wg.Wait()
		if err != nil {
			continue // the failing creator's error, or its size, won
		}
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(int(a.File().Fd()), &st))
		require.NotZero(t, st.Nlink, "round %d: Open returned an arena whose file was removed", i)
		require.NoError(t, a.Close())
	}
}

// requireOnePrefix checks that err's message names the package once, at
// the start, however many layers wrapped it.
func requireOnePrefix(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "shmarena: "), "%q", msg)
	require.Equal(t, 1, strings.Count(msg, "shmarena:"), "%q", msg)
}

func TestErrorMessagesHaveOnePrefix(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "small"), WithSize(1))
	requireOnePrefix(t, err) // ErrInvalid
	_, err = Open(filepath.Join(dir, "missing"))
	requireOnePrefix(t, err) // os.ErrNotExist
	require.NoError(t, os.Symlink(filepath.Join(dir, "x"), filepath.Join(dir, "link")))
	_, err = Open(filepath.Join(dir, "link"), WithSize(MinSize))
	requireOnePrefix(t, err) // ErrSymlink
	junk := filepath.Join(dir, "junk")
	require.NoError(t, os.WriteFile(junk, make([]byte, 100), 0o600))
	f, err := os.OpenFile(junk, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = OpenFile(f)
	requireOnePrefix(t, err) // ErrNotArena, through a descriptor
	require.Contains(t, err.Error(), "open the arena's file descriptor:")

	a, _ := tempArena(t, 4<<20)
	_, err = a.Map("", WithSlots(16))
	requireOnePrefix(t, err) // ErrInvalid: the name
	_, err = a.Map("m", WithSlots(0))
	requireOnePrefix(t, err) // ErrInvalid: the shape
	m, err := a.Map("m", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	_, err = a.Map("m", WithSlots(32), WithSlotSize(64))
	requireOnePrefix(t, err) // ErrShape
	_, err = a.Map("huge", WithSlots(1<<20))
	requireOnePrefix(t, err)                            // ErrArenaFull
	requireOnePrefix(t, m.Store("", nil))               // ErrEmptyKey
	requireOnePrefix(t, m.Store("k", make([]byte, 64))) // ErrTooLarge
	require.NoError(t, m.Store("k", []byte("v")))
	_, err = m.Add("k", 1)
	requireOnePrefix(t, err) // ErrNotCounter
	for i := 0; err == nil || !errors.Is(err, ErrFull); i++ {
		err = m.Store(strconv.Itoa(i), nil)
	}
	requireOnePrefix(t, err) // ErrFull
	r, err := a.Ring("r", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	_, err = r.Publish("t", make([]byte, 64))
	requireOnePrefix(t, err) // ErrTooLarge
	require.NoError(t, a.Close())
	requireOnePrefix(t, m.Store("k", nil)) // ErrClosed
}

// Open racing with someone creating and removing the path: every error must
// carry the prefix.
func TestOpenRacingCreateRemoveErrorPrefix(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a")
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
			if err == nil {
				f.Close()
			}
			os.Remove(p)
		}
	}()
	seen := map[string]int{}
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		a, err := Open(p, WithSize(MinSize))
		if err == nil {
			a.Close()
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "shmarena: ") || strings.Count(msg, "shmarena:") != 1 {
			seen[msg]++
		}
	}
	stop.Store(true)
	wg.Wait()
	for msg, n := range seen {
		t.Errorf("%d x %q", n, msg)
	}
}

// Each arena hashes its keys under a seed of its own, chosen at random
// when it is created and kept in the file: every process attached to it
// hashes alike, and no one who cannot read the file knows which keys
// collide.
func TestHashSeedPerArena(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	b, _ := tempArena(t, 4<<20)
	require.NotEqual(t, a.seed, b.seed, "two arenas drew the same 64-bit seed")
	require.Equal(t, a.seed, layout.ReadHeader(a.mem).Seed)
	again, err := Open(path)
	require.NoError(t, err)
	defer again.Close()
	require.Equal(t, a.seed, again.seed, "an attaching handle uses the creator's seed")
	ma, err := a.Map("m")
	require.NoError(t, err)
	mb, err := b.Map("m")
	require.NoError(t, err)
	require.NotEqual(t, ma.hashKey("user:42"), mb.hashKey("user:42"))
	require.NoError(t, ma.Store("user:42", []byte("v")))
	m2, err := again.Map("m")
	require.NoError(t, err)
	got, ok := m2.Load("user:42")
	require.True(t, ok)
	require.Equal(t, "v", string(got))
}
