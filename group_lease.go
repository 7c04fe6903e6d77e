package shmarena

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

// This file: settling an acking group's leases (Ack, Nack, Extend) and
// dead letters.

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
func (g *Group) Ack(recs ...Record) error { return g.settle(opAck, 0, recs) }

// Nack gives a record this member claimed back to an acking group, to be
// delivered again (to any member, Deliveries one higher) by a Claim made
// delay or more from now (wall clock; delay <= 0: at once). A record at
// its WithMaxDeliveries limit is dead-lettered by that Claim instead.
// Errors as Ack.
func (g *Group) Nack(rec Record, delay time.Duration) error {
	return g.settle(opNack, delay, []Record{rec})
}

// Extend sets the lease of a record this member claimed to end d from now
// (wall clock; d > 0), for work that takes longer than the group's lease.
// It is not a delivery: Deliveries does not change. Errors as Ack, and
// ErrInvalid for d <= 0.
func (g *Group) Extend(rec Record, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("shmarena: ring %s: group %s: %w: extend by %v", quote(g.r.name), quote(g.name), ErrInvalid, d)
	}
	return g.settle(opExtend, d, []Record{rec})
}

func (g *Group) settle(op settleOp, d time.Duration, recs []Record) error {
	r := g.r
	if r.closed() {
		return ErrClosed
	}
	if !g.ack {
		return fmt.Errorf("shmarena: ring %s: group %s: %w: %v on a group without WithAck", quote(r.name), quote(g.name), ErrInvalid, op)
	}
	if len(recs) == 0 {
		return nil
	}
	if !g.lockAck() {
		if r.closed() {
			return ErrClosed
		}
		return fmt.Errorf("shmarena: ring %s: group %s: %w: the group was dropped", quote(r.name), quote(g.name), ErrLeaseLost)
	}
	b := r.b
	now := time.Now().UnixNano()
	floor, pos, ok := g.window()
	if !ok {
		g.repairWindow()
		g.unlockAck()
		return fmt.Errorf("shmarena: ring %s: group %s: %w: floor and position out of order", quote(r.name), quote(g.name), ErrCorrupt)
	}
	var lost int
	var first uint64
	for _, rec := range recs {
		e := g.entry(rec.Seq)
		if !ok || rec.lease != g.leaseID() || rec.Seq < floor || rec.Seq >= pos || rec.Deliveries <= 0 || int64(rec.Deliveries) > math.MaxUint32 ||
			mem.Load64(b, e+rl.PSeq) != rec.Seq ||
			mem.Load64(b, e+rl.PState) != pendWord(rl.StPending, uint32(rec.Deliveries)) ||
			mem.Load64(b, e+rl.PHolder) != r.a.self {
			if lost == 0 {
				first = rec.Seq
			}
			lost++
			continue
		}
		switch op {
		case opAck:
			mem.Store64(b, e+rl.PState, pendWord(rl.StDone, uint32(rec.Deliveries)))
			crashPoint("ack")
		case opNack:
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
	released := g.unlockAck()
	switch {
	case lost > 0:
		return fmt.Errorf("shmarena: ring %s: group %s: %w: %v of record %d (%d of %d records)", quote(r.name), quote(g.name), ErrLeaseLost, op, first, lost, len(recs))
	case !released:
		return r.errLockLost()
	}
	return nil
}

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
//	       because the dead letter would not fit a slot
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

// deadLetter publishes rec to the group's dead-letter topic, with the
// group lock held, and reports whether the record may be finished: true
// when published, or when the group has no dead-letter topic; false when
// the ring has no room (the record stays, to be tried again).
func (g *Group) deadLetter(rec Record, deliveries uint32) bool {
	if g.dead == "" {
		return true
	}
	r := g.r
	room := r.maxBody - len(g.dead) - deadHeader
	topic, payload, flags := rec.Topic, rec.Payload, uint16(0)
	if len(topic) > room || len(topic) > 0xffff {
		topic = ""
	}
	if len(payload) > room-len(topic) {
		payload, flags = nil, 1
	}
	p := make([]byte, deadHeader, deadHeader+len(topic)+len(payload))
	binary.LittleEndian.PutUint64(p, rec.Seq)
	binary.LittleEndian.PutUint32(p[8:], deliveries)
	binary.LittleEndian.PutUint16(p[12:], uint16(len(topic)))
	binary.LittleEndian.PutUint16(p[14:], flags)
	p = append(append(p, topic...), payload...)
	q := *r
	q.quiet, q.exGroup, q.allow = true, g.goff+1, rec.Seq
	_, err := q.Publish(g.dead, p)
	return err == nil
}
