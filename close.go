package shmarena

import (
	"fmt"
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/mapping"
)

const inflightShards = 16

// enter counts an operation in flight in shard i, or returns false after
// Close, and always on a read-only handle (every lock taken in the file,
// and so every repair and lazy collection, starts here). The count goes up before closed is checked and Close sets closed
// before it reads the counts, so either the operation sees closed or Close
// sees the count.
func (a *Arena) enter(i uint64) bool {
	if a.readOnly {
		return false // takes no lock, repairs nothing: see ReadOnly
	}
	c := &a.inflight[i%inflightShards].n
	c.Add(1)
	if a.closed.Load() {
		c.Add(-1)
		return false
	}
	return true
}

// exit ends an operation counted by enter(i).
func (a *Arena) exit(i uint64) { a.inflight[i%inflightShards].n.Add(-1) }

func (a *Arena) inflightTotal() int64 {
	var n int64
	for i := range a.inflight {
		n += a.inflight[i].n.Load()
	}
	return n
}

// Close detaches from the arena: it waits up to 100 ms for this handle's
// writes in flight (a write may hold a lock in the file), then replaces
// the file's mapping in place by zero pages that reserve no memory, closes
// the file and leaves the process table (from then on other processes see
// this handle dead; never while one of its writes may hold a lock). The file stays for other
// processes (remove it yourself when none need it). After Close every
// method of the arena and of everything carved from it returns ErrClosed
// (or false or zero); an operation racing with Close reads zeros, never
// faults.
//
// The zero pages keep the mapping's address range (address space, no
// memory) until the arena and every handle carved from it (Map, TypedMap,
// Ring, Cursor, Group, and the iterators they return) are unreachable and
// the garbage collector has run; the range is then unmapped. So that a
// process that opens and closes arenas stays flat, Close runs a
// collection itself (runtime.GC) when more than 4 closed arenas, or more
// than 64 MiB of them, have come to await one since it last did.
//
// A write still holding a lock 100 ms into Close (such as a slow Update
// function) is let finish in the file: Close then returns nil at once, and
// the mapping is replaced, the file closed and the process table left when
// the last such write ends.
//
// Close returns ErrClosed when called again. It returns an error when the
// file cannot be closed, or when the mapping cannot be replaced (the file
// then stays mapped until the range is unmapped as above), and one
// wrapping ErrTruncated when the file was cut under the mapping (this
// handle's use counts could not be added to it); the arena is closed
// either way.
func (a *Arena) Close() (err error) {
	defer catchFault(a, guard(), &err)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	ferr := a.leaveMapping()
	if !a.awaitInflight() {
		go a.finishWhenDrained()
		return nil
	}
	if err := a.finishClose(); err != nil {
		return fmt.Errorf("shmarena: close %s: %w", describePath(a.path), err)
	}
	return ferr
}

// leaveMapping is what Close does in the file before it waits for writes
// in flight: it adds this handle's use counts to the file, makes writes
// waiting for a lock give up (ErrClosed) and wakes sleepers on futex
// words. It runs under a fault guard of its own: a file cut under the
// mapping makes it return an error wrapping ErrTruncated, and Close goes
// on to replace the mapping, close the file and leave the process table,
// which it would otherwise skip for the life of the process.
func (a *Arena) leaveMapping() (err error) {
	defer catchFault(a, guard(), &err)
	a.own.Abandon()
	a.flushUses() // the mapping is still the file's
	if !a.readOnly {
		wakeAllOnClose(a.mem) // a read-only handle never sleeps on a futex word
	}
	return nil
}

// awaitInflight gives operations counted by enter 100 ms to finish and
// reports whether none is left. A lock released into a retired (private)
// mapping would stay held in the file while this process lives, stalling
// every other process; so when one is still running (a slow Update
// function, a descheduled writer), Close leaves the rest to
// finishWhenDrained.
func (a *Arena) awaitInflight() bool {
	deadline := time.Now().Add(100 * time.Millisecond)
	for a.inflightTotal() != 0 && a.faulted.Load() == nil { // a fault left its count behind
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

// finishWhenDrained runs, in a goroutine of its own, the end of a Close
// whose writes in flight outlasted awaitInflight: it waits for the last
// to end, backing off to a check every 10 ms, then calls finishClose,
// whose error has no one to go to. Holding a, it keeps the range from
// being unmapped meanwhile.
func (a *Arena) finishWhenDrained() {
	for d := 50 * time.Microsecond; a.inflightTotal() != 0 && a.faulted.Load() == nil; d = min(2*d, 10*time.Millisecond) {
		time.Sleep(d)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.finishClose()
}

// finishClose is the end of Close, run once, holding a.mu, when no
// operation of this handle can hold a lock in the file any more (and after
// Close set closed, none can start one). Whatever must outlive writes in
// flight is released here: it replaces the mapping by zero pages, has the
// range unmapped once a is unreachable, and closes the file's
// descriptor(s).
func (a *Arena) finishClose() error {
	forgetGroups(a)
	r, err := mapping.Retire(a.mem)
	a.retired = r
	// Every handle that reaches the range holds a, and every method that
	// touches the range keeps its receiver reachable past its last access
	// (runtime.KeepAlive, or a deferred call that holds it), so once a is
	// unreachable no goroutine is inside an operation on the range.
	runtime.AddCleanup(a, releaseRetired, r)
	if mapping.CollectDue() {
		runtime.GC() // the cleanups of closed arenas no longer reachable
	}
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	// Only now: other processes may take this handle's locks from the
	// moment its process-table entry's lock is released.
	if cerr := a.own.Close(); err == nil {
		err = cerr
	}
	return err
}

// releaseRetired unmaps a closed arena's range; runtime.AddCleanup calls
// it once the arena is unreachable. An error leaves the range mapped, as
// Close did before.
func releaseRetired(r *mapping.Retired) { _ = r.Release() }

// wakeAllOnClose is set by region kinds that put sleepers on futex words,
// so a Close wakes them before the words vanish from this process.
var wakeAllOnClose = func(b []byte) {}
