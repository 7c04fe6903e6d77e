// Package rlock implements a robust spin lock in one 64-bit word of a
// shared mapping. The word holds the owner's process token (0 = free), so a
// waiter that has waited past a bound can prove the owner dead and take the
// lock over by a compare-and-swap to its own token: a recoverer that dies in
// turn leaves a lock the next waiter can prove dead too.
package rlock

import (
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/proc"
)

// Tunables, variables so tests can shorten them.
var (
	// CheckAfter is how long a waiter waits before it first asks whether
	// the owner is alive; CheckEvery is how often it asks again.
	CheckAfter = 5 * time.Millisecond
	CheckEvery = 20 * time.Millisecond
	// SpinFor is how long a waiter yields before it starts to sleep.
	SpinFor = 50 * time.Microsecond
)

// Acquire takes the lock at off for self, waiting as long as the owner is
// alive. It returns true when it took the lock over from a dead owner: the
// caller then holds the lock and must repair what that owner left.
func Acquire(b []byte, off int, self proc.Token) (recovered bool) {
	if mem.CAS64(b, off, 0, uint64(self)) {
		return false
	}
	return acquireSlow(b, off, self)
}

func acquireSlow(b []byte, off int, self proc.Token) bool {
	var start, nextCheck time.Time
	sleep := 5 * time.Microsecond
	for i := 0; ; i++ {
		owner := mem.Load64(b, off)
		if owner == 0 {
			if mem.CAS64(b, off, 0, uint64(self)) {
				return false
			}
			continue
		}
		if i < 64 {
			continue // holders keep a lock for well under a microsecond
		}
		now := time.Now()
		if start.IsZero() {
			start, nextCheck = now, now.Add(CheckAfter)
		}
		// Yield rather than sleep for a while: a Go sleep lasts tens of
		// microseconds at least, a hundred times a critical section, so
		// sleeping at the first collision made two busy writer processes
		// run at a fraction of one.
		if now.Sub(start) < SpinFor {
			runtime.Gosched()
			continue
		}
		if now.After(nextCheck) {
			nextCheck = now.Add(CheckEvery)
			if TakeOver(b, off, owner, self) {
				return true
			}
		}
		time.Sleep(sleep)
		if sleep < time.Millisecond {
			sleep *= 2
		}
	}
}

// TryAcquire takes the lock if it is free, or if its owner is dead (then
// recovered is true), without waiting.
func TryAcquire(b []byte, off int, self proc.Token) (ok, recovered bool) {
	owner := mem.Load64(b, off)
	if owner == 0 {
		return mem.CAS64(b, off, 0, uint64(self)), false
	}
	if TakeOver(b, off, owner, self) {
		return true, true
	}
	return false, false
}

// TakeOver replaces owner by self if owner is dead and still holds the lock.
func TakeOver(b []byte, off int, owner uint64, self proc.Token) bool {
	if owner == 0 || proc.Alive(proc.Token(owner)) {
		return false
	}
	return mem.CAS64(b, off, owner, uint64(self))
}

// Release frees the lock.
func Release(b []byte, off int) { mem.Store64(b, off, 0) }

// Owner returns the token holding the lock, or 0.
func Owner(b []byte, off int) proc.Token { return proc.Token(mem.Load64(b, off)) }
