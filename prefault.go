package shmarena

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"golang.org/x/sys/unix"
)

// This file: paying a mapping's first-touch cost up front.

// prefaultChunk is how many bytes Prefault touches between checks for
// Close (2 MiB: a few hundred microseconds on 4 KiB pages).
const prefaultChunk = 2 << 20

// prefaultPopulate, cleared by a test, makes Prefault skip
// MADV_POPULATE_WRITE and write-touch every page as it does on kernels
// older than 5.14.
var prefaultPopulate = true

// Prefault touches every page of the arena's mapping once, in this
// process, so that its operations stop paying for the first access to
// each page, and returns how long that took.
//
// Each process maps the arena afresh and pays for its first touch of
// every page: a page fault, and on a virtual machine that shadows page
// tables (this project's CI reports a PVM hypervisor) a far larger
// hypervisor exit, 5-7 µs per 4 KiB page, against tens of ns per
// operation afterwards. A new worker's first operations therefore run
// many times slower than its later ones until it has touched the pages
// it uses. Measured there (bench/results.md, "First touch"; a 47 MiB
// arena of 100,000 keys, three rounds on a loaded machine): a new
// worker's first 10,000 reads of random keys took 58 ms (54-94 ms)
// against 3.5 ms for the same reads again, 15x; after Prefault, which
// took 95-135 ms (about 2 ms per MiB), they took 3.7 ms, 1.5x. On a tmpfs
// mounted with huge=always (2 MiB pages, one fault per 512 pages)
// Prefault took 2-3 ms and a worker without it was already within 1.7x.
// Call it once in each worker, after Open and before latency matters.
//
// How: madvise(MADV_POPULATE_WRITE) maps every page writable, as a write
// fault would, without writing; that alone leaves the hypervisor's cost
// to the first real access, so it then reads one word of every page.
// Where the kernel lacks MADV_POPULATE_WRITE (before Linux 5.14) it
// instead adds 0 atomically to one word of every page. Neither changes a
// byte of the arena, and both are safe while other goroutines and
// processes read and write it.
//
// Memory: every page of the file is allocated, as the creator's
// fallocate already did unless the filesystem lacked it. Then Prefault
// fills the sparse file: on a full filesystem MADV_POPULATE_WRITE fails
// (its error is returned), and on a kernel without it the first touch
// that finds no room raises SIGBUS, as any write to the arena would.
//
// Prefault returns ErrClosed if the arena is closed before or while it
// runs (it stops within one 2 MiB step of Close), and an error wrapping
// the operating system's when madvise fails for another reason than
// lacking the advice. Safe for concurrent use; Close waits for it.
func (a *Arena) Prefault() (_ time.Duration, err error) {
	defer catchFault(a, guard(), &err)
	start := time.Now()
	if !a.enter(0) {
		return 0, ErrClosed
	}
	defer a.exit(0)
	defer runtime.KeepAlive(a)
	page := os.Getpagesize()
	populate := prefaultPopulate
	var sum uint32 // the read touches' results, kept live
	for off := 0; off < len(a.mem); off += prefaultChunk {
		if a.closed.Load() {
			return time.Since(start), ErrClosed
		}
		end := min(off+prefaultChunk, len(a.mem))
		if populate {
			err := unix.Madvise(a.mem[off:end], unix.MADV_POPULATE_WRITE)
			switch {
			case errors.Is(err, unix.EINVAL) && off == 0:
				populate = false // a kernel without the advice
			case errors.Is(err, unix.EINTR):
				// interrupted by a signal: the touches below finish the job
			case err != nil:
				return time.Since(start), fmt.Errorf("shmarena: prefault %s: madvise: %w", describePath(a.path), err)
			}
		}
		for p := off; p < end; p += page {
			if populate {
				sum += mem.Load32(a.mem, p)
			} else {
				mem.Add32(a.mem, p, 0)
			}
		}
	}
	runtime.KeepAlive(sum)
	return time.Since(start), nil
}
