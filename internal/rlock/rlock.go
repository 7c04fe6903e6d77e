// Package rlock implements a robust spin lock in one 64-bit word of a
// shared mapping. The word holds the owner's process token (0 = free), so a
// waiter that has waited past a bound can prove the owner dead and take the
// lock over by a compare-and-swap to its own token: a recoverer that dies in
// turn leaves a lock the next waiter can prove dead too.
//
// A second word, HeirOff bytes after the lock word, names the process of
// the one waiter that has waited longer than StarveAfter behind another
// process: while it is set, no other waiter (of any process, its own
// included) takes the free lock, so a process that keeps losing the race
// to busier ones gets the lock next (the idea of sync.Mutex's starvation
// mode, across processes). Waiting behind its own process makes no heir:
// fairness among one process's goroutines is left to chance, as before,
// and costs nothing. The heir word is advisory: an heir that dies is
// cleared by the next waiter to prove it dead, and a waiter that has
// deferred to an heir for HeirPatience stops deferring.
package rlock

import (
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/proc"
)

// HeirOff is where the heir word lives, in bytes after the lock word. Every
// lock word must have these 8 bytes reserved beside it (same cache line).
const HeirOff = 32

// Tunables, variables so tests can shorten them.
var (
	// CheckAfter is how long a waiter waits before it first asks whether
	// the owner is alive; CheckEvery is how often it asks again.
	CheckAfter = 5 * time.Millisecond
	CheckEvery = 20 * time.Millisecond
	// SpinFor is how long a waiter yields before it starts to sleep.
	SpinFor = 50 * time.Microsecond
	// StarveAfter is how long a waiter waits before it claims to be heir.
	StarveAfter = time.Millisecond
	// HeirPatience is how long a waiter defers to another process's heir
	// before it takes a free lock regardless (an heir that is alive but
	// stopped must not stop everyone).
	HeirPatience = 100 * time.Millisecond
)

// Acquire takes the lock at off for self, waiting as long as the owner is
// alive. It returns true when it took the lock over from a dead owner: the
// caller then holds the lock and must repair what that owner left.
func Acquire(b []byte, off int, self proc.Token) (recovered bool) {
	if mem.Load64(b, off+HeirOff) == 0 && mem.CAS64(b, off, 0, uint64(self)) {
		return false
	}
	return acquireSlow(b, off, self)
}

// waiter is the state of one acquireSlow call.
type waiter struct {
	b         []byte
	off       int
	self      proc.Token
	start     time.Time
	nextCheck time.Time
	heir      bool // this call set the heir word
}

func acquireSlow(b []byte, off int, self proc.Token) bool {
	w := waiter{b: b, off: off, self: self}
	sleep := 5 * time.Microsecond
	for i := 0; ; i++ {
		owner := mem.Load64(b, off)
		if owner == 0 && w.mayTake(i) {
			if mem.CAS64(b, off, 0, uint64(self)) {
				w.leave()
				return false
			}
			continue
		}
		if i < 64 {
			continue // holders keep a lock for well under a microsecond
		}
		now := time.Now()
		if w.start.IsZero() {
			w.start, w.nextCheck = now, now.Add(CheckAfter)
		}
		waited := now.Sub(w.start)
		if !w.heir && waited >= StarveAfter && owner != uint64(self) {
			w.heir = mem.CAS64(b, off+HeirOff, 0, uint64(self))
		}
		if now.After(w.nextCheck) {
			w.nextCheck = now.Add(CheckEvery)
			if owner != 0 && TakeOver(b, off, owner, self) {
				w.leave()
				return true
			}
			w.clearDeadHeir()
		}
		// Yield rather than sleep for a while: a Go sleep lasts tens of
		// microseconds at least, a hundred times a critical section, so
		// sleeping at the first collision made two busy writer processes
		// run at a fraction of one. The heir sleeps at most heirSleep at
		// a time: the lock is kept for it, so its sleep is everyone's.
		if waited < SpinFor {
			runtime.Gosched()
			continue
		}
		if w.heir {
			time.Sleep(min(sleep, heirSleep))
		} else {
			time.Sleep(sleep)
		}
		if sleep < time.Millisecond {
			sleep *= 2
		}
	}
}

// heirSleep bounds one sleep of the heir: a free lock waits for it.
const heirSleep = 20 * time.Microsecond

// mayTake reports whether the waiter may take a free lock: it is the heir,
// there is none, or it has deferred to the heir for HeirPatience. Another
// goroutine of the heir's process defers like anyone else.
func (w *waiter) mayTake(i int) bool {
	if w.heir || mem.Load64(w.b, w.off+HeirOff) == 0 {
		return true
	}
	return i >= 64 && !w.start.IsZero() && time.Since(w.start) >= HeirPatience
}

// leave clears the heir word if this waiter set it; it holds the lock.
func (w *waiter) leave() {
	if w.heir {
		mem.CAS64(w.b, w.off+HeirOff, uint64(w.self), 0)
	}
}

// clearDeadHeir clears an heir word left by a process that died waiting.
func (w *waiter) clearDeadHeir() {
	h := mem.Load64(w.b, w.off+HeirOff)
	if h != 0 && h != uint64(w.self) && !proc.Alive(proc.Token(h)) {
		mem.CAS64(w.b, w.off+HeirOff, h, 0)
	}
}

// TryAcquire takes the lock if it is free and no waiter is its heir, or if
// its owner is dead (then recovered is true), without waiting.
func TryAcquire(b []byte, off int, self proc.Token) (ok, recovered bool) {
	owner := mem.Load64(b, off)
	if owner == 0 {
		if h := mem.Load64(b, off+HeirOff); h != 0 {
			if proc.Alive(proc.Token(h)) || !mem.CAS64(b, off+HeirOff, h, 0) {
				return false, false
			}
		}
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

// Release frees the lock: a release store, so everything written under
// the lock is visible to the next owner.
func Release(b []byte, off int) { mem.StoreRelease64(b, off, 0) }

// Reset clears the lock and heir words; only for a file whose processes
// all died with an earlier boot.
func Reset(b []byte, off int) {
	mem.Store64(b, off, 0)
	mem.Store64(b, off+HeirOff, 0)
}

// Owner returns the token holding the lock, or 0.
func Owner(b []byte, off int) proc.Token { return proc.Token(mem.Load64(b, off)) }
