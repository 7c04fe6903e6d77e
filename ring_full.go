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
// publish sequence s only if the record s overwrites, s - slots, is below
// every protected group's floor.
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
// group entry dead-lettering record r.allow, and r.exFloor that group's
// floor were r.allow finished (it copied the record): see floor.
//
// The cache is read before the mask and replaced by compare-and-swap from
// the value read, and a group's creation sets its mask bit before it
// lowers the cache: so a producer that computed the floor without a new
// group's bit cannot raise the cache over that group's floor.
func (r *Ring) room(s uint64) bool {
	b := r.b
	ex, allow := r.exGroup-1, r.allow
	if s <= r.slots {
		return true
	}
	victim := s - r.slots
	cache := mem.Load64(b, r.off+rl.OffFloor)
	if victim < cache {
		return true
	}
	f := r.floor(mem.Load64(b, r.off+rl.OffProtected), ex, allow, r.exFloor)
	// The cache never passes the head (validateRing checks it): a group
	// made later starts at the head or, FromStart, lowers it.
	if c := min(f, s); ex < 0 && c != cache {
		mem.CAS64(b, r.off+rl.OffFloor, cache, c)
	}
	return victim < f
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
// floor word, a back-pressured one's its position.
//
// For a dead letter of record allow published by the group entry at ex
// (>= 0; -1 for any other publish), that group's floor is exFloor, its
// floor were allow finished (it copied the record); and another acking
// group whose floor is allow and that has given up on it too (gaveUp)
// counts it finished the same way: it will never deliver allow again, and
// builds its own dead letter from this one (Group.giveUp). Without this,
// groups giving up on the oldest record of a full ring would each wait
// for another to finish it, for good.
func (r *Ring) floor(mask uint64, ex int, allow, exFloor uint64) uint64 {
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
		switch {
		case g == ex:
			gf = exFloor
		case ex >= 0 && gf == allow && flags&rl.FlagAck != 0 && r.gaveUp(g, i, allow):
			gf = r.floorWithout(g, i, allow)
		}
		f = min(f, gf)
	}
	return f
}

// floorWithout returns the floor of the acking group entry at g (index i)
// were record seq finished: the first record of its window other than
// seq not finished, else its position. Exact with the group's lock held;
// without it, it never passes a record the group has not finished (a
// finished entry stays so until the floor passes it; an entry being
// reused for a later record reads as unfinished, or as that record's
// state once the floor is past it).
func (r *Ring) floorWithout(g, i int, seq uint64) uint64 {
	b := r.b
	floor, pos := mem.Load64(b, g+rl.GFloor), mem.Load64(b, g+rl.GPosition)
	if floor > pos || pos-floor > r.inFlight || pos >= rl.MaxSeq {
		return min(floor, pos) // damaged, or moved between the two loads
	}
	table := r.tables + i*int(r.inFlight)*rl.PendSize
	for s := floor; s < pos; s++ {
		e := table + int(s%r.inFlight)*rl.PendSize
		if s != seq && (mem.Load64(b, e+rl.PSeq) != s || mem.Load64(b, e+rl.PState)>>32 != rl.StDone) {
			return s
		}
	}
	return pos
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
	e := r.tables + (i*int(r.inFlight)+int(seq%r.inFlight))*rl.PendSize
	if mem.Load64(b, e+rl.PSeq) != seq {
		return false
	}
	st := mem.Load64(b, e+rl.PState)
	return st>>32 == rl.StPending && uint64(uint32(st)) >= md && mem.Load64(b, e+rl.PSeq) == seq
}

// hasRoom reports, without the publish lock, whether the next publish
// would find room now.
func (r *Ring) hasRoom() bool {
	next := mem.Load64(r.b, r.off+rl.OffNext)
	mask := mem.Load64(r.b, r.off+rl.OffProtected)
	return mask == 0 || next <= r.slots || next-r.slots < r.floor(mask, -1, 0, 0)
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
		s, err := q.Publish(topic, payload)
		if err != errNoRoom {
			return s, err
		}
		if !waited {
			waited = true
			mem.Add64(r.b, r.off+rl.OffWaited, 1)
		}
		if err := r.waitRoom(ctx); err != nil {
			if err == ErrClosed {
				return 0, err
			}
			return 0, fmt.Errorf("shmarena: ring %s: %w: %w", quote(r.name), ErrRingFull, err)
		}
	}
}

// waitRoom blocks until the ring has room, ctx ends or the arena closes.
func (r *Ring) waitRoom(ctx context.Context) error {
	defer runtime.KeepAlive(r)
	for start := time.Now(); time.Since(start) < waitSpin; {
		if r.closed() {
			return ErrClosed
		}
		if r.hasRoom() {
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
		if !r.closed() {
			mem.Add32(b, f, 2)
			futex.Wake(mem.Ptr32(b, f), math.MaxInt32)
		}
		runtime.KeepAlive(r)
	})
	defer stop()
	for {
		v := r.armAt(rl.OffRoom)
		switch {
		case r.closed():
			return ErrClosed
		case r.hasRoom():
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
