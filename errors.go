package shmarena

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Sentinel errors. Every error the package returns wraps one of these (or
// an error from the operating system, such as os.ErrNotExist or
// syscall.ENOSPC) with context, so test them with errors.Is. A returned
// error's message starts with "shmarena: " once; the sentinels' own texts
// carry no prefix, except ErrClosed's, which is returned as it is. The one
// exception is a Wait method's ctx.Err(), returned as it is.
var (
	// ErrClosed is returned by every method of an arena, and of the maps,
	// rings and groups carved from it, after the arena's Close.
	ErrClosed = errors.New("shmarena: arena is closed")

	// ErrNotArena means the file does not start with the arena magic.
	ErrNotArena = errors.New("not an arena file")

	// ErrIncompatible means the file is an arena of another layout version,
	// byte order or word size than this build writes.
	ErrIncompatible = errors.New("incompatible arena file")

	// ErrSizeMismatch means the size asked for with WithSize differs from
	// the arena's, or the file's length differs from its header.
	ErrSizeMismatch = errors.New("arena size mismatch")

	// ErrCorrupt means a field read from the file is out of range or
	// inconsistent, or a stored value does not decode.
	ErrCorrupt = errors.New("corrupt arena data")

	// ErrSymlink means the arena path is a symbolic link, which Open refuses
	// so that nobody can redirect another process's arena. Only the last
	// element is checked (O_NOFOLLOW): directories above it are trusted,
	// so keep arenas in a directory only their users can write.
	ErrSymlink = errors.New("arena path is a symbolic link")

	// ErrShape means a region exists under the name asked for but with
	// another kind or shape; the message names the field that differs.
	ErrShape = errors.New("region exists with another shape")

	// ErrArenaFull means the arena has no room for a new region, in bytes
	// or in directory entries; the message gives what was needed and free.
	ErrArenaFull = errors.New("arena is full")

	// ErrEmptyKey is returned for a zero-length key.
	ErrEmptyKey = errors.New("empty key")

	// ErrTooLarge means a key and value (or a record) do not fit one slot.
	ErrTooLarge = errors.New("too large for a slot")

	// ErrFull means the map has no free slot for a new key. Overwriting a
	// key that is present never returns it.
	ErrFull = errors.New("map is full")

	// ErrRingFull means a publish found no room: the record it would
	// overwrite is one a protected group (WithAck, WithBackpressure) has not
	// finished. Ring.Publish returns it at once; Ring.PublishWait waits
	// instead, and returns it (with the context's error) only when its ctx
	// ends first. ErrFull is the map's counterpart.
	ErrRingFull = errors.New("ring is full")

	// ErrLeaseLost means an Ack, Nack or Extend named a lease this member no
	// longer holds: it expired and another member (or this one, by a later
	// Claim) took the record again, or the record was finished or
	// dead-lettered, or its group was dropped. Nothing was changed.
	ErrLeaseLost = errors.New("lease lost")

	// ErrNoGroup means Ring.DropGroup found no group of the name given, or
	// Group.Wait found its group dropped.
	ErrNoGroup = errors.New("no such group")

	// ErrNotCounter means Add met a key holding a value that is not a
	// counter; the value is left as it was.
	ErrNotCounter = errors.New("value is not a counter")

	// ErrEncoded means a byte-level counter operation was asked of a map
	// that holds msgpack-encoded values.
	ErrEncoded = errors.New("map holds encoded values")

	// ErrTypeMismatch means a typed map's stored value is well-formed
	// msgpack that does not decode as the map's Go type (it was written
	// through the byte view, or by a process using another type); the
	// message names the type.
	ErrTypeMismatch = errors.New("value type mismatch")

	// ErrEncode means a value could not be encoded with msgpack.
	ErrEncode = errors.New("cannot encode value")

	// ErrTooManyGroups means a ring's table of consumer groups is full.
	ErrTooManyGroups = errors.New("too many groups")

	// ErrTooManyHandles means Open found every entry of the arena's process
	// table (256) held by a live handle; entries of closed or dead handles
	// are reused. Close handles a process no longer needs.
	ErrTooManyHandles = errors.New("too many handles attached")

	// ErrLockLost means an operation found, when it ended its write,
	// released its lock or committed its record, that another process had
	// taken the lock over, judging this handle dead. It stops there and
	// writes nothing more, but what it wrote before it found out may have
	// reached the slot or record (which the recoverer treats as a dead
	// writer's: made absent or abandoned) and may be lost. Liveness is
	// proven by the kernel (see the package documentation), so this never
	// happens unless the file is damaged, written by other means, or this
	// handle's descriptors were closed behind its back: it is a second line
	// of defence, and worth reporting.
	ErrLockLost = errors.New("lock was taken over by another process")

	// ErrReadOnly means a write (or the creation of a region) was asked of
	// an arena opened with ReadOnly. Nothing was changed; open the arena
	// without ReadOnly to write.
	ErrReadOnly = errors.New("arena is open read-only")

	// ErrNoRegion means Arena.LookupMap or Arena.LookupRing found no region
	// of the name (and kind) asked for.
	ErrNoRegion = errors.New("no such region")

	// ErrTruncated means the arena's file was shrunk by another process
	// (truncate, ftruncate) while mapped: the regions past its new end are
	// gone. An operation that meets them returns it (one that returns no
	// error returns a miss or zero) instead of the process dying of
	// SIGBUS; Check, Info and Stats report it. Nothing can repair such a
	// file: stop its users and create it afresh (docs/lifecycle.md).
	// From its first fault on, a handle gives up its waits (Wait,
	// PublishWait, LoadOrCompute, a write waiting for a lock) with it,
	// since it may hold a lock what they wait for needs. Also returned
	// for a fault on a file not shorter than its mapping (a page the
	// file system could not supply, such as a sparse copy's hole on a
	// full file system).
	ErrTruncated = errors.New("arena file truncated")

	// ErrRemoved means the arena's file was removed, or its path now names
	// another file, while this process had it open: processes that open
	// the path from now on reach another arena (Open creates a new one),
	// and this one's data is no longer shared with them. Check returns it;
	// Info and Stats report it (Removed). Plan a change of file as
	// docs/lifecycle.md says.
	ErrRemoved = errors.New("arena file removed or replaced")

	// ErrInvalid means an option or argument is out of range.
	ErrInvalid = errors.New("invalid argument")
)

// quoteMax is how many bytes of a caller's string an error quotes.
const quoteMax = 64

// quote returns s quoted as %q would, for an error message that names a
// caller's input (a name, topic or key): a string longer than quoteMax
// bytes is cut there (at a rune boundary), marked with "…" and followed
// by its length, as in "aaaa…" (1048576 bytes), so a huge input does not
// make a huge error.
func quote(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	n := quoteMax
	for i := 1; i < utf8.UTFMax && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return strconv.Quote(s[:n]+"…") + " (" + strconv.Itoa(len(s)) + " bytes)"
}
