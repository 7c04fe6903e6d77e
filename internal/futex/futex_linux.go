// Package futex waits on and wakes a 32-bit word of a shared mapping. The
// mapping is MAP_SHARED, so the non-private futex operations reach sleepers
// in every process that maps it.
package futex

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Wait sleeps while *addr == val, for at most d (d <= 0: no limit). It
// returns on a wake, a timeout, a signal or when *addr != val; callers
// re-check their condition in every case.
func Wait(addr *uint32, val uint32, d time.Duration) {
	var tsp unsafe.Pointer
	var ts unix.Timespec
	if d > 0 {
		ts = unix.NsecToTimespec(d.Nanoseconds())
		tsp = unsafe.Pointer(&ts)
	}
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)),
		futexWait, uintptr(val), uintptr(tsp), 0, 0)
}

// Wake wakes up to n sleepers on addr and returns how many woke.
func Wake(addr *uint32, n int) int {
	r, _, _ := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)),
		futexWake, uintptr(n), 0, 0, 0)
	return int(r)
}

// From linux/futex.h; x/sys/unix does not export them.
const (
	futexWait = 0
	futexWake = 1
)
