package shmarena

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/futex"
	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

// This file: back-pressure. A protected group (WithAck, WithBackpressure)
// has a floor, the oldest sequence it has not finished; a producer may
// publish sequence s if the record s overwrites, s - slots, is below every
// protected group's floor, or else if every protected group has finished
// that record (or gave up on it, for its own dead letter: see spare).
//
// Producers keep this cheap: the ring header holds a mask of the protected
// group entries (no protected group: one load per publish) and a cached
// lower bound of their floors, recomputed from the groups' floor words
// only by a producer that finds the slot it would overwrite at or past the
// cache (about once per lap while consumers keep up). Floors only grow,
// except that a new protected group starting FromStart lowers the true
// floor: it is created holding the publish lock, so no producer is past
// its check meanwhile, and its creation lowers the cache (see room).

// errNoRoom is a quiet publish's unwrapped refusal (see Ring.quiet), on
// which PublishWait waits.
var errNoRoom = errors.New("no room")

func (r *Ring) errFull() error {
	return fmt.Errorf("shmarena: ring %s: %w: a protected group has not finished the oldest record", quote(r.name), ErrRingFull)
}

// room reports whether sequence s may be published, with the publish lock
// held (so s is the next sequence). r.exGroup > 0 is the offset + 1 of a
// group entry publishing the dead letter of record r.allow (see spare).
//
// The cache is read before the mask and replaced by compare-and-swap from
// the value read, and a group's creation sets its mask bit before it
// lowers the cache: so a producer that computed the floor without a new
// group's bit cannot raise the cache over that group's floor.
func (r *Ring) room(s uint64) bool {
	b := r.b
	if s <= r.slots {
		return true
	}
	victim := s - r.slots
	cache := mem.Load64(b, r.off+rl.OffFloor)
	if victim < cache {
		return true
	}
	mask := mem.Load64(b, r.off+rl.OffProtected)
	f := r.floor(mask)
	// The cache never passes the head (validateRing checks it): a group
	// made later starts at the head or, FromStart, lowers it.
	if c := min(f, s); c != cache {
		mem.CAS64(b, r.off+rl.OffFloor, cache, c)
	}
	return victim < f || r.spare(mask, victim, r.exGroup-1, r.allow)
}

// lowerFloor lowers the floor cache to at most f (a protected group was
// made at f, after its mask bit was set).
func (r *Ring) lowerFloor(f uint64) {
	b := r.b
	for c := mem.Load64(b, r.off+rl.OffFloor); f < c && !mem.CAS64(b, r.off+rl.OffFloor, c, f); c = mem.Load64(b, r.off+rl.OffFloor) {
	}
}

// floor returns the lowest floor of the protected groups in mask
// (math.MaxUint64 when none is ready). An acking group's floor is its
// floor word, a back-pressured one's its position. Every record below it
// is finished by every protected group: the producers' fast path.
func (r *Ring) floor(mask uint64) uint64 {
	b := r.b
	f := uint64(math.MaxUint64)
	for m := mask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		g := r.off + rl.GroupOff(i)
		flags := mem.Load64(b, g+rl.GFlags)
		if mem.Load64(b, g+rl.GState) != rl.GroupReady || flags&rl.FlagProtected == 0 {
			continue // a bit left by a dropper killed before clearing it
		}
		gf := mem.Load64(b, g+rl.GPosition)
		if flags&rl.FlagAck != 0 {
			gf = min(gf, mem.Load64(b, g+rl.GFloor))
		}
		f = min(f, gf)
	}
	return f
}

// The rule for overwriting a record, and why groups that give up never
// wait for one another.
//
// Rule: the publish of sequence s overwrites record v = s - slots, the
// oldest the ring holds. It may, when every protected group has finished
// v; and the dead letter of v itself also may where the groups that have
// not finished v have all given up on it (each holds v pending at its
// WithMaxDeliveries limit: it will deliver v no more, only take the Ack of
// a member still holding it, or dead-letter it). Nothing else counts: a
// group's older unfinished records do not hold v (spare), and the dead
// letter of another record does not excuse anyone.
//
// Invariant I: an unfinished record of a protected group is overwritten
// only by its own dead letter, published while that group had given up
// on it; so the record's slot then holds that dead letter, at v + slots,
// until the group finishes v. The first half is the rule. For the second:
// the group's claims stop at floor + max in flight, and a ring's max in
// flight is at most its slots (Ring, validateRing), so while v is
// unfinished the group's position is at most v + slots: record v + slots
// is not finished by it, and is not v's, so nothing overwrites it.
//
// A group that gave up on v and finds it overwritten therefore finds a
// dead letter of v in its slot (or a hole, if its publisher died writing
// it). Its own letter there (a member killed after publishing it) finishes
// v; another group's is copied into its own, waiting for room as any dead
// letter does, but only while the group has finished the oldest record:
// otherwise the letter in the slot stands for its own and v is finished
// at once (Group.giveUp); a hole loses it (counted lapped).
//
// Progress: let v be the oldest record. Each protected group h that has
// not finished v finishes or gives up on it through its own members,
// never waiting for another group: a member holding v acks it, or its
// lease runs out or it is Nacked and it is delivered again until it
// reaches the limit; if h has not delivered v, a member claims it once
// h's window allows, and every record older than v that h has not
// finished was overwritten, so by I (and since h holds v) h finishes each
// at once and its window opens. When every group left holding v has given
// up on it, the first of them to come to v in a Claim publishes v's dead
// letter over it (the rule allows it) and the head moves. A group waits
// for room (for a dead letter or a copy) only while the oldest record is
// held by groups that have not finished it and it has; those never wait
// for it. So no groups wait for one another in a cycle, for any number of
// groups and any order of giving up, and the head moves whenever the
// members of the groups holding the oldest record claim, settle, or let
// leases run out.

// spare reports whether record v, the oldest the ring holds, may be
// overwritten though some floor is at or below it: every protected group
// in mask has finished v, or, for the dead letter of v published by the
// group entry at ex (>= 0; -1 for any other publish, allow then unused),
// gave up on it. See the rule above.
func (r *Ring) spare(mask, v uint64, ex int, allow uint64) bool {
	b := r.b
	own := ex >= 0 && v == allow
	for m := mask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		g := r.off + rl.GroupOff(i)
		flags := mem.Load64(b, g+rl.GFlags)
		if mem.Load64(b, g+rl.GState) != rl.GroupReady || flags&rl.FlagProtected == 0 {
			continue
		}
		if r.finished(g, i, flags, v) || own && flags&rl.FlagAck != 0 && (g == ex || r.gaveUp(g, i, v)) {
			continue
		}
		return false
	}
	return true
}

// finished reports whether the protected group entry at g (index i, with
// flags) has finished record v: passed it (back-pressured), or (acking)
// its floor is past v or v's pending entry is done. Read without the
// group's lock, it never reports true for a record the group has not
// finished: the floor is read before the position, an entry is written
// before the position passes it, and an entry is reused for a later
// record only after the floor passed v (a done state read in between is
// v's, or the later record's after v was finished; a sequence word other
// than v is believed only when the floor, read after it, is past v).
func (r *Ring) finished(g, i int, flags, v uint64) bool {
	b := r.b
	if flags&rl.FlagAck == 0 {
		return v < mem.Load64(b, g+rl.GPosition)
	}
	floor := mem.Load64(b, g+rl.GFloor)
	if v < floor {
		return true
	}
	pos := mem.Load64(b, g+rl.GPosition)
	if v >= pos || r.inFlight == 0 || pos-floor > r.inFlight {
		return false
	}
	e := r.tables + (i*int(r.inFlight)+ringIndex(v, r.inFlight, r.pendMask))*rl.PendSize
	s1 := mem.Load64(b, e+rl.PSeq)
	st := mem.Load64(b, e+rl.PState)
	if s1 == v && mem.Load64(b, e+rl.PSeq) == v {
		return st>>32 == rl.StDone
	}
	return v < mem.Load64(b, g+rl.GFloor) // reused for a later record, or damaged
}

// gaveUp reports whether the acking group entry at g (index i) has
// delivered record seq as many times as it ever will (WithMaxDeliveries)
// and not finished it: it will not deliver it again, only take the Ack of
// the member holding it or dead-letter it. Read without the group's lock:
// the entry's sequence word is read before and after its state (a claim
// stores the sequence last), and an entry at its limit stays so until the
// record is finished. A state read from the entry's next record can only
// be seen once seq is finished, when excusing the group changes nothing.
func (r *Ring) gaveUp(g, i int, seq uint64) bool {
	b := r.b
	md := uint64(mem.Load32(b, g+rl.GMaxDeliv))
	if md == 0 || r.inFlight == 0 {
		return false
	}
	e := r.tables + (i*int(r.inFlight)+ringIndex(seq, r.inFlight, r.pendMask))*rl.PendSize
	if mem.Load64(b, e+rl.PSeq) != seq {
		return false
	}
	st := mem.Load64(b, e+rl.PState)
	return st>>32 == rl.StPending && uint64(uint32(st)) >= md && mem.Load64(b, e+rl.PSeq) == seq
}

// hasRoom reports, without the publish lock, whether the next k
// publishes (one batch when k > 1) would find room now.
func (r *Ring) hasRoom(k uint64) bool {
	if k <= 1 {
		return r.roomFor(-1, 0)
	}
	next := mem.Load64(r.b, r.off+rl.OffNext)
	mask := mem.Load64(r.b, r.off+rl.OffProtected)
	last := next + k - 1
	if mask == 0 || last <= r.slots {
		return true
	}
	f := r.floor(mask)
	for v := max(next, r.slots+1) - r.slots; v <= last-r.slots; v++ {
		if v >= f && !r.spare(mask, v, -1, 0) {
			return false
		}
	}
	return true
}

// roomFor reports, without the publish lock, whether the next publish
// would find room now, were it the dead letter of record allow by the
// group entry at ex (-1: any other publish).
func (r *Ring) roomFor(ex int, allow uint64) bool {
	next := mem.Load64(r.b, r.off+rl.OffNext)
	mask := mem.Load64(r.b, r.off+rl.OffProtected)
	if mask == 0 || next <= r.slots {
		return true
	}
	v := next - r.slots
	return v < r.floor(mask) || r.spare(mask, v, ex, allow)
}

// roomFreed wakes producers waiting for room, if any announced themselves;
// the caller has just moved a protected group's floor or position with a
// full fence.
func (r *Ring) roomFreed() {
	if mem.Load32(r.b, r.off+rl.OffRoom)&futexWaiters != 0 {
		r.wakeAt(rl.OffRoom)
	}
}

// PublishWait publishes like Publish, but where Publish would refuse with
// ErrRingFull (a protected group has not finished the record the next
// publish would overwrite) it waits until that group acks, dead-letters or
// claims it, or is dropped, then publishes. A PublishWait that had to wait
// is counted once in Stats().Waited. It spins for up to 50 µs, then
// sleeps on a futex word that members bump when they free room (no system
// call on their side unless a producer sleeps), waking at least every
// 100 ms.
//
// A member of a protected group that publishes to the ring it consumes
// (follow-up jobs) must not wait holding the leases that keep the ring
// full: ack first, or publish with a ctx that bounds the wait.
//
// Errors: those of Publish other than ErrRingFull; when ctx ends first,
// an error wrapping both ErrRingFull and ctx.Err() (nothing published);
// ErrClosed when the arena closes. Safe for concurrent use by goroutines
// and processes; waiting producers publish in no particular order.
func (r *Ring) PublishWait(ctx context.Context, topic string, payload []byte) (_ uint64, err error) {
	defer catchFault(r.a, guard(), &err)
	if err := r.refuse("publish"); err != nil {
		return 0, err
	}
	waited := false
	q := *r
	q.quiet = true
	for {
		s, err := q.publish(topic, payload)
		if err != errNoRoom {
			return s, err
		}
		if !waited {
			waited = true
			mem.Add64(r.b, r.off+rl.OffWaited, 1)
		}
		if err := r.waitRoom(ctx, 1); err != nil {
			if err == ErrClosed {
				return 0, err
			}
			return 0, fmt.Errorf("shmarena: ring %s: %w: %w", quote(r.name), ErrRingFull, err)
		}
	}
}

// waitRoom blocks until the ring has room for k records, ctx ends, the
// arena closes or a fault abandons the handle (see Arena.stopped).
func (r *Ring) waitRoom(ctx context.Context, k uint64) error {
	defer runtime.KeepAlive(r)
	for start := time.Now(); time.Since(start) < waitSpin; {
		if err := r.a.stopped(); err != nil {
			return err
		}
		if r.hasRoom(k) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		runtime.Gosched()
	}
	b := r.b
	f := r.off + rl.OffRoom
	stop := context.AfterFunc(ctx, func() {
		// A goroutine of its own: no caller's fault guard covers it, and
		// the word may be past the end of a file cut under the mapping
		// (the sleeper then wakes at the backstop, and faults guarded).
		defer catchFault(r.a, guard(), nil)
		if !r.closed() {
			mem.Add32(b, f, 2)
			futex.Wake(mem.Ptr32(b, f), math.MaxInt32)
		}
		runtime.KeepAlive(r)
	})
	defer stop()
	for {
		v := r.armAt(rl.OffRoom)
		if err := r.a.stopped(); err != nil {
			return err
		}
		switch {
		case r.hasRoom(k):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		futex.Wait(mem.Ptr32(b, f), v, waitBackstop)
	}
}

// roomArmed reports whether a producer announced itself as about to sleep
// for room (for benchmarks).
func (r *Ring) roomArmed() bool { return mem.Load32(r.b, r.off+rl.OffRoom)&futexWaiters != 0 }
