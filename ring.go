package shmarena

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/futex"
	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
)

// A Record is one message of a ring. Payload is a private copy: it never
// aliases the shared mapping, so the caller may keep and modify it.
type Record struct {
	// Topic is the topic the record was published under ("" for none).
	Topic string
	// Payload is the record's bytes (possibly empty, never shared).
	Payload []byte
	// Seq is the record's sequence number: 1 for the first record a ring
	// ever held, then one more for each publish, abandoned ones included.
	Seq uint64
	// Deliveries is how many times an acking group (WithAck) has delivered
	// the record, this delivery included: 1 the first time. It is part of
	// the lease: Ack, Nack and Extend need the value Claim returned. It is
	// 0 for records read by a Cursor or an at-most-once Group.
	Deliveries int

	// lease names the group entry and generation that leased the record,
	// so Ack, Nack and Extend refuse a record of another ring or group,
	// or of a group dropped and made again (0 when not leased).
	lease uint64
}

// A Ring is a fixed circle of slots in an arena that holds the most recent
// records published to it, each {topic, payload, sequence}. Producers in
// any process publish; readers either follow it privately with a Cursor
// (every cursor sees every record, a broadcast) or share a Group (each
// record goes to one member, a work queue). When the ring is full the
// oldest record is overwritten: readers that fall more than a lap behind
// lose records and count them as lapped.
//
// A Ring handle is safe for concurrent use by goroutines, and any number
// of processes may use the same ring at once. After the arena's Close,
// every method returns ErrClosed, or false, zero or nil.
type Ring struct {
	a        *Arena
	b        []byte // the whole mapping
	name     string
	off      int    // region offset in the mapping
	slots    uint64 // from the directory entry, validated
	slotMask uint64 // slots - 1 when slots is a power of two, else 0
	pendMask uint64 // inFlight - 1 when inFlight is a power of two (> 1), else 0
	slotSize int
	maxBody  int    // topic + payload bytes one slot holds
	inFlight uint64 // pending-table entries per group
	tables   int    // offset of group 0's pending table in the mapping

	// Set only in the copies PublishWait and dead-lettering publish
	// through: quiet makes a publish that finds no room return errNoRoom
	// uncounted; exGroup (a group entry's offset + 1) and allow make it
	// that group's dead letter of record allow (see Ring.spare).
	quiet   bool
	exGroup int
	allow   uint64
}

// RingStats are a ring's shared counters, summed over every process.
type RingStats struct {
	// Published is how many records were published and committed: the
	// sequence numbers handed out, less the abandoned ones.
	Published uint64
	// Oversize is how many Publish calls were refused with ErrTooLarge.
	Oversize uint64
	// Abandoned is how many records were lost because their producer died
	// while writing them (each leaves a sequence number no reader gets).
	Abandoned uint64
	// Full counts Publish calls refused with ErrRingFull for want of room
	// (a protected group had not finished the oldest record).
	Full uint64
	// Waited counts PublishWait calls that had to wait for room (each once,
	// however long it waited).
	Waited uint64
	// Slots is how many records the ring holds; SlotSize is the size of one
	// slot in bytes, 24 bytes of header included.
	Slots    int
	SlotSize int
}

// A ReaderOption configures a Cursor or a Group.
type ReaderOption func(*readerConfig)

type readerConfig struct {
	fromStart    bool
	topic        string
	lease        time.Duration // > 0: acking (at-least-once)
	backpressure bool
	maxDeliv     int
	dead         string
	deadSet      bool
}

// FromStart makes a new Cursor, or a Group that does not exist yet, start
// at the oldest record the ring still holds rather than at its head (the
// next record to be published). Joining an existing group ignores it: the
// group's shared position is where the pool left off.
func FromStart() ReaderOption { return func(c *readerConfig) { c.fromStart = true } }

// WithTopic binds a Group to one topic: it delivers only records
// published under exactly that topic and steps over the rest, counting
// them in GroupStats.Skipped. The empty topic means every topic. A topic
// is at most 64 bytes. Cursor ignores this option: a cursor sees every
// record.
func WithTopic(topic string) ReaderOption { return func(c *readerConfig) { c.topic = topic } }

// Tunables, variables so tests can shorten them.
var (
	// waitBackstop bounds one futex sleep, so a lost wake-up, a cancelled
	// context or a producer that died mid-publish is noticed within it.
	waitBackstop = 100 * time.Millisecond
	// holeCheckAfter is how long a reader watches the publish lock held
	// by the same owner, with nothing new committed, before asking whether
	// that owner is alive.
	holeCheckAfter = 50 * time.Millisecond
)

// validateRingHook, when set (by tests only), runs inside validateRing
// between its reads of the ring's head and of the groups' positions.
var validateRingHook func()

// publishHook, when set (by tests only), runs inside Publish after the
// record is written and before it is committed, with the lock held.
var publishHook func(seq uint64)

func init() {
	kinds[KindRing] = kindOps{validate: validateRing, reset: resetRing}
	prev := wakeAllOnClose
	wakeAllOnClose = func(b []byte) {
		prev(b)
		wakeRings(b)
	}
}

// RingBytes returns how many bytes of an arena a ring of the given shape
// (the options Arena.Ring takes) occupies; see MapBytes. It returns
// ErrInvalid for a shape out of range.
func RingBytes(opts ...RegionOption) (int64, error) {
	_, n, err := ringShape(opts)
	if err != nil {
		return 0, fmt.Errorf("shmarena: ring size: %w", err)
	}
	return layout.Align(n), nil
}

// defaultInFlight is a ring's pending-table capacity per group when
// WithMaxInFlight is not given.
const defaultInFlight = 64

// ringShape applies a ring's options over the defaults, checks them and
// returns the region length they need.
func ringShape(opts []RegionOption) (regionConfig, int64, error) {
	cfg := regionConfig{slots: 1024, slotSize: 256, inFlight: defaultInFlight}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.stripes != 0 || cfg.encoded || cfg.evict {
		return cfg, 0, fmt.Errorf("%w: stripes, encoding and eviction are map options", ErrInvalid)
	}
	if cfg.slotSize > 0 {
		cfg.slotSize = (cfg.slotSize + 7) &^ 7
	}
	if cfg.inFlight > cfg.slots && cfg.slots >= rl.MinSlots {
		cfg.inFlight = cfg.slots // more could never be in flight
	}
	n, err := rl.LengthWithTables(cfg.slots, cfg.slotSize, cfg.inFlight)
	if err != nil {
		return cfg, 0, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return cfg, n, nil
}

// Ring finds the ring called name in the arena or creates it. Every
// process must ask for the same shape: WithSlots (default 1024, in
// [2, 2^30]) records of WithSlotSize bytes each (default 256, rounded up to
// a multiple of 8, in [32, 2^20]; a record's topic and payload together
// hold at most the slot size minus 24 bytes).
//
// Errors: ErrInvalid for a bad name, a shape out of range or a map-only
// option (WithStripes); ErrShape when a region of that name exists as a map
// or with another shape (the message names the field); ErrArenaFull when
// the arena has no room; ErrCorrupt when the existing region is damaged;
// ErrClosed after Close. Safe for concurrent use; creation is serialised
// across processes by the arena's file lock.
func (a *Arena) Ring(name string, opts ...RegionOption) (_ *Ring, err error) {
	defer catchFault(a, guard(), &err)
	if a.closed.Load() {
		return nil, ErrClosed
	}
	cfg, length, err := ringShape(opts)
	if err != nil {
		return nil, fmt.Errorf("shmarena: ring %s: %w", quote(name), err)
	}
	spec := regionSpec{
		name:   name,
		kind:   KindRing,
		length: length,
		init: func(b []byte, off int64) {
			o := int(off)
			mem.Store64(b, o+rl.OffSlots, uint64(cfg.slots))
			mem.Store64(b, o+rl.OffSlotSize, uint64(cfg.slotSize))
			mem.Store64(b, o+rl.OffVersion, rl.Version)
			mem.Store64(b, o+rl.OffInFlight, uint64(cfg.inFlight))
			mem.Store64(b, o+rl.OffNext, 1)
			mem.Store64(b, o+rl.OffMagic, rl.Magic)
		},
	}
	spec.params[0], spec.params[1], spec.params[2], spec.params[3] = uint64(cfg.slots), uint64(cfg.slotSize), rl.Version, uint64(cfg.inFlight)
	spec.names[0], spec.names[1], spec.names[2], spec.names[3] = "slots", "slot size", "ring layout", "max in flight"
	e, err := a.region(spec)
	if err != nil {
		return nil, err
	}
	if err := checkRingEntry(a.mem, e); err != nil {
		return nil, fmt.Errorf("shmarena: ring %s: %w: %v", quote(name), ErrCorrupt, err)
	}
	return newRing(a, a.mem, name, e), nil
}

// newRing builds a handle from a checked directory entry (a is nil for
// the reset hook).
func newRing(a *Arena, b []byte, name string, e layout.Entry) *Ring {
	return &Ring{
		a: a, b: b, name: name, off: int(e.Offset),
		slots: e.Params[0], slotSize: int(e.Params[1]), maxBody: int(e.Params[1]) - rl.SBody,
		slotMask: powerMask(e.Params[0]), pendMask: powerMask(e.Params[3]),
		inFlight: e.Params[3],
		tables:   int(e.Offset) + rl.HeaderSize + int(e.Params[0]*e.Params[1]),
	}
}

// powerMask returns n - 1 when n is a power of two above 1, else 0: the
// mask that replaces a division by n (tens of cycles, on every publish
// and every record read) by an and.
func powerMask(n uint64) uint64 {
	if n > 1 && n&(n-1) == 0 {
		return n - 1
	}
	return 0
}

// ringIndex returns seq mod n, by mask when mask is not 0 (see powerMask).
func ringIndex(seq, n, mask uint64) int {
	if mask != 0 {
		return int(seq & mask)
	}
	return int(seq % n)
}

// checkRingEntry checks what a Ring handle caches: the shape in the
// directory entry, the region length, and that the region lies in b.
func checkRingEntry(b []byte, e layout.Entry) error {
	if e.Params[2] != rl.Version {
		return fmt.Errorf("ring layout version %d, this build reads %d", e.Params[2], rl.Version)
	}
	if e.Params[0] > rl.MaxSlots || e.Params[1] > rl.MaxSlotSize || e.Params[3] > rl.MaxInFlight || e.Params[3] > e.Params[0] {
		return fmt.Errorf("shape %d slots of %d bytes, %d in flight, out of range", e.Params[0], e.Params[1], e.Params[3])
	}
	need, err := rl.LengthWithTables(int64(e.Params[0]), int64(e.Params[1]), int64(e.Params[3]))
	if err != nil {
		return err
	}
	if layout.Align(need) != e.Length {
		return fmt.Errorf("region is %d bytes, its shape needs %d", e.Length, layout.Align(need))
	}
	if e.Offset < 0 || e.Offset > int64(len(b)) || e.Length > int64(len(b))-e.Offset {
		return fmt.Errorf("region [%d, +%d) outside the %d-byte mapping", e.Offset, e.Length, len(b))
	}
	return nil
}

// validateRing checks every field of a ready ring's header against its
// directory entry and region length (the kinds hook, run on attach).
func validateRing(b []byte, e layout.Entry) error {
	if err := checkRingEntry(b, e); err != nil {
		return err
	}
	o := int(e.Offset)
	switch {
	case mem.Load64(b, o+rl.OffMagic) != rl.Magic:
		return fmt.Errorf("ring magic %#x", mem.Load64(b, o+rl.OffMagic))
	case mem.Load64(b, o+rl.OffSlots) != e.Params[0]:
		return fmt.Errorf("ring header says %d slots, directory %d", mem.Load64(b, o+rl.OffSlots), e.Params[0])
	case mem.Load64(b, o+rl.OffSlotSize) != e.Params[1]:
		return fmt.Errorf("ring header says slot size %d, directory %d", mem.Load64(b, o+rl.OffSlotSize), e.Params[1])
	case mem.Load64(b, o+rl.OffVersion) != e.Params[2]:
		return fmt.Errorf("ring header says layout %d, directory %d", mem.Load64(b, o+rl.OffVersion), e.Params[2])
	case mem.Load64(b, o+rl.OffInFlight) != e.Params[3]:
		return fmt.Errorf("ring header says %d in flight, directory %d", mem.Load64(b, o+rl.OffInFlight), e.Params[3])
	}
	// Members may publish, claim and repair while this runs, so a word
	// that grows with the head is read before the head and checked against
	// it, or, for the positions read after it, against the head read again
	// (a position is never ahead of the head it was read after).
	floorCache := mem.Load64(b, o+rl.OffFloor)
	holeCount, holeSeq := mem.Load64(b, o+rl.OffHoleCount), mem.Load64(b, o+rl.OffHoleSeq)
	ab := mem.Load64(b, o+rl.OffAbandoned)
	next := mem.Load64(b, o+rl.OffNext)
	if h := validateRingHook; h != nil {
		h()
	}
	if next == 0 || next >= rl.MaxSeq {
		return fmt.Errorf("next sequence %d out of range", next)
	}
	if ab > next { // a repair counts its hole just before it moves the head
		return fmt.Errorf("%d abandoned, next sequence %d", ab, next)
	}
	if floorCache > next { // a cache past the head would let producers overwrite protected records
		return fmt.Errorf("producers' floor cache %d past next sequence %d", floorCache, next)
	}
	if holeSeq > next || holeCount > ab {
		return fmt.Errorf("hole %d with %d abandoned before it; %d abandoned, next sequence %d", holeSeq, holeCount, ab, next)
	}
	for i := 0; i < rl.Groups; i++ {
		g := o + rl.GroupOff(i)
		st := mem.Load64(b, g+rl.GState)
		if st > rl.GroupReady {
			return fmt.Errorf("group entry %d has state %d", i, st)
		}
		if st != rl.GroupReady {
			continue
		}
		nl, tl := mem.Load32(b, g+rl.GNameLen), mem.Load32(b, g+rl.GTopicLen)
		if nl == 0 || nl > rl.MaxGroupName || tl > rl.MaxGroupTopic {
			return fmt.Errorf("group entry %d has name length %d, topic length %d", i, nl, tl)
		}
		f1 := mem.Load64(b, g+rl.GFloor)
		p := mem.Load64(b, g+rl.GPosition)
		if p > next {
			next = mem.Load64(b, o+rl.OffNext)
		}
		if p == 0 || p > next {
			return fmt.Errorf("group entry %d at position %d, ring head %d", i, p, next)
		}
		if err := validateAck(b, g, e, f1, p); err != nil {
			return fmt.Errorf("group entry %d: %v", i, err)
		}
	}
	return nil
}

// resetRing clears what owners from a previous boot left: the publish and
// group-table locks, the sleeper count, a record left half-written (marked
// abandoned) and a group left half-created. The region was validated.
func resetRing(b []byte, e layout.Entry) {
	o := int(e.Offset)
	rlock.Reset(b, o+rl.OffLock)
	rlock.Reset(b, o+rl.OffGroupLock)
	mem.Store32(b, o+rl.OffSleepers, 0)
	for i := 0; i < rl.Groups; i++ {
		g := o + rl.GroupOff(i)
		if mem.Load64(b, g+rl.GState) == rl.GroupCreating {
			mem.Store64(b, g+rl.GState, rl.GroupFree)
		}
	}
	for i := 0; i < rl.Groups; i++ {
		g := o + rl.GroupOff(i)
		rlock.Reset(b, g+rl.GLock)
		if mem.Load64(b, g+rl.GState) == rl.GroupReady && mem.Load64(b, g+rl.GFlags)&rl.FlagAck != 0 {
			applyJournal(b, g) // a claim or a redelivery cut short by the reboot
			tables := o + rl.HeaderSize + int(e.Params[0]*e.Params[1])
			applyLeaseJournal(b, g, tables+i*int(e.Params[3])*rl.PendSize, e.Params[3])
		}
	}
	mem.Store32(b, o+rl.OffRoom, 0)
	r := newRing(nil, b, "", e)
	r.repair()
}

// wakeRings wakes every sleeper on every ring of the mapping; the arena's
// Close calls it (through wakeAllOnClose) so this process's waiters see
// the close. Other processes' sleepers wake too, find nothing and sleep
// again. Entries are bounds-checked: a damaged directory wakes nothing.
func wakeRings(b []byte) {
	if len(b) < layout.HeaderSize {
		return
	}
	for i := 0; i < layout.DirEntries; i++ {
		e := layout.ReadEntry(b, i)
		if e.State != layout.EntryReady || RegionKind(e.Kind) != KindRing ||
			e.Offset < layout.HeaderSize || e.Offset%8 != 0 || e.Offset > int64(len(b))-rl.HeaderSize {
			continue
		}
		o := int(e.Offset)
		for _, f := range [...]int{rl.OffFutex, rl.OffRoom} { // readers, and producers waiting for room
			mem.Add32(b, o+f, 2) // bump the sequence, keep the flag
			futex.Wake(mem.Ptr32(b, o+f), math.MaxInt32)
		}
	}
}

// Name returns the ring's name.
func (r *Ring) Name() string { return r.name }

func (r *Ring) closed() bool { return r.a == nil || r.a.closed.Load() }

func (r *Ring) slotOff(seq uint64) int {
	return r.off + rl.HeaderSize + ringIndex(seq, r.slots, r.slotMask)*r.slotSize
}

// Publish appends a record to the ring under topic ("" for none) and
// returns its sequence number (the first record of a ring is 1). The
// payload is copied; it may be empty. When the ring is full the oldest
// record is overwritten, unless a protected group (WithAck or
// WithBackpressure) has not finished it: then Publish refuses at once with
// ErrRingFull, counted in Stats().Full, and publishes nothing (PublishWait
// waits instead). A topic may be as long as the slot allows, but a group
// binds (WithTopic) to at most 64 bytes: records of a longer topic reach
// cursors and unbound groups only.
//
// Errors: ErrTooLarge (counted in Stats().Oversize, nothing published)
// when len(topic)+len(payload) exceeds the slot size minus 24 bytes;
// ErrRingFull as above; ErrCorrupt when the ring's sequence word is
// damaged; ErrClosed after Close.
//
// Any number of goroutines and processes may publish at once: a short
// robust lock (held for one copy into the slot) orders them. A producer
// that dies holding it leaves one hole, which the next publisher, or a
// reader that finds it stuck, marks abandoned. Publish makes a system call
// only when some reader is asleep in Wait. With no protected group the
// room check is one load of a mask word.
func (r *Ring) Publish(topic string, payload []byte) (_ uint64, err error) {
	defer catchFault(r.a, guard(), &err)
	return r.publish(topic, payload)
}

// publish is Publish for a caller that holds the fault guard (Publish,
// PublishWait). Publish is split in three so that each function's
// defers are open-coded: the compiler stops open-coding when returns
// times defers pass 15, and a Publish with one body and 13 returns paid
// the runtime's deferred-call records (deferprocStack, deferreturn),
// about 250 instructions of its 825.
func (r *Ring) publish(topic string, payload []byte) (uint64, error) {
	if r.closed() {
		return 0, ErrClosed
	}
	if r.a.readOnly {
		return 0, r.refuse("publish")
	}
	if len(topic) > r.maxBody || len(payload) > r.maxBody-len(topic) {
		mem.Add64(r.b, r.off+rl.OffOversize, 1)
		return 0, fmt.Errorf("shmarena: ring %q: %w: topic %d + payload %d bytes, a slot holds %d",
			r.name, ErrTooLarge, len(topic), len(payload), r.maxBody)
	}
	if !r.a.enter(0) {
		return 0, ErrClosed
	}
	defer r.a.exit(0) // after the wake, so Close cannot retire under it
	return r.publishEntered(topic, payload)
}

// publishEntered is publish once the operation is counted in flight.
func (r *Ring) publishEntered(topic string, payload []byte) (uint64, error) {
	b := r.b
	lock := r.off + rl.OffLock
	recovered, ok := rlock.Acquire(b, lock, r.a.own)
	if !ok {
		return 0, r.a.closedErr() // Close began, or a fault abandoned the handle, while this waited
	}
	if recovered {
		r.repair()
	}
	s := mem.Load64(b, r.off+rl.OffNext)
	if s == 0 || s >= rl.MaxSeq {
		if !rlock.Release(b, lock, r.a.self) {
			return 0, r.errLockLost()
		}
		return 0, fmt.Errorf("shmarena: ring %q: %w: next sequence %d", r.name, ErrCorrupt, s)
	}
	if mem.Load64(b, r.off+rl.OffProtected) != 0 && !r.room(s) {
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
	o := r.slotOff(s)
	// Plain stores (see mem.Put64) up to the commit: the slot is ours
	// under the lock, readers validate it by begin and end, and stores
	// become visible in program order. The commit is a full fence, which
	// wake needs between it and its look at the futex word.
	mem.Put64(b, o+rl.SBegin, s) // from here readers of s-slots see it lapped
	mem.Put64(b, o+rl.SLens, uint64(len(topic))|uint64(len(payload))<<32)
	writeWords(b, o+rl.SBody, topic)
	writeWords(b, o+rl.SBody+len(topic), payload)
	if h := publishHook; h != nil {
		h(s)
	}
	mem.Put64(b, o+rl.SEnd, s)
	// The commit, a compare-and-swap from s: a producer whose lock was
	// taken over (judged dead) finds the record marked abandoned and the
	// sequence moved on, and must not move it again.
	if !mem.CAS64(b, r.off+rl.OffNext, s, s+1) {
		return 0, r.errLockLost()
	}
	released := rlock.Release(b, lock, r.a.self)
	r.wake()
	if !released {
		return s, r.errLockLost()
	}
	// Readers have the next slot's lines in their caches; ask for them
	// now, so the next publish does not wait on that at its commit fence.
	o = r.slotOff(s + 1)
	for l := 0; l < min(r.slotSize, 256); l += 64 { // a header and a small record
		mem.PrefetchW(b, o+l)
	}
	return s, nil
}

func (r *Ring) errLockLost() error {
	return fmt.Errorf("shmarena: ring %q: %w", r.name, ErrLockLost)
}

// writeWords stores s at off in the slot the caller owns (it holds the
// publish lock). On amd64 outside the race detector it is a plain copy,
// as the map's value copies are (internal/mem/copy_fast.go): readers
// check the slot's begin and end words around their own copy and drop a
// copy that raced, and the commit after it is a locked instruction, so
// every byte is visible before the record is. Elsewhere it stores whole
// words atomically.
func writeWords[S ~string | ~[]byte](b []byte, off int, s S) { mem.Write(b, off, s) }

// repair runs with the publish lock held after taking it from a dead
// owner (or on reset after a reboot): a record begun but not committed
// becomes an abandoned hole that readers step over, and is counted.
//
// Marking and counting are one idempotent step, so a recoverer that dies
// anywhere in it (the lock then passes to the next, which repairs again)
// leaves a state redone to the same result: the count before the hole is
// kept once per hole in the header (hole count, then hole sequence), and
// the abandoned count is stored from it, never added to. Until the head
// moves on, Stats may show the hole counted with the head not past it.
//
// A batch (PublishBatch) killed before its commit may have begun several
// slots, each over a record the ring still held: each becomes a hole, so
// the head passes every slot the dead batch wrote. Left behind, such a
// slot held a sequence the head had not reached (Check reported it), lost
// a record the head said the ring still held, and turned a later dead
// owner that had begun nothing into a hole. A slot begun past the head is
// only ever a dead batch's: the batch's room check covered it, and no
// publisher has held the lock since.
func (r *Ring) repair() {
	for range r.slots { // a batch begins at most slots slots
		if !r.repairOne() {
			return
		}
	}
}

// repairOne makes the record begun at the head a hole and reports
// whether there was one.
func (r *Ring) repairOne() bool {
	b := r.b
	s := mem.Load64(b, r.off+rl.OffNext)
	if s == 0 || s >= rl.MaxSeq {
		return false
	}
	o := r.slotOff(s)
	if mem.Load64(b, o+rl.SBegin) != s {
		return false // the dead producer had not started: no hole
	}
	if mem.Load64(b, r.off+rl.OffHoleSeq) != s {
		mem.Store64(b, r.off+rl.OffHoleCount, mem.Load64(b, r.off+rl.OffAbandoned))
		mem.Store64(b, r.off+rl.OffHoleSeq, s)
	}
	crashPoint("hole-prepared")
	mem.Store64(b, r.off+rl.OffAbandoned, mem.Load64(b, r.off+rl.OffHoleCount)+1)
	crashPoint("hole-counted")
	mem.Store64(b, o+rl.SLens, rl.AbandonedLens)
	mem.Store64(b, o+rl.SEnd, s)
	crashPoint("hole-marked")
	mem.Store64(b, r.off+rl.OffNext, s+1)
	if r.a != nil {
		r.wake()
	}
	return true
}

// Head returns the sequence number the next record published will get:
// one past the newest record (1 for an empty ring). A reader whose
// position equals Head has read everything. It returns 0 after Close.
// Safe for concurrent use; the value may be stale as soon as it returns.
func (r *Ring) Head() uint64 {
	defer catchFault(r.a, guard(), nil)
	if r.closed() {
		return 0
	}
	n := mem.Load64(r.b, r.off+rl.OffNext)
	runtime.KeepAlive(r)
	return n
}

// Stats returns the ring's counters (the zero RingStats after Close).
// Each field is read atomically; together they are a near-snapshot.
func (r *Ring) Stats() RingStats {
	defer catchFault(r.a, guard(), nil)
	if r.closed() {
		return RingStats{}
	}
	defer runtime.KeepAlive(r)
	next := mem.Load64(r.b, r.off+rl.OffNext)
	ab := mem.Load64(r.b, r.off+rl.OffAbandoned)
	var pub uint64
	if next > ab+1 {
		pub = next - 1 - ab
	}
	return RingStats{
		Published: pub,
		Oversize:  mem.Load64(r.b, r.off+rl.OffOversize),
		Abandoned: ab,
		Full:      mem.Load64(r.b, r.off+rl.OffFull),
		Waited:    mem.Load64(r.b, r.off+rl.OffWaited),
		Slots:     int(r.slots),
		SlotSize:  r.slotSize,
	}
}

// oldest returns the oldest sequence the ring may still hold, given next.
func (r *Ring) oldest(next uint64) uint64 {
	if next > r.slots {
		return next - r.slots
	}
	return 1
}
