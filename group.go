package shmarena

import (
	"context"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
)

// A Group is a work queue over a ring, shared by processes: its position
// lives in the ring's own header, so every member advances the same word
// and each record goes to one member of the group. It is the Kafka
// consumer group / Redis Streams XREADGROUP idea.
//
// By default delivery is at most once: the claim itself moves the shared
// position (the member whose compare-and-swap moved it past a record owns
// it), nothing records who holds what, and a member that dies holding
// records loses them; a producer faster than the pool laps the group,
// which counts the loss (GroupStats.Lapped). WithBackpressure stops the
// lapping: producers wait (PublishWait) or are refused (Publish,
// ErrRingFull) instead. WithAck makes the group at least once: each claim
// is a lease, recorded in the group's pending table until Ack; a lease
// that runs out, or whose member died, is delivered again; Nack gives a
// record back, Extend keeps it longer, and WithMaxDeliveries with
// WithDeadLetter gives up on a record that keeps failing. An acking group
// is protected too: no record it has not finished is overwritten.
//
// Different groups on one ring do not take records from each other: each
// has its own position, so a record goes to one member of every group, and
// a Cursor on the same ring still sees everything. A ring holds at most 64
// groups; a group lasts until Ring.DropGroup, and a handle going away is a
// member leaving, not the group ending.
//
// A Group handle is safe for concurrent use by goroutines; any number of
// processes may be members. After the arena's Close, every method returns
// ErrClosed, or false, zero or nil.
type Group struct {
	r     *Ring
	goff  int // offset of the group's table entry in the mapping
	gen   uint64
	name  string
	topic string
	mine  *atomic.Uint64
	last  atomic.Pointer[string] // the last topic claimed, reused to save an allocation

	// Acking groups (see group_ack.go).
	ack, protected bool
	lease          time.Duration
	maxDeliv       uint32
	dead           string
	table          int // offset of the pending table in the mapping
	alive          aliveCache

	hmu sync.Mutex
	hw  holeWatch
}

// GroupStats are a group's counts. All but Mine are shared by every member
// in every process; Delivered + Lapped + Skipped + Abandoned equals the
// records the group's position has moved over since the group was created
// (in an acking group, a delivered record found overwritten or damaged
// when it is due for redelivery is counted again, as lapped or abandoned).
// An acking group's counts stay exact whatever instruction a member is
// killed at (each change journals its counts first; only the recount of
// a lease found damaged at redelivery is not); an at-most-once
// group's are added after its claim, so a member killed in between leaves
// them short by that claim.
type GroupStats struct {
	// Name and Topic are the group's name and bound topic ("" for all).
	Name, Topic string
	// Position is the sequence number the group looks at next.
	Position uint64
	// Delivered counts records claimed by any member (first deliveries:
	// redeliveries count in Redelivered).
	Delivered uint64
	// Lapped counts records overwritten before any member claimed them:
	// the pool is not keeping up, or the ring is too small.
	Lapped uint64
	// Skipped counts records of other topics a bound group stepped over.
	Skipped uint64
	// Abandoned counts holes left by producers that died mid-publish, and
	// damaged slots, that the group stepped over.
	Abandoned uint64
	// Mine counts the records this process claimed from the group, through
	// any of its handles: comparing it with Delivered shows how the work is
	// spread.
	Mine uint64
	// Lag is how many records the group has not yet looked at: the ring's
	// head minus Position. It grows while an unprotected group falls
	// behind; a protected group holds producers back instead, so its Lag
	// stops at the ring's slots less Position - Floor (at the slots for a
	// WithBackpressure group) and what grows is RingStats.Full and Waited
	// (see Ring.DropGroup).
	Lag uint64
	// The rest are for acking groups (WithAck) and zero otherwise.
	//
	// Pending counts records delivered and not yet finished (acked or
	// dead-lettered): leased, or given back and waiting for redelivery.
	Pending int
	// Floor is the oldest record not finished (Position when none is
	// pending); a protected group keeps the ring from overwriting it.
	Floor uint64
	// OldestPending is how long ago the oldest pending record was first
	// delivered (0 with none pending): a lease that keeps being extended
	// or redelivered shows here.
	OldestPending time.Duration
	// Redelivered counts deliveries after the first: leases taken again
	// after they ran out or their member died, and Nacked records.
	Redelivered uint64
	// DeadLettered counts records given up after WithMaxDeliveries.
	DeadLettered uint64
}

// mineCounts holds each process-local Mine counter, keyed by arena handle
// and group entry.
var mineCounts sync.Map // groupKey -> *atomic.Uint64

type groupKey struct {
	a    *Arena
	goff int
	gen  uint64 // the entry's generation: a group made anew there counts afresh
}

// forgetGroups drops the Mine counters of a closed arena, whose groups
// report zero stats from then on, so that mineCounts does not keep the
// arena reachable (and its range mapped) for the life of the process.
func forgetGroups(a *Arena) {
	mineCounts.Range(func(k, _ any) bool {
		if k.(groupKey).a == a {
			mineCounts.Delete(k)
		}
		return true
	})
}

// Group joins the consumer group called name on the ring, creating it if
// it does not exist. Every member asks for the same name; the first
// creates the group and the rest join it, sharing its position.
//
// A new group starts at the ring's head (records published from now on),
// or with FromStart at the oldest record the ring still holds; joining an
// existing group ignores FromStart. WithTopic binds a new group to a
// topic; WithAck, WithBackpressure, WithMaxDeliveries and WithDeadLetter
// set how it delivers. Joining an existing group must ask for the topic
// and delivery settings it has.
//
// Errors: ErrInvalid for an empty name or a name or topic longer than 64
// bytes, or delivery options that do not go together (see each); ErrShape
// when the group exists with another topic or delivery setting (the
// message names the field and both values); ErrTooManyGroups when the
// ring already holds 64 groups; ErrCorrupt when the group table is
// damaged; ErrClosed after Close. Creation is serialised across processes
// by a robust lock in the ring header.
func (r *Ring) Group(name string, opts ...ReaderOption) (_ *Group, err error) {
	defer catchFault(r.a, guard(), &err)
	if r.closed() {
		return nil, ErrClosed
	}
	if err := r.refuse("group " + quote(name)); err != nil {
		return nil, err
	}
	var cfg readerConfig
	for _, o := range opts {
		o(&cfg)
	}
	if name == "" || len(name) > rl.MaxGroupName {
		return nil, fmt.Errorf("shmarena: ring %s: group %s: %w: name must be 1 to %d bytes", quote(r.name), quote(name), ErrInvalid, rl.MaxGroupName)
	}
	if len(cfg.topic) > rl.MaxGroupTopic {
		return nil, fmt.Errorf("shmarena: ring %s: group %s: %w: topic is %d bytes, at most %d", quote(r.name), quote(name), ErrInvalid, len(cfg.topic), rl.MaxGroupTopic)
	}
	if err := r.checkAckConfig(cfg); err != nil {
		return nil, fmt.Errorf("shmarena: ring %s: group %s: %w", quote(r.name), quote(name), err)
	}
	b := r.b
	if !r.a.enter(0) {
		return nil, ErrClosed
	}
	defer r.a.exit(0)
	lock := r.off + rl.OffGroupLock
	if _, ok := rlock.Acquire(b, lock, r.a.own); !ok {
		return nil, r.a.closedErr() // Close began, or a fault abandoned the handle, while this waited
	}
	r.dropHalfMade() // left by a creator that died, or dropped under a member
	goff, err := r.findOrCreateGroup(name, cfg)
	if !rlock.Release(b, lock, r.a.self) && err == nil {
		err = r.errLockLost()
	}
	if err != nil {
		return nil, err
	}
	gen := mem.Load64(b, goff+rl.GGen)
	m, _ := mineCounts.LoadOrStore(groupKey{r.a, goff, gen}, new(atomic.Uint64))
	idx := (goff - r.off - rl.OffGroups) / rl.GroupSize
	return &Group{
		r: r, goff: goff, gen: gen, name: name, topic: cfg.topic, mine: m.(*atomic.Uint64),
		ack: cfg.lease > 0, protected: cfg.lease > 0 || cfg.backpressure, lease: cfg.lease,
		maxDeliv: uint32(cfg.maxDeliv), dead: cfg.dead,
		table: r.tables + idx*int(r.inFlight)*rl.PendSize,
	}, nil
}

// findOrCreateGroup runs with the group-table lock held.
func (r *Ring) findOrCreateGroup(name string, cfg readerConfig) (int, error) {
	b := r.b
	free := -1
	for i := 0; i < rl.Groups; i++ {
		g := r.off + rl.GroupOff(i)
		switch mem.Load64(b, g+rl.GState) {
		case rl.GroupFree:
			if free < 0 {
				free = g
			}
			continue
		case rl.GroupReady:
		default:
			continue // damaged: neither usable nor free
		}
		nl := mem.Load32(b, g+rl.GNameLen)
		if nl != uint32(len(name)) || !mem.Equal(b, g+rl.GName, name) {
			continue
		}
		tl := mem.Load32(b, g+rl.GTopicLen)
		if tl > rl.MaxGroupTopic {
			return 0, fmt.Errorf("shmarena: ring %s: group %s: %w: topic length %d", quote(r.name), quote(name), ErrCorrupt, tl)
		}
		have := string(mem.AppendBytes(nil, b, g+rl.GTopic, int(tl)))
		if have != cfg.topic {
			return 0, fmt.Errorf("shmarena: ring %s: group %s: %w: it is bound to topic %s, asked for %s", quote(r.name), quote(name), ErrShape, quote(have), quote(cfg.topic))
		}
		if err := r.sameAckConfig(g, cfg); err != nil {
			return 0, fmt.Errorf("shmarena: ring %s: group %s: %w", quote(r.name), quote(name), err)
		}
		// A creator killed between making the group ready and setting its
		// mask bit left it unprotected: every joiner sets the bit again.
		r.setProtected(g, cfg.lease > 0 || cfg.backpressure)
		return g, nil
	}
	if free < 0 {
		return 0, fmt.Errorf("shmarena: ring %s: group %s: %w: all %d entries are in use", quote(r.name), quote(name), ErrTooManyGroups, rl.Groups)
	}
	g := free
	protected := cfg.lease > 0 || cfg.backpressure
	if protected {
		// Under the publish lock, so that no record is published between
		// the head read below and the group's protection taking effect.
		recovered, ok := rlock.Acquire(b, r.off+rl.OffLock, r.a.own)
		if !ok {
			return 0, r.a.closedErr()
		}
		if recovered {
			r.repair()
		}
		defer rlock.Release(b, r.off+rl.OffLock, r.a.self)
	}
	gen := mem.Load64(b, g+rl.GGen)
	mem.Store64(b, g+rl.GState, rl.GroupCreating)
	// The lock words stay: a member of a dropped group that held this
	// entry's lock releases it by compare-and-swap (or it is taken over).
	mem.Zero(b, g+rl.GPosition, rl.GLock-rl.GPosition)
	mem.Store64(b, g+rl.GGen, gen+1)
	mem.Store32(b, g+rl.GNameLen, uint32(len(name)))
	mem.Store32(b, g+rl.GTopicLen, uint32(len(cfg.topic)))
	mem.Write(b, g+rl.GName, name)
	mem.Write(b, g+rl.GTopic, cfg.topic)
	next := mem.Load64(b, r.off+rl.OffNext)
	pos := next
	if cfg.fromStart {
		pos = r.oldest(next)
	}
	mem.Store64(b, g+rl.GPosition, pos)
	r.initAck(g, cfg, pos)
	mem.Store64(b, g+rl.GState, rl.GroupReady)
	r.setProtected(g, protected)
	if protected {
		r.lowerFloor(pos) // after the mask bit: see room
	}
	return g, nil
}

// setProtected sets or clears group entry g's bit in the protected mask.
func (r *Ring) setProtected(g int, protected bool) {
	b := r.b
	bit := uint64(1) << ((g - r.off - rl.OffGroups) / rl.GroupSize)
	want := uint64(0)
	if protected {
		want = bit
	}
	for m := mem.Load64(b, r.off+rl.OffProtected); m&bit != want && !mem.CAS64(b, r.off+rl.OffProtected, m, m&^bit|want); m = mem.Load64(b, r.off+rl.OffProtected) {
	}
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Topic returns the topic the group is bound to, or "" when it takes every
// topic.
func (g *Group) Topic() string { return g.topic }

// Position returns the group's shared position: the sequence number the
// pool looks at next. It belongs to the pool, not to this member, and
// stays when every member leaves. It returns 0 after Close.
func (g *Group) Position() uint64 {
	defer catchFault(g.r.a, guard(), nil)
	if g.r.closed() {
		return 0
	}
	p := mem.Load64(g.r.b, g.goff+rl.GPosition)
	runtime.KeepAlive(g)
	return p
}

// Claim takes up to max records for this member (every available one when
// max <= 0) and returns them oldest first, or nil when there is nothing to
// take now or after Close. It never blocks. With max <= 0 it stops at the
// head it saw on entry.
//
// Each record goes to exactly one member: a member copies a run of up to
// 64 records from the shared position, then moves the position past the
// run with one compare-and-swap, and only the winner returns them (the
// position is never fetch-and-added, which could skip records for good; a
// loser drops its copies and tries again from the new position). The
// payloads of one call are carved from shared 8 KiB blocks, each slice
// capped at its own length, so appending to one never writes into another
// (keeping one keeps its block alive: copy a payload you keep long). A
// bound group steps over other topics, counting them as skipped;
// overwritten records count as lapped, holes and damaged slots as
// abandoned.
//
// In an at-most-once group (the default) the claim itself moves the
// shared position, and nothing records which member holds which record:
// if a member dies, or drops the slice, between Claim and finishing its
// work, those records are lost for good. Claiming fewer at a time (max 1,
// as Records does) loses less; WithAck loses nothing.
//
// In an acking group (WithAck) each record returned is leased to this
// member (Record.Deliveries says how many times it was delivered): Claim
// first takes again, oldest first, records whose lease ran out, whose
// member's handle is gone (asked of the kernel, the answer kept 2 ms),
// or that were Nacked and are due, dead-lettering those at their
// WithMaxDeliveries limit; then new records. The group's pending table
// holds WithMaxInFlight records between the oldest unfinished one and the
// newest delivered: a Claim that would go past it returns fewer records
// (none while the oldest is unfinished), never an error. Claims of an
// acking group are serialised by the group's robust lock, and look at
// every pending entry, so one costs O(pending) loads. A dropped group's
// handle claims nothing.
//
// Safe for concurrent use by goroutines and processes.
func (g *Group) Claim(max int) []Record {
	out := g.AppendClaim(nil, max)
	if len(out) == 0 {
		return nil
	}
	return out
}

// AppendClaim is Claim into the caller's memory: it appends the records it
// claims to dst and returns the extended slice (dst itself when it claims
// none), allocating nothing once dst has room. Each payload is copied into
// the Payload memory of the element of dst it lands in, when that element
// (past len(dst), within cap(dst)) has the room, and its Topic string is
// reused when equal; otherwise it is carved from new blocks as Claim's
// are. So a loop that passes back the slice it got, truncated,
//
//	recs = g.AppendClaim(recs[:0], 64)
//
// allocates nothing once its payloads have grown to the records' sizes,
// and each payload stays valid until the slice is passed again (copy one
// you keep longer). The records, leases and counts are Claim's, with the
// same max; an acking group's records are settled with Ack as usual.
//
// Safe for concurrent use by goroutines and processes, each with its own
// dst.
func (g *Group) AppendClaim(dst []Record, max int) []Record {
	defer catchFault(g.r.a, guard(), nil)
	r := g.r
	if r.closed() {
		return dst
	}
	if g.ack {
		return g.claimAck(dst, max)
	}
	b := r.b
	if mem.Load64(b, g.goff+rl.GGen) != g.gen || mem.Load64(b, g.goff+rl.GState) != rl.GroupReady {
		return dst // dropped
	}
	po := g.goff + rl.GPosition
	limit := mem.Load64(b, r.off+rl.OffNext)
	out, start := dst, len(dst)
	max = claimLimit(max, start)
	var buf payloadBuf
	for max <= 0 || len(out) < max {
		pos := mem.Load64(b, po)
		next := mem.Load64(b, r.off+rl.OffNext)
		if max <= 0 && next > limit {
			next = limit
		}
		if pos >= next {
			if len(out) == start && g.checkHole() {
				limit = mem.Load64(b, r.off+rl.OffNext)
				continue
			}
			break
		}
		if next-pos > r.slots {
			if to := next - r.slots; mem.CAS64(b, po, pos, to) {
				mem.Add64(b, g.goff+rl.GLapped, to-pos)
			}
			continue
		}
		n := min(next-pos, claimBatch)
		if max > 0 {
			n = min(n, uint64(max-len(out)))
		}
		out = g.claimRun(pos, n, out, &buf)
	}
	runtime.KeepAlive(g)
	return out
}

// claimBatch bounds how many records one compare-and-swap of the group's
// position claims: reading more before the swap wastes more work when
// another member wins it.
const claimBatch = 64

// claimLimit turns a claim's max into the length at which an append to a
// slice of length have stops (max <= 0, no limit, stays so).
func claimLimit(max, have int) int {
	if max <= 0 {
		return max
	}
	return have + max
}

// claimRun reads the n records from pos, then claims them all with one
// compare-and-swap of the group's position; if another member moved the
// position first, the reads are dropped (those records are theirs) and
// out is returned unchanged. Payloads are carved from buf.
func (g *Group) claimRun(pos, n uint64, out []Record, buf *payloadBuf) []Record {
	r := g.r
	b := r.b
	have := len(out)
	buf.expect(int(n) * r.maxBody)
	if cap(out)-have < int(n) {
		out = slices.Grow(out, int(n))
	}
	var tally [readSkipped + 1]uint64
	prev, cached := "", ""
	if p := g.last.Load(); p != nil {
		prev, cached = *p, *p
	}
	if have > 0 {
		prev = out[have-1].Topic
	}
	for seq := pos; seq < pos+n; seq++ {
		buf.lend(out)
		rec, res := r.readInto(seq, g.topic != "", g.topic, prev, buf)
		tally[res]++
		if res == readOK {
			prev = rec.Topic
			out = append(out, rec)
		}
	}
	if !mem.CAS64(b, g.goff+rl.GPosition, pos, pos+n) {
		// The copies are dropped but their memory stays with out's
		// spare elements, to be lent again (what they took from buf's
		// chunk is theirs: it is not carved a second time).
		return out[:have]
	}
	if g.protected {
		r.roomFreed()
	}
	for res, field := range [...]int{readOK: rl.GDelivered, readLapped: rl.GLapped, readAbandoned: rl.GAbandoned, readSkipped: rl.GSkipped} {
		if tally[res] != 0 {
			mem.Add64(b, g.goff+field, tally[res])
		}
	}
	g.mine.Add(tally[readOK])
	if len(out) > have && out[len(out)-1].Topic != cached {
		t := out[len(out)-1].Topic
		g.last.Store(&t)
	}
	return out
}

func (g *Group) checkHole() bool {
	g.hmu.Lock()
	defer g.hmu.Unlock()
	return g.r.checkHole(&g.hw)
}

// Wait blocks until a record may be claimable (Claim may still return
// nothing: another member may take it first, or it may be another topic),
// ctx ends (returns ctx.Err()) or the arena closes (ErrClosed). It returns
// nil at once when the group's position is behind the ring's head.
// Otherwise it first polls for new records for up to 50 µs, yielding the
// processor between looks (a producer publishing now usually commits
// within that, and a record caught awake costs neither side a system
// call), then sleeps on a futex shared with producers, waking at least
// every 100 ms to notice a producer that died mid-publish. The poll costs
// a consumer that ends up asleep up to 50 µs of CPU per Wait: 5% of a
// core at 1,000 sleeps a second (spin, then sleep, as Go's sync.Mutex
// and glibc's adaptive mutexes do; here the spin is bounded by time).
//
// For an acking group a record is claimable when the pending table has
// room for it, or when a lease is due for redelivery (ran out, its member
// died, or it was Nacked and its delay passed); a due lease is noticed
// within the 100 ms backstop. A due lease at its WithMaxDeliveries limit
// whose dead letter would find no room (a protected group has not
// finished the record it would overwrite) is not claimable: Wait sleeps
// until an acking group's floor moves (its Ack wakes it) or the backstop,
// rather than return at once with nothing for Claim to take.
//
// Wait returns an error wrapping ErrNoGroup when the group was dropped
// (Ring.DropGroup), before or while it waits.
func (g *Group) Wait(ctx context.Context) (err error) {
	defer catchFault(g.r.a, guard(), &err)
	r := g.r
	dropped := false
	err = r.wait(ctx, func(spin bool) bool {
		if !g.current() {
			dropped = true
			return true
		}
		pos, next := mem.Load64(r.b, g.goff+rl.GPosition), mem.Load64(r.b, r.off+rl.OffNext)
		if g.ack {
			if floor := mem.Load64(r.b, g.goff+rl.GFloor); floor <= pos && pos < next && pos < floor+r.inFlight {
				return true
			}
			if !spin && g.due() {
				return true
			}
			next = pos // the window is full: only a hole repair is news
		}
		if pos < next {
			return true
		}
		return !spin && g.checkHole()
	})
	if err == nil && dropped {
		return fmt.Errorf("shmarena: ring %s: group %s: %w: it was dropped", quote(r.name), quote(g.name), ErrNoGroup)
	}
	return err
}

// Records returns an iterator over records claimed one at a time, waiting
// when there are none, until ctx ends or the arena closes. Each record is
// claimed just before it is yielded, so breaking out of the loop leaves no
// claimed record behind; the delivery rules are those of Claim. ctx is
// checked before every claim: with a ctx already done it yields nothing,
// and once ctx ends it claims no more, even while records keep coming.
//
// The iteration also ends when the group is dropped (see Ring.DropGroup).
//
// Records acks nothing: in an acking group the loop body must finish each
// record itself, with Ack when the work is done, Nack to have it retried,
// or Extend while it takes longer than the lease; a record left alone is
// delivered again when its lease runs out. See the Example for Group.Ack.
func (g *Group) Records(ctx context.Context) iter.Seq[Record] {
	return func(yield func(Record) bool) {
		for {
			if ctx.Err() != nil {
				return
			}
			recs := g.Claim(1)
			if len(recs) == 1 {
				if !yield(recs[0]) {
					return
				}
				continue
			}
			if g.Wait(ctx) != nil {
				return
			}
		}
	}
}

// Stats returns the group's counts (zero after Close). Each shared field
// is read atomically; together they are a near-snapshot.
func (g *Group) Stats() GroupStats {
	defer catchFault(g.r.a, guard(), nil)
	r := g.r
	if r.closed() {
		return GroupStats{}
	}
	defer runtime.KeepAlive(g)
	b := r.b
	if !g.current() {
		return GroupStats{Name: g.name, Topic: g.topic, Mine: g.mine.Load()}
	}
	st := GroupStats{
		Name:      g.name,
		Topic:     g.topic,
		Position:  mem.Load64(b, g.goff+rl.GPosition),
		Delivered: mem.Load64(b, g.goff+rl.GDelivered),
		Lapped:    mem.Load64(b, g.goff+rl.GLapped),
		Skipped:   mem.Load64(b, g.goff+rl.GSkipped),
		Abandoned: mem.Load64(b, g.goff+rl.GAbandoned),
		Mine:      g.mine.Load(),
	}
	if head := mem.Load64(b, r.off+rl.OffNext); head > st.Position {
		st.Lag = head - st.Position
	}
	if g.ack {
		st.Redelivered = mem.Load64(b, g.goff+rl.GRedelivered)
		st.DeadLettered = mem.Load64(b, g.goff+rl.GDeadLettered)
		st.Pending, st.Floor, st.OldestPending = g.pending()
	}
	return st
}

// current reports whether the group's entry is still the one this handle
// joined (not dropped, nor dropped and made again).
func (g *Group) current() bool {
	b := g.r.b
	return mem.Load64(b, g.goff+rl.GState) == rl.GroupReady && mem.Load64(b, g.goff+rl.GGen) == g.gen
}
