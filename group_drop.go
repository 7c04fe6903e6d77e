package shmarena

import (
	"fmt"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
)

// DropGroup removes the consumer group called name from the ring, with
// its position, counts and pending leases: nothing of it is left to block
// producers or to be claimed, and its table entry is free for a new group.
// Members of the dropped group find out at their next call: Claim returns
// nothing, Ack, Nack and Extend return ErrLeaseLost, Stats reports only
// the name and Mine, Wait returns ErrNoGroup at once, and Records ends. A
// group of the same name made later is a new group (at the head, or
// FromStart), which the old handles do not reach.
//
// Use it for a group nobody will read again: a protected group (WithAck,
// WithBackpressure) whose members are gone holds producers back for good
// (PublishWait waits, Publish returns ErrRingFull), so RingStats.Full and
// Waited grow. GroupStats shows which group it is: Position and Floor not
// moving, Lag + Position - Floor equal to the ring's slots (Lag itself,
// for a WithBackpressure group, whose Floor reads 0; Lag cannot grow past
// them), and, acking, Pending stuck: 0 if nobody claimed, else with
// OldestPending growing past the lease.
//
// Errors: ErrNoGroup when the ring has no group of that name; ErrClosed
// after Close. Serialised with Group by the ring's group-table lock, a
// robust lock: a process killed in the middle leaves the group either
// present or gone. It never waits for a member of the group: one in the
// middle of an update (a Claim or Ack; even one stopped there, by SIGSTOP
// or a debugger) finishes it on the dropped entry, which a later Group or
// DropGroup on the ring frees for a new group once no member holds it.
func (r *Ring) DropGroup(name string) (err error) {
	defer catchFault(r.a, guard(), &err)
	if r.closed() {
		return ErrClosed
	}
	if err := r.refuse("drop group " + quote(name)); err != nil {
		return err
	}
	b := r.b
	if !r.a.enter(0) {
		return ErrClosed
	}
	defer r.a.exit(0)
	lock := r.off + rl.OffGroupLock
	if _, ok := rlock.Acquire(b, lock, r.a.own); !ok {
		return r.a.closedErr() // Close began, or a fault abandoned the handle, while this waited
	}
	r.dropHalfMade()
	g := -1
	for i := 0; i < rl.Groups; i++ {
		o := r.off + rl.GroupOff(i)
		if mem.Load64(b, o+rl.GState) == rl.GroupReady && mem.Load32(b, o+rl.GNameLen) == uint32(len(name)) &&
			len(name) <= rl.MaxGroupName && mem.Equal(b, o+rl.GName, name) {
			g = i
			break
		}
	}
	if g < 0 {
		if !rlock.Release(b, lock, r.a.self) {
			return r.errLockLost()
		}
		return fmt.Errorf("shmarena: ring %s: group %s: %w", quote(r.name), quote(name), ErrNoGroup)
	}
	o := r.off + rl.GroupOff(g)
	// The drop takes effect here, under the group-table lock: the entry
	// leaves the ready state and stops protecting. It is freed now if no
	// member holds the group's lock (one mid-update would go on writing
	// into it), else by the next holder of the table lock that finds the
	// group's lock free (freeDropped): a DropGroup never waits for a
	// member, so a stopped one cannot hold up the table and every join.
	free, _ := rlock.TryAcquire(b, o+rl.GLock, r.a.own)
	if free {
		mem.Store64(b, o+rl.GState, rl.GroupFree)
	} else {
		mem.Store64(b, o+rl.GState, rl.GroupCreating) // neither usable nor free
	}
	crashPoint("drop")
	bit := uint64(1) << g
	for m := mem.Load64(b, r.off+rl.OffProtected); m&bit != 0 && !mem.CAS64(b, r.off+rl.OffProtected, m, m&^bit); m = mem.Load64(b, r.off+rl.OffProtected) {
	}
	ok := true
	if free {
		mem.Zero(b, r.tables+g*int(r.inFlight)*rl.PendSize, int(r.inFlight)*rl.PendSize)
		ok = rlock.Release(b, o+rl.GLock, r.a.self)
	}
	ok = rlock.Release(b, lock, r.a.self) && ok
	r.roomFreed()
	r.wake()
	if !ok {
		return r.errLockLost()
	}
	return nil
}

// dropHalfMade frees, with the group-table lock held, the entries left
// neither ready nor free: half-made by a creator that died (creation runs
// under the table lock, so with it held no live creator is at work), or
// dropped while a member held the group's lock. Each is freed only once
// its lock can be taken (free, or its holder dead): a member of a dropped
// group still in the middle of an update may be writing into the entry.
func (r *Ring) dropHalfMade() {
	b := r.b
	for i := 0; i < rl.Groups; i++ {
		g := r.off + rl.GroupOff(i)
		if mem.Load64(b, g+rl.GState) != rl.GroupCreating {
			continue
		}
		if ok, _ := rlock.TryAcquire(b, g+rl.GLock, r.a.own); !ok {
			continue
		}
		mem.Zero(b, r.tables+i*int(r.inFlight)*rl.PendSize, int(r.inFlight)*rl.PendSize)
		mem.Store64(b, g+rl.GState, rl.GroupFree)
		rlock.Release(b, g+rl.GLock, r.a.self)
	}
}
