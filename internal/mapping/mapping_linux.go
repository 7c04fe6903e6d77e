// Package mapping maps an arena file shared and retires a mapping on Close
// without leaving a hole that a racing access could fault on.
package mapping

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Map maps size bytes of fd read-write and shared.
func Map(fd int, size int) ([]byte, error) {
	return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// Retire replaces the shared mapping in place by private zero pages, so the
// file is no longer mapped but an access that races with Close reads zeros
// instead of faulting. The address range stays reserved for the life of
// the process; untouched, it costs no memory.
func Retire(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	addr := uintptr(unsafe.Pointer(&b[0]))
	r, _, e := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(len(b)),
		unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED, ^uintptr(0), 0)
	if e != 0 {
		return fmt.Errorf("mapping: retire: %w", e)
	}
	if r != addr {
		return fmt.Errorf("mapping: retire: kernel moved the mapping")
	}
	return nil
}

// Unmap releases a mapping outright. Only safe when nothing can touch it.
func Unmap(b []byte) error { return unix.Munmap(b) }
