package shmarena

import (
	"context"
	"math"
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/futex"
	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
)

// This file: how ring readers wait for records, and how they notice a
// producer that died mid-publish.

// The futex word is a sequence in bits 1-31 and, in bit 0, a flag that
// some reader is about to sleep. A reader sets the flag before it checks
// the ring one last time and sleeps on the word it set. A publisher, after
// its commit, looks at the word: only if the flag is set does it bump the
// sequence, clear the flag (one compare-and-swap) and make the wake system
// call. Both sides put a full fence between their write and their read, so
// either the reader sees the record or the publisher sees the flag. With
// nobody asleep a publish so costs one load, and a reader killed while
// asleep costs at most one extra wake, where a count of sleepers would
// stay raised for good.
const futexWaiters = 1

// wake wakes sleepers after a commit, if any announced themselves.
func (r *Ring) wake() { r.wakeAt(rl.OffFutex) }

// wakeAt wakes the sleepers on the futex word at ring offset at (the
// readers' or the producers' waiting for room), if any announced
// themselves; the caller's preceding write must be a full fence.
func (r *Ring) wakeAt(at int) {
	f := r.off + at
	for {
		w := mem.Load32(r.b, f)
		if w&futexWaiters == 0 {
			return
		}
		if mem.CAS32(r.b, f, w, (w+2)&^futexWaiters) {
			futex.Wake(mem.Ptr32(r.b, f), math.MaxInt32)
			return
		}
	}
}

// arm sets the waiters flag and returns the word a sleeper waits on.
func (r *Ring) arm() uint32 { return r.armAt(rl.OffFutex) }

// armAt sets the waiters flag of the futex word at ring offset at and
// returns the word a sleeper waits on.
func (r *Ring) armAt(at int) uint32 {
	f := r.off + at
	for {
		w := mem.Load32(r.b, f)
		if w&futexWaiters != 0 || mem.CAS32(r.b, f, w, w|futexWaiters) {
			return w | futexWaiters
		}
	}
}

// holeWatch follows the publish lock from one reader's point of view, to
// notice a producer that died holding it without asking /proc on every
// empty read.
type holeWatch struct {
	owner, next uint64
	since       time.Time
}

// checkHole is called by a reader that found nothing new. If the publish
// lock has been held by the same other process, with nothing committed,
// for holeCheckAfter, it asks whether that owner is alive; if not, it takes
// the lock over, repairs the hole and reports true.
func (r *Ring) checkHole(w *holeWatch) bool {
	b := r.b
	// The sequence word first: a reader reads its line anyway, and while
	// it moves between two looks there is no hole to watch for. Only a
	// reader that finds it where it was looks at the lock's word (a line
	// the producer writes twice per record: loading it on every empty
	// read of a stream that keeps up took it from the producer each time)
	// and at the clock.
	next := mem.Load64(b, r.off+rl.OffNext)
	if next != w.next {
		*w = holeWatch{next: next}
		return false
	}
	lock := r.off + rl.OffLock
	owner := mem.Load64(b, lock)
	if owner == 0 || owner == r.a.self {
		w.owner = 0
		return false
	}
	now := time.Now()
	if owner != w.owner {
		w.owner, w.since = owner, now
		return false
	}
	if now.Sub(w.since) < holeCheckAfter {
		return false
	}
	w.since = now
	if !r.a.enter(0) {
		return false
	}
	defer r.a.exit(0)
	ok, recovered := rlock.TryAcquire(b, lock, r.a.own)
	if !ok {
		return false
	}
	if recovered {
		r.repair()
	}
	rlock.Release(b, lock, r.a.self)
	return recovered
}

// waitSpin is how long Wait polls before it sleeps on the futex.
const waitSpin = 50 * time.Microsecond

// wait blocks until avail reports true, ctx ends or the arena closes. A
// sleeper announces itself and reads the futex word before re-checking,
// so a commit after the check changes the word and wakes it.
//
// avail(true) is the quick look, on entry and in the spin phase's loop:
// it looks only for new records, with loads of words readers read anyway.
// The slower checks (a producer dead mid-publish, which reads the publish
// lock's word and the clock; an acking group's due leases, a scan of its
// pending table) are left to avail(false), which runs before every sleep:
// a reader that loaded the lock's line on every look took it from the
// producer, who writes it twice per record, and a consumer that keeps up
// with a stream calls Wait every few records.
func (r *Ring) wait(ctx context.Context, avail func(spin bool) bool) error {
	defer runtime.KeepAlive(r)
	if err := r.a.stopped(); err != nil {
		// Also a fault's: a handle a fault abandoned may hold a lock a
		// claim needs, and a record that stays available would make
		// every wait return at once, and a consumer's loop spin.
		return err
	}
	if avail(true) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.a.readOnly {
		if avail(false) {
			return nil
		}
		return r.poll(ctx, avail)
	}
	// Poll a little before sleeping: a producer that is publishing now
	// usually commits within microseconds, and catching that record awake
	// saves both sides a futex system call (the publisher wakes only
	// announced sleepers).
	for start := time.Now(); time.Since(start) < waitSpin; {
		runtime.Gosched()
		if avail(true) {
			return nil
		}
		if r.closed() || ctx.Err() != nil {
			break
		}
	}
	b := r.b
	f, sl := r.off+rl.OffFutex, r.off+rl.OffSleepers
	stop := context.AfterFunc(ctx, func() {
		// A goroutine of its own: no caller's fault guard covers it, and
		// the word may be past the end of a file cut under the mapping
		// (the sleeper then wakes at the backstop, and faults guarded).
		defer catchFault(r.a, guard(), nil)
		if !r.closed() {
			mem.Add32(b, f, 2) // bump the sequence, keep the flag
			futex.Wake(mem.Ptr32(b, f), math.MaxInt32)
		}
		runtime.KeepAlive(r)
	})
	defer stop()
	for {
		mem.Add32(b, sl, 1) // a count for tests and Stats; wakes use the flag
		v := r.arm()
		var err error
		switch {
		case r.closed():
			err = ErrClosed
		case avail(false):
		case ctx.Err() != nil:
			err = ctx.Err()
		default:
			futex.Wait(mem.Ptr32(b, f), v, waitBackstop)
			mem.Add32(b, sl, ^uint32(0))
			continue
		}
		mem.Add32(b, sl, ^uint32(0))
		return err
	}
}

// sleepers returns the number of announced sleepers (for tests and
// benchmarks).
func (r *Ring) sleepers() uint32 { return mem.Load32(r.b, r.off+rl.OffSleepers) }

// A read-only handle's Wait looks again after readOnlyPoll, backing off
// to readOnlyPollMax while nothing comes: it may not write the futex word
// a sleeper must arm.
const (
	readOnlyPoll    = time.Millisecond
	readOnlyPollMax = 20 * time.Millisecond
)

// poll is wait for a read-only handle.
func (r *Ring) poll(ctx context.Context, avail func(spin bool) bool) error {
	t := time.NewTimer(readOnlyPoll)
	defer t.Stop()
	for d := readOnlyPoll; ; d = min(2*d, readOnlyPollMax) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		switch {
		case r.closed():
			return ErrClosed
		case avail(false):
			return nil
		}
		t.Reset(d)
	}
}
