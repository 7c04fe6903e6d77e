// Package owner gives every attached arena handle an identity that any
// other process can prove alive or dead, whatever PID namespace, container
// or /proc view either of them has.
//
// The arena header holds a table of entries. A handle takes an entry by
// taking an open-file-description lock (F_OFD_SETLK, a write lock on the
// entry's first byte of the arena file) on a description of its own, then
// bumps the entry's generation. Its token, the value lock words record, is
// the entry index and that generation. The kernel holds the lock exactly as
// long as the description is open, and closes the description when the
// last process holding it exits, however it exits. So:
//
//   - a token whose entry holds another generation is dead (the entry was
//     taken again, which needs the lock, which its owner held while alive);
//   - a token whose entry's byte is not locked (F_OFD_GETLK) is dead;
//   - anything else is alive: a stopped, throttled or paused process, or one
//     in another container, keeps its lock and so its locks in the arena.
//
// No pid is involved, so PID reuse, PID namespaces, hidepid and a missing
// /proc need no special case, and after a reboot every entry reads dead.
// The pid and attach time kept in an entry are for people only.
//
// The description must be the handle's own: a descriptor inherited across
// exec shares the parent's description, whose lock would outlive either
// process alone. Open gives each handle one (see Reopen).
package owner

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"golang.org/x/sys/unix"
)

// An entry of the table, at layout.ProcSlotOff(i):
//
//	0   8  generation: bumped by each handle that takes the entry (0 = never taken)
//	8   4  pid of the process that took it, in its own PID namespace (display only)
//	16  8  when it was taken, Unix nanoseconds (display only)
const (
	eGen   = 0
	ePid   = 8
	eSince = 16

	indexBits = 16
	genMask   = 1<<(64-indexBits) - 1
)

// Entries is the size of the table: how many handles may be attached to
// one arena at once.
const Entries = layout.ProcSlots

// ErrTableFull reports that every entry is held by a live handle.
var ErrTableFull = errors.New("every process-table entry is held by a live handle")

// Token builds the token of entry i at generation gen. It is never 0, so 0
// can mean "no owner".
func Token(i int, gen uint64) uint64 { return gen<<indexBits | uint64(i+1) }

// Split returns a token's entry index and generation, or -1 for a token no
// entry can hold (0, a generation of 0, or an index past the table).
func Split(tok uint64) (i int, gen uint64) {
	i, gen = int(tok&(1<<indexBits-1))-1, tok>>indexBits
	if i < 0 || i >= Entries || gen == 0 {
		return -1, 0
	}
	return i, gen
}

// A Handle is one attached arena handle's entry and the description that
// holds the entry's lock. Its methods are safe for concurrent use.
type Handle struct {
	b         []byte
	fd        int
	index     int
	tok       uint64
	abandoned atomic.Bool
}

// Register takes the first entry of the table in b whose lock no live
// handle holds, using fd (a description of the caller's own, which the
// Handle owns from now on and closes in Close), and records pid and now for
// display. It returns ErrTableFull when all entries are held, and the
// system's error when the file takes no OFD locks.
func Register(b []byte, fd int, pid int, now int64) (*Handle, error) {
	for i := 0; i < Entries; i++ {
		off := layout.ProcSlotOff(i)
		err := lockByte(fd, off, unix.F_OFD_SETLK, unix.F_WRLCK)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			continue // a live handle holds it
		}
		if err != nil {
			return nil, fmt.Errorf("taking an open-file-description lock on the arena file: %w", err)
		}
		gen := (mem.Load64(b, off+eGen) + 1) & genMask
		if gen == 0 {
			gen = 1
		}
		mem.Store32(b, off+ePid, uint32(pid))
		mem.Store64(b, off+eSince, uint64(now))
		mem.Store64(b, off+eGen, gen) // after the lock: see Alive
		return &Handle{b: b, fd: fd, index: i, tok: Token(i, gen)}, nil
	}
	return nil, fmt.Errorf("%w (%d entries): close arenas this host no longer uses", ErrTableFull, Entries)
}

// Observe returns a Handle that takes no entry of the table in b and
// writes nothing: it only asks, through fd (a description of the caller's
// own, which the Handle owns and closes in Close; it may be open
// read-only), whether other handles are alive. Its token is 0, which no
// lock word holds, so it can own no lock and has none to release: a
// read-only arena handle uses it.
func Observe(b []byte, fd int) *Handle {
	return &Handle{b: b, fd: fd, index: -1}
}

// Token returns the handle's token, the value its lock words hold.
func (h *Handle) Token() uint64 { return h.tok }

// Index returns the handle's entry in the table, -1 for an observer.
func (h *Handle) Index() int { return h.index }

// Fd returns the handle's own description, for a file lock that must die
// with this process (never one shared with a child).
func (h *Handle) Fd() int { return h.fd }

// Abandon tells every wait for a lock on this handle's behalf to give up
// (the arena is closing); Abandoned reports whether it was called.
func (h *Handle) Abandon() { h.abandoned.Store(true) }

// Abandoned reports whether Abandon was called.
func (h *Handle) Abandoned() bool { return h.abandoned.Load() }

// Alive reports whether the handle that tok names is still attached: false
// only with proof that it is not (see the package comment). An error from
// the kernel counts as alive, so a lock is never taken from a handle that
// may be running. The handle's own token is always alive.
func (h *Handle) Alive(tok uint64) bool {
	if tok == h.tok && tok != 0 {
		return true
	}
	i, gen := Split(tok)
	if i < 0 {
		return false // no handle can hold such a token: a damaged word
	}
	off := layout.ProcSlotOff(i)
	if mem.Load64(h.b, off+eGen) != gen {
		return false
	}
	held, err := h.held(off)
	if err != nil {
		return true
	}
	// Held, and still by tok's owner: the entry's generation changes only
	// after a new owner has taken the lock, which needs the old one gone.
	return held && mem.Load64(h.b, off+eGen) == gen
}

// held asks the kernel whether any description holds a lock on the byte
// at off. The caller's own description never conflicts with itself, so
// this must not be asked of the handle's own entry.
func (h *Handle) held(off int) (bool, error) {
	lk := byteLock(off, unix.F_WRLCK)
	if err := unix.FcntlFlock(uintptr(h.fd), unix.F_OFD_GETLK, &lk); err != nil {
		return false, err
	}
	return lk.Type != unix.F_UNLCK, nil
}

// Close gives up the entry: it closes the description, which releases its
// lock, so every other handle sees this one dead from now on. The caller
// must hold no lock of the arena.
func (h *Handle) Close() error { return unix.Close(h.fd) }

// Info describes one entry of the table.
type Info struct {
	Index int
	Pid   int   // in the PID namespace of the process that registered
	Since int64 // Unix nanoseconds
	Alive bool
	Self  bool
}

// List returns the entries that were ever taken, as h sees them.
func (h *Handle) List() []Info {
	var out []Info
	for i := 0; i < Entries; i++ {
		off := layout.ProcSlotOff(i)
		gen := mem.Load64(h.b, off+eGen)
		if gen == 0 {
			continue
		}
		tok := Token(i, gen)
		out = append(out, Info{
			Index: i,
			Pid:   int(mem.Load32(h.b, off+ePid)),
			Since: int64(mem.Load64(h.b, off+eSince)),
			Alive: h.Alive(tok),
			Self:  tok == h.tok,
		})
	}
	return out
}

// Pid returns the pid recorded by the handle that tok names, or 0 when
// its entry has been taken again since (or tok names no entry). The pid
// is for people only (see Info).
func (h *Handle) Pid(tok uint64) int {
	i, gen := Split(tok)
	if i < 0 {
		return 0
	}
	off := layout.ProcSlotOff(i)
	pid := int(mem.Load32(h.b, off+ePid))
	if mem.Load64(h.b, off+eGen) != gen {
		return 0
	}
	return pid
}

// AnyAlive reports whether a handle other than h holds an entry: false
// proves that no other process is attached (every entry's lock is free).
func (h *Handle) AnyAlive() bool {
	for i := 0; i < Entries; i++ {
		if i == h.index {
			continue
		}
		off := layout.ProcSlotOff(i)
		if held, err := h.held(off); err != nil || held {
			return true
		}
	}
	return false
}

func lockByte(fd, off, cmd int, typ int16) error {
	lk := byteLock(off, typ)
	return unix.FcntlFlock(uintptr(fd), cmd, &lk)
}

// byteLock describes a lock of type typ on the one byte at off.
func byteLock(off int, typ int16) unix.Flock_t {
	return unix.Flock_t{Type: typ, Whence: 0, Start: int64(off), Len: 1}
}

// Reopen returns a new open file description of the file fd refers to, so
// that a handle's lock is its own even when fd was inherited or passed on.
// It reopens /proc/self/fd/<fd> where /proc is mounted, else path when it
// is not empty (O_NOFOLLOW), and checks that the result is the same file
// (device and inode): a path replaced meanwhile is an error.
func Reopen(fd int, path string) (int, error) { return ReopenMode(fd, path, unix.O_RDWR) }

// ReopenMode is Reopen with the access mode given: unix.O_RDWR or
// unix.O_RDONLY (for a handle that only reads).
func ReopenMode(fd int, path string, mode int) (int, error) {
	var want unix.Stat_t
	if err := unix.Fstat(fd, &want); err != nil {
		return -1, err
	}
	self := procSelfFd + strconv.Itoa(fd)
	// Not O_NOFOLLOW here: the magic link is the file itself.
	nfd, err := unix.Open(self, mode|unix.O_CLOEXEC, 0)
	if err == nil {
		return sameFile(nfd, want, self)
	}
	errs := []error{fmt.Errorf("%s: %w", self, err)}
	if path != "" {
		nfd, err := unix.Open(path, mode|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err == nil {
			return sameFile(nfd, want, path)
		}
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	return -1, errors.Join(errs...)
}

// procSelfFd is where this process's descriptors appear; a variable so a
// test can take /proc away.
var procSelfFd = "/proc/self/fd/"

func sameFile(nfd int, want unix.Stat_t, name string) (int, error) {
	var got unix.Stat_t
	if err := unix.Fstat(nfd, &got); err != nil {
		unix.Close(nfd)
		return -1, err
	}
	if got.Dev != want.Dev || got.Ino != want.Ino {
		unix.Close(nfd)
		return -1, fmt.Errorf("%s is no longer the file being opened (replaced meanwhile)", name)
	}
	return nfd, nil
}
