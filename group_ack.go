package shmarena

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
)

// This file: at-least-once (acking) groups. Such a group keeps, besides
// its position (the next record never delivered), a floor (the oldest
// record not finished) and a pending table of max-in-flight entries, where
// record s, while floor <= s < position, has entry s mod max-in-flight:
// its lease holder (a handle's token), the lease deadline, its state
// (pending or done) and its delivery count. A claim may take a new record
// only while position < floor + max in flight, so the table never
// overflows and each record's entry is found without search.
//
// Every update of the table, the position and the floor is made under the
// group's robust lock (a word in the group entry), one aligned word per
// store. Each store leaves a state the next holder reads right, so the
// repair after a holder is SIGKILLed is idempotent and is what every
// holder does anyway: entries past the position are ignored (a claim that
// died before moving the position delivered nothing), a lease whose holder
// is dead is taken again, an entry whose sequence word does not match is
// made available for redelivery, and the floor is advanced over finished
// entries. Records are copied out of the ring under the lock, so a
// protected record cannot be overwritten while it is read. The counts a
// claim of new records moves (Delivered, Skipped, Lapped, Abandoned) go
// through a journal in the group entry (applyJournal), and so do
// Redelivered and DeadLettered (applyLeaseJournal), so they stay exact
// whatever instruction a holder is killed at.

// WithAck makes a Group at-least-once: each record a member claims is a
// lease of the given length (> 0, wall-clock), recorded in the group's
// pending table until the member calls Ack. A lease that runs out, or
// whose member's arena handle is gone (the process died or closed it), is
// delivered again by a later Claim, with Record.Deliveries one higher.
// The group is protected: no producer overwrites a record it has not
// acked or dead-lettered (Publish returns ErrRingFull, PublishWait waits).
// The ring needs pending tables (WithMaxInFlight, default 64). Every
// member must ask for the same lease; another is refused with ErrShape.
func WithAck(lease time.Duration) ReaderOption {
	return func(c *readerConfig) { c.lease = lease }
}

// WithBackpressure protects an at-most-once Group: no producer overwrites
// a record the group's position has not reached, so nothing is lost by
// lapping (Publish returns ErrRingFull, PublishWait waits), while a
// member that dies holding claimed records still loses them. Every member
// must ask for it alike (ErrShape). Acking groups are protected anyway.
func WithBackpressure() ReaderOption {
	return func(c *readerConfig) { c.backpressure = true }
}

// WithMaxDeliveries bounds how many times an acking group delivers one
// record (n in [1, 2^31-1]; default 0, unlimited): a record delivered n
// times whose lease runs out or is Nacked is, at the next Claim that
// finds it, published to the WithDeadLetter topic (or, without one,
// dropped) and finished, and counted in GroupStats.DeadLettered. Only
// claims count as deliveries; Extend does not. It needs WithAck; every
// member must ask for the same value (ErrShape).
func WithMaxDeliveries(n int) ReaderOption {
	return func(c *readerConfig) { c.maxDeliv = n }
}

// WithDeadLetter names the topic (1 to 64 bytes, not the group's own)
// under which an acking group publishes, on the same ring, a record that
// reached WithMaxDeliveries. The dead letter's payload is a 16-byte header
// followed by the original topic and payload; ParseDeadLetter reads it. A
// dead letter is published before the record is finished, so a member
// killed in between makes the next one publish it again (at least once;
// not when the dead letter took the record's own slot, where the next
// member finds it). It is published without waiting: one that finds no
// room leaves the record pending, tried again by a Claim after room frees
// (Wait does not wake for it meanwhile). On a full ring it may take the
// slot of the record it replaces, where every group that has not finished
// that record has given up on it too (holds it at its WithMaxDeliveries
// limit). Each of them then finds it there and finishes the record at
// once: it copies the letter into its own when the ring has room for one
// at that moment, and otherwise the letter stands for its own (the record
// is dead-lettered once, on the first group's topic). So groups giving up
// never wait for one another, whatever their number and order of giving
// up (see docs/queues.md).
// It needs WithAck and WithMaxDeliveries; every member must ask for the
// same topic (ErrShape). A group that takes every topic skips its own
// dead-letter topic.
func WithDeadLetter(topic string) ReaderOption {
	return func(c *readerConfig) { c.dead, c.deadSet = topic, true }
}

// checkAckConfig checks a Group's ack options against each other and the
// ring's shape.
func (r *Ring) checkAckConfig(c readerConfig) error {
	switch {
	case c.lease < 0:
		return fmt.Errorf("%w: lease %v is negative", ErrInvalid, c.lease)
	case c.lease == 0 && (c.maxDeliv != 0 || c.deadSet):
		return fmt.Errorf("%w: WithMaxDeliveries and WithDeadLetter need WithAck", ErrInvalid)
	case c.lease > 0 && r.inFlight == 0:
		return fmt.Errorf("%w: the ring has no pending tables (made WithMaxInFlight(0))", ErrInvalid)
	case c.maxDeliv < 0 || c.maxDeliv > 1<<31-1:
		return fmt.Errorf("%w: max deliveries %d outside [0, 2^31-1]", ErrInvalid, c.maxDeliv)
	case c.deadSet && (c.dead == "" || len(c.dead) > rl.MaxGroupTopic):
		return fmt.Errorf("%w: dead-letter topic must be 1 to %d bytes", ErrInvalid, rl.MaxGroupTopic)
	case c.deadSet && c.dead == c.topic:
		return fmt.Errorf("%w: dead-letter topic %s is the group's own topic", ErrInvalid, quote(c.dead))
	case c.deadSet && c.maxDeliv == 0:
		return fmt.Errorf("%w: WithDeadLetter needs WithMaxDeliveries", ErrInvalid)
	case c.deadSet && r.maxBody < deadHeader+len(c.dead):
		return fmt.Errorf("%w: a slot cannot hold a dead letter's header", ErrInvalid)
	}
	return nil
}

// sameAckConfig compares a joining member's ack options with the group's,
// naming the first field that differs.
func (r *Ring) sameAckConfig(g int, c readerConfig) error {
	b := r.b
	flags := mem.Load64(b, g+rl.GFlags)
	lease := time.Duration(mem.Load64(b, g+rl.GLease))
	if flags&rl.FlagAck == 0 {
		lease = 0
	}
	dl := mem.Load32(b, g+rl.GDeadLen)
	if dl > rl.MaxGroupTopic {
		return fmt.Errorf("%w: dead-letter topic length %d", ErrCorrupt, dl)
	}
	dead := string(mem.AppendBytes(nil, b, g+rl.GDead, int(dl)))
	bp := flags&rl.FlagProtected != 0 && flags&rl.FlagAck == 0
	switch {
	case lease != c.lease:
		return fmt.Errorf("%w: lease is %v, asked for %v (0: at most once)", ErrShape, lease, c.lease)
	case bp != c.backpressure && c.lease == 0:
		return fmt.Errorf("%w: backpressure is %v, asked for %v", ErrShape, bp, c.backpressure)
	case mem.Load32(b, g+rl.GMaxDeliv) != uint32(c.maxDeliv):
		return fmt.Errorf("%w: max deliveries is %d, asked for %d", ErrShape, mem.Load32(b, g+rl.GMaxDeliv), c.maxDeliv)
	case dead != c.dead:
		return fmt.Errorf("%w: dead-letter topic is %s, asked for %s", ErrShape, quote(dead), quote(c.dead))
	}
	return nil
}

// initAck writes a new group entry's ack settings and clears its pending
// table, with the group-table lock held and the entry being created.
func (r *Ring) initAck(g int, c readerConfig, pos uint64) {
	b := r.b
	var flags uint64
	if c.lease > 0 {
		flags = rl.FlagAck | rl.FlagProtected
	} else if c.backpressure {
		flags = rl.FlagProtected
	}
	mem.Store64(b, g+rl.GFlags, flags)
	mem.Store64(b, g+rl.GLease, uint64(c.lease))
	mem.Store32(b, g+rl.GMaxDeliv, uint32(c.maxDeliv))
	mem.Store32(b, g+rl.GDeadLen, uint32(len(c.dead)))
	mem.Write(b, g+rl.GDead, c.dead)
	mem.Store64(b, g+rl.GFloor, pos)
	mem.Zero(b, g+rl.GLSeq, rl.GLField+8-rl.GLSeq) // past the zeroed part: a dropped group's lease journal
	idx := (g - r.off - rl.OffGroups) / rl.GroupSize
	mem.Zero(b, r.tables+idx*int(r.inFlight)*rl.PendSize, int(r.inFlight)*rl.PendSize)
}

// aliveCache remembers which lease holders this handle has asked the
// kernel about: a dead token stays dead, a live one is asked again after
// aliveFor, so a claim costs no system call per entry.
type aliveCache struct {
	mu    sync.Mutex
	notes map[uint64]aliveNote
}

type aliveNote struct {
	alive bool
	at    int64
}

// aliveFor is how long a holder found alive is taken to stay so.
var aliveFor = 2 * time.Millisecond

func (g *Group) holderAlive(tok uint64, now int64) bool {
	a := g.r.a
	if tok == a.self {
		return true
	}
	c := &g.alive
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.notes[tok]; ok && (!n.alive || now-n.at < int64(aliveFor)) {
		return n.alive
	}
	if c.notes == nil || len(c.notes) > 256 {
		c.notes = make(map[uint64]aliveNote)
	}
	alive := a.own.Alive(tok)
	c.notes[tok] = aliveNote{alive: alive, at: now}
	return alive
}

// entry returns the offset of seq's pending-table entry.
func (g *Group) entry(seq uint64) int {
	return g.table + ringIndex(seq, g.r.inFlight, g.r.pendMask)*rl.PendSize
}

func pendWord(state, deliveries uint32) uint64 { return uint64(state)<<32 | uint64(deliveries) }

// lockAck takes the group's lock for a table update. It returns false,
// not holding it, when the arena is closed or the group was dropped.
func (g *Group) lockAck() bool {
	r := g.r
	if !g.current() { // dropped: do not wait for a lock a member of it may hold
		return false
	}
	if !r.a.enter(0) {
		return false
	}
	recovered, ok := rlock.Acquire(r.b, g.goff+rl.GLock, r.a.own)
	if !ok { // Close began while this waited
		r.a.exit(0)
		return false
	}
	if mem.Load64(r.b, g.goff+rl.GState) != rl.GroupReady || mem.Load64(r.b, g.goff+rl.GGen) != g.gen {
		g.unlockAck()
		return false
	}
	if recovered { // the rest of the repair is what every holder does
		g.applyJournal()
		applyLeaseJournal(r.b, g.goff, g.table, r.inFlight)
	}
	return true
}

// unlockAck releases the group's lock; false means another handle had
// taken it over (judging this one dead).
func (g *Group) unlockAck() bool {
	r := g.r
	ok := rlock.Release(r.b, g.goff+rl.GLock, r.a.self)
	r.a.exit(0)
	return ok
}

// window returns the group's floor and position, or ok false when they
// break floor <= position <= floor + max in flight (a damaged entry:
// nothing is claimed or settled).
func (g *Group) window() (floor, pos uint64, ok bool) {
	b := g.r.b
	floor, pos = mem.Load64(b, g.goff+rl.GFloor), mem.Load64(b, g.goff+rl.GPosition)
	return floor, pos, floor <= pos && pos-floor <= g.r.inFlight && pos < rl.MaxSeq
}

// leaseID identifies the group entry and generation that lease a record:
// the entry's offset in the mapping (which tells rings apart too), mixed
// by an odd multiplier (one-to-one), with the generation. Never 0.
func (g *Group) leaseID() uint64 { return (uint64(g.goff)*0x9e3779b97f4a7c15 ^ g.gen) | 1 }

// repairWindow, with the lock held, clamps a damaged floor back into
// [position - max in flight, position], so the group goes on claiming
// (the records skipped or taken again are the damage's cost). A damaged
// position (past MaxSeq) is left alone: nothing is claimed from it.
func (g *Group) repairWindow() {
	b := g.r.b
	floor, pos := mem.Load64(b, g.goff+rl.GFloor), mem.Load64(b, g.goff+rl.GPosition)
	switch {
	case pos >= rl.MaxSeq:
	case floor > pos:
		mem.Store64(b, g.goff+rl.GFloor, pos)
	case pos-floor > g.r.inFlight:
		mem.Store64(b, g.goff+rl.GFloor, pos-g.r.inFlight)
	}
}

// advanceFloor moves the floor past finished entries, with the lock held,
// and wakes producers waiting for room (and members waiting for the
// window) when it moved.
func (g *Group) advanceFloor() {
	r := g.r
	b := r.b
	floor, pos, ok := g.window()
	if !ok {
		return
	}
	start := floor
	for floor < pos {
		e := g.entry(floor)
		if mem.Load64(b, e+rl.PSeq) != floor || mem.Load64(b, e+rl.PState)>>32 != rl.StDone {
			break
		}
		floor++
	}
	if floor != start {
		mem.Store64(b, g.goff+rl.GFloor, floor)
		r.roomFreed()
		r.wake()
	}
}

// claimAck is AppendClaim for an acking group.
func (g *Group) claimAck(dst []Record, max int) []Record {
	if !g.lockAck() {
		return dst
	}
	defer g.unlockAck()
	return g.claimLocked(dst, max)
}

// claimLocked is claimAck with the group lock held.
func (g *Group) claimLocked(dst []Record, max int) []Record {
	r := g.r
	b := r.b
	if max <= 0 {
		max = int(r.inFlight)
	}
	g.advanceFloor()
	now := time.Now().UnixNano()
	var buf payloadBuf
	buf.expect(min(max, int(r.inFlight)) * r.maxBody) // a small claim allocates little
	out, start := dst, len(dst)
	// Room for all it could return (the window, up to the head), at once.
	if floor, _, ok := g.window(); ok {
		avail := min(mem.Load64(b, r.off+rl.OffNext), floor+r.inFlight)
		avail -= min(avail, floor)
		if want := min(uint64(max), avail); uint64(cap(out)-start) < want {
			out = slices.Grow(out, int(want))
		}
	}
	max += start
	out = g.reclaim(now, max, out, &buf)
	for round := 0; len(out) < max && round < 4; round++ {
		floor, pos, ok := g.window()
		if !ok {
			break
		}
		end := min(mem.Load64(b, r.off+rl.OffNext), floor+r.inFlight)
		if pos >= end {
			if len(out) == start && round == 0 && g.checkHole() {
				continue
			}
			break
		}
		out = g.claimNew(now, pos, end, max, out, &buf)
		g.advanceFloor()
	}
	return out
}

// claimNew leases the records from pos up to end (at most max in out),
// with the lock held, then moves the position past what it looked at.
// Records of other topics, holes and overwritten records are entered as
// done, so the floor passes them.
func (g *Group) claimNew(now int64, pos, end uint64, max int, out []Record, buf *payloadBuf) []Record {
	r := g.r
	b := r.b
	var tally [readSkipped + 1]uint64
	prev, cached := "", ""
	if p := g.last.Load(); p != nil {
		prev, cached = *p, *p // reused when equal: no allocation per record
	}
	if len(out) > 0 {
		prev = out[len(out)-1].Topic
	}
	deadline := uint64(deadlineFrom(now, g.lease))
	lease, self := g.leaseID(), r.a.self
	seq := pos
	for ; seq < end && len(out) < max; seq++ {
		buf.lend(out)
		rec, res := r.readInto(seq, g.topic != "", g.topic, prev, buf)
		if res == readOK && g.dead != "" && g.topic == "" && rec.Topic == g.dead {
			res = readSkipped
		}
		tally[res]++
		// Plain stores (mem.Put64) here and in the journal below, not
		// fenced ones: only the lock's holder writes the table and the
		// journal, lock-free readers (due, pending, Stats) need each word
		// whole, which an aligned store is, and the repair after a kill
		// needs them in program order, which the CPU (x86 stores are
		// seen in order; elsewhere Put64 is atomic) and the compiler
		// keep. No store here is followed by a load of a word another
		// process writes without the lock: the one that is, the floor's
		// before a wake, stays fenced (advanceFloor).
		e := g.entry(seq)
		if res != readOK {
			mem.Put64(b, e+rl.PState, pendWord(rl.StDone, 0))
			mem.Put64(b, e+rl.PSeq, seq)
			continue
		}
		mem.Put64(b, e+rl.PHolder, self)
		mem.Put64(b, e+rl.PDeadline, deadline)
		mem.Put64(b, e+rl.PSince, uint64(now))
		mem.Put64(b, e+rl.PState, pendWord(rl.StPending, 1))
		mem.Put64(b, e+rl.PSeq, seq)
		rec.Deliveries = 1
		rec.lease = lease
		prev = rec.Topic
		out = append(out, rec)
	}
	// The counts after the claim go to the journal before the position
	// moves, and from it to the counters after: a holder killed between
	// leaves the journal for the next holder to apply (see applyJournal).
	mem.Put64(b, g.goff+rl.GJPos, 0)
	for res, j := range journalFields {
		mem.Put64(b, g.goff+j[1], mem.Load64(b, g.goff+j[0])+tally[res])
	}
	mem.Put64(b, g.goff+rl.GJPos, seq)
	crashPoint("claim-entered")
	mem.Store64(b, g.goff+rl.GPosition, seq)
	crashPoint("claim-moved")
	g.applyJournal()
	g.mine.Add(tally[readOK])
	if len(out) > 0 && out[len(out)-1].Topic != cached {
		t := out[len(out)-1].Topic
		g.last.Store(&t)
	}
	return out
}

// journalFields pairs each count a claim moves with its journal word,
// indexed by readResult.
var journalFields = [...][2]int{
	readOK:        {rl.GDelivered, rl.GJDelivered},
	readLapped:    {rl.GLapped, rl.GJLapped},
	readAbandoned: {rl.GAbandoned, rl.GJAbandoned},
	readSkipped:   {rl.GSkipped, rl.GJSkipped},
}

// applyJournal, with the group lock held, stores the counts a claim
// journaled if that claim moved the position (else it never happened),
// then clears the journal. Storing is idempotent, so a holder killed in
// the middle leaves it for the next one, which runs it on taking the lock
// over: the counts are exact whatever instruction a claimer dies at.
func (g *Group) applyJournal() { applyJournal(g.r.b, g.goff) }

// journalLease, with the group lock held, journals the change of seq's
// entry to state and the count (at field) it adds one to; the caller then
// changes the entry and runs applyLeaseJournal.
func (g *Group) journalLease(seq, state uint64, field int) {
	b := g.r.b
	mem.Store64(b, g.goff+rl.GLSeq, 0)
	mem.Store64(b, g.goff+rl.GLState, state)
	mem.Store64(b, g.goff+rl.GLCount, mem.Load64(b, g.goff+field)+1)
	mem.Store64(b, g.goff+rl.GLField, uint64(field))
	mem.Store64(b, g.goff+rl.GLSeq, seq)
}

// applyLeaseJournal stores the count a redelivery or dead-lettering
// journaled if the entry it changes holds the journaled state (else the
// change never happened, and the lease will be taken again and counted
// then), then clears the journal: like applyJournal, idempotent, so the
// next holder redoes it after a kill. goff is the group entry, table its
// pending table of inFlight entries. A damaged journal is ignored.
func applyLeaseJournal(b []byte, goff, table int, inFlight uint64) {
	seq := mem.Load64(b, goff+rl.GLSeq)
	if seq == 0 {
		return
	}
	field := mem.Load64(b, goff+rl.GLField)
	if (field == rl.GRedelivered || field == rl.GDeadLettered) && inFlight > 0 && seq < rl.MaxSeq {
		e := table + int(seq%inFlight)*rl.PendSize
		if mem.Load64(b, e+rl.PSeq) == seq && mem.Load64(b, e+rl.PState) == mem.Load64(b, goff+rl.GLState) {
			mem.Store64(b, goff+int(field), mem.Load64(b, goff+rl.GLCount))
		}
	}
	crashPoint("lease-journal-applied")
	mem.Store64(b, goff+rl.GLSeq, 0)
}

// applyJournal is Group.applyJournal for the group entry at goff (also run
// by resetRing, whose lock reset no takeover follows).
func applyJournal(b []byte, goff int) {
	jp := mem.Load64(b, goff+rl.GJPos)
	if jp == 0 {
		return
	}
	if mem.Load64(b, goff+rl.GPosition) == jp {
		for _, j := range journalFields {
			mem.Put64(b, goff+j[0], mem.Load64(b, goff+j[1])) // plain: see claimNew
		}
	}
	crashPoint("journal-applied")
	mem.Put64(b, goff+rl.GJPos, 0)
}

// reclaim leases again, with the lock held, the records in the window
// whose lease ran out, whose holder is dead or that were Nacked and are
// due, oldest first, up to max in out. A record at its delivery limit is
// dead-lettered instead (see giveUp; one whose dead letter finds no room
// stays pending and due). An entry that does not describe its sequence
// (damaged) is made due for redelivery.
func (g *Group) reclaim(now int64, max int, out []Record, buf *payloadBuf) []Record {
	r := g.r
	b := r.b
	floor, pos, ok := g.window()
	if !ok {
		return out
	}
	self := r.a.self
	finished := false
	var lastTok uint64 // the last other holder asked about, and its answer:
	lastAlive := false // neighbouring entries mostly share a holder
	alive := func(tok uint64) bool {
		if tok != lastTok {
			lastTok, lastAlive = tok, g.holderAlive(tok, now)
		}
		return lastAlive
	}
	for seq := floor; seq < pos && len(out) < max; seq++ {
		e := g.entry(seq)
		st := mem.Load64(b, e+rl.PState)
		if mem.Load64(b, e+rl.PSeq) != seq || (st>>32 != rl.StPending && st>>32 != rl.StDone) {
			mem.Store64(b, e+rl.PHolder, 0)
			mem.Store64(b, e+rl.PDeadline, 0)
			mem.Store64(b, e+rl.PSince, uint64(now))
			// A damaged entry: its record goes out again as if delivered
			// once, whatever count the damage left (one near 2^32 would
			// wrap to 0, which no Ack matches).
			st = pendWord(rl.StPending, 1)
			mem.Store64(b, e+rl.PState, st)
			mem.Store64(b, e+rl.PSeq, seq)
		}
		if st>>32 != rl.StPending {
			continue
		}
		holder := mem.Load64(b, e+rl.PHolder)
		due := int64(mem.Load64(b, e+rl.PDeadline)) <= now
		if !due && (holder == 0 || holder == self || alive(holder)) {
			continue
		}
		deliv := uint32(st)
		buf.lend(out)
		rec, res := r.readInto(seq, false, "", "", buf)
		if g.maxDeliv != 0 && deliv >= g.maxDeliv {
			switch g.giveUp(seq, deliv, rec, res) {
			case giveWait:
				continue
			case giveDone:
				crashPoint("dead-lettered")
				done := pendWord(rl.StDone, deliv)
				g.journalLease(seq, done, rl.GDeadLettered)
				mem.Store64(b, e+rl.PState, done)
				crashPoint("dead-finished")
				applyLeaseJournal(b, g.goff, g.table, r.inFlight)
				finished = true
				continue
			}
		}
		if res != readOK { // overwritten or damaged: cannot be delivered again
			mem.Store64(b, e+rl.PState, pendWord(rl.StDone, deliv))
			field := rl.GAbandoned
			if res == readLapped {
				field = rl.GLapped
			}
			mem.Add64(b, g.goff+field, 1)
			finished = true
			continue
		}
		again := pendWord(rl.StPending, deliv+1)
		g.journalLease(seq, again, rl.GRedelivered)
		mem.Store64(b, e+rl.PHolder, self)
		crashPoint("reclaim")
		mem.Store64(b, e+rl.PDeadline, uint64(deadlineFrom(now, g.lease)))
		mem.Store64(b, e+rl.PState, again)
		crashPoint("reclaimed")
		applyLeaseJournal(b, g.goff, g.table, r.inFlight)
		g.mine.Add(1)
		rec.Deliveries = int(deliv + 1)
		rec.lease = g.leaseID()
		out = append(out, rec)
	}
	if finished {
		g.advanceFloor()
	}
	return out
}

// validateAck checks a ready group entry's ack settings and, for an
// acking group, its floor: f1 read before its position p, and the floor
// read again after (a floor may pass an older position read).
func validateAck(b []byte, g int, e layout.Entry, f1, p uint64) error {
	flags, lease := mem.Load64(b, g+rl.GFlags), mem.Load64(b, g+rl.GLease)
	md, dl := mem.Load32(b, g+rl.GMaxDeliv), mem.Load32(b, g+rl.GDeadLen)
	switch {
	case flags > rl.FlagAck|rl.FlagProtected || flags == rl.FlagAck:
		return fmt.Errorf("flags %#x", flags)
	case flags&rl.FlagAck != 0 && (lease == 0 || lease > math.MaxInt64 || e.Params[3] == 0):
		return fmt.Errorf("acking with lease %d ns, %d in flight", lease, e.Params[3])
	case md > math.MaxInt32 || dl > rl.MaxGroupTopic:
		return fmt.Errorf("max deliveries %d, dead-letter topic length %d", md, dl)
	case flags&rl.FlagAck == 0 && (md != 0 || dl != 0):
		return fmt.Errorf("max deliveries %d, dead-letter topic length %d without acks", md, dl)
	}
	if flags&rl.FlagAck == 0 {
		return nil
	}
	f2 := mem.Load64(b, g+rl.GFloor)
	if jp := mem.Load64(b, g+rl.GJPos); jp >= rl.MaxSeq {
		return fmt.Errorf("claim journal at position %d", jp)
	}
	if ls, lf := mem.Load64(b, g+rl.GLSeq), mem.Load64(b, g+rl.GLField); ls >= rl.MaxSeq ||
		(lf != 0 && lf != rl.GRedelivered && lf != rl.GDeadLettered) {
		return fmt.Errorf("lease journal for sequence %d, count at %d", ls, lf)
	}
	if f1 == 0 || f1 > p || (f2 <= p && p-f2 > e.Params[3]) {
		return fmt.Errorf("floor %d (then %d), position %d, %d in flight", f1, f2, p, e.Params[3])
	}
	return nil
}
