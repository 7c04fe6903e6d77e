package shmarena

import (
	"fmt"
	"runtime/debug"

	"github.com/shmarena/shmarena/internal/mapping"
)

// This file: surviving an arena file truncated under its mapping.
//
// Another process that shrinks the file (truncate -s, ftruncate) takes the
// pages past the new end away from every mapping of it, and an access to
// them raises SIGBUS, which kills a Go program. Every public method that
// touches the mapping therefore starts with the one line
//
//	defer catchFault(a, guard(), &err)
//
// (nil for a method that returns no error): for the length of the call the
// goroutine panics on a fault instead of dying (debug.SetPanicOnFault), and
// the deferred catchFault turns a fault on the arena's mapping into an
// error wrapping ErrTruncated. A method that returns no error returns its
// zero value (a miss); Check, Info and Stats say why from then on. A fault
// anywhere else during the call (a bug, or in the caller's own function)
// is not recovered: it goes on as a panic, not the crash it would have
// been without the guard. Under the race detector sync/atomic runs in the
// race runtime, outside Go code, and a fault there is fatal whatever the
// goroutine's setting: a -race build is not protected.

// guard makes the calling goroutine panic on a memory fault rather than
// crash, and returns whether it already did.
func guard() bool { return debug.SetPanicOnFault(true) }

// catchFault ends what guard began: it restores the goroutine's setting
// and, when the call is unwinding from a fault on a's mapping, stops the
// panic and stores the fault's error in *err (when err is not nil).
func catchFault(a *Arena, was bool, err *error) {
	debug.SetPanicOnFault(was)
	if r := recover(); r != nil {
		ferr := a.faultError(r)
		if err != nil {
			*err = ferr
		}
	}
}

// faultError returns the error for the panic value r of a fault on a's
// mapping, recording it for Check, Info and Stats; anything else is
// panicked again.
func (a *Arena) faultError(r any) error {
	f, ok := r.(interface{ Addr() uintptr })
	if a == nil || !ok || !mapping.Contains(a.mem, f.Addr()) {
		panic(r)
	}
	err := a.truncation()
	if err == nil {
		// Not shorter (or not known to be): a page the file system could
		// not supply, such as a hole in a sparse copy on a full tmpfs.
		err = fmt.Errorf("shmarena: %s: memory fault on the mapping, the file not shorter than it (a page the file system could not supply: a sparse file on a full file system?): %w", describePath(a.path), ErrTruncated)
	}
	a.faulted.CompareAndSwap(nil, &err)
	// A write that faulted holding a lock in the file has left it held
	// (the hottest writes release without a defer), and this handle is
	// alive: its own later writes would wait for that lock for ever, as a
	// Close would. Abandoned, they give up (with this error: see
	// closedErr) after a short spin on a lock another holds, and the
	// lock goes to other processes when this handle closes.
	if a.own != nil {
		a.own.Abandon()
	}
	return err
}

// closedErr is what a write returns when it gave up waiting for a lock
// because the handle was abandoned: ErrClosed after Close, else the error
// of the fault that abandoned it (see faultError). Returned at the lock's
// failure, never tested on a call's way out, which every call pays.
func (a *Arena) closedErr() error {
	if err := a.stopped(); err != nil {
		return err
	}
	return ErrClosed
}

// truncation returns an error wrapping ErrTruncated when the file is now
// shorter than the mapping, else nil.
func (a *Arena) truncation() error {
	if fs := a.fileState(); fs.truncated {
		return fs.err(a)
	}
	return nil
}

// stopped returns why a wait of this handle must end now: ErrClosed after
// Close, the fault's error once a fault abandoned the handle (what it
// waits for may need a lock the fault left it holding, and would never
// come), else nil.
func (a *Arena) stopped() error {
	if a == nil || a.closed.Load() {
		return ErrClosed
	}
	if f := a.faulted.Load(); f != nil {
		return *f
	}
	return nil
}
