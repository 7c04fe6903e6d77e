package shmarena

import (
	"context"
	"fmt"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
)

// This file: publishing several records in one step. Between processes a
// ring's throughput is bounded by cache lines moving between cores, not by
// instructions: every Publish takes the publish lock, commits the
// next-sequence word and looks at the readers' futex word, each a line the
// consumer's core last touched. A batch pays those once for all its
// records, as a Disruptor producer claims a run of sequences (LMAX's
// RingBuffer.next(n)) and Kafka's producer sends a record batch.

// PublishBatch appends one record per element of payloads to the ring,
// all under topic ("" for none), in order, and returns the sequence
// number of the first: the records get first, first+1, ...,
// first+len(payloads)-1, with no other publisher's record between them.
// The payloads are copied; any may be empty. An empty payloads publishes
// nothing and returns 0 and nil; a batch of one is a Publish.
//
// It is all or nothing: the batch is checked whole (every record's size,
// room for every record) before any is written, and readers see none of
// its records until all are written, then all of them at once. The cost
// is one publish's: one lock round trip, one commit of the ring's
// sequence word and at most one wake-up system call for the whole batch,
// then a copy per record (180 instructions per 64-byte record in batches
// of 64, against 588 for a Publish; between processes 1.5-2.4x the
// records per second of one Publish per record, bench/results.md). The
// publish lock is held while the batch is copied: a large batch holds
// off other producers while all its records are copied.
//
// Errors (nothing published on any of them): ErrTooLarge (counted once
// in Stats().Oversize) when a record's topic plus payload exceeds the
// slot size minus 24 bytes, or when the batch has more records than the
// ring has slots; ErrRingFull (counted once in Stats().Full) when a
// protected group (WithAck or WithBackpressure) has not finished a record
// the batch would overwrite (PublishBatchWait waits instead); ErrCorrupt
// when the ring's sequence word is damaged; ErrReadOnly on a handle opened
// ReadOnly; ErrClosed after Close.
//
// Safe for concurrent use by goroutines and processes, with Publish and
// with other batches. A producer killed while writing a batch leaves none
// of the batch visible and an abandoned record (as a killed Publish
// leaves one) for each record it had begun: the repair moves the head
// past every slot the batch overwrote. It allocates nothing.
func (r *Ring) PublishBatch(topic string, payloads [][]byte) (_ uint64, err error) {
	defer catchFault(r.a, guard(), &err)
	return r.publishBatch(topic, payloads)
}

// PublishBatchWait publishes like PublishBatch, but where PublishBatch
// would refuse with ErrRingFull it waits, as PublishWait does, until
// protected groups have finished every record the batch would overwrite,
// then publishes the whole batch. A call that had to wait is counted once
// in Stats().Waited.
//
// Errors: those of PublishBatch other than ErrRingFull; when ctx ends
// first, an error wrapping both ErrRingFull and ctx.Err() (nothing
// published); ErrClosed when the arena closes. Safe for concurrent use by
// goroutines and processes; waiting producers publish in no particular
// order, and a batch waits until room for all of it is free at once.
func (r *Ring) PublishBatchWait(ctx context.Context, topic string, payloads [][]byte) (_ uint64, err error) {
	defer catchFault(r.a, guard(), &err)
	if err := r.refuse("publish"); err != nil {
		return 0, err
	}
	waited := false
	q := *r
	q.quiet = true
	for {
		s, err := q.publishBatch(topic, payloads)
		if err != errNoRoom {
			return s, err
		}
		if !waited {
			waited = true
			mem.Add64(r.b, r.off+rl.OffWaited, 1)
		}
		if err := r.waitRoom(ctx, uint64(len(payloads))); err != nil {
			if err == ErrClosed {
				return 0, err
			}
			return 0, fmt.Errorf("shmarena: ring %s: %w: %w", quote(r.name), ErrRingFull, err)
		}
	}
}

// publishBatch is PublishBatch for a caller that holds the fault guard.
func (r *Ring) publishBatch(topic string, payloads [][]byte) (uint64, error) {
	if r.closed() {
		return 0, ErrClosed
	}
	if r.a.readOnly {
		return 0, r.refuse("publish")
	}
	switch len(payloads) {
	case 0:
		return 0, nil
	case 1:
		return r.publish(topic, payloads[0]) // a batch of one is a Publish, 70 instructions cheaper
	}
	if err := r.checkBatch(topic, payloads); err != nil {
		mem.Add64(r.b, r.off+rl.OffOversize, 1)
		return 0, err
	}
	if !r.a.enter(0) {
		return 0, ErrClosed
	}
	defer r.a.exit(0) // after the wake, so Close cannot retire under it
	return r.publishBatchEntered(topic, payloads)
}

// checkBatch returns ErrTooLarge when a record of the batch does not fit a
// slot or the batch does not fit the ring.
func (r *Ring) checkBatch(topic string, payloads [][]byte) error {
	if uint64(len(payloads)) > r.slots {
		return fmt.Errorf("shmarena: ring %s: %w: a batch of %d records, the ring holds %d",
			quote(r.name), ErrTooLarge, len(payloads), r.slots)
	}
	if len(topic) > r.maxBody {
		return fmt.Errorf("shmarena: ring %s: %w: topic %d bytes, a slot holds %d", quote(r.name), ErrTooLarge, len(topic), r.maxBody)
	}
	for i, p := range payloads {
		if len(p) > r.maxBody-len(topic) {
			return fmt.Errorf("shmarena: ring %s: %w: record %d of the batch: topic %d + payload %d bytes, a slot holds %d",
				quote(r.name), ErrTooLarge, i, len(topic), len(p), r.maxBody)
		}
	}
	return nil
}

// publishBatchEntered is publishBatch once the operation is counted in
// flight: Publish's protocol (see publishEntered), with every slot of the
// batch written before the one commit that moves the sequence word past
// them all. A producer that dies before the commit leaves slots from the
// first on begun, which repair turns into holes one by one (see repair):
// left as they were, they would hold sequences past the head over records
// the head still counts.
func (r *Ring) publishBatchEntered(topic string, payloads [][]byte) (uint64, error) {
	b := r.b
	k := uint64(len(payloads))
	lock := r.off + rl.OffLock
	recovered, ok := rlock.Acquire(b, lock, r.a.own)
	if !ok {
		return 0, r.a.closedErr()
	}
	if recovered {
		r.repair()
	}
	s := mem.Load64(b, r.off+rl.OffNext)
	if s == 0 || s >= rl.MaxSeq-k {
		if !rlock.Release(b, lock, r.a.self) {
			return 0, r.errLockLost()
		}
		return 0, fmt.Errorf("shmarena: ring %q: %w: next sequence %d", r.name, ErrCorrupt, s)
	}
	if mem.Load64(b, r.off+rl.OffProtected) != 0 && !r.roomBatch(s, k) {
		crashPoint("publish-full")
		if !rlock.Release(b, lock, r.a.self) {
			return 0, r.errLockLost()
		}
		if r.quiet {
			return 0, errNoRoom
		}
		mem.Add64(b, r.off+rl.OffFull, 1)
		return 0, r.errFull()
	}
	lens := uint64(len(topic))
	for i, p := range payloads {
		seq := s + uint64(i)
		o := r.slotOff(seq)
		mem.Put64(b, o+rl.SBegin, seq)
		mem.Put64(b, o+rl.SLens, lens|uint64(len(p))<<32)
		writeWords(b, o+rl.SBody, topic)
		writeWords(b, o+rl.SBody+len(topic), p)
		if h := publishHook; h != nil {
			h(seq)
		}
		mem.Put64(b, o+rl.SEnd, seq)
	}
	if !mem.CAS64(b, r.off+rl.OffNext, s, s+k) {
		return 0, r.errLockLost()
	}
	released := rlock.Release(b, lock, r.a.self)
	r.wake()
	if !released {
		return s, r.errLockLost()
	}
	o := r.slotOff(s + k)
	for l := 0; l < min(r.slotSize, 256); l += 64 {
		mem.PrefetchW(b, o+l)
	}
	return s, nil
}

// roomBatch reports whether the k sequences from s may be published, with
// the publish lock held (s is the next sequence): every record they
// overwrite must be below the protected groups' floor or finished by every
// protected group (room's rule, record by record; a batch is never a dead
// letter). The floor cache is kept as room keeps it, never past s.
func (r *Ring) roomBatch(s, k uint64) bool {
	if k == 1 {
		return r.room(s)
	}
	b := r.b
	last := s + k - 1
	if last <= r.slots {
		return true
	}
	cache := mem.Load64(b, r.off+rl.OffFloor)
	if last-r.slots < cache {
		return true
	}
	mask := mem.Load64(b, r.off+rl.OffProtected)
	f := r.floor(mask)
	if c := min(f, s); c != cache {
		mem.CAS64(b, r.off+rl.OffFloor, cache, c)
	}
	for v := max(s, r.slots+1) - r.slots; v <= last-r.slots; v++ {
		if v >= f && !r.spare(mask, v, -1, 0) {
			return false
		}
	}
	return true
}
