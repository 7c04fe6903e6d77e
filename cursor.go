package shmarena

import (
	"context"
	"sync"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

// A Cursor is a broadcast reader of a ring: its position lives in this
// process, so every cursor sees every record, whoever else reads. It
// follows a Redis Streams XREAD or a Kafka consumer without a group.
// Its methods are safe for concurrent use by goroutines (they share the
// one position) and never block, except Wait.
type Cursor struct {
	r   *Ring
	mu  sync.Mutex
	pos uint64
	st  CursorStats
	hw  holeWatch
	top string // last topic read, reused to avoid an allocation
}

// CursorStats are one cursor's counts. Delivered + Lapped + Abandoned
// equals the records published since the cursor started (from its start
// position up to Position).
type CursorStats struct {
	// Position is the sequence number the cursor reads next.
	Position uint64
	// Delivered counts records returned by Next and Read.
	Delivered uint64
	// Lapped counts records overwritten before the cursor reached them.
	Lapped uint64
	// Abandoned counts holes left by producers that died mid-publish, and
	// damaged slots, that the cursor stepped over.
	Abandoned uint64
}

// Cursor returns a new broadcast reader positioned at the ring's head, so
// it sees records published from now on, or with FromStart at the oldest
// record the ring still holds. WithTopic is ignored. After Close the
// cursor it returns reads nothing.
func (r *Ring) Cursor(opts ...ReaderOption) *Cursor {
	defer catchFault(r.a, guard(), nil)
	var cfg readerConfig
	for _, o := range opts {
		o(&cfg)
	}
	c := &Cursor{r: r}
	if r.closed() {
		return c
	}
	next := mem.Load64(r.b, r.off+rl.OffNext)
	c.pos = next
	if cfg.fromStart {
		c.pos = r.oldest(next)
	}
	c.st.Position = c.pos
	return c
}

// Next returns the next record and true, or false when nothing new is
// readable now (or after Close). It never blocks. A cursor more than a lap
// behind jumps to the oldest record still held and counts the gap as
// lapped; holes and damaged slots are stepped over and counted.
func (c *Cursor) Next() (Record, bool) {
	defer catchFault(c.r.a, guard(), nil)
	if c.r.closed() {
		return Record{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next(0, nil)
}

// next reads the record at the cursor's position, its payload carved from
// buf when buf is not nil (see readInto).
func (c *Cursor) next(limit uint64, buf *payloadBuf) (Record, bool) {
	r := c.r
	repaired := false
	for {
		next := mem.Load64(r.b, r.off+rl.OffNext)
		if limit != 0 && next > limit {
			next = limit
		}
		if c.pos >= next {
			if !repaired && r.checkHole(&c.hw) {
				repaired = true
				continue
			}
			return Record{}, false
		}
		if next-c.pos > r.slots {
			c.st.Lapped += next - r.slots - c.pos
			c.pos = next - r.slots
		}
		rec, res := r.readInto(c.pos, false, "", c.top, buf)
		c.pos++
		c.st.Position = c.pos
		switch res {
		case readOK:
			c.st.Delivered++
			c.top = rec.Topic
			return rec, true
		case readLapped:
			c.st.Lapped++
		default:
			c.st.Abandoned++
		}
	}
}

// Read returns up to max records (all that are readable now when max <= 0),
// oldest first, or nil when there are none or after Close. It never
// blocks; with max <= 0 it stops at the head it saw on entry. The payloads
// of one call are carved from shared 8 KiB blocks, each slice capped at its
// own length (keeping one keeps its block alive: copy a payload you keep
// long).
func (c *Cursor) Read(max int) []Record {
	out := c.AppendRead(nil, max)
	if len(out) == 0 {
		return nil
	}
	return out
}

// AppendRead is Read into the caller's memory: it appends the records it
// reads to dst and returns the extended slice (dst itself when there are
// none). Payloads and topics reuse the memory of dst's spare elements as
// Group.AppendClaim describes, so a loop passing back recs[:0] allocates
// nothing once its slice and payloads have grown, and each payload stays
// valid until the slice is passed again.
func (c *Cursor) AppendRead(dst []Record, max int) []Record {
	defer catchFault(c.r.a, guard(), nil)
	if c.r.closed() {
		return dst
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := mem.Load64(c.r.b, c.r.off+rl.OffNext)
	out := dst
	var buf payloadBuf
	if limit > c.pos && max > 0 && max < claimBatch {
		buf.expect(max * c.r.maxBody)
	}
	max = claimLimit(max, len(dst))
	for max <= 0 || len(out) < max {
		buf.lend(out)
		rec, ok := c.next(limit, &buf)
		if !ok {
			break
		}
		out = append(out, rec)
	}
	return out
}

// Wait blocks until a record may be readable by this cursor (Next may
// still return false: a later record may have been a hole, and a
// concurrent goroutine may have read it), ctx ends (returns ctx.Err()) or
// the arena closes (ErrClosed). It returns nil at once when something is
// already readable. Like Group.Wait it polls for up to 50 µs before it
// sleeps on a futex shared with producers, waking at least every 100 ms
// to notice a producer that died mid-publish.
func (c *Cursor) Wait(ctx context.Context) (err error) {
	defer catchFault(c.r.a, guard(), &err)
	return c.r.wait(ctx, func(spin bool) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.pos < mem.Load64(c.r.b, c.r.off+rl.OffNext) {
			return true
		}
		return !spin && c.r.checkHole(&c.hw)
	})
}

// Stats returns the cursor's counts (zero after Close).
func (c *Cursor) Stats() CursorStats {
	defer catchFault(c.r.a, guard(), nil)
	if c.r.closed() {
		return CursorStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}
