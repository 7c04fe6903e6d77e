package shmarena

import (
	"errors"
	"fmt"
	"os"

	"github.com/shmarena/shmarena/internal/owner"
	"golang.org/x/sys/unix"
)

// This file: arenas reached through a descriptor rather than a path.

// OpenMemfd creates an arena of WithSize bytes in anonymous memory
// (memfd_create; name shows in /proc/<pid>/fd). It has no path: share it
// with workers started by os/exec by passing File() in Cmd.ExtraFiles and
// calling OpenFile in the worker. It disappears when the last process
// holding it exits, so a crash leaves nothing behind. Its size is sealed
// (F_SEAL_SHRINK, F_SEAL_GROW): no process holding it can resize it.
func OpenMemfd(name string, opts ...OpenOption) (*Arena, error) {
	cfg := openConfig{mode: 0o600}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.size == 0 {
		return nil, fmt.Errorf("shmarena: memfd %s: %w: WithSize is required", quote(name), ErrInvalid)
	}
	if cfg.readOnly {
		return nil, fmt.Errorf("shmarena: memfd %s: %w: ReadOnly cannot create an arena; pass ReadOnly to OpenFile in the processes that only read it", quote(name), ErrInvalid)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("shmarena: memfd %s: %w", quote(name), err)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shmarena: memfd %s: %w", quote(name), err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+name)
	a, err := initFile(f, "", cfg)
	if err == nil {
		// Its size is final: sealed, no process holding it can shrink it
		// under the others' mappings (SIGBUS) or grow it.
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
		if err != nil {
			a.Close()
			a, err = nil, fmt.Errorf("shmarena: memfd %s: sealing its size: %w", quote(name), err)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

// reopenError explains why a handle could not get an open file
// description of its own, which it needs (see owner.Reopen), and names the
// fix.
func reopenError(err error) error {
	why := "mount /proc in this process's namespace, or open the arena by path"
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		why = "this process may not open the arena file itself, which every handle must (a descriptor passed " +
			"to it is shared with its sender); give it access (WithMode when creating, or the file's owner and group)"
	}
	return fmt.Errorf("cannot open a file description of this handle's own: %w; %s", err, why)
}

// describePath names an arena's file in errors; arenas reached through a
// descriptor (OpenFile, OpenMemfd) have no path.
func describePath(path string) string {
	if path == "" {
		return "the arena's file descriptor"
	}
	return path
}

// OpenFile attaches to an arena through an open file, such as one a parent
// passed in exec.Cmd.ExtraFiles (in the child, os.NewFile(3, "arena")).
// The file must be open for reading and writing (the arena maps it shared,
// read-write), or for reading with ReadOnly. The arena does not use f's open file description, which
// f's other holders share: it opens a description of its own through
// /proc/self/fd (so OpenFile needs /proc mounted, and fails with an error
// saying so otherwise), because file locks and the handle's liveness
// belong to a description. The caller may close f afterwards. Validation
// and errors are as for Open.
func OpenFile(f *os.File, opts ...OpenOption) (*Arena, error) {
	if f == nil {
		return nil, fmt.Errorf("shmarena: open: %w: nil file", ErrInvalid)
	}
	cfg := openConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("shmarena: open %s: %w", f.Name(), err)
	}
	// A description of our own, not a duplicate: flock and OFD locks belong
	// to the description, so sharing the parent's would let this handle's
	// file lock and identity stand in for the parent's.
	mode := unix.O_RDWR
	if cfg.readOnly {
		mode = unix.O_RDONLY
	}
	fd, err := owner.ReopenMode(int(f.Fd()), "", mode)
	if err != nil {
		return nil, fmt.Errorf("shmarena: open %s: %w", f.Name(), reopenError(err))
	}
	return attach(os.NewFile(uintptr(fd), f.Name()), "", cfg)
}

// File returns the arena's open file, to pass to child processes in
// exec.Cmd.ExtraFiles. It stays owned by the arena: do not close it.
func (a *Arena) File() *os.File { return a.f }

// Path returns the path the arena was opened at, or "" for an arena opened
// with OpenMemfd or OpenFile.
func (a *Arena) Path() string { return a.path }
