// Package mapping maps an arena file shared and, at Close, retires the
// mapping: it replaces it in place by zero pages that reserve no memory,
// so that an access racing with Close reads zeros instead of faulting,
// and unmaps the range once its owner proves nothing can touch it.
package mapping

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Map maps size bytes of fd read-write and shared.
func Map(fd int, size int) ([]byte, error) {
	return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// MapReadOnly maps size bytes of fd read-only and shared: a write through
// the mapping faults, so a handle built on it provably never changes the
// file. fd may be open read-only.
func MapReadOnly(fd int, size int) ([]byte, error) {
	return unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
}

// Unmap releases a mapping outright. Only safe when nothing can touch it.
func Unmap(b []byte) error { return unix.Munmap(b) }

// A Retired is the address range of a mapping that Retire replaced. It
// stays reserved, and counted by Pending, until Release.
type Retired struct {
	b        []byte
	released atomic.Bool
}

// Retire replaces the shared mapping b in place by zero pages of this
// process alone, so the file is no longer mapped but an access racing
// with the caller's Close reads zeros (and writes land in them) instead
// of faulting. The pages reserve no memory up front: the range is mapped
// MAP_NORESERVE, which the kernel's default (heuristic) and "always"
// overcommit modes honour; strict overcommit ignores it and charges the
// whole range, so there, when that is refused, the range maps a sparse
// memfd instead, whose pages are charged only when written. Untouched,
// either costs address space and no memory.
//
// The returned Retired is never nil and is counted by Pending until its
// Release. When no replacement could be made the error says why, and the
// Retired still holds b, which then still maps the file until Release.
func Retire(b []byte) (*Retired, error) {
	r := &Retired{b: b}
	tally.add(1, int64(len(b)))
	if len(b) == 0 {
		return r, nil
	}
	if err := replaceAnon(b); err != nil {
		if !errors.Is(err, unix.ENOMEM) {
			return r, err
		}
		if err2 := replaceMemfd(b); err2 != nil {
			return r, fmt.Errorf("%w; %w", err, err2)
		}
	}
	return r, nil
}

// replaceAnon maps private anonymous zero pages over b.
func replaceAnon(b []byte) error {
	return mapFixed(b, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE, -1)
}

// replaceMemfd maps a sparse memfd of b's length, shared, over b. A memfd
// reserves nothing (the kernel creates it unaccounted) and a shared
// mapping is not charged at mmap, so this works under strict overcommit.
func replaceMemfd(b []byte) error {
	fd, err := unix.MemfdCreate("shmarena-retired", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("mapping: retire: memfd: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(len(b))); err != nil {
		return fmt.Errorf("mapping: retire: memfd: %w", err)
	}
	return mapFixed(b, unix.MAP_SHARED, fd)
}

// mapFixed maps fd (or anonymous memory, fd -1) read-write over b, in
// place. A failed MAP_FIXED leaves the old mapping as it was (Linux 6.12
// and later; earlier kernels could leave the range unmapped).
func mapFixed(b []byte, flags, fd int) error {
	addr := uintptr(unsafe.Pointer(&b[0]))
	got, _, e := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(len(b)),
		unix.PROT_READ|unix.PROT_WRITE, uintptr(flags|unix.MAP_FIXED), uintptr(fd), 0)
	if e != 0 {
		return fmt.Errorf("mapping: retire: %w", e)
	}
	if got != addr {
		return fmt.Errorf("mapping: retire: kernel moved the mapping")
	}
	return nil
}

// Release unmaps the range, and stops counting it in Pending. Only safe
// when nothing can touch the range any more. Calls after the first do
// nothing. It returns munmap's error, which leaves the range mapped but
// no longer counted.
func (r *Retired) Release() error {
	if !r.released.CompareAndSwap(false, true) {
		return nil
	}
	defer tally.add(-1, -int64(len(r.b)))
	if len(r.b) == 0 {
		return nil
	}
	if err := unix.Munmap(r.b); err != nil {
		return fmt.Errorf("mapping: release: %w", err)
	}
	return nil
}

// Released reports whether Release was called.
func (r *Retired) Released() bool { return r.released.Load() }

// Pending returns how many retired ranges are not yet released, and their
// total length in bytes.
func Pending() (n int, bytes int64) {
	tally.mu.Lock()
	defer tally.mu.Unlock()
	return tally.n, tally.bytes
}

// The budget of retired ranges that may await release, beyond those that
// were still awaiting it after the last collection, before CollectDue
// asks for one.
const (
	BudgetRanges = 4
	BudgetBytes  = 64 << 20
)

// CollectDue reports whether more than BudgetRanges ranges, or more than
// BudgetBytes, were retired and not released since the low point of
// Pending after the last time it reported true. The caller then runs a
// garbage collection, whose cleanups release the ranges of handles no
// longer reachable. Measuring from the low point, rather than from zero,
// keeps ranges that stay reachable for long from calling for a useless
// collection at every Close.
func CollectDue() bool {
	tally.mu.Lock()
	defer tally.mu.Unlock()
	if tally.n-tally.lowN <= BudgetRanges && tally.bytes-tally.lowBytes <= BudgetBytes {
		return false
	}
	tally.lowN, tally.lowBytes = tally.n, tally.bytes
	return true
}

// tally counts the retired ranges not yet released, process-wide.
var tally counts

type counts struct {
	mu              sync.Mutex
	n, lowN         int   // ranges pending; their low point since CollectDue said true
	bytes, lowBytes int64 // the same in bytes
}

func (c *counts) add(n int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += n
	c.bytes += bytes
	c.lowN = min(c.lowN, c.n)
	c.lowBytes = min(c.lowBytes, c.bytes)
}

// Contains reports whether addr lies inside the mapping b (or the range it
// occupied): for telling a fault on an arena's mapping from another.
func Contains(b []byte, addr uintptr) bool {
	if len(b) == 0 {
		return false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return addr >= base && addr-base < uintptr(len(b))
}
