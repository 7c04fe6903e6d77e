package shmarena

import (
	"errors"
	"fmt"

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
	removed   bool  // its last name was removed (link count 0)
	replaced  bool  // its path names another file now, or nothing
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
	if a.path != "" && !fs.removed {
		var pst unix.Stat_t
		err := unix.Lstat(a.path, &pst)
		fs.replaced = errors.Is(err, unix.ENOENT) || err == nil && (uint64(pst.Dev) != a.id.dev || pst.Ino != a.id.ino)
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
	case fs.removed:
		return fmt.Errorf("shmarena: %s: %w: the file was removed while this process had it open; processes that "+
			"open the path now create or reach another arena, and writes here are not seen there (see docs/lifecycle.md)",
			describePath(a.path), ErrRemoved)
	case fs.replaced:
		return fmt.Errorf("shmarena: %s: %w: the path now names another file (or none) than the one this process has "+
			"open; processes that open the path reach another arena, and writes here are not seen there (see docs/lifecycle.md)",
			describePath(a.path), ErrRemoved)
	}
	return nil
}

// attachedText says that n handles are attached, for an error that tells
// the user to remove the file: removing it under live handles splits them
// from whoever creates it again.
func attachedText(n int) string {
	switch n {
	case 0:
		return "no handle is attached now"
	case 1:
		return "1 handle is attached now: removing the file under it splits it from the new file; stop it first (docs/lifecycle.md)"
	}
	return fmt.Sprintf("%d handles are attached now: removing the file under them splits them from the new file; stop them first (docs/lifecycle.md)", n)
}
