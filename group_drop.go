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
// after Close. Serialised with Group and with the group's own updates by
// the ring's robust locks; a process killed in the middle leaves the
// group either present or gone.
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
	recovered, ok := rlock.Acquire(b, lock, r.a.own)
	if !ok {
		return ErrClosed // Close began while this waited
	}
	if recovered {
		r.dropHalfMade()
	}
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
	if _, ok := rlock.Acquire(b, o+rl.GLock, r.a.own); !ok { // no member is mid-update
		rlock.Release(b, lock, r.a.self)
		return ErrClosed // Close began while this waited
	}
	mem.Store64(b, o+rl.GState, rl.GroupFree)
	crashPoint("drop")
	bit := uint64(1) << g
	for m := mem.Load64(b, r.off+rl.OffProtected); m&bit != 0 && !mem.CAS64(b, r.off+rl.OffProtected, m, m&^bit); m = mem.Load64(b, r.off+rl.OffProtected) {
	}
	mem.Zero(b, r.tables+g*int(r.inFlight)*rl.PendSize, int(r.inFlight)*rl.PendSize)
	ok = rlock.Release(b, o+rl.GLock, r.a.self)
	ok = rlock.Release(b, lock, r.a.self) && ok
	r.roomFreed()
	r.wake()
	if !ok {
		return r.errLockLost()
	}
	return nil
}

// dropHalfMade frees group entries a dead creator left half-made, with
// the group-table lock held.
func (r *Ring) dropHalfMade() {
	for i := 0; i < rl.Groups; i++ {
		g := r.off + rl.GroupOff(i)
		if mem.Load64(r.b, g+rl.GState) == rl.GroupCreating {
			mem.Store64(r.b, g+rl.GState, rl.GroupFree)
		}
	}
}
