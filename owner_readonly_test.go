package shmarena

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/owner"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A process that may only read the arena file (another user, the file
// created WithMode(0o644)) can take OFD read locks on any byte of it. It
// must not thereby keep a dead handle looking alive (its locks would never
// be recovered) nor make free process-table entries look taken (every Open
// would fail).

func init() {
	// read-locker opens SHMARENA_PATH read-only and read-locks, for every
	// process-table entry, the byte a new handle taking the entry would
	// lock first (SHMARENA_RANGE=1: every byte it can, in one range per
	// gap between the bytes live handles hold); it says "LOCKED n" and
	// waits to be killed.
	childRoles["read-locker"] = func() error {
		f, err := os.OpenFile(os.Getenv("SHMARENA_PATH"), os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		b, err := unix.Mmap(int(f.Fd()), 0, layout.HeaderSize, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		n := 0
		lock := func(start, length int64) {
			lk := unix.Flock_t{Type: unix.F_RDLCK, Start: start, Len: length}
			if unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) == nil {
				n++
			}
		}
		if os.Getenv("SHMARENA_RANGE") == "1" {
			// Lock everything that no live handle's write lock is on:
			// split the whole file range around the bytes in conflict.
			var cover func(start, length int64, depth int)
			cover = func(start, length int64, depth int) {
				lk := unix.Flock_t{Type: unix.F_RDLCK, Start: start, Len: length}
				if unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) == nil {
					n++
					return
				}
				// Any lock in conflict (the kernel names one, not the
				// first): cover each side of it.
				lk = unix.Flock_t{Type: unix.F_RDLCK, Start: start, Len: length}
				if unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk) != nil || lk.Type == unix.F_UNLCK || depth > 1000 {
					return
				}
				if lk.Start > start {
					cover(start, lk.Start-start, depth+1)
				}
				if lk.Len == 0 {
					return
				}
				next := lk.Start + lk.Len
				if length == 0 {
					cover(next, 0, depth+1)
				} else if end := start + length; next < end {
					cover(next, end-next, depth+1)
				}
			}
			cover(0, 0, 0)
		} else {
			for i := 0; i < owner.Entries; i++ {
				lock(owner.FirstLockOffset(b, i), 1)
			}
		}
		os.Stdout.WriteString("LOCKED " + strconv.Itoa(n) + "\n")
		for {
			time.Sleep(time.Hour) // until killed (select {} would be a deadlock the runtime ends)
		}
	}
}

// readLocker starts read-locker as user nobody and waits until it holds
// its locks; the test kills it at cleanup.
func readLocker(t *testing.T, bin, path string, wholeRange bool) {
	t.Helper()
	env := []string{"SHMARENA_ROLE=read-locker", "SHMARENA_PATH=" + path}
	if wholeRange {
		env = append(env, "SHMARENA_RANGE=1")
	}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = killGroup(cmd); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the reader did not start")
	require.True(t, strings.HasPrefix(line, "LOCKED "), line)
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "LOCKED ")))
	require.Positive(t, n, "the reader took no lock")
}

// readerArena creates an arena readable by everyone, writable by its
// owner only, in a directory another user can reach, and returns its
// path and the test binary copied there.
func readerArena(t *testing.T) (a *Arena, m *Map, path, bin string) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) is not installed: cannot run the reader as another user")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as another user")
	}
	dir, bin := nsDir(t)
	path = filepath.Join(dir, "arena")
	a, err := Open(path, WithSize(4<<20), WithMode(0o644))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	m, err = a.Map("m", WithSlots(4096), WithSlotSize(128), WithStripes(2))
	require.NoError(t, err)
	_, err = a.Ring("r", WithSlots(1024), WithSlotSize(64))
	require.NoError(t, err)
	return a, m, path, bin
}

// deadHolder starts ns-holder (same user), waits until it holds the
// counter's stripe and SIGKILLs it.
func deadHolder(t *testing.T, path string) {
	t.Helper()
	cmd := child(t, "ns-holder", "SHMARENA_PATH="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	for held := 0; held < 2 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "HOLDING") {
			held++
		}
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
}

func TestReadLocksNeitherFreezeRecoveryNorBlockOpen(t *testing.T) {
	a, m, path, bin := readerArena(t)
	deadHolder(t, path)
	readLocker(t, bin, path, false)

	locks, err := a.Locks()
	require.NoError(t, err)
	require.NotEmpty(t, locks, "the killed holder's locks")
	for _, l := range locks {
		require.False(t, l.Alive, "%s %s: a reader's read lock on the entry keeps its killed holder alive", l.Region, l.Lock)
	}
	done, err := a.RecoverLocks()
	require.NoError(t, err)
	require.Len(t, done, len(locks))

	// Every entry but ours is free (the holder is dead) and read-locked:
	// a new handle must still attach, and many of them.
	var opened []*Arena
	defer func() {
		for _, o := range opened {
			o.Close()
		}
	}()
	for i := 0; i < 8; i++ {
		o, err := Open(path)
		require.NoError(t, err, "handle %d", i)
		opened = append(opened, o)
	}
	ps, err := a.Processes()
	require.NoError(t, err)
	require.Len(t, ps, 1, "one process (this one) with 9 handles")
	in, err := a.Info()
	require.NoError(t, err)
	alive := 0
	for _, p := range in.Processes {
		if p.Alive {
			alive++
		}
	}
	require.Equal(t, 9, alive)
	_, err = m.Add("ctr", 1)
	require.NoError(t, err)
}

// A reader that read-locks every byte no live handle holds blocks new
// handles (OFD locks offer nothing it cannot lock); Open must then say
// so, not claim the table is full, and recovery must still work.
func TestWholeRangeReadLockNamedByOpen(t *testing.T) {
	a, _, path, bin := readerArena(t)
	deadHolder(t, path)
	readLocker(t, bin, path, true)

	done, err := a.RecoverLocks()
	require.NoError(t, err)
	require.NotEmpty(t, done, "a dead holder's locks are recovered under the reader's locks")

	start := time.Now()
	_, err = Open(path)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrTooManyHandles, "the table is not full")
	require.ErrorIs(t, err, unix.EAGAIN)
	require.Contains(t, err.Error(), "read lock")
	t.Logf("refused in %v: %v", time.Since(start), err)
}
