package shmarena

import (
	"fmt"
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/rlock"
)

// Map region layout, offsets from the region start.
//
//	0    slots          8  slot size      16 stripes (= segments)
//	24   flags: 1 encoded, 2 evicting
//	32   deadlines (nonzero once any entry had one)  40 busy    48 full
//	56   expired        64 recoveries   72 longest probe distance of any insert
//	80   evicted        88 inserts that met the probe bound   96 entries moved
//	128  stripes x 192 bytes, one per segment: lock word; the slot index+1
//	     being written (0 = none), so a recoverer knows which slot a dead
//	     writer held; the segment's used and tombstone counts; at 32 the
//	     lock's futex word for parked waiters (see internal/rlock); at 40
//	     a count of the lock's releases; at 48 the slot index+1 an entry
//	     is moving from; at 56 the segment's sweep cursor. At 64 the eviction
//	     queues' heads and tails (small, then main), counted up forever.
//	     At 128, alone in its cache line because every read loads it, the
//	     move version, odd while entries move (see readKey).
//	...  one tag byte per slot, 64-aligned (see tagOf)
//	...  evicting maps: one read-count byte per slot, 64-aligned, then per
//	     segment a small and a main queue of 8-byte hashes (see evict.go)
//	...  64-aligned, slots x slot size
//	...  64-aligned, the use counts: one 32-byte line per process-table
//	     entry (see hashmap_uses.go), then the compute table (see
//	     hashmap_compute.go)
//
// A slot:
//
//	0  deadline, Unix nanoseconds (0 = none); a counter's value instead
//	8  version: seq<<21 | stripe<<1 | 1 while being written, seq<<21 at rest
//	16 meta: state | flags<<8 | key length<<16 | value length<<32
//	24 the key's 64-bit hash (XXH3 under the arena's seed)
//	32 data: key then value; for a counter its deadline, then the key; for
//	   a value in the value space its 8-byte reference, then the key
//
// Slots start on a cache line, so a slot of 64 bytes is one line and a
// counter's Add touches one line. A counter keeps its value at 0, beside
// the version, where its deadline would be: Add changes a counter with
// one 16-byte compare-and-swap of the pair (see addInPlace), which must
// be 16-aligned, and the slot size is a multiple of 8 only. The version
// could not precede the data with both 16-aligned and the header 32
// bytes, hence the trade (see deadlineOff).
const (
	mapHeader    = 128
	stripeStride = 192

	mhSlots        = 0
	mhSlotSize     = 8
	mhStripes      = 16
	mhFlags        = 24
	mhDeadlines    = 32
	mhBusy         = 40
	mhFull         = 48
	mhExpired      = 56
	mhRecoveries   = 64
	mhMaxProbe     = 72
	mhEvicted      = 80
	mhProbeLimited = 88
	mhMoved        = 96

	flagEncoded = 1
	flagEvict   = 2

	slotHeader = 32
	sDeadline  = 0 // not a counter's: see deadlineOff
	sCount     = 0 // a counter's value
	sVersion   = 8
	sMeta      = 16
	sHash      = 24
	sData      = 32

	stateEmpty     = 0
	stateTombstone = 1
	stateLive      = 3

	flagCounter = 1

	seqShift   = 21
	maxStripes = 1 << 16
	maxKeyLen  = 1<<16 - 1

	defaultSlots    = 1024
	defaultSlotSize = 256
	defaultStripes  = 64
	minSlotSize     = 48
	maxSlotSize     = 1 << 24
	maxSlots        = 1<<32 - 1

	// minSegmentSlots is the fewest slots a segment has when the map has
	// more than one: keys land in segments by hash, and a segment's share
	// strays from the average by about its square root, so small segments
	// fill while others have room. Filling 65,536 slots to 90%, the
	// fullest of 64 segments of 1,024 held 944-996; of 16 of 4,096,
	// 3,748-3,790 (92.5%).
	minSegmentSlots = 4096

	// probeBound caps every probe: an insert that finds no free slot
	// within it is refused (ErrFull) or, in an evicting map, replaces an
	// entry within it; no key sits further from home. Random keys reached
	// 480-880 slots filling 65,536- and 1,048,576-slot maps to 90%, and
	// 610-1,440 to 92%, so below 90% only keys chosen to collide meet
	// it, and then they cost a bounded probe, not a scan of the table.
	probeBound = 1024

	// A reader retries a slot that changed under it this many times
	// before it reports busy.
	readRetries = 64
)

var (
	// oddPatience is how long a reader waits for a slot being written
	// before it reports busy; a variable so tests can lengthen it.
	oddPatience = 5 * time.Millisecond
	// oddCheckAfter is how long a reader waits on a slot being written
	// before it asks whether the writer is alive, and between two such
	// questions; a variable so tests can shorten it.
	oddCheckAfter = 500 * time.Microsecond
)

// A Map is a fixed-capacity hash map in an arena, shared by every process
// that opens the arena. Reads take no lock (each slot is a seqlock); writes
// take one of a stripe of robust locks chosen by the key's hash; a delete
// moves the entries after the deleted one back toward their home slots, so
// the table keeps no trace of deleted keys. Keys are strings of arbitrary bytes (NUL
// included); values are byte slices.
//
// A Map's methods are safe for concurrent use by goroutines and processes.
// Each single operation is atomic (linearizable) with respect to every other
// operation on the same key, in any process. The table never grows: a full
// table refuses new keys with ErrFull, while overwriting a present key
// always works.
type Map struct {
	a        *Arena
	name     string
	mem      []byte
	base     int // region offset
	tagBase  int // one byte per slot: 0 empty, 2 tombstone, else tagOf(hash)
	slotBase int
	slots    uint64
	slotSize int
	stripes  uint64 // segments, one lock each
	segLen   uint64 // slots per segment, the last one's remainder aside
	maxPair  int
	encoded  bool
	seed     uint64 // the arena's hash seed
	vs       valueSpace

	q         queues // eviction queues; q.on false for a plain map
	countUses bool   // reads count uses: an evicting map not opened ReadOnly

	useTable     int   // the use counts' lines (see hashmap_uses.go)
	computeTable int   // see hashmap_compute.go
	uses         *uses // this handle's use counts

	// counterHints remember, in this process only, where Add last found
	// each counter (see hintEntries); 8 KiB, nil for a typed map.
	counterHints []byte
}

// MapStats are a map's shared counters, the same in every process.
type MapStats struct {
	Used       int    // live entries, lapsed ones not yet collected included
	Capacity   int    // slots
	Tombstones int    // deleted entries not yet cleared: 0 at rest (deletes move entries back; see Delete)
	Busy       uint64 // give-ups of lock-free reads (Add's included) on a slot that kept changing; a KeyValue read that reads again counts each
	Full       uint64 // inserts refused with ErrFull
	Expired    uint64 // lapsed entries collected (removed, replaced or evicted)
	Recoveries uint64 // locks taken over from dead processes
	Evicted    uint64 // entries evicted to make room (WithEviction), lapsed ones aside
	// ProbeLimited counts inserts that found no free slot within the
	// probe bound (1,024 slots) of their home while their segment had room:
	// keys chosen to collide, or a plain map nearly full. Each was refused
	// with ErrFull, or evicted an entry within the bound.
	ProbeLimited uint64
	Moved        uint64 // entries moved back toward their home slot by deletes
	MaxProbe     int    // the longest distance, in slots, any insert went from its home

	// Hits and Misses count reads of a value (Load, AppendLoad, a typed
	// map's Load, and LoadOrCompute's first look) that found their key,
	// or not, as Redis's keyspace_hits and keyspace_misses do; their
	// ratio is the cache's hit ratio. Exists, TTL, walks and writes are
	// not counted. Loads counts LoadOrCompute functions that returned a
	// value, LoadFailures those that returned an error (or a value the
	// map refused). Every process adds its counts to the file at least
	// every 64 counts of a kind per CPU it runs on, when it reads Stats
	// and when it closes, so another process's latest uses may show a
	// little late, and a process killed loses its last unadded ones. The
	// totals of processes that closed or died stay in: they never go
	// back. A read-only handle counts nothing.
	Hits, Misses, Loads, LoadFailures uint64

	// The value space (WithBytes), in bytes; all zero without one.
	// BytesUsed is what live values there hold: each value rounded up
	// to 16 bytes plus a 16-byte header. BytesDead is what overwritten,
	// deleted and evicted values still hold until the log's head passes
	// them (reclaimed as room is needed; never stranded: see
	// docs/values.md). BytesMoved counts, for good, the bytes copied to
	// reclaim space (compaction and reinsertion).
	BytesUsed     int64
	BytesDead     int64
	BytesCapacity int64
	BytesMoved    uint64
}

func init() {
	kinds[KindMap] = kindOps{validate: validateMapRegion, reset: resetMapRegion}
}

// Map returns the map named name (1 to 48 bytes of UTF-8), creating it with
// the given shape if the arena has no region of that name. Defaults: WithSlots(1024),
// WithSlotSize(256), WithStripes(64). Errors: ErrInvalid for an option out
// of range or a bad name, ErrShape (naming the field) when the region
// exists with another shape or kind, ErrArenaFull when there is no room,
// ErrClosed after Close. Safe for concurrent use; carving is serialised
// across processes by the file lock.
func (a *Arena) Map(name string, opts ...RegionOption) (_ *Map, err error) {
	defer catchFault(a, guard(), &err)
	return a.openMap(name, false, opts)
}

// mapShape applies a map's options over the defaults and checks them. The
// stripes it returns are the segments the map has (see WithStripes).
func mapShape(encoded bool, opts []RegionOption) (regionConfig, error) {
	cfg := regionConfig{slots: defaultSlots, slotSize: defaultSlotSize, stripes: defaultStripes, encoded: encoded}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.inFlightSet {
		return cfg, fmt.Errorf("%w: WithMaxInFlight is a ring option", ErrInvalid)
	}
	cfg.slotSize = (cfg.slotSize + 7) &^ 7
	if err := checkMapShape(cfg.slots, cfg.slotSize, cfg.stripes); err != nil {
		return cfg, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	cfg.stripes = segmentsFor(cfg.slots, cfg.stripes)
	if err := valueShape(&cfg); err != nil {
		return cfg, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return cfg, nil
}

// segmentsFor returns how many segments a map of slots slots has when
// asked for at most stripes locks.
func segmentsFor(slots, stripes int64) int64 {
	return max(1, min(stripes, slots/minSegmentSlots))
}

// MapBytes returns how many bytes of an arena a map of the given shape
// (the options Arena.Map takes) occupies, so that WithSize can be worked
// out: an arena needs MinSize plus the sum of its regions' sizes. It
// counts the value space (WithBytes). It returns ErrInvalid for a shape
// out of range.
func MapBytes(opts ...RegionOption) (int64, error) {
	cfg, err := mapShape(false, opts)
	if err != nil {
		return 0, fmt.Errorf("shmarena: map size: %w", err)
	}
	return layout.Align(regionLength(cfg)), nil
}

func (a *Arena) openMap(name string, encoded bool, opts []RegionOption) (*Map, error) {
	cfg, err := mapShape(encoded, opts)
	if err != nil {
		return nil, fmt.Errorf("shmarena: map %s: %w", quote(name), err)
	}
	var flags, evict uint64
	if cfg.encoded {
		flags |= flagEncoded
	}
	if cfg.evict {
		flags |= flagEvict
		evict = 1
	}
	spec := regionSpec{
		name:   name,
		kind:   KindMap,
		params: [layout.Params]uint64{uint64(cfg.slots), uint64(cfg.slotSize), uint64(cfg.stripes), flags & flagEncoded, evict, uint64(cfg.bytes)},
		names:  [layout.Params]string{"slots", "slot size", "stripes", "encoded flag", "eviction (WithEviction)", "value bytes (WithBytes)"},
		length: regionLength(cfg),
		init: func(b []byte, off int64) {
			o := int(off)
			mem.Store64(b, o+mhSlots, uint64(cfg.slots))
			mem.Store64(b, o+mhSlotSize, uint64(cfg.slotSize))
			mem.Store64(b, o+mhStripes, uint64(cfg.stripes))
			mem.Store64(b, o+mhFlags, flags)
		},
	}
	e, err := a.region(spec)
	if err != nil {
		return nil, err
	}
	return newMap(a, e), nil
}

func checkMapShape(slots, slotSize, stripes int64) error {
	switch {
	case slots < 1 || slots > maxSlots:
		return fmt.Errorf("slots %d outside [1, %d]", slots, int64(maxSlots))
	case slotSize < minSlotSize || slotSize > maxSlotSize:
		return fmt.Errorf("slot size %d bytes outside [%d, %d]", slotSize, minSlotSize, maxSlotSize)
	case slotSize%8 != 0:
		return fmt.Errorf("slot size %d bytes is not a multiple of 8", slotSize)
	case stripes < 1 || stripes > maxStripes:
		return fmt.Errorf("stripes %d outside [1, %d]", stripes, maxStripes)
	}
	return nil
}

// mapLength returns a map region's length in bytes.
func mapLength(slots, slotSize, stripes int64, evict bool) int64 {
	return tailOffset(slots, slotSize, stripes, evict) + useTableBytes + computeTableBytes
}

// tailOffset is where the use counts start, after the slots.
func tailOffset(slots, slotSize, stripes int64, evict bool) int64 {
	return layout.Align(slotsOffset(slots, stripes, evict) + slots*slotSize)
}

// regionLength returns a map region's length in bytes, value space
// included.
func regionLength(cfg regionConfig) int64 {
	n := mapLength(cfg.slots, cfg.slotSize, cfg.stripes, cfg.evict)
	if cfg.bytes == 0 {
		return n
	}
	return layout.Align(n) + valuesLength(cfg.bytes, cfg.stripes)
}

func tagsOffset(stripes int64) int64 { return mapHeader + layout.Align(stripes*stripeStride) }

// slotsOffset is where the slots start, 64-aligned: after the
// tags, and an evicting map's read counts and queues.
func slotsOffset(slots, stripes int64, evict bool) int64 {
	o := tagsOffset(stripes) + layout.Align(slots)
	if evict {
		o += layout.Align(slots) + layout.Align(stripes*queueBytes(slots, stripes))
	}
	return o
}

func newMap(a *Arena, e layout.Entry) *Map {
	slots, slotSize, stripes := e.Params[0], int(e.Params[1]), e.Params[2]
	evict := e.Params[4] != 0
	o := int(e.Offset)
	m := &Map{
		a:        a,
		name:     e.Name,
		mem:      a.mem,
		base:     o,
		tagBase:  o + int(tagsOffset(int64(stripes))),
		slotBase: o + int(slotsOffset(int64(slots), int64(stripes), evict)),
		slots:    slots,
		slotSize: slotSize,
		stripes:  stripes,
		segLen:   slots / stripes,
		maxPair:  slotSize - slotHeader,
		encoded:  e.Params[3] != 0,
		seed:     a.seed,
		vs:       newValueSpace(o, int64(e.Params[5]), int64(stripes), mapLength(int64(slots), int64(slotSize), int64(stripes), evict)),
	}
	m.useTable = o + int(tailOffset(int64(slots), int64(slotSize), int64(stripes), evict))
	m.computeTable = m.useTable + useTableBytes
	m.uses = a.usesOf(m.useTable)
	if evict {
		m.q = newQueues(m)
		m.countUses = !a.readOnly
	}
	if !m.encoded { // a typed map refuses Add
		m.counterHints = make([]byte, hintEntries*8)
	}
	return m
}

// validateMapRegion checks a map region's shape against its entry.
func validateMapRegion(b []byte, e layout.Entry) error {
	p := e.Params
	if p[0] > maxSlots || p[1] > maxSlotSize || p[2] > maxStripes {
		return fmt.Errorf("shape out of range")
	}
	if err := checkMapShape(int64(p[0]), int64(p[1]), int64(p[2])); err != nil {
		return err
	}
	if p[2] != uint64(segmentsFor(int64(p[0]), int64(p[2]))) {
		return fmt.Errorf("%d segments for %d slots", p[2], p[0])
	}
	if p[3] > 1 || p[4] > 1 {
		return fmt.Errorf("flags %#x, %#x", p[3], p[4])
	}
	cfg := regionConfig{slots: int64(p[0]), slotSize: int64(p[1]), stripes: int64(p[2]), evict: p[4] != 0, bytes: int64(p[5])}
	if p[5] > maxShare*maxStripes || valueShape(&cfg) != nil || cfg.bytes != int64(p[5]) {
		return fmt.Errorf("value space of %d bytes over %d segments", p[5], p[2])
	}
	if need := regionLength(cfg); e.Length < need {
		return fmt.Errorf("%d bytes, shape needs %d", e.Length, need)
	}
	o := int(e.Offset)
	flags := p[3]*flagEncoded | p[4]*flagEvict
	for k, f := range []int{mhSlots, mhSlotSize, mhStripes} {
		if v := mem.Load64(b, o+f); v != p[k] {
			return fmt.Errorf("header field %d is %d, directory says %d", k, v, p[k])
		}
	}
	if v := mem.Load64(b, o+mhFlags); v != flags {
		return fmt.Errorf("header flags are %#x, directory says %#x", v, flags)
	}
	return nil
}

// resetMapRegion clears the locks and half-written slots that processes of
// an earlier boot left, and repairs every segment. Nothing else runs on it
// meanwhile.
func resetMapRegion(b []byte, e layout.Entry) {
	m := newMap(&Arena{mem: b}, e)
	for s := uint64(0); s < m.stripes; s++ {
		rlock.Reset(b, m.lockOff(s))
		m.repairSegment(s)
	}
}

// Name returns the region name.
func (m *Map) Name() string { return m.name }

// Capacity returns the number of slots.
func (m *Map) Capacity() int { return int(m.slots) }

// MaxPair returns the largest len(key)+len(value) a slot holds, in bytes.
func (m *Map) MaxPair() int { return m.maxPair }

// Len returns the number of entries held, counting lapsed ones (TTL past,
// so Exists reports them absent) until they are collected; 0 after Close.
// It sums a count per segment (WithStripes), so it costs a load per
// segment and, under concurrent writes, may be off by the writes in
// flight.
func (m *Map) Len() int {
	defer catchFault(m.a, guard(), nil)
	if m.a.closed.Load() {
		return 0
	}
	used, _ := m.counts()
	return used
}

// Offsets within a stripe's entry.
const (
	stIntent   = 8
	stUsed     = 16
	stTomb     = 24
	stMoveVer  = 128
	stWrites   = 40 // bumped by every release of the lock: see checkSegment
	stSweep    = 56 // where the next insert's sweep of lapsed entries starts (see sweepSome)
	stMoveFrom = 48
)

// counts sums the segments' counts. Under concurrent writes the sums may
// be off by the operations in flight; they are never negative.
func (m *Map) counts() (used, tomb int) {
	var u, t int64
	for s := uint64(0); s < m.stripes; s++ {
		u += int64(mem.Load64(m.mem, m.lockOff(s)+stUsed))
		t += int64(mem.Load64(m.mem, m.lockOff(s)+stTomb))
	}
	runtime.KeepAlive(m) // for Len, whose reads of the mapping are these
	return int(max(u, 0)), int(max(t, 0))
}

// addCounts changes segment s's counts; the caller holds s.
func (m *Map) addCounts(s uint64, used, tomb int64) {
	o := m.lockOff(s)
	mem.Put64(m.mem, o+stUsed, uint64(int64(mem.Load64(m.mem, o+stUsed))+used))
	mem.Put64(m.mem, o+stTomb, uint64(int64(mem.Load64(m.mem, o+stTomb))+tomb))
}

func (m *Map) used(s uint64) uint64 { return mem.Load64(m.mem, m.lockOff(s)+stUsed) }

// Stats returns the map's shared counters; zero after Close.
func (m *Map) Stats() MapStats {
	defer catchFault(m.a, guard(), nil)
	if m.a.closed.Load() {
		return MapStats{}
	}
	defer runtime.KeepAlive(m)
	used, tomb := m.counts()
	m.uses.flush()
	u := sumUses(m.mem, m.useTable)
	st := MapStats{
		Hits:         u[useHits],
		Misses:       u[useMisses],
		Loads:        u[useLoads],
		LoadFailures: u[useLoadFailures],
		Used:         used,
		Capacity:     int(m.slots),
		Tombstones:   tomb,
		Busy:         mem.Load64(m.mem, m.base+mhBusy),
		Full:         mem.Load64(m.mem, m.base+mhFull),
		Expired:      mem.Load64(m.mem, m.base+mhExpired),
		Recoveries:   mem.Load64(m.mem, m.base+mhRecoveries),
		Evicted:      mem.Load64(m.mem, m.base+mhEvicted),
		ProbeLimited: mem.Load64(m.mem, m.base+mhProbeLimited),
		Moved:        mem.Load64(m.mem, m.base+mhMoved),
		MaxProbe:     int(min(mem.Load64(m.mem, m.base+mhMaxProbe), probeBound)),
	}
	m.valueStats(&st)
	return st
}
