// Package rlock implements a robust lock in one 64-bit word of a shared
// mapping. The word holds its owner's token (see internal/owner; 0 =
// free), so a waiter that has waited past a bound can ask the kernel
// whether the owner's handle is still attached and, if it is not, take the
// lock over by a compare-and-swap to its own token: a recoverer that dies
// in turn leaves a lock the next waiter can prove dead too.
//
// A waiter spins briefly, yields for a while, then parks on a futex word
// FutexOff bytes after the lock word, after setting that word's waiters
// bit; a release that finds the bit set clears it, bumps the word and wakes
// every sleeper. The bit is cleared on each such release, so a sleeper that
// never runs again (stopped, or killed) costs releasers at most one wake.
// Sleeps are bounded, so a dead owner, which never releases, is noticed.
//
// Release is a compare-and-swap from the owner's own token to 0: an owner
// that lost its lock (another handle judged it dead) finds out instead of
// freeing a lock someone else holds. With correct liveness it never
// happens; it is the second line of defence.
package rlock

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/shmarena/shmarena/internal/futex"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
)

// FutexOff is where the futex word lives, in bytes after the lock word.
// Every lock word must have 8 bytes reserved there (Reset clears them).
const FutexOff = 32

// waitersBit in the futex word says a waiter may be asleep on it; the rest
// of the word is a sequence bumped by each release that wakes.
const waitersBit = 1

// spinLoads is how many times a waiter reloads the lock word before it
// starts to look at the clock: holders keep a lock for well under a
// microsecond.
const spinLoads = 64

// Tunables, variables so tests can shorten them.
var (
	// CheckAfter is how long a waiter waits before it first asks whether
	// the owner is alive; CheckEvery is how often it asks again, and the
	// longest a parked waiter sleeps. Asking is one fcntl system call
	// (about a microsecond), and only waiters ask. A killed process's lock
	// is released when the kernel has closed its files, which can come a
	// few milliseconds after the kill on a loaded machine: a short period
	// keeps the takeover close behind it.
	CheckAfter = 2 * time.Millisecond
	CheckEvery = 5 * time.Millisecond
	// SpinFor is how long a waiter yields before it parks on the futex.
	SpinFor = 50 * time.Microsecond
)

// Acquire takes the lock at off for h, waiting as long as the owner is
// alive, and reports ok. recovered is true when it took the lock over from
// a dead owner: the caller then holds the lock and must repair what that
// owner left. ok is false, and the lock not taken, when h was abandoned
// (its arena is closing) while it waited; a parked waiter notices within
// CheckEvery.
func Acquire(b []byte, off int, h *owner.Handle) (recovered, ok bool) {
	if mem.CAS64(b, off, 0, h.Token()) {
		return false, true
	}
	return acquireSlow(b, off, h)
}

func acquireSlow(b []byte, off int, h *owner.Handle) (recovered, ok bool) {
	self := h.Token()
	var start, nextCheck time.Time
	for i := 0; ; i++ {
		cur := mem.Load64(b, off)
		if cur == 0 {
			if mem.CAS64(b, off, 0, self) {
				return false, true
			}
			continue
		}
		if i < spinLoads {
			continue
		}
		if h.Abandoned() {
			return false, false
		}
		now := time.Now()
		if start.IsZero() {
			start, nextCheck = now, now.Add(CheckAfter)
		}
		if !now.Before(nextCheck) {
			nextCheck = now.Add(CheckEvery)
			if TakeOver(b, off, cur, h) {
				return true, true
			}
		}
		// Yield before parking: a futex sleep and wake cost microseconds
		// each, many critical sections' worth.
		if now.Sub(start) < SpinFor {
			runtime.Gosched()
			continue
		}
		park(b, off, cur, nextCheck.Sub(now))
	}
}

// park sleeps on the lock's futex word while the lock stays with owner, for
// at most d. Setting the waiters bit before the last look at the lock word,
// both full fences, pairs with Release's order (free the lock, then look at
// the bit): either this waiter sees the lock freed or the releaser sees the
// bit and wakes it.
func park(b []byte, off int, owner uint64, d time.Duration) {
	f := off + FutexOff
	v := arm(b, f)
	if mem.Load64(b, off) != owner {
		return
	}
	futex.Wait(mem.Ptr32(b, f), v, max(d, time.Microsecond))
}

// arm sets the waiters bit and returns the word to sleep on.
func arm(b []byte, f int) uint32 {
	for {
		w := mem.Load32(b, f)
		if w&waitersBit != 0 || mem.CAS32(b, f, w, w|waitersBit) {
			return w | waitersBit
		}
	}
}

// wake clears the waiters bit, bumps the sequence and wakes every sleeper;
// each goes back to the lock and parks again (setting the bit) if it loses.
func wake(b []byte, f int) {
	for {
		w := mem.Load32(b, f)
		if w&waitersBit == 0 {
			return
		}
		if mem.CAS32(b, f, w, (w+2)&^waitersBit) {
			futex.Wake(mem.Ptr32(b, f), math.MaxInt32)
			return
		}
	}
}

// TryAcquire takes the lock if it is free, or takes it over if its owner
// is dead (then recovered is true), without waiting.
func TryAcquire(b []byte, off int, h *owner.Handle) (ok, recovered bool) {
	cur := mem.Load64(b, off)
	if cur == 0 {
		return mem.CAS64(b, off, 0, h.Token()), false
	}
	if TakeOver(b, off, cur, h) {
		return true, true
	}
	return false, false
}

// TakeOver replaces cur by h's token if cur still holds the lock and the
// kernel proves its handle gone.
func TakeOver(b []byte, off int, cur uint64, h *owner.Handle) bool {
	if cur == 0 || h.Alive(cur) {
		return false
	}
	return mem.CAS64(b, off, cur, h.Token())
}

// Release frees the lock if self holds it and reports whether it did. The
// compare-and-swap is a full fence, so everything written under the lock
// is visible to the next owner, and it orders the look at the waiters bit
// after the lock is free (see park). False means another handle took the
// lock over: the caller must change nothing more under it.
func Release(b []byte, off int, self uint64) bool {
	w := mem.Words5(b, off) // one bounds check; small enough to inline
	if !atomic.CompareAndSwapUint64(&w[0], self, 0) {
		return false
	}
	// The futex word is the low half of w[4] (the file is little-endian;
	// the high half is reserved, zero).
	if atomic.LoadUint64(&w[FutexOff/8])&waitersBit != 0 {
		wake(b, off+FutexOff)
	}
	return true
}

// Reset clears the lock and futex words; only for a file no live handle is
// attached to.
func Reset(b []byte, off int) {
	mem.Store64(b, off, 0)
	mem.Store64(b, off+FutexOff, 0)
}

// Owner returns the token holding the lock, or 0.
func Owner(b []byte, off int) uint64 { return mem.Load64(b, off) }
