package shmarena

import (
	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

// readResult says what a reader found at a sequence number.
type readResult int

const (
	readOK        readResult = iota
	readLapped               // overwritten by a newer record before or while read
	readAbandoned            // a hole left by a dead producer, or a damaged slot
	readSkipped              // another topic than the reader is bound to
)

// readInto copies the record at seq, which must be below the ring's next
// sequence. bound says whether only records of topic are wanted; prev is
// a topic string to reuse when equal, to save an allocation. Every length
// taken from the slot is checked before use. The payload is carved from
// buf when buf is not nil, so a batch of records shares a few allocations,
// and is allocated alone otherwise; it is never nil, even when empty.
func (r *Ring) readInto(seq uint64, bound bool, topic, prev string, buf *payloadBuf) (Record, readResult) {
	if seq == 0 {
		return Record{}, readAbandoned
	}
	b := r.b
	o := r.slotOff(seq)
	begin := mem.Load64(b, o+rl.SBegin)
	if begin != seq {
		if begin > seq {
			return Record{}, readLapped
		}
		return Record{}, readAbandoned // never written: damaged
	}
	// lost says why a check failed: the slot moved on, or it is damaged.
	lost := func() (Record, readResult) {
		if mem.Load64(b, o+rl.SBegin) != seq {
			return Record{}, readLapped
		}
		return Record{}, readAbandoned
	}
	if mem.Load64(b, o+rl.SEnd) != seq {
		return lost()
	}
	lens := mem.Load64(b, o+rl.SLens)
	tl, pl := uint64(uint32(lens)), lens>>32
	if lens == rl.AbandonedLens || tl+pl > uint64(r.maxBody) {
		return lost()
	}
	body := o + rl.SBody
	if bound && (tl != uint64(len(topic)) || !mem.Equal(b, body, topic)) {
		if mem.Load64(b, o+rl.SBegin) != seq {
			return Record{}, readLapped
		}
		return Record{}, readSkipped
	}
	var rec Record
	switch {
	case bound:
		rec.Topic = topic
	case tl == uint64(len(prev)) && mem.Equal(b, body, prev):
		rec.Topic = prev
	case buf != nil && tl == uint64(len(buf.spareTopic)) && mem.Equal(b, body, buf.spareTopic):
		rec.Topic = buf.spareTopic
	case tl > 0:
		rec.Topic = string(mem.AppendBytes(nil, b, body, int(tl)))
	}
	var dst []byte
	if buf == nil || pl == 0 {
		dst = make([]byte, 0, int(pl))
	} else {
		dst = buf.take(int(pl))
	}
	rec.Payload = mem.AppendBytes(dst, b, body+int(tl), int(pl))
	if mem.Load64(b, o+rl.SBegin) != seq {
		return Record{}, readLapped // the torn copy's bytes are left unused
	}
	rec.Seq = seq
	return rec, readOK
}

// payloadBuf carves the payloads of a batch of records from chunks of
// payloadChunk bytes, so a Read or Claim of many small records costs one
// allocation per chunk rather than one per record, and never copies a
// payload already handed out (a chunk is not grown, a new one is started).
//
// For the Append forms (Group.AppendClaim, Cursor.AppendRead), lend first
// offers the memory of the caller's spare record, which take uses when
// the payload fits: a loop that passes back the slice it got allocates
// nothing once its payloads have grown.
type payloadBuf struct {
	chunk []byte
	want  int // bytes the caller still expects to take; <= 0: unknown

	spare      []byte // the lent payload memory, or nil
	spareTopic string // the lent record's topic, reused when equal
}

// lend offers take the Payload and Topic of out's next element, if out
// has capacity for one: the caller's record there is overwritten next.
func (p *payloadBuf) lend(out []Record) {
	if len(out) == cap(out) {
		p.spare, p.spareTopic = nil, ""
		return
	}
	s := &out[:len(out)+1][len(out)]
	p.spare, p.spareTopic = s.Payload, s.Topic
}

const payloadChunk = 8 << 10

// expect says how many bytes the next takes will need at most, so a Claim
// of one small record does not allocate a whole chunk.
func (p *payloadBuf) expect(n int) { p.want = n }

// take returns an empty slice with capacity at least n: the lent memory
// when it fits, else a piece of a chunk, its capacity ending there, so
// appending to one payload never writes into the next.
func (p *payloadBuf) take(n int) []byte {
	if lent := p.spare; lent != nil {
		p.spare = nil
		if cap(lent) >= n {
			return lent[:0] // the caller's own: appending grows only into it
		}
	}
	if cap(p.chunk)-len(p.chunk) < n {
		size := payloadChunk
		if p.want > 0 {
			size = min(size, p.want)
		}
		p.chunk = make([]byte, 0, max(n, size))
	}
	p.want -= n
	start := len(p.chunk)
	p.chunk = p.chunk[:start+n]
	return p.chunk[start : start : start+n]
}
