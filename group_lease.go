package shmarena

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

// This file: settling an acking group's leases (Ack, Nack, Extend),
// finding due and pending ones, and dead letters.

type settleOp int

const (
	opAck settleOp = iota
	opNack
	opExtend
)

func (op settleOp) String() string { return [...]string{"ack", "nack", "extend"}[op] }

// Ack finishes records this member claimed from an acking group: they are
// never delivered again, and once every older record is finished too the
// ring may overwrite them. An Ack of a record whose lease ran out but that
// no other claim has taken yet still succeeds.
//
// Errors: ErrLeaseLost when a record's lease is no longer this member's
// (it went to another member, or to a later Claim of this one, which
// returned it with a higher Deliveries; or it is already finished; or the
// group was dropped): that record is left as it is, the others are acked,
// and the error names the first lost sequence and how many were lost.
// ErrInvalid for a group without WithAck; ErrClosed after Close. Safe for
// concurrent use by goroutines and processes: updates are serialised by
// the group's robust lock, which a member killed holding it passes on.
func (g *Group) Ack(recs ...Record) (err error) {
	defer catchFault(g.r.a, guard(), &err)
	return g.settle(opAck, 0, recs)
}

// Nack gives a record this member claimed back to an acking group, to be
// delivered again (to any member, Deliveries one higher) by a Claim made
// delay or more from now (wall clock; delay <= 0: at once). A record at
// its WithMaxDeliveries limit is dead-lettered by that Claim instead.
// Errors as Ack.
func (g *Group) Nack(rec Record, delay time.Duration) (err error) {
	defer catchFault(g.r.a, guard(), &err)
	return g.settle(opNack, delay, []Record{rec})
}

// Extend sets the lease of a record this member claimed to end d from now
// (wall clock; d > 0), for work that takes longer than the group's lease.
// It is not a delivery: Deliveries does not change. Errors as Ack, and
// ErrInvalid for d <= 0.
func (g *Group) Extend(rec Record, d time.Duration) (err error) {
	defer catchFault(g.r.a, guard(), &err)
	if d <= 0 {
		return fmt.Errorf("shmarena: ring %s: group %s: %w: extend by %v", quote(g.r.name), quote(g.name), ErrInvalid, d)
	}
	return g.settle(opExtend, d, []Record{rec})
}

func (g *Group) settle(op settleOp, d time.Duration, recs []Record) error {
	r := g.r
	if err := g.settleable(op); err != nil || len(recs) == 0 {
		return err
	}
	if !g.lockAck() {
		return g.errUnlockable()
	}
	err := g.settleLocked(op, d, recs)
	if !g.unlockAck() && err == nil {
		err = r.errLockLost()
	}
	return err
}

// AckAndClaim acks done as Ack does, then claims up to max records as
// AppendClaim(done[:0], max) does, into done's memory, taking the group's
// lock once for both. A member working in batches pays one lock round
// trip per batch rather than two, and allocates nothing once its slice
// has grown:
//
//	recs := g.Claim(64)
//	for len(recs) > 0 {
//		work(recs)
//		recs, err = g.AckAndClaim(recs, 64)
//	}
//
// The records of done are read before their memory is reused. The error
// is Ack's for done (with ErrLeaseLost the others are acked, and the
// claim goes ahead); ErrInvalid for a group without WithAck and ErrClosed
// after Close, with nothing acked or claimed. Safe for concurrent use by
// goroutines and processes, as Ack and Claim are.
func (g *Group) AckAndClaim(done []Record, max int) (recs []Record, err error) {
	defer catchFault(g.r.a, guard(), &err)
	if err := g.settleable(opAck); err != nil {
		return done[:0], err
	}
	if !g.lockAck() {
		return done[:0], g.errUnlockable()
	}
	if len(done) > 0 {
		err = g.settleLocked(opAck, 0, done)
	}
	out := g.claimLocked(done[:0], max)
	if !g.unlockAck() && err == nil {
		err = g.r.errLockLost()
	}
	return out, err
}

// settleable returns the error of settling with op on this handle: the
// arena is closed, or the group does not ack.
func (g *Group) settleable(op settleOp) error {
	if g.r.closed() {
		return ErrClosed
	}
	if !g.ack {
		return fmt.Errorf("shmarena: ring %s: group %s: %w: %v on a group without WithAck", quote(g.r.name), quote(g.name), ErrInvalid, op)
	}
	return nil
}

// errUnlockable is the error of a settle whose lockAck failed.
func (g *Group) errUnlockable() error {
	if g.r.closed() {
		return ErrClosed
	}
	if err := g.r.a.stopped(); err != nil && g.current() {
		return err // the lock wait given up: a fault abandoned the handle
	}
	return fmt.Errorf("shmarena: ring %s: group %s: %w: the group was dropped", quote(g.r.name), quote(g.name), ErrLeaseLost)
}

// settleLocked settles recs with op, holding the group lock. An Ack reads
// no clock: only a Nack's delay and an Extend set a deadline.
func (g *Group) settleLocked(op settleOp, d time.Duration, recs []Record) error {
	r := g.r
	b := r.b
	floor, pos, ok := g.window()
	if !ok {
		g.repairWindow()
		return fmt.Errorf("shmarena: ring %s: group %s: %w: floor and position out of order", quote(r.name), quote(g.name), ErrCorrupt)
	}
	var now int64
	if op != opAck {
		now = time.Now().UnixNano()
	}
	var lost int
	var first uint64
	lease, self := g.leaseID(), r.a.self
	for i := range recs {
		rec := &recs[i] // not a 64-byte copy per record
		e := g.entry(rec.Seq)
		held := mem.Load64(b, e+rl.PState) == pendWord(rl.StPending, uint32(rec.Deliveries)) && mem.Load64(b, e+rl.PHolder) == self
		if brokenAck && op == opAck {
			held = mem.Load64(b, e+rl.PState)>>32 == rl.StPending
		}
		if rec.lease != lease || rec.Seq < floor || rec.Seq >= pos || rec.Deliveries <= 0 || int64(rec.Deliveries) > math.MaxUint32 ||
			mem.Load64(b, e+rl.PSeq) != rec.Seq || !held {
			if lost == 0 {
				first = rec.Seq
			}
			lost++
			continue
		}
		switch op {
		case opAck:
			// A plain store, as claimNew's (see there): what a finished
			// entry frees, the floor's fenced store in advanceFloor
			// publishes before anyone is woken.
			mem.Put64(b, e+rl.PState, pendWord(rl.StDone, uint32(rec.Deliveries)))
			crashPoint("ack")
		case opNack:
			// Fenced stores: the wake below must not look at the futex
			// word before a member that then sleeps could see them.
			mem.Store64(b, e+rl.PDeadline, uint64(deadlineFrom(now, max(d, 0))))
			crashPoint("nack")
			mem.Store64(b, e+rl.PHolder, 0)
		case opExtend:
			mem.Store64(b, e+rl.PDeadline, uint64(deadlineFrom(now, d)))
		}
	}
	if op == opAck {
		g.advanceFloor()
	} else if op == opNack {
		r.wake() // members waiting for work
	}
	if lost > 0 {
		return fmt.Errorf("shmarena: ring %s: group %s: %w: %v of record %d (%d of %d records)", quote(r.name), quote(g.name), ErrLeaseLost, op, first, lost, len(recs))
	}
	return nil
}

// brokenAck is false except in a build with the shmarena_broken_ack tag
// (lincheck_broken_ack.go), where Ack ignores who holds the lease.
var brokenAck bool

// deadHeader is the size of a dead letter's header.
const deadHeader = 16

// A DeadLetter is a record an acking group gave up on after
// WithMaxDeliveries deliveries, as published on its WithDeadLetter topic.
// The dead letter's payload is, little-endian:
//
//	0   8  Seq: the original record's sequence number
//	8   4  Deliveries: how many times the group delivered it
//	12  2  length of the original topic
//	14  2  flags: bit 0 set when the original payload was left out
//	       because the dead letter would not fit a slot; bits 8-15 the
//	       dead-lettering group's entry in the ring's group table, plus
//	       one (how a group tells its own dead letters from another's)
//	16     the original topic, then the original payload
type DeadLetter struct {
	// Seq is the original record's sequence number on the ring.
	Seq uint64
	// Deliveries is how many times the group delivered it.
	Deliveries int
	// Topic and Payload are the original record's ("" when the topic did
	// not fit; Payload is empty when Truncated).
	Topic   string
	Payload []byte
	// Truncated reports that the original payload was left out (it and
	// the header did not fit one slot).
	Truncated bool
}

// ParseDeadLetter decodes a record published on a dead-letter topic. It
// returns ErrCorrupt when the payload is shorter than its header says.
// The returned Payload aliases rec.Payload.
func ParseDeadLetter(rec Record) (DeadLetter, error) {
	p := rec.Payload
	if len(p) < deadHeader {
		return DeadLetter{}, fmt.Errorf("shmarena: dead letter %d: %w: %d bytes, header is %d", rec.Seq, ErrCorrupt, len(p), deadHeader)
	}
	tl := int(binary.LittleEndian.Uint16(p[12:]))
	if tl > len(p)-deadHeader {
		return DeadLetter{}, fmt.Errorf("shmarena: dead letter %d: %w: topic of %d bytes in %d", rec.Seq, ErrCorrupt, tl, len(p)-deadHeader)
	}
	return DeadLetter{
		Seq:        binary.LittleEndian.Uint64(p),
		Deliveries: int(binary.LittleEndian.Uint32(p[8:])),
		Topic:      string(p[deadHeader : deadHeader+tl]),
		Payload:    p[deadHeader+tl:],
		Truncated:  binary.LittleEndian.Uint16(p[14:])&1 != 0,
	}, nil
}

// due reports, without the lock, whether some lease in the window is due
// for redelivery now, or at its delivery limit and able to be given up
// (not one whose dead letter would find no room: a Wait for it would
// return at once, over and over, with nothing to claim).
func (g *Group) due() bool {
	b := g.r.b
	floor, pos, ok := g.window()
	if !ok {
		return false
	}
	now := time.Now().UnixNano()
	for seq := floor; seq < pos; seq++ {
		e := g.entry(seq)
		if mem.Load64(b, e+rl.PSeq) != seq || mem.Load64(b, e+rl.PState)>>32 != rl.StPending {
			continue
		}
		holder := mem.Load64(b, e+rl.PHolder)
		if int64(mem.Load64(b, e+rl.PDeadline)) > now && (holder == 0 || g.holderAlive(holder, now)) {
			continue
		}
		if g.maxDeliv == 0 || uint32(mem.Load64(b, e+rl.PState)) < g.maxDeliv || g.canGiveUp(seq) {
			return true
		}
	}
	return false
}

// pending counts the window's pending entries, without the lock, and
// returns the floor and the age of the oldest first delivery.
func (g *Group) pending() (n int, floor uint64, oldest time.Duration) {
	b := g.r.b
	floor, pos, ok := g.window()
	if !ok {
		return 0, floor, 0
	}
	now := time.Now().UnixNano()
	for seq := floor; seq < pos; seq++ {
		e := g.entry(seq)
		if mem.Load64(b, e+rl.PSeq) != seq || mem.Load64(b, e+rl.PState)>>32 != rl.StPending {
			continue
		}
		n++
		if age := time.Duration(now - int64(mem.Load64(b, e+rl.PSince))); age > oldest {
			oldest = age
		}
	}
	return n, floor, oldest
}

// giveResult is what giveUp did with a record at its delivery limit.
type giveResult int

const (
	giveDone giveResult = iota // dead-lettered (or dropped): finish it
	giveWait                   // its dead letter found no room: try again later
	giveLost                   // overwritten with no dead letter of it found
)

// giveUp dead-letters record seq, delivered deliv times (the group's
// limit), with the group lock held; rec and res are what reading seq
// found.
//
// A protected group's unfinished record is overwritten only by a dead
// letter of it, published over its slot (as sequence seq + slots) by this
// group or by another that gave up on it too, and that letter stays there
// until this group finishes the record (see the rule in ring_full.go). So
// a record found overwritten is finished at once, never waiting for room:
// this group's own letter there (a member killed after publishing it,
// before finishing the record) is not published again; another group's
// is copied into this group's dead letter, waiting for room as any dead
// letter does, but only while this group has finished the ring's oldest
// record: where it has not, the wait could be for itself, and the letter
// found stands for its own. Anything else is
// giveLost: damage, or a dead letter over the slot whose publisher died
// in the middle (a hole, as any record a producer dies writing).
func (g *Group) giveUp(seq uint64, deliv uint32, rec Record, res readResult) giveResult {
	if g.dead == "" {
		return giveDone
	}
	switch res {
	case readOK:
		if !g.deadLetter(seq, deliv, rec.Topic, rec.Payload, false) {
			return giveWait
		}
		return giveDone
	case readLapped:
		if mem.Load64(g.r.b, g.r.off+rl.OffNext) <= seq+g.r.slots {
			return giveWait // the dead letter over its slot is being published
		}
		dl, ours, found := g.findLetter(seq)
		switch {
		case !found:
			return giveLost
		case !ours && !g.deadLetter(seq, deliv, dl.Topic, dl.Payload, dl.Truncated) && g.holdsNoOldest():
			return giveWait
		}
		return giveDone
	}
	return giveLost
}

// findLetter looks in the slot of record seq, overwritten, for a dead
// letter of it (sequence seq + slots), and reports whether it is this
// group's. Read only.
func (g *Group) findLetter(seq uint64) (dl DeadLetter, ours, found bool) {
	r := g.r
	rec, res := r.readInto(seq+r.slots, false, "", "", nil)
	if res != readOK {
		return dl, false, false
	}
	dl, err := ParseDeadLetter(rec)
	if err != nil || dl.Seq != seq || binary.LittleEndian.Uint16(rec.Payload[14:])>>8 == 0 {
		return dl, false, false
	}
	ours = rec.Topic == g.dead && int(binary.LittleEndian.Uint16(rec.Payload[14:])>>8) == g.index()+1
	return dl, ours, true
}

// index returns the group's entry in the ring's group table.
func (g *Group) index() int { return (g.goff - g.r.off - rl.OffGroups) / rl.GroupSize }

// canGiveUp reports, without the locks, whether a Claim could finish
// record seq, at its delivery limit, now: true unless its dead letter
// would find no room (Wait must not return for it until it would).
func (g *Group) canGiveUp(seq uint64) bool {
	r := g.r
	b := r.b
	if g.dead == "" {
		return true
	}
	if mem.Load64(b, r.slotOff(seq)+rl.SBegin) != seq {
		if mem.Load64(b, r.off+rl.OffNext) <= seq+r.slots {
			return false // the dead letter over its slot is being published
		}
		if _, ours, found := g.findLetter(seq); ours || !found || !g.holdsNoOldest() {
			return true // finished without a publish
		}
	}
	return r.roomFor(g.goff, seq)
}

// holdsNoOldest reports whether the group has finished the oldest record
// the ring holds (the one the next publish overwrites).
func (g *Group) holdsNoOldest() bool {
	r := g.r
	next := mem.Load64(r.b, r.off+rl.OffNext)
	return next <= r.slots || r.finished(g.goff, g.index(), mem.Load64(r.b, g.goff+rl.GFlags), next-r.slots)
}

// deadLetter publishes, with the group lock held, the dead letter of
// record seq (delivered deliveries times; its topic and payload, or what
// another group's dead letter kept of them) to the group's dead-letter
// topic, and reports whether it was published. It never waits: on a ring
// with no room (a protected group has not finished the record it would
// overwrite) it returns false, and the record stays pending and due.
func (g *Group) deadLetter(seq uint64, deliveries uint32, topic string, payload []byte, truncated bool) bool {
	r := g.r
	room := r.maxBody - len(g.dead) - deadHeader
	flags := uint16(g.index()+1) << 8
	if truncated {
		flags |= 1
	}
	if len(topic) > room || len(topic) > 0xffff {
		topic = ""
	}
	if len(payload) > room-len(topic) {
		payload, flags = nil, flags|1
	}
	p := make([]byte, deadHeader, deadHeader+len(topic)+len(payload))
	binary.LittleEndian.PutUint64(p, seq)
	binary.LittleEndian.PutUint32(p[8:], deliveries)
	binary.LittleEndian.PutUint16(p[12:], uint16(len(topic)))
	binary.LittleEndian.PutUint16(p[14:], flags)
	p = append(append(p, topic...), payload...)
	q := *r
	q.quiet, q.exGroup, q.allow = true, g.goff+1, seq
	_, err := q.Publish(g.dead, p)
	return err == nil
}
