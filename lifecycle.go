package shmarena

import (
	"errors"
	"fmt"

	"github.com/shmarena/shmarena/internal/owner"
	"golang.org/x/sys/unix"
)

// This file: what became of the arena's file since it was opened (removed,
// replaced at its path, truncated), for Check, Info, Stats and the errors
// that tell a user to remove the file.

// fileID is what identifies the file an arena opened.
type fileID struct {
	dev, ino uint64
	linked   bool // it had a name then (a memfd never has)
}

// identify records which file a's descriptor is, at open.
func (a *Arena) identify() {
	var st unix.Stat_t
	if unix.Fstat(int(a.f.Fd()), &st) == nil {
		a.id = fileID{dev: uint64(st.Dev), ino: st.Ino, linked: st.Nlink > 0}
	}
}

// fileState is what became of an arena's file.
type fileState struct {
	removed   bool  // its last name was removed (link count 0), or its path names nothing
	replaced  bool  // its path names another file now
	truncated bool  // it is shorter than the arena
	size      int64 // its length now, bytes
}

// fileState asks the kernel about a's file (one fstat, and one lstat of
// its path when it has one). A failed call reports nothing amiss.
func (a *Arena) fileState() fileState {
	var fs fileState
	var st unix.Stat_t
	if unix.Fstat(a.own.Fd(), &st) != nil {
		return fs
	}
	fs.size = st.Size
	// Once a fault was met the regions are gone, even if the file has
	// been extended again since (with zeros).
	fs.truncated = st.Size < int64(len(a.mem)) || a.faulted.Load() != nil
	fs.removed = a.id.linked && st.Nlink == 0
	if a.path != "" {
		var pst unix.Stat_t
		err := unix.Lstat(a.path, &pst)
		fs.replaced = err == nil && (uint64(pst.Dev) != a.id.dev || pst.Ino != a.id.ino)
		fs.removed = fs.removed || errors.Is(err, unix.ENOENT)
	}
	return fs
}

// err returns the error for a file state: one wrapping ErrTruncated or
// ErrRemoved, or nil when the file is as it was.
func (fs fileState) err(a *Arena) error {
	switch {
	case fs.truncated:
		return fmt.Errorf("shmarena: %s: %w: the file is %d bytes, the arena %d: another process shrank it, and the "+
			"regions past its end are gone; stop every process using it and create it afresh (see docs/lifecycle.md)",
			describePath(a.path), ErrTruncated, fs.size, len(a.mem))
	case fs.replaced:
		return fmt.Errorf("shmarena: %s: %w: the path names another file now than the one this process has open "+
			"(replaced, or moved over); processes that open the path reach another arena, and writes here are not "+
			"seen there (see docs/lifecycle.md)", describePath(a.path), ErrRemoved)
	case fs.removed:
		return fmt.Errorf("shmarena: %s: %w: the file was removed while this process had it open; processes that "+
			"open the path create or reach another arena, and writes here are not seen there (see docs/lifecycle.md)",
			describePath(a.path), ErrRemoved)
	}
	return nil
}

// attachedText says that n handles are attached (this one among them when
// self), for an error that tells the user to remove or change the file:
// removing it under live handles splits them from whoever creates it
// again.
func attachedText(n int, self bool) string {
	among := ""
	if self {
		among = ", this one among them"
	}
	what := fmt.Sprintf("%d handles are attached now%s", n, among)
	switch {
	case n == 0:
		return "no handle is attached now"
	case n == 1 && self:
		return "only this handle is attached now"
	case n == 1:
		what = "1 handle is attached now"
	}
	return what + ": removing the file under them splits them from whoever creates it again; see docs/lifecycle.md"
}

// liveHandles counts the handles attached to the arena mapped at b, asking
// through fd: any description of the file that holds no entry's lock.
func liveHandles(b []byte, fd int) int { return countAlive(owner.Observe(b, fd).List()) }

func countAlive(list []owner.Info) int {
	n := 0
	for _, p := range list {
		if p.Alive {
			n++
		}
	}
	return n
}

// withAttached adds to err, when it tells the user to remove or reshape
// the file (ErrSizeMismatch, ErrShape), that n handles are attached
// (self: the caller's among them).
func withAttached(err error, n func() int, self bool) error {
	if err == nil || !errors.Is(err, ErrSizeMismatch) && !errors.Is(err, ErrShape) {
		return err
	}
	return fmt.Errorf("%w (%s)", err, attachedText(n(), self))
}

// attached counts the handles attached to a's file, a's own included.
func (a *Arena) attached() int { return countAlive(a.own.List()) }
