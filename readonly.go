package shmarena

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mapping"
	"github.com/shmarena/shmarena/internal/owner"
	"golang.org/x/sys/unix"
)

// This file: read-only handles, and the errors of opening a file.

// ReadOnly makes Open (or OpenFile) attach read-only, for inspectors and
// monitoring sidecars: the file is opened O_RDONLY and mapped PROT_READ,
// so a read-only handle provably never writes a byte of it (a write would
// fault). It needs only read permission on the file.
//
// Reads work as usual and see other processes' writes at once. Every
// write returns an error wrapping ErrReadOnly and changes nothing: Store,
// Swap, LoadOrStore, CompareAndSwap, Add, Publish, PublishWait, Group and
// DropGroup, and asking for a region that does not exist (Map, Ring,
// OpenTypedMap create nothing); the write methods that report a bool
// (Delete, LoadAndDelete, CompareAndDelete, Expire) return false. Reads
// do not do the chores a read may do on a writable handle: a lapsed entry
// reads absent but is not collected (Expired does not move), a slot or
// publish a dead process left half-written is not repaired (the reader
// reports it absent or waits), and a Map read that gives up on a busy
// slot is not counted in Busy. Cursor.Wait polls (after 1 ms, backing
// off to every 20 ms) rather than sleeping on the ring's futex word.
//
// A read-only handle takes no entry in the arena's process table: other
// processes do not see it (Processes), it holds no lock, and it leaves
// nothing to release if it is killed. Open still validates the file; it
// never creates, initialises or resets one (a missing file is an error
// wrapping os.ErrNotExist whatever WithSize says; WithSize, if given, is
// checked against the file). OpenMemfd refuses ReadOnly with ErrInvalid.
func ReadOnly() OpenOption { return func(c *openConfig) { c.readOnly = true } }

// ReadOnly reports whether the arena was opened with ReadOnly.
func (a *Arena) ReadOnly() bool { return a.readOnly }

// refuse returns the error every write of a read-only handle returns
// (nil on a writable one): what names the region ("map \"x\""), op the
// write refused.
func (a *Arena) refuse(what, op string) error {
	if !a.readOnly {
		return nil
	}
	return fmt.Errorf("shmarena: %s: %s: %w (opened with ReadOnly; open the arena without it to write)", what, op, ErrReadOnly)
}

// refuse is Arena.refuse for a write to map m. It tests the handle
// before it builds the region's name: every Store, Add and Publish calls
// it, and a writable handle must not pay the allocations of an error it
// does not return (alloc_test.go holds the hot paths to zero).
func (m *Map) refuse(op string) error {
	if !m.a.readOnly {
		return nil
	}
	return m.refuseReadOnly(op)
}

// refuseReadOnly is refuse's error, out of line so refuse inlines.
func (m *Map) refuseReadOnly(op string) error { return m.a.refuse("map "+quote(m.name), op) }

// refuse is Arena.refuse for a write to ring r; see Map.refuse. It is
// small enough to inline, so a writable handle pays two loads.
func (r *Ring) refuse(op string) error {
	if r.a == nil || !r.a.readOnly {
		return nil
	}
	return r.refuseWrite(op)
}

func (r *Ring) refuseWrite(op string) error { return r.a.refuse("ring "+quote(r.name), op) }

func openReadOnly(path string, cfg openConfig) (*Arena, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("shmarena: open %s: %w", path, ErrSymlink)
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("shmarena: open %s read-only: no arena there (a read-only open never creates one): %w", path, os.ErrNotExist)
	default:
		return nil, fmt.Errorf("shmarena: open %s read-only: %w", path, openError(path, err))
	}
	return attach(os.NewFile(uintptr(fd), path), path, cfg)
}

// newReadOnlyArena builds a read-only handle on the mapping b: an
// observer in the process table (no entry taken, nothing written) on a
// read-only description of its own, used only to ask whether other
// handles are alive. It unmaps b on failure.
func newReadOnlyArena(f *os.File, path string, b []byte) (*Arena, error) {
	fd, err := owner.ReopenMode(int(f.Fd()), path, unix.O_RDONLY)
	if err != nil {
		_ = mapping.Unmap(b)
		return nil, fmt.Errorf("shmarena: open %s: %w", describePath(path), reopenError(err))
	}
	a := &Arena{f: f, path: path, mem: b, own: owner.Observe(b, fd), readOnly: true,
		seed: layout.ReadHeader(b).Seed}
	a.identify()
	return a, nil
}

// lookupRegion is region for a read-only handle: it finds the region
// named spec.name and checks its shape, without the file lock (which a
// carver holds only while it writes an entry it publishes last) and
// without writing; a missing region is ErrReadOnly, as creating it would
// be a write.
func (a *Arena) lookupRegion(spec regionSpec) (layout.Entry, error) {
	h := layout.ReadHeader(a.mem)
	for i := 0; i < layout.DirEntries; i++ {
		if e := layout.ReadEntry(a.mem, i); e.State == layout.EntryReady && e.Name == spec.name {
			return e, withAttached(spec.sameShape(e, h.NextFree, int64(len(a.mem))), a.attached, false)
		}
	}
	return layout.Entry{}, fmt.Errorf("shmarena: region %s: %w: it does not exist, and a read-only handle creates nothing (open the arena without ReadOnly to create it)",
		quote(spec.name), ErrReadOnly)
}

// openError explains a failure to open an arena file, naming the fix: for
// a permission error, the file's mode and owner, and how an arena is
// shared with a group of users.
func openError(path string, err error) error {
	if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
		return err
	}
	fi, serr := os.Lstat(path)
	if serr != nil {
		return fmt.Errorf("%w: the directory does not let this user (uid %d) reach or create the file; open a path it may use", err, os.Geteuid())
	}
	owner := ""
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil {
		owner = fmt.Sprintf(", owned by %s:%s", userName(st.Uid), groupName(st.Gid))
	}
	return fmt.Errorf("%w: the file has mode %v%s, and this process runs as %s (uid %d): create the arena WithMode(0o660) and give it a group both users are in to share it, or open it ReadOnly() where read permission is enough",
		err, fi.Mode()&fs.ModePerm, owner, userName(uint32(os.Geteuid())), os.Geteuid())
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(uid))
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return g.Name
	}
	return strconv.Itoa(int(gid))
}
