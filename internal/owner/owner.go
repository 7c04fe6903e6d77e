// Package owner gives every attached arena handle an identity that any
// other process can prove alive or dead, whatever PID namespace, container
// or /proc view either of them has.
//
// The arena header holds a table of entries. A handle takes an entry by
// taking an open-file-description lock (F_OFD_SETLK, a write lock on one
// of the entry's candidate bytes, which lie past the end of the arena file)
// on a description of its own, then bumps the entry's generation and names
// the byte in the entry's word. Its token, the value lock words record, is
// the entry index and that generation. The kernel holds the lock exactly as
// long as the description is open, and closes the description when the
// last process holding it exits, however it exits. So:
//
//   - a token whose entry holds another generation is dead (the entry was
//     taken again, which needs the lock, which its owner held while alive);
//   - a token whose entry's byte holds no write lock (F_OFD_GETLK) is dead:
//     only a write lock counts, which a description open read-only cannot
//     take, so a process that may only read the file cannot keep a dead
//     handle alive, and a byte it read-locks is passed over by a handle
//     taking the entry;
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
//	0   8  generation<<16 | candidate: the generation is bumped by each
//	       handle that takes the entry (0 = never taken); the candidate
//	       names the byte its holder write-locks (lockOff)
//	8   4  pid of the process that took it, in its own PID namespace (display only)
//	16  8  when it was taken, Unix nanoseconds (display only)
const (
	eGen   = 0
	ePid   = 8
	eSince = 16

	indexBits = 16
	genMask   = 1<<(64-indexBits) - 1

	// candBits: the low bits of an entry's word name which of its
	// candidate lock bytes its holder locked; candTries is how many a
	// handle taking the entry tries before giving up on it.
	candBits  = 16
	candMask  = 1<<candBits - 1
	candTries = 64

	// lockBase is where the lock bytes start: far past the end of any
	// arena file (OFD locks may lie past the end), so they never share a
	// byte with anything else locked. Entry i's candidates are
	// lockBase + i<<candBits + c.
	lockBase = int64(1) << 56
)

// lockOff returns the offset of candidate lock byte c of entry i.
func lockOff(i int, c uint64) int64 { return lockBase + int64(i)<<candBits + int64(c) }

// Entries is the size of the table: how many handles may be attached to
// one arena at once.
const Entries = layout.ProcSlots

// ErrTableFull reports that every entry is held by a live handle.
var ErrTableFull = errors.New("every process-table entry is held by a live handle")

// ErrReadLocked reports that free entries remain but another description
// read-locks every byte that could prove a new handle alive. It wraps
// unix.EAGAIN.
var ErrReadLocked = fmt.Errorf("process table read-locked by another open file description: %w", unix.EAGAIN)

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

// Register takes the first entry of the table in b that no live handle
// holds, using fd (a description of the caller's own, which the Handle owns
// from now on and closes in Close), and records pid and now for display.
//
// An entry is held while a write lock is on the byte its word names. A
// process that may only read the file can read-lock any byte, and a write
// lock cannot be taken over a read lock; so a free entry is taken by
// write-locking any of several candidate bytes (see lockOff) and naming the
// one locked in the entry's word with a compare-and-swap, and a byte
// read-locked by someone else is passed over.
//
// It returns ErrTableFull when live handles hold every entry, an error
// wrapping unix.EAGAIN (ErrReadLocked) when free entries remain but every
// candidate byte of each is read-locked by another description, and the
// system's error when the file takes no OFD locks.
func Register(b []byte, fd int, pid int, now int64) (*Handle, error) {
	blocked, lastBlocked := 0, 0
	for i := 0; i < Entries; i++ {
		off := layout.ProcSlotOff(i)
		w := mem.Load64(b, off+eGen)
		if w>>candBits != 0 {
			held, err := writeLocked(fd, lockOff(i, w&candMask))
			if err != nil || held {
				continue // a live handle holds it (an error counts as alive)
			}
		}
		tok, err := take(b, fd, i, w)
		if errors.Is(err, errTaken) {
			continue
		}
		if errors.Is(err, ErrReadLocked) {
			blocked, lastBlocked = blocked+1, i
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("taking an open-file-description lock on the arena file: %w", err)
		}
		mem.Store32(b, off+ePid, uint32(pid))
		mem.Store64(b, off+eSince, uint64(now))
		return &Handle{b: b, fd: fd, index: i, tok: tok}, nil
	}
	if blocked > 0 {
		return nil, fmt.Errorf("%w: %d process-table entries are free, but another open file description read-locks "+
			"every byte that would prove a new handle alive (held: %s); a process with read access to the file "+
			"(fcntl F_RDLCK locks) is blocking new handles: stop it, or remove read access for those who "+
			"need not attach", ErrReadLocked, blocked, describeLock(fd, lastBlocked, mem.Load64(b, layout.ProcSlotOff(lastBlocked)+eGen)+1))
	}
	return nil, fmt.Errorf("%w (%d entries): close arenas this host no longer uses", ErrTableFull, Entries)
}

// take takes free entry i, whose word read w: it write-locks the first
// candidate byte after the one w names that it can, and installs its own
// generation and byte in the word. It returns the new token, errTaken when
// another handle took the entry meanwhile, ErrReadLocked when every
// candidate tried was locked by another description.
func take(b []byte, fd, i int, w uint64) (uint64, error) {
	off := layout.ProcSlotOff(i)
	gen := (w>>candBits + 1) & genMask
	if gen == 0 {
		gen = 1
	}
	for t := uint64(1); t <= candTries; t++ {
		c := (w + t) & candMask
		err := lockByte(fd, lockOff(i, c), unix.F_OFD_SETLK, unix.F_WRLCK)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			continue // read-locked by another description, or being taken
		}
		if err != nil {
			return 0, err
		}
		// The word names our byte only once we hold it: see Alive.
		if !mem.CAS64(b, off+eGen, w, gen<<candBits|c) {
			_ = lockByte(fd, lockOff(i, c), unix.F_OFD_SETLK, unix.F_UNLCK)
			return 0, errTaken
		}
		return Token(i, gen), nil
	}
	return 0, ErrReadLocked
}

var errTaken = errors.New("entry taken by another handle")

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
//
// Only a write lock proves life: a description open read-only cannot take
// one, so a process that may only read the file cannot keep a dead
// handle looking alive by read-locking its byte.
func (h *Handle) Alive(tok uint64) bool {
	if tok == h.tok && tok != 0 {
		return true
	}
	i, gen := Split(tok)
	if i < 0 {
		return false // no handle can hold such a token: a damaged word
	}
	off := layout.ProcSlotOff(i)
	w := mem.Load64(h.b, off+eGen)
	if w>>candBits != gen {
		return false
	}
	held, err := writeLocked(h.fd, lockOff(i, w&candMask))
	if err != nil {
		return true
	}
	// Held, and still by tok's owner: the word changes only after a new
	// owner has locked another byte, and it names a byte only once its
	// owner holds it; so the byte held while the word is unchanged is
	// the owner's.
	return held && mem.Load64(h.b, off+eGen) == w
}

// writeLocked asks the kernel whether any description holds a write lock
// on the byte at off: a read lock (which any reader of the file may take)
// does not conflict with the read lock asked about, so it reads unlocked.
// The caller's own description never conflicts with itself, so this must
// not be asked of the handle's own entry.
func writeLocked(fd int, off int64) (bool, error) {
	lk := byteLock(off, unix.F_RDLCK)
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk); err != nil {
		return false, err
	}
	return lk.Type == unix.F_WRLCK, nil
}

// describeLock says who holds a lock in conflict with a write lock on
// candidate byte c of entry i, for an error message.
func describeLock(fd, i int, c uint64) string {
	lk := byteLock(lockOff(i, c&candMask), unix.F_WRLCK)
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK {
		return "none seen now"
	}
	kind := map[int16]string{unix.F_RDLCK: "a read lock", unix.F_WRLCK: "a write lock"}[lk.Type]
	who := "an open file description lock (its pid is not recorded; see /proc/locks)"
	if lk.Pid > 0 {
		who = "pid " + strconv.Itoa(int(lk.Pid))
	}
	return fmt.Sprintf("%s from byte %d, length %d, by %s", kind, lk.Start, lk.Len, who)
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
		gen := mem.Load64(h.b, off+eGen) >> candBits
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
	if mem.Load64(h.b, off+eGen)>>candBits != gen {
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
		w := mem.Load64(h.b, layout.ProcSlotOff(i)+eGen)
		if w>>candBits == 0 {
			continue // never taken
		}
		if held, err := writeLocked(h.fd, lockOff(i, w&candMask)); err != nil || held {
			return true
		}
	}
	return false
}

func lockByte(fd int, off int64, cmd int, typ int16) error {
	lk := byteLock(off, typ)
	return unix.FcntlFlock(uintptr(fd), cmd, &lk)
}

// byteLock describes a lock of type typ on the one byte at off.
func byteLock(off int64, typ int16) unix.Flock_t {
	return unix.Flock_t{Type: typ, Whence: 0, Start: off, Len: 1}
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

// FirstLockOffset returns the byte of the arena file that the next handle
// to take entry i would try to lock first: for tests that play a process
// with read access locking it.
func FirstLockOffset(b []byte, i int) int64 {
	return lockOff(i, (mem.Load64(b, layout.ProcSlotOff(i)+eGen)+1)&candMask)
}
