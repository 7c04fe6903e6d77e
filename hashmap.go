package shmarena

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/proc"
	"github.com/shmarena/shmarena/internal/rlock"
)

// Map region layout, offsets from the region start.
//
//	0    slots          8  slot size      16 stripes      24 flags (1 = encoded)
//	32   deadlines (nonzero once any entry had one)  40 busy    48 full
//	56   expired        64 recoveries   72 longest probe distance of any insert
//	128  stripes x 64 bytes: lock word; the slot index+1 being written
//	     (0 = none), so a recoverer knows which slot a dead writer held;
//	     then this stripe's share of used and of tombstones (signed: an
//	     insert may reuse another stripe's tombstone; only the sums mean
//	     anything, and only holders of the stripe change them); at 32
//	     the lock's heir word (see internal/rlock)
//	...  one tag byte per slot, 64-aligned (see tagOf)
//	...  8 bytes of padding past a 64-byte boundary, then slots x slot size
//
// A slot:
//
//	0  deadline, Unix nanoseconds (0 = none)
//	8  meta: state | flags<<8 | key length<<16 | value length<<32
//	16 the key's 64-bit xxhash
//	24 version: seq<<21 | stripe<<1 | 1 while being written, seq<<21 at rest
//	32 data: key then value; for a counter the 8-byte value, then the key
//
// The padding puts each slot's version and first data word in one aligned
// 16-byte pair when the slot size is a multiple of 16: Add changes a
// counter with one 16-byte compare-and-swap of its version and value (see
// addInPlace).
const (
	mapHeader    = 128
	stripeStride = 64

	mhSlots      = 0
	mhSlotSize   = 8
	mhStripes    = 16
	mhFlags      = 24
	mhBusy       = 40
	mhFull       = 48
	mhExpired    = 56
	mhRecoveries = 64
	mhMaxProbe   = 72
	mhDeadlines  = 32

	slotHeader = 32
	sDeadline  = 0
	sMeta      = 8
	sHash      = 16
	sVersion   = 24
	sData      = 32
	slotsPad   = 8 // see the layout: puts sVersion on a 16-byte boundary

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

	// A reader retries a slot that changed under it this many times, and
	// waits this long for a slot being written, before it reports busy.
	readRetries = 64
	oddPatience = 5 * time.Millisecond
	// How long a reader waits on a slot being written before it asks
	// whether the writer is alive.
	oddCheckAfter = 500 * time.Microsecond
)

// A Map is a fixed-capacity hash map in an arena, shared by every process
// that opens the arena. Reads take no lock (each slot is a seqlock); writes
// take one of a stripe of robust locks chosen by the key's hash; deleted
// entries become tombstones. Keys are strings of arbitrary bytes (NUL
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
	tagBase  int // one byte per slot: 0 never claimed, 1 unknown, 2 tombstone, else tagOf(hash)
	slotBase int
	slots    uint64
	slotSize int
	stripes  uint64
	maxPair  int
	encoded  bool

	// counterHints remember, in this process only, where Add last found
	// each counter (see hintEntries); 8 KiB, nil for a typed map.
	counterHints []byte
}

// MapStats are a map's shared counters, the same in every process.
type MapStats struct {
	Used       int    // live entries, lapsed ones not yet collected included
	Capacity   int    // slots
	Tombstones int    // deleted entries keeping probe chains intact
	Busy       uint64 // lock-free reads (Add's included) that gave up on a slot that kept changing
	Full       uint64 // inserts refused with ErrFull
	Expired    uint64 // lapsed entries collected (made tombstones or replaced)
	Recoveries uint64 // locks taken over from dead processes
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
func (a *Arena) Map(name string, opts ...RegionOption) (*Map, error) {
	return a.openMap(name, false, opts)
}

// mapShape applies a map's options over the defaults and checks them.
func mapShape(encoded bool, opts []RegionOption) (regionConfig, error) {
	cfg := regionConfig{slots: defaultSlots, slotSize: defaultSlotSize, stripes: defaultStripes, encoded: encoded}
	stripesSet := false
	for _, o := range opts {
		before := cfg.stripes
		o(&cfg)
		stripesSet = stripesSet || cfg.stripes != before
	}
	cfg.slotSize = (cfg.slotSize + 7) &^ 7
	if !stripesSet && cfg.stripes > cfg.slots {
		cfg.stripes = max(cfg.slots, 1)
	}
	if err := checkMapShape(cfg.slots, cfg.slotSize, cfg.stripes); err != nil {
		return cfg, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return cfg, nil
}

// MapBytes returns how many bytes of an arena a map of the given shape
// (the options Arena.Map takes) occupies, so that WithSize can be worked
// out: an arena needs MinSize plus the sum of its regions' sizes. It
// returns ErrInvalid for a shape out of range.
func MapBytes(opts ...RegionOption) (int64, error) {
	cfg, err := mapShape(false, opts)
	if err != nil {
		return 0, fmt.Errorf("shmarena: map size: %w", err)
	}
	return layout.Align(mapLength(cfg.slots, cfg.slotSize, cfg.stripes)), nil
}

func (a *Arena) openMap(name string, encoded bool, opts []RegionOption) (*Map, error) {
	cfg, err := mapShape(encoded, opts)
	if err != nil {
		return nil, fmt.Errorf("shmarena: map %q: %w", name, err)
	}
	var flags uint64
	if cfg.encoded {
		flags = 1
	}
	spec := regionSpec{
		name:   name,
		kind:   KindMap,
		params: [layout.Params]uint64{uint64(cfg.slots), uint64(cfg.slotSize), uint64(cfg.stripes), flags},
		names:  [layout.Params]string{"slots", "slot size", "stripes", "encoded flag"},
		length: mapLength(cfg.slots, cfg.slotSize, cfg.stripes),
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
	case stripes < 1 || stripes > maxStripes || stripes > slots:
		return fmt.Errorf("stripes %d outside [1, min(%d, slots)]", stripes, maxStripes)
	}
	return nil
}

func mapLength(slots, slotSize, stripes int64) int64 {
	return tagsOffset(stripes) + layout.Align(slots) + slotsPad + slots*slotSize
}

func tagsOffset(stripes int64) int64 { return mapHeader + layout.Align(stripes*stripeStride) }

func newMap(a *Arena, e layout.Entry) *Map {
	slots, slotSize, stripes := e.Params[0], int(e.Params[1]), e.Params[2]
	m := &Map{
		a:        a,
		name:     e.Name,
		mem:      a.mem,
		base:     int(e.Offset),
		tagBase:  int(e.Offset) + int(tagsOffset(int64(stripes))),
		slotBase: int(e.Offset) + int(tagsOffset(int64(stripes))+layout.Align(int64(slots))) + slotsPad,
		slots:    slots,
		slotSize: slotSize,
		stripes:  stripes,
		maxPair:  slotSize - slotHeader,
		encoded:  e.Params[3] != 0,
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
	if p[3] > 1 {
		return fmt.Errorf("flags %#x", p[3])
	}
	if need := mapLength(int64(p[0]), int64(p[1]), int64(p[2])); e.Length < need {
		return fmt.Errorf("%d bytes, shape needs %d", e.Length, need)
	}
	o := int(e.Offset)
	for k, f := range []int{mhSlots, mhSlotSize, mhStripes, mhFlags} {
		if v := mem.Load64(b, o+f); v != p[k] {
			return fmt.Errorf("header field %d is %d, directory says %d", k, v, p[k])
		}
	}
	return nil
}

// resetMapRegion clears the locks and half-written slots that processes of
// an earlier boot left, then recounts. Nothing else runs on it meanwhile.
func resetMapRegion(b []byte, e layout.Entry) {
	m := newMap(&Arena{mem: b}, e)
	for s := uint64(0); s < m.stripes; s++ {
		rlock.Reset(b, m.lockOff(s))
		mem.Store64(b, m.lockOff(s)+8, 0)
	}
	m.count()
}

// Name returns the region name.
func (m *Map) Name() string { return m.name }

// Capacity returns the number of slots.
func (m *Map) Capacity() int { return int(m.slots) }

// MaxPair returns the largest len(key)+len(value) a slot holds, in bytes.
func (m *Map) MaxPair() int { return m.maxPair }

// Len returns the number of entries held, counting lapsed ones (TTL past,
// so Exists reports them absent) until they are collected; 0 after Close. It sums one share per stripe (see counts), so
// it costs a load per stripe and, under concurrent writes, may be off by
// the writes in flight.
func (m *Map) Len() int {
	if m.a.closed.Load() {
		return 0
	}
	used, _ := m.counts()
	return used
}

const (
	stUsed = 16 // offsets within a stripe
	stTomb = 24
)

// counts sums the stripes' shares. Under concurrent writes the sums may be
// off by the operations in flight; they are never negative.
func (m *Map) counts() (used, tomb int) {
	var u, t int64
	for s := uint64(0); s < m.stripes; s++ {
		u += int64(mem.Load64(m.mem, m.lockOff(s)+stUsed))
		t += int64(mem.Load64(m.mem, m.lockOff(s)+stTomb))
	}
	return int(max(u, 0)), int(max(t, 0))
}

// addCounts changes stripe s's shares; the caller holds s.
func (m *Map) addCounts(s uint64, used, tomb int64) {
	o := m.lockOff(s)
	mem.Put64(m.mem, o+stUsed, uint64(int64(mem.Load64(m.mem, o+stUsed))+used))
	mem.Put64(m.mem, o+stTomb, uint64(int64(mem.Load64(m.mem, o+stTomb))+tomb))
}

// Stats returns the map's shared counters; zero after Close.
func (m *Map) Stats() MapStats {
	if m.a.closed.Load() {
		return MapStats{}
	}
	used, tomb := m.counts()
	return MapStats{
		Used:       used,
		Capacity:   int(m.slots),
		Tombstones: tomb,
		Busy:       mem.Load64(m.mem, m.base+mhBusy),
		Full:       mem.Load64(m.mem, m.base+mhFull),
		Expired:    mem.Load64(m.mem, m.base+mhExpired),
		Recoveries: mem.Load64(m.mem, m.base+mhRecoveries),
	}
}

// --- addressing ---

func (m *Map) home(h uint64) uint64 {
	hi, _ := bits.Mul64(h, m.slots)
	return hi
}

func (m *Map) stripeOf(h uint64) uint64 {
	return (uint64(uint32(h)) * m.stripes) >> 32
}

func (m *Map) slotOff(i uint64) int { return m.slotBase + int(i)*m.slotSize }

func (m *Map) slotIndex(off int) uint64 { return uint64(off-m.slotBase) / uint64(m.slotSize) }

// Tags let a search skip slots without touching them: 64 slots' tags share
// a cache line. A slot's tag is 0 until someone tries to claim it (the
// claimer sets it to tagUnknown before its compare-and-swap and to the
// key's tag after winning), and never returns to 0. A delete sets it to
// tagTombstone while the slot is still being written. So a tag of 0 proves
// the slot empty and ends a search, and a tag that is neither tagUnknown
// nor the key's own proves the slot holds (or held) another key, or none.
// Any other tag sends the reader to the slot itself, whose seqlock
// decides. An insert looks for the tags a free slot can have: 0,
// tagUnknown and tagTombstone (crash recovery tags the tombstones it makes
// too, before their version is even again).
const (
	tagUnknown   = 1
	tagTombstone = 2
)

// tagOf takes bits 32-39 of the hash: the home slot comes from the top
// bits and the stripe from bits 0-31, so the tag is independent of both.
func tagOf(h uint64) byte {
	t := byte(h >> 32)
	if t <= tagTombstone {
		t += 3
	}
	return t
}

func (m *Map) tagWord(i uint64) uint64 { return mem.Load64(m.mem, m.tagBase+int(i>>3)<<3) }

const (
	lowBytes  = 0x0101010101010101
	highBytes = 0x8080808080808080
)

// bytesEqual sets the high bit of every byte of w equal to c, and possibly
// of a byte just above such a byte (a borrow): callers check the byte.
func bytesEqual(w uint64, c byte) uint64 {
	x := w ^ (lowBytes * uint64(c))
	return (x - lowBytes) &^ x & highBytes
}

// bytesBelow sets the high bit of every byte of w less than c (c <= 128),
// with the same borrows as bytesEqual.
func bytesBelow(w uint64, c byte) uint64 {
	return (w - lowBytes*uint64(c)) &^ w & highBytes
}

// scanTags looks at most left slots from slot i, wrapping at the end of
// the table, for the first whose tag is 0, want or tagUnknown: the slots a
// search for a key with tag want must look at. It returns how many slots
// it skipped before that one and its tag, or left when there is none. It
// tests eight tags at a time.
func (m *Map) scanTags(i, left uint64, want byte) (skip uint64, t byte) {
	for skip < left {
		n := min(8-i&7, m.slots-i) // tags of this word from slot i on
		w := m.tagWord(i) >> ((i & 7) * 8)
		cand := (bytesBelow(w, tagUnknown+1) | bytesEqual(w, want)) & (1<<(n*8) - 1)
		for cand != 0 {
			b := uint64(bits.TrailingZeros64(cand)) / 8
			if skip+b >= left {
				return left, 0
			}
			if t = byte(w >> (b * 8)); t == 0 || t == want || t == tagUnknown {
				return skip + b, t
			}
			cand &^= 0x80 << (b * 8)
		}
		skip += n
		if i += n; i == m.slots {
			i = 0
		}
	}
	return left, 0
}

// nextCandidate is scanTags for the common case: it tests the eight tags
// from slot i on with one unaligned load, and the slot to read comes from
// arithmetic on that word rather than from a branch per tag. A key sits at
// its home slot or a few past it unpredictably often (at 75% load about
// 60% at home), so a branch on the home tag alone is mispredicted often.
// The lowest flagged byte is never a borrow, so it needs no check.
func (m *Map) nextCandidate(i, left uint64, want byte) (skip uint64, t byte) {
	w := mem.Load8(m.mem, m.tagBase+int(i))
	n := min(8, m.slots-i, left) // the window's tags that are slots to look at
	cand := (bytesBelow(w, tagUnknown+1) | bytesEqual(w, want)) & (1<<(n*8) - 1)
	if cand == 0 {
		return m.scanTags(i, left, want)
	}
	skip = uint64(bits.TrailingZeros64(cand)) / 8
	return skip, byte(w >> (skip * 8))
}

// wrapAdd returns slot i+d, wrapping at the end of the table (d < slots).
func (m *Map) wrapAdd(i, d uint64) uint64 {
	if i += d; i >= m.slots {
		i -= m.slots
	}
	return i
}

func (m *Map) setTag(i uint64, t byte) {
	off := m.tagBase + int(i>>3)<<3
	shift := (i & 7) * 8
	for {
		w := mem.Load64(m.mem, off)
		nw := w&^(0xff<<shift) | uint64(t)<<shift
		if w == nw || mem.CAS64(m.mem, off, w, nw) {
			return
		}
	}
}

func (m *Map) lockOff(s uint64) int { return m.base + mapHeader + int(s)*stripeStride }

func (m *Map) stat(field int) { mem.Add64(m.mem, m.base+field, 1) }

func metaOf(state, flags uint64, klen, vlen int) uint64 {
	return state | flags<<8 | uint64(klen)<<16 | uint64(vlen)<<32
}

func metaState(meta uint64) uint64 { return meta & 0xff }
func metaFlags(meta uint64) uint64 { return meta >> 8 & 0xff }
func metaKeyLen(meta uint64) int   { return int(meta >> 16 & 0xffff) }
func metaValLen(meta uint64) int   { return int(meta >> 32) }

// keyOff returns where a slot's key starts.
func keyOff(off int, meta uint64) int {
	if metaFlags(meta)&flagCounter != 0 {
		return off + sData + 8
	}
	return off + sData
}

// holds reports whether the slot at off, whose meta word is meta, holds key
// (hash h) live: part of a read that its caller validates by the version.
func (m *Map) holds(off int, meta uint64, key string, h uint64) bool {
	return metaState(meta) == stateLive && mem.Load64(m.mem, off+sHash) == h &&
		metaKeyLen(meta) == len(key) && m.valid(meta) &&
		mem.EqualString(m.mem, keyOff(off, meta), key)
}

// valid reports whether a live slot's lengths fit the slot. The value
// length is checked as the 32-bit field it is before it becomes an int,
// which on 386 would make a length of 2^31 or more negative.
func (m *Map) valid(meta uint64) bool {
	if meta>>32 > uint64(m.maxPair) {
		return false
	}
	kl, vl := metaKeyLen(meta), metaValLen(meta)
	if kl == 0 || kl+vl > m.maxPair {
		return false
	}
	return metaFlags(meta)&flagCounter == 0 || vl == 8
}

func now() int64 { return time.Now().UnixNano() }

// deadlineAfter returns the deadline ttl (> 0) from now, saturating at the
// largest time rather than wrapping into the past: a "forever" TTL such as
// math.MaxInt64 must not expire the entry at once.
func deadlineAfter(ttl time.Duration) int64 {
	n := now()
	if int64(ttl) > math.MaxInt64-n {
		return math.MaxInt64
	}
	return n + int64(ttl)
}

func lapsed(deadline int64) bool { return deadline != 0 && deadline <= now() }

// --- the lock-free read ---

// A view is what one consistent read of a slot saw.
type view struct {
	off      int
	ver      uint64
	meta     uint64
	deadline int64
}

// readKey finds key and, when dst is not nil, appends its value. It takes
// no lock. found is false for an absent or lapsed key, and also for a busy
// one (counted in Busy) or a slot whose writer died (repair is started).
func (m *Map) readKey(key string, h uint64, dst []byte, want bool) (v view, out []byte, found bool) {
	switch v, out, r := m.readNear(key, h, dst, want); r {
	case nearHit:
		return v, out, true
	case nearMiss:
		return v, dst, false
	}
	return m.searchKey(key, h, dst, want)
}

// What readNear found.
const (
	nearUnsure = iota // searchKey must decide
	nearHit
	nearMiss
)

// readNear is readKey's common case in few instructions: a lookup costs
// about as much as the instructions it runs, and the general search's
// bounds checks and calls had doubled them. It decides only when the first
// candidate among the eight tags from key's home is empty (a miss), or is
// key's slot, at rest, without a lapsed deadline (a hit).
// Anything else is nearUnsure, and searchKey starts over.
func (m *Map) readNear(key string, h uint64, dst []byte, want bool) (v view, out []byte, r int) {
	i := m.home(h)
	if i+8 > m.slots { // the window would pass the last tag (or a table of under 8 slots)
		return v, dst, nearUnsure
	}
	w := mem.Load8(m.mem, m.tagBase+int(i))
	t := tagOf(h)
	d := uint64(bits.TrailingZeros64(bytesBelow(w, tagUnknown+1)|bytesEqual(w, t))) / 8
	if d == 8 {
		return v, dst, nearUnsure
	}
	if first := byte(w >> (d * 8)); first != t {
		if first == 0 {
			return v, dst, nearMiss
		}
		return v, dst, nearUnsure
	}
	off := m.slotOff(i + d)
	hdr := mem.Words4(m.mem, off)
	ver := atomic.LoadUint64(&hdr[sVersion/8])
	meta := atomic.LoadUint64(&hdr[sMeta/8])
	kl := len(key)
	keyAt := off + sData
	switch meta & 0xffffffff {
	case metaOf(stateLive, 0, kl, 0):
	case metaOf(stateLive, flagCounter, kl, 0): // the 8-byte value, then the key
		if meta>>32 != 8 {
			return v, dst, nearUnsure
		}
		keyAt += 8
	default:
		return v, dst, nearUnsure
	}
	if ver&1 != 0 || atomic.LoadUint64(&hdr[sHash/8]) != h ||
		uint64(kl)+meta>>32 > uint64(m.maxPair) || !mem.EqualString(m.mem, keyAt, key) {
		return v, dst, nearUnsure
	}
	deadline := int64(atomic.LoadUint64(&hdr[sDeadline/8]))
	out = dst
	if want {
		if keyAt == off+sData {
			out = mem.AppendBytes(dst, m.mem, keyAt+kl, int(meta>>32))
		} else {
			out = m.appendValue(dst, off, meta)
		}
	}
	if atomic.LoadUint64(&hdr[sVersion/8]) != ver || lapsed(deadline) {
		return v, dst, nearUnsure
	}
	return view{off: off, ver: ver, meta: meta, deadline: deadline}, out, nearHit
}

// searchKey is readKey's general search: it probes up to the probe limit,
// waits out writers, and collects a lapsed entry.
func (m *Map) searchKey(key string, h uint64, dst []byte, want bool) (v view, out []byte, found bool) {
	n0 := len(dst)
	i := m.home(h)
	wantTag := tagOf(h)
	for left := m.probeLimit(); left > 0; left-- {
		skip, t := m.nextCandidate(i, left, wantTag)
		if skip == left || t == 0 {
			return v, dst, false
		}
		i, left = m.wrapAdd(i, skip), left-skip
		off := m.slotOff(i)
		for tries := 0; ; tries++ {
			if tries == readRetries {
				m.stat(mhBusy)
				return v, dst, false
			}
			ver := mem.Load64(m.mem, off+sVersion)
			if ver&1 != 0 {
				if !m.awaitWriter(off, ver) {
					return v, dst, false
				}
				continue
			}
			meta := mem.Load64(m.mem, off+sMeta)
			st := metaState(meta)
			isKey := m.holds(off, meta, key, h)
			if !isKey {
				if mem.Load64(m.mem, off+sVersion) != ver {
					continue
				}
				if st == stateEmpty {
					return v, dst, false
				}
				break
			}
			deadline := int64(mem.Load64(m.mem, off+sDeadline))
			if want {
				dst = m.appendValue(dst[:n0], off, meta)
			}
			if mem.Load64(m.mem, off+sVersion) != ver {
				continue
			}
			v = view{off: off, ver: ver, meta: meta, deadline: deadline}
			if lapsed(deadline) {
				m.collect(key, h)
				return v, dst[:n0], false
			}
			return v, dst, true
		}
		i = m.wrapAdd(i, 1)
	}
	return v, dst, false
}

// probeLimit bounds a search for a key: no key sits further than the
// longest distance any insert went from its home slot. It keeps a miss
// short in a table whose empty slots have all become tombstones.
func (m *Map) probeLimit() uint64 {
	return min(mem.Load64(m.mem, m.base+mhMaxProbe), m.slots-1) + 1
}

// noteDistance raises the longest probe distance to cover slot i of a key
// whose home is home, before the key is published.
func (m *Map) noteDistance(home, i uint64) {
	d := (i + m.slots - home) % m.slots
	for {
		cur := mem.Load64(m.mem, m.base+mhMaxProbe)
		if cur >= d || mem.CAS64(m.mem, m.base+mhMaxProbe, cur, d) {
			return
		}
	}
}

func (m *Map) appendValue(dst []byte, off int, meta uint64) []byte {
	if metaFlags(meta)&flagCounter != 0 {
		c := mem.Load64(m.mem, off+sData)
		return append(dst, byte(c), byte(c>>8), byte(c>>16), byte(c>>24),
			byte(c>>32), byte(c>>40), byte(c>>48), byte(c>>56))
	}
	return mem.AppendBytes(dst, m.mem, off+sData+metaKeyLen(meta), metaValLen(meta))
}

// awaitWriter waits for a slot being written to settle. It returns false
// when the reader should give up: the writer died (the key reads as absent
// and repair is started), or it kept writing past oddPatience (busy).
func (m *Map) awaitWriter(off int, ver uint64) bool {
	var start time.Time
	checked := false
	for spin := 0; ; spin++ {
		if mem.Load64(m.mem, off+sVersion) != ver {
			return true
		}
		if spin < 64 {
			continue
		}
		runtime.Gosched()
		if spin%64 != 0 {
			continue
		}
		if start.IsZero() {
			start = time.Now()
			continue
		}
		waited := time.Since(start)
		if waited > oddCheckAfter && !checked {
			checked = true
			s := ver >> 1 & (1<<(seqShift-1) - 1)
			if s >= m.stripes {
				return false // not a version this map writes: corrupt
			}
			if !rlockOwnerAlive(m.mem, m.lockOff(s)) {
				m.repairDead(s)
				return mem.Load64(m.mem, off+sVersion) != ver
			}
		}
		if waited > oddPatience {
			m.stat(mhBusy)
			return false
		}
	}
}

// aliveFn is proc.Alive; a variable so tests can fake a dead owner.
var aliveFn = proc.Alive

func rlockOwnerAlive(b []byte, off int) bool {
	o := rlock.Owner(b, off)
	return o != 0 && aliveFn(o)
}

// collect turns key's lapsed entry into a tombstone if its stripe is free
// right now; a busy stripe means a writer is there and will see it.
func (m *Map) collect(key string, h uint64) {
	s := m.stripeOf(h)
	if !m.a.enter(s) {
		return
	}
	defer m.a.exit(s)
	ok, recovered := rlock.TryAcquire(m.mem, m.lockOff(s), m.a.self)
	if !ok {
		return
	}
	if recovered {
		m.afterTakeover(s)
		return
	}
	if v, found := m.find(key, h); found && lapsed(v.deadline) {
		m.remove(s, v)
		m.stat(mhExpired)
	}
	m.release(s)
}

// --- locking and recovery ---

// lock takes stripe s for a write, or returns false after Close. It
// counts the write in flight first (see Arena.enter), so Close never
// retires the mapping under a lock held in the file.
func (m *Map) lock(s uint64) bool {
	if !m.a.enter(s) {
		return false
	}
	for rlock.Acquire(m.mem, m.lockOff(s), m.a.self) {
		m.afterTakeover(s)
	}
	return true
}

// unlock releases a stripe taken by lock.
func (m *Map) unlock(s uint64) {
	m.release(s)
	m.a.exit(s)
}

// release frees stripe s without ending an operation.
func (m *Map) release(s uint64) { rlock.Release(m.mem, m.lockOff(s)) }

// repairDead takes over stripe s from a dead owner if it can, repairs it
// and releases it.
func (m *Map) repairDead(s uint64) {
	if !m.a.enter(s) {
		return
	}
	defer m.a.exit(s)
	if ok, recovered := rlock.TryAcquire(m.mem, m.lockOff(s), m.a.self); ok {
		if recovered {
			m.afterTakeover(s)
			return
		}
		m.release(s)
	}
}

// afterTakeover runs holding stripe s just taken from a dead owner: it
// repairs the slot the owner was writing, releases s, and recounts.
func (m *Map) afterTakeover(s uint64) {
	m.repairStripe(s)
	mem.Add64(m.mem, m.base+mhRecoveries, 1)
	m.release(s)
	m.recount()
}

// repairStripe makes the slot a dead holder of s was writing a tombstone.
func (m *Map) repairStripe(s uint64) {
	intent := m.lockOff(s) + 8
	idx := mem.Load64(m.mem, intent)
	crashPoint("recover")
	if idx != 0 && idx <= m.slots {
		off := m.slotOff(idx - 1)
		ver := mem.Load64(m.mem, off+sVersion)
		if ver&1 != 0 && ver>>1&(1<<(seqShift-1)-1) == s {
			mem.Store64(m.mem, off+sMeta, metaOf(stateTombstone, 0, 0, 0))
			mem.Store64(m.mem, off+sDeadline, 0)
			m.setTag(idx-1, tagTombstone) // while odd, as remove does
			mem.Store64(m.mem, off+sVersion, ver>>seqShift<<seqShift)
		}
	}
	mem.Store64(m.mem, intent, 0)
}

// recount takes every stripe in order (so two recounters cannot deadlock),
// recomputes used and tombstones from the slots, and releases them.
func (m *Map) recount() {
	for s := uint64(0); s < m.stripes; s++ {
		// Try first: a stripe a dead process holds is taken over at once,
		// not after Acquire's patience, so a recount over many stripes
		// left held by a dying recoverer stays well inside a second.
		ok, recovered := rlock.TryAcquire(m.mem, m.lockOff(s), m.a.self)
		if !ok {
			recovered = rlock.Acquire(m.mem, m.lockOff(s), m.a.self)
		}
		if recovered {
			m.repairStripe(s)
			mem.Add64(m.mem, m.base+mhRecoveries, 1)
		}
	}
	crashPoint("recount")
	m.count()
	for s := uint64(0); s < m.stripes; s++ {
		m.release(s)
	}
}

// count recomputes the used and tombstone counts; with every stripe held
// no slot may be mid-write, so an odd slot is a leftover and is repaired.
func (m *Map) count() {
	var used, tomb uint64
	for i := uint64(0); i < m.slots; i++ {
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		if ver&1 != 0 {
			mem.Store64(m.mem, off+sMeta, metaOf(stateTombstone, 0, 0, 0))
			m.setTag(i, tagTombstone)
			mem.Store64(m.mem, off+sVersion, ver>>seqShift<<seqShift)
		}
		switch metaState(mem.Load64(m.mem, off+sMeta)) {
		case stateLive:
			used++
		case stateTombstone:
			tomb++
		}
	}
	for s := uint64(0); s < m.stripes; s++ {
		mem.Store64(m.mem, m.lockOff(s)+stUsed, 0)
		mem.Store64(m.mem, m.lockOff(s)+stTomb, 0)
	}
	mem.Store64(m.mem, m.lockOff(0)+stUsed, used)
	mem.Store64(m.mem, m.lockOff(0)+stTomb, tomb)
}

// --- the locked write path ---

// find looks key up holding its stripe. Only holders of the stripe change
// a slot holding the key, so the view stays valid until unlock.
func (m *Map) find(key string, h uint64) (view, bool) {
	v, _, found := m.locate(key, h, m.stripeOf(h))
	return v, found
}

// locate finds key's slot, lapsed or not, or else the first slot an insert
// may claim (free.off < 0 when the probe met no free slot).
//
// In a map that has ever held a deadline, a lapsed entry of another key met
// before any free slot is collected on the way (if its stripe can be had
// without waiting) and offered as the free slot, so keys with deadlines do
// not fill the table for good. In one that never has, the free slot is
// found by the tags, without reading the slots passed.
func (m *Map) locate(key string, h uint64, s uint64) (v view, free view, found bool) {
	free.off = -1
	if v, ok := m.seek(key, h); ok {
		return v, free, true
	}
	// The key is absent (its stripe is ours, so it stays so): the first
	// free slot from its home is where it goes.
	if mem.Load64(m.mem, m.base+mhDeadlines) == 0 {
		if free, ok := m.firstFree(h); ok {
			return v, free, false
		}
	}
	i := m.home(h)
	for probes := uint64(0); probes < m.slots; probes++ {
		off := m.slotOff(i)
		for {
			ver := mem.Load64(m.mem, off+sVersion)
			if ver&1 != 0 {
				break // another stripe's writer: not free
			}
			meta := mem.Load64(m.mem, off+sMeta)
			deadline := int64(mem.Load64(m.mem, off+sDeadline))
			if mem.Load64(m.mem, off+sVersion) != ver {
				continue
			}
			sv := view{off: off, ver: ver, meta: meta, deadline: deadline}
			switch st := metaState(meta); {
			case st == stateEmpty || st == stateTombstone:
				return v, sv, false
			case st == stateLive && deadline != 0 && lapsed(deadline):
				if r, ok := m.reclaim(s, sv); ok {
					return v, r, false
				}
			}
			break
		}
		if i++; i == m.slots {
			i = 0
		}
	}
	return v, free, false
}

// firstFree finds, by the tags, the first slot from h's home that is empty
// or a tombstone, within the probe limit.
func (m *Map) firstFree(h uint64) (view, bool) {
	i := m.home(h)
	for left := m.probeLimit(); left > 0; left-- {
		skip, t := m.nextFree(i, left)
		if skip == left {
			return view{}, false
		}
		i, left = m.wrapAdd(i, skip), left-skip
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		meta := mem.Load64(m.mem, off+sMeta)
		if st := metaState(meta); ver&1 == 0 && (st == stateEmpty || st == stateTombstone) &&
			mem.Load64(m.mem, off+sVersion) == ver {
			return view{off: off, ver: ver, meta: meta}, true
		}
		if t == 0 {
			return view{}, false // claimed since: let the slot-by-slot search decide
		}
		i = m.wrapAdd(i, 1)
	}
	return view{}, false
}

// nextFree is scanTags for the tags of free slots: 0, tagUnknown and
// tagTombstone.
func (m *Map) nextFree(i, left uint64) (skip uint64, t byte) {
	for skip < left {
		n := min(8, m.slots-i, left-skip)
		w := mem.Load8(m.mem, m.tagBase+int(i))
		if cand := bytesBelow(w, tagTombstone+1) & (1<<(n*8) - 1); cand != 0 {
			b := uint64(bits.TrailingZeros64(cand)) / 8
			return skip + b, byte(w >> (b * 8))
		}
		skip += n
		if i += n; i == m.slots {
			i = 0
		}
	}
	return left, 0
}

// seek finds key's slot holding its stripe, skipping foreign slots by
// their tags as readKey does. A slot being written belongs to another
// stripe's writer, so it is not the key's.
func (m *Map) seek(key string, h uint64) (view, bool) {
	i := m.home(h)
	wantTag := tagOf(h)
	for left := m.probeLimit(); left > 0; left-- {
		skip, t := m.nextCandidate(i, left, wantTag)
		if skip == left || t == 0 {
			return view{}, false
		}
		i, left = m.wrapAdd(i, skip), left-skip
		off := m.slotOff(i)
		for {
			ver := mem.Load64(m.mem, off+sVersion)
			if ver&1 != 0 {
				break
			}
			meta := mem.Load64(m.mem, off+sMeta)
			isKey := m.holds(off, meta, key, h)
			deadline := int64(mem.Load64(m.mem, off+sDeadline))
			if mem.Load64(m.mem, off+sVersion) != ver {
				continue
			}
			if isKey {
				return view{off: off, ver: ver, meta: meta, deadline: deadline}, true
			}
			if metaState(meta) == stateEmpty {
				return view{}, false
			}
			break
		}
		i = m.wrapAdd(i, 1)
	}
	return view{}, false
}

// reclaim turns another key's lapsed entry into a tombstone and returns
// its new view. The caller holds stripe s; the entry's stripe, if another,
// is taken only if free now, so two writers never wait on each other.
func (m *Map) reclaim(s uint64, v view) (view, bool) {
	other := m.stripeOf(mem.Load64(m.mem, v.off+sHash))
	if other != s {
		// Only a free lock: taking over a dead owner's means a recount,
		// which needs every stripe, and we hold one.
		if !mem.CAS64(m.mem, m.lockOff(other), 0, uint64(m.a.self)) {
			return v, false
		}
		defer m.release(other)
	}
	if mem.Load64(m.mem, v.off+sVersion) != v.ver {
		return v, false
	}
	m.remove(other, v)
	m.stat(mhExpired)
	v.ver = mem.Load64(m.mem, v.off+sVersion)
	v.meta = mem.Load64(m.mem, v.off+sMeta)
	v.deadline = 0
	return v, true
}

// claim takes a free slot for a new key, starting at free and moving on
// when another stripe's writer takes it first. It returns the slot, begun
// for writing by stripe s, and whether it was a tombstone.
func (m *Map) claim(s, h uint64, free view) (off int, wasTomb bool, ok bool) {
	if free.off < 0 {
		return 0, false, false
	}
	i := m.slotIndex(free.off)
	intent := m.lockOff(s) + 8
	for probes := uint64(0); probes < m.slots; probes++ {
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		st := metaState(mem.Load64(m.mem, off+sMeta))
		if ver&1 == 0 && (st == stateEmpty || st == stateTombstone) {
			mem.Put64(m.mem, intent, i+1) // ordered before the CAS by it
			m.setTag(i, tagUnknown)
			if mem.CAS64(m.mem, off+sVersion, ver, m.begun(ver, s)) {
				m.setTag(i, tagOf(h))
				m.noteDistance(m.home(h), i)
				return off, st == stateTombstone, true
			}
		}
		if i++; i == m.slots {
			i = 0
		}
	}
	mem.Put64(m.mem, intent, 0)
	return 0, false, false
}

func (m *Map) begun(ver, s uint64) uint64 { return (ver>>seqShift+1)<<seqShift | s<<1 | 1 }

// begin marks a slot the stripe holder owns as being written. The version
// is exchanged, a full barrier in every build: it orders the intent before
// it, and a pin's read of the counter after it (see pin).
func (m *Map) begin(s uint64, v view) {
	m.setIntent(s, v.off)
	mem.Swap64(m.mem, v.off+sVersion, m.begun(v.ver, s))
}

// setIntent names the slot at off in stripe s's intent word, for a
// recoverer should the holder die; the version change that follows orders
// it.
func (m *Map) setIntent(s uint64, off int) {
	i := m.slotIndex(off)
	mem.Put64(m.mem, m.lockOff(s)+8, i+1)
}

// end publishes a slot and clears the stripe's intent.
func (m *Map) end(off int) {
	ver := mem.Load64(m.mem, off+sVersion)
	mem.Store64(m.mem, off+sVersion, ver>>seqShift<<seqShift)
}

// clearIntent needs no fence: a recoverer reads the intent only after the
// holder died, and checks the slot's version names this stripe.
func (m *Map) clearIntent(s uint64) { mem.Put64(m.mem, m.lockOff(s)+8, 0) }

// An entry is what a write puts in a slot.
type entry struct {
	key      string
	h        uint64
	val      []byte
	counter  bool
	n        int64 // a counter's value
	deadline int64
}

// fill writes e's fields into a slot being written.
func (m *Map) fill(off int, e *entry) {
	if e.counter {
		mem.Put64(m.mem, off+sMeta, metaOf(stateLive, flagCounter, len(e.key), 8))
		mem.Put64(m.mem, off+sData, uint64(e.n))
		mem.Write(m.mem, off+sData+8, e.key)
	} else {
		mem.Put64(m.mem, off+sMeta, metaOf(stateLive, 0, len(e.key), len(e.val)))
		mem.Write(m.mem, off+sData, e.key)
		mem.Write(m.mem, off+sData+len(e.key), e.val)
	}
	mem.Put64(m.mem, off+sHash, e.h)
	mem.Put64(m.mem, off+sDeadline, uint64(e.deadline))
	if e.deadline != 0 {
		m.noteDeadlines()
	}
}

// noteDeadlines records, for good, that the map has held a deadline: from
// then on an insert reads the slots it passes, to reclaim lapsed entries,
// rather than finding a free slot by the tags alone (see locate).
func (m *Map) noteDeadlines() {
	if mem.Load64(m.mem, m.base+mhDeadlines) == 0 {
		mem.Store64(m.mem, m.base+mhDeadlines, 1)
	}
}

// remove makes the live slot v a tombstone. Caller holds stripe s.
func (m *Map) remove(s uint64, v view) {
	m.begin(s, v)
	crashPoint("delete")
	mem.Store64(m.mem, v.off+sMeta, metaOf(stateTombstone, 0, 0, 0))
	mem.Store64(m.mem, v.off+sDeadline, 0)
	// Before end: once the slot is at rest another stripe's insert may
	// claim it and tag it, and a late tombstone tag would hide that key.
	m.setTag(m.slotIndex(v.off), tagTombstone)
	m.end(v.off)
	m.addCounts(s, -1, 1)
	m.clearIntent(s)
}

// put writes e holding stripe s: over the key's slot v if found, else
// into a free slot claimed from free on.
func (m *Map) put(s uint64, e *entry, v view, free view, found bool) error {
	if found {
		m.begin(s, v)
		crashPoint("overwrite")
		m.fill(v.off, e)
		m.end(v.off)
		m.clearIntent(s)
		return nil
	}
	off, wasTomb, ok := m.claim(s, e.h, free)
	if !ok {
		m.stat(mhFull)
		return fmt.Errorf("shmarena: map %q: %w (%d slots)", m.name, ErrFull, m.slots)
	}
	crashPoint("claimed")
	m.fill(off, e)
	crashPoint("insert")
	m.end(off)
	if wasTomb {
		m.addCounts(s, 1, -1)
	} else {
		m.addCounts(s, 1, 0)
	}
	m.clearIntent(s)
	return nil
}

// crashHook, when set by a test, is called inside the critical sections
// named by point, so a test can kill the process there.
var crashHook func(point string)

// lockedAddsForTest, set by a test, sends every Add through the stripe
// lock, so a test can kill an adder holding it.
var lockedAddsForTest bool

func crashPoint(point string) {
	if crashHook != nil {
		crashHook(point)
	}
}

func (m *Map) check(key string, vlen int) error {
	if m.a.closed.Load() {
		return ErrClosed
	}
	if key == "" {
		return fmt.Errorf("shmarena: map %q: %w", m.name, ErrEmptyKey)
	}
	if len(key) > maxKeyLen || len(key)+vlen > m.maxPair {
		return fmt.Errorf("shmarena: map %q: %w: key %d + value %d bytes, slot holds %d", m.name, ErrTooLarge, len(key), vlen, m.maxPair)
	}
	return nil
}

// deadlineFor returns the deadline a write sets: from WithTTL, kept from
// the live entry with WithKeepTTL, else none.
func deadlineFor(c writeConfig, v view, live bool) int64 {
	switch {
	case c.ttl > 0:
		return deadlineAfter(c.ttl)
	case c.keepTTL && live:
		return v.deadline
	}
	return 0
}

// --- public operations ---

// Store sets key to value, replacing any entry and its deadline (with
// WithTTL a new one, else none; WithKeepTTL keeps the current one), as
// Redis SET does. Errors: ErrEmptyKey, ErrTooLarge (len(key)+len(value) >
// MaxPair), ErrFull (new key, no free slot; counted in Stats.Full),
// ErrClosed. A refused write changes nothing. The value is copied.
func (m *Map) Store(key string, value []byte, opts ...WriteOption) error {
	if err := m.check(key, len(value)); err != nil {
		return err
	}
	c := writeOpts(opts)
	h := hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return ErrClosed
	}
	defer m.unlock(s)
	return m.storeLocked(s, key, h, value, c, nil)
}

// storeLocked stores value for key holding stripe s. With previous not
// nil, it sets *previous to a copy of the live value it replaces (non-nil,
// if empty), read after pinning a counter (see pin).
func (m *Map) storeLocked(s uint64, key string, h uint64, value []byte, c writeConfig, previous *[]byte) error {
	v, free, found := m.locate(key, h, s)
	live := found && !lapsed(v.deadline)
	if found && !live {
		m.stat(mhExpired)
	}
	if live && previous != nil {
		m.pin(s, v) // put begins the same slot again: a no-op
		*previous = m.appendValue([]byte{}, v.off, v.meta)
	}
	e := entry{key: key, h: h, val: value, deadline: deadlineFor(c, v, live)}
	return m.put(s, &e, v, free, found)
}

// Load returns a copy of key's value and true, or nil and false when the
// key is absent, lapsed, busy (see Stats.Busy) or the arena is closed. A
// counter reads as its 8-byte little-endian value. Lock-free.
func (m *Map) Load(key string) ([]byte, bool) {
	v, ok := m.AppendLoad(nil, key)
	if ok && v == nil {
		v = []byte{}
	}
	return v, ok
}

// AppendLoad appends key's value to dst and returns the extended slice and
// true; on a miss it returns dst unchanged and false. It allocates only if
// dst lacks capacity. Lock-free; the same misses as Load.
func (m *Map) AppendLoad(dst []byte, key string) ([]byte, bool) {
	if key == "" || m.a.closed.Load() {
		return dst, false
	}
	_, out, ok := m.readKey(key, hashKey(key), dst, true)
	return out, ok
}

// Exists reports whether key is present and not lapsed. Lock-free.
func (m *Map) Exists(key string) bool {
	if key == "" || m.a.closed.Load() {
		return false
	}
	_, _, ok := m.readKey(key, hashKey(key), nil, false)
	return ok
}

// Delete removes key and reports whether it was present (a lapsed entry is
// collected but reports false). False after Close.
func (m *Map) Delete(key string) bool {
	_, ok := m.loadAndDelete(key, false)
	return ok
}

// LoadAndDelete removes key and returns the value it had, as sync.Map's
// LoadAndDelete does.
func (m *Map) LoadAndDelete(key string) (value []byte, loaded bool) {
	return m.loadAndDelete(key, true)
}

func (m *Map) loadAndDelete(key string, load bool) (value []byte, loaded bool) {
	if key == "" || m.a.closed.Load() {
		return nil, false
	}
	h := hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return nil, false
	}
	defer m.unlock(s)
	v, found := m.find(key, h)
	if !found {
		return nil, false
	}
	if lapsed(v.deadline) {
		m.remove(s, v)
		m.stat(mhExpired)
		return nil, false
	}
	if load {
		m.pin(s, v)
		value = m.appendValue([]byte{}, v.off, v.meta)
	}
	m.remove(s, v)
	return value, true
}

// LoadOrStore returns the existing value for key (loaded true) if present,
// else stores value with opts and returns it (loaded false), as sync.Map's
// LoadOrStore does. Errors as for Store; on error nothing changes.
func (m *Map) LoadOrStore(key string, value []byte, opts ...WriteOption) (actual []byte, loaded bool, err error) {
	if err := m.check(key, len(value)); err != nil {
		return nil, false, err
	}
	h := hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return nil, false, ErrClosed
	}
	defer m.unlock(s)
	v, found := m.find(key, h)
	if found && !lapsed(v.deadline) {
		return m.appendValue([]byte{}, v.off, v.meta), true, nil
	}
	if err := m.storeLocked(s, key, h, value, writeOpts(opts), nil); err != nil {
		return nil, false, err
	}
	return value, false, nil
}

// Swap stores value for key and returns the previous value, if any, as
// sync.Map's Swap does. Options and errors as for Store.
func (m *Map) Swap(key string, value []byte, opts ...WriteOption) (previous []byte, loaded bool, err error) {
	if err := m.check(key, len(value)); err != nil {
		return nil, false, err
	}
	h := hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return nil, false, ErrClosed
	}
	defer m.unlock(s)
	if err := m.storeLocked(s, key, h, value, writeOpts(opts), &previous); err != nil {
		return nil, false, err
	}
	return previous, previous != nil, nil
}

// CompareAndSwap stores new for key if its value equals old byte for byte,
// keeping the entry's deadline, and reports whether it swapped. An absent
// key never matches. A counter compares as its 8-byte little-endian value
// and stops being a counter when swapped. Errors: ErrTooLarge for new,
// ErrEmptyKey, ErrClosed.
func (m *Map) CompareAndSwap(key string, old, new []byte) (swapped bool, err error) {
	if err := m.check(key, len(new)); err != nil {
		return false, err
	}
	h := hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return false, ErrClosed
	}
	defer m.unlock(s)
	v, found := m.find(key, h)
	if !found || lapsed(v.deadline) || !m.valueEqual(v, old) || !m.pinEqual(s, v, old) {
		return false, nil
	}
	m.begin(s, v)
	m.fill(v.off, &entry{key: key, h: h, val: new, deadline: v.deadline})
	m.end(v.off)
	m.clearIntent(s)
	return true, nil
}

// CompareAndDelete deletes key if its value equals old and reports
// whether it did. False after Close.
func (m *Map) CompareAndDelete(key string, old []byte) (deleted bool) {
	if key == "" || m.a.closed.Load() {
		return false
	}
	h := hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return false
	}
	defer m.unlock(s)
	v, found := m.find(key, h)
	if !found || lapsed(v.deadline) || !m.valueEqual(v, old) || !m.pinEqual(s, v, old) {
		return false
	}
	m.remove(s, v)
	return true
}

// pin begins the slot of v, found holding stripe s, when it is a counter,
// which lock-free adders may change (see addInPlace): a write decided by a
// counter's value must read the value after shutting them out, and only an
// odd version does. It pins whether or not this process can add lock-free:
// the adders may be other processes (another build, or one run with
// GODEBUG=cpu.cx16=off). begin's exchange is a full barrier, so a value
// read after it holds every add that landed and no add lands later. The
// write that follows begins the slot again, which stores the same version
// and intent, and ends it.
func (m *Map) pin(s uint64, v view) {
	if metaFlags(v.meta)&flagCounter != 0 {
		m.begin(s, v)
	}
}

// pinEqual pins v, for a write to follow, if its value still equals b, and
// reports whether it did. A value that is no counter cannot change under
// the stripe lock, so it is not read again. A counter is pinned and
// compared in one CAS128 of its version and value where it can be, so a
// compare that fails writes nothing; elsewhere the slot is begun, compared
// and, on a difference, ended unchanged (a process killed in that window
// leaves the counter absent, as one killed mid-write does).
func (m *Map) pinEqual(s uint64, v view, b []byte) bool {
	if metaFlags(v.meta)&flagCounter == 0 {
		return true
	}
	if mem.HasCAS128 && (v.off+sVersion)&15 == 0 && len(b) == 8 {
		m.setIntent(s, v.off)
		n := binary.LittleEndian.Uint64(b)
		if mem.CAS128(m.mem, v.off+sVersion, v.ver, n, m.begun(v.ver, s), n) {
			return true
		}
		m.clearIntent(s)
		return false
	}
	m.begin(s, v)
	if !m.valueEqual(v, b) {
		m.end(v.off)
		m.clearIntent(s)
		return false
	}
	return true
}

func (m *Map) valueEqual(v view, b []byte) bool {
	if metaValLen(v.meta) != len(b) {
		return false
	}
	if metaFlags(v.meta)&flagCounter != 0 {
		var w [8]byte
		return string(m.appendValue(w[:0], v.off, v.meta)) == string(b)
	}
	return mem.Equal(m.mem, v.off+sData+metaKeyLen(v.meta), b)
}

// Add adds delta (which may be negative) to the counter at key and returns
// the new value. It wraps on overflow, where Redis INCRBY returns an error.
// An absent or lapsed key becomes a counter holding delta with opts applied
// (WithTTL sets its deadline). opts are ignored for a live counter, which
// keeps its deadline, so a fixed-window rate limit needs no reset. Errors: ErrNotCounter (the key
// holds another value, left as it was), ErrEncoded (typed map), ErrFull,
// ErrEmptyKey, ErrTooLarge, ErrClosed.
//
// Counters are Redis INCRBY's counterpart. On amd64 with slot sizes a
// multiple of 16 bytes, an Add to a live counter takes no lock: it swaps
// the slot's version and value together in one 16-byte compare-and-swap,
// so it never lands on a slot that was deleted and reused meanwhile (the
// reuse changed the version). Elsewhere, and to create a counter, Add
// takes the key's stripe lock. An Add racing with Close either takes
// effect in the file or returns ErrClosed.
func (m *Map) Add(key string, delta int64, opts ...WriteOption) (int64, error) {
	if err := m.check(key, 8); err != nil {
		return 0, err
	}
	if m.encoded {
		return 0, fmt.Errorf("shmarena: map %q: %w", m.name, ErrEncoded)
	}
	h := hashKey(key)
	if !lockedAddsForTest {
		if n, err, done := m.addInPlace(key, h, delta); done {
			return n, err
		}
	}
	s := m.stripeOf(h)
	if !m.lock(s) {
		return 0, ErrClosed
	}
	defer m.unlock(s)
	v, free, found := m.locate(key, h, s)
	if found && !lapsed(v.deadline) {
		if metaFlags(v.meta)&flagCounter == 0 {
			return 0, fmt.Errorf("shmarena: map %q: key %q: %w", m.name, key, ErrNotCounter)
		}
		crashPoint("add")
		// An atomic add: lock-free adders (addInPlace) may race with it,
		// but holding the stripe keeps the slot this key's.
		return int64(mem.Add64(m.mem, v.off+sData, uint64(delta))), nil
	}
	if found {
		m.stat(mhExpired)
	}
	e := entry{key: key, h: h, counter: true, n: delta, deadline: deadlineFor(writeOpts(opts), v, false)}
	if err := m.put(s, &e, v, free, found); err != nil {
		return 0, err
	}
	return delta, nil
}

// addInPlace adds delta to key's live counter without the stripe lock, and
// reports done false when the caller must take the locked path: the key is
// absent, lapsed or busy, the CPU lacks CAS128, the slot is not 16-aligned,
// or the counter kept changing under it. It reads the slot as any reader
// does, then swaps the slot's version and value as one 16-byte word, so
// the add lands only if no writer began the slot since the read: every
// change to a slot (a delete, an overwrite, a reuse by another key, a
// repair) moves its version on, and a holder of the stripe that writes
// according to a counter's value pins the slot first (see pin). After
// Close the mapping is private zeros, where no live version can match, so
// the swap fails and the locked path reports ErrClosed. done with a nil
// error is an add that took effect in the file.
func (m *Map) addInPlace(key string, h uint64, delta int64) (n int64, err error, done bool) {
	if !mem.HasCAS128 {
		return 0, nil, false
	}
	v, found := m.hintedKey(key, h)
	if !found || metaFlags(v.meta)&flagCounter == 0 {
		v, _, found = m.readKey(key, h, nil, false)
		switch {
		case !found:
			return 0, nil, false
		case metaFlags(v.meta)&flagCounter == 0:
			return 0, fmt.Errorf("shmarena: map %q: key %q: %w", m.name, key, ErrNotCounter), true
		}
		m.noteHint(h, v.off)
	}
	// A live slot's version is never 0; a crafted file's could be, and
	// the private zero pages that replace the mapping at Close hold 0:
	// a swap expecting 0 there would report an add that never happened.
	if (v.off+sVersion)&15 != 0 || v.ver == 0 {
		return 0, nil, false
	}
	crashPoint("add-in-place")
	for range addRetries {
		old := mem.Load64(m.mem, v.off+sData)
		if mem.CAS128(m.mem, v.off+sVersion, v.ver, old, v.ver, old+uint64(delta)) {
			return int64(old + uint64(delta)), nil, true
		}
		if mem.Load64(m.mem, v.off+sVersion) != v.ver {
			return 0, nil, false // a writer began the slot: look again, locked
		}
	}
	return 0, nil, false
}

// Counters are hot keys (a rate limit is hit on every request), and a
// counter created in a table already full is often many slots from its
// home, each skipped by its tag at a cost. So Add remembers where it found
// a counter, in a small process-local table indexed by hash, and looks
// there first, skipping the probe. A hint is only a guess, checked as any
// read is: a key lives in at most one live slot at a time, so a
// consistent read that finds it at the hinted slot has found it, and a
// stale hint (the key deleted, the slot reused) costs one slot read.
// Hints are written only when they change, so a steady set of hot
// counters writes none.
const hintEntries = 1024

func hintIndex(h uint64) uint64 { return h >> 40 & (hintEntries - 1) }

// A hint holds the hash's low 32 bits over the slot index + 1.
func hintOf(h uint64, i uint64) uint64 { return h<<32 | (i + 1) }

// noteHint records that key h was found at off. The table is words in
// a byte slice written with plain stores (mem.Put64): goroutines may race
// to write one hint, and any of their values is a fine guess, while an
// atomic store's exchange, paid on every Add where many keys are added
// once each and keep replacing each other's hints, cost more than the
// hint saved.
func (m *Map) noteHint(h uint64, off int) {
	i := m.slotIndex(off)
	if e := hintIndex(h) * 8; mem.Load64(m.counterHints, int(e)) != hintOf(h, i) {
		mem.Put64(m.counterHints, int(e), hintOf(h, i))
	}
}

// hintedKey reads the slot a hint names for key h, and reports whether it
// holds key, live and not lapsed. The read is not closed by a second load
// of the version: the caller's compare-and-swap of the version does that,
// and it must not act on the view otherwise.
func (m *Map) hintedKey(key string, h uint64) (view, bool) {
	e := mem.Load64(m.counterHints, int(hintIndex(h)*8))
	i := e&(1<<32-1) - 1
	if e>>32 != h&(1<<32-1) || i >= m.slots {
		return view{}, false
	}
	off := m.slotOff(i)
	ver := mem.Load64(m.mem, off+sVersion)
	meta := mem.Load64(m.mem, off+sMeta)
	if ver&1 != 0 || !m.holds(off, meta, key, h) {
		return view{}, false
	}
	deadline := int64(mem.Load64(m.mem, off+sDeadline))
	if lapsed(deadline) {
		return view{}, false
	}
	return view{off: off, ver: ver, meta: meta, deadline: deadline}, true
}

// addRetries bounds addInPlace's attempts against other adders of the same
// counter before it queues on the stripe lock instead.
const addRetries = 16

// Counter returns the counter at key and true, or 0 and false when the key
// is absent, lapsed, holds another kind of value, or the map is typed.
// Lock-free: one consistent read of the slot.
func (m *Map) Counter(key string) (int64, bool) {
	if m.encoded || key == "" || m.a.closed.Load() {
		return 0, false
	}
	var buf [8]byte
	v, out, ok := m.readKey(key, hashKey(key), buf[:0], true)
	if !ok || metaFlags(v.meta)&flagCounter == 0 {
		return 0, false
	}
	return int64(uint64(out[0]) | uint64(out[1])<<8 | uint64(out[2])<<16 | uint64(out[3])<<24 |
		uint64(out[4])<<32 | uint64(out[5])<<40 | uint64(out[6])<<48 | uint64(out[7])<<56), true
}

// Expire sets key's deadline to ttl from now (ttl <= 0 removes it, as
// Redis PERSIST does) and reports whether the key was present.
func (m *Map) Expire(key string, ttl time.Duration) bool {
	if key == "" || m.a.closed.Load() {
		return false
	}
	h := hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return false
	}
	defer m.unlock(s)
	v, found := m.find(key, h)
	if !found || lapsed(v.deadline) {
		return false
	}
	var d int64
	if ttl > 0 {
		d = deadlineAfter(ttl)
		m.noteDeadlines()
	}
	m.begin(s, v)
	mem.Store64(m.mem, v.off+sDeadline, uint64(d))
	m.end(v.off)
	m.clearIntent(s)
	return true
}

// TTL returns how long key has left and true; 0 and true for a key with
// no deadline; 0 and false when absent. Lock-free.
func (m *Map) TTL(key string) (time.Duration, bool) {
	if key == "" || m.a.closed.Load() {
		return 0, false
	}
	v, _, ok := m.readKey(key, hashKey(key), nil, false)
	if !ok {
		return 0, false
	}
	if v.deadline == 0 {
		return 0, true
	}
	return max(time.Duration(v.deadline-now()), 1), true
}

// All returns an iterator over the live entries in table order, yielding
// each key with a copy of its value. It is a walk, not a snapshot and not a
// lock: each entry is read consistently, but entries stored or deleted
// while it runs may or may not appear, and unlike sync.Map.Range a key
// deleted and stored again during the walk (which may move it further
// along its probe chain) can be yielded twice. Empty after Close.
func (m *Map) All() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		m.walk(func(key string, off int, meta uint64) bool {
			v, val, ok := m.readKey(key, hashKey(key), []byte{}, true)
			return !ok || v.off != off || yield(key, val)
		})
	}
}

// Keys returns an iterator over the live keys, with All's rules.
func (m *Map) Keys() iter.Seq[string] {
	return func(yield func(string) bool) {
		m.walk(func(key string, off int, meta uint64) bool { return yield(key) })
	}
}

// walk calls fn with each live, unlapsed, consistently read key.
func (m *Map) walk(fn func(key string, off int, meta uint64) bool) {
	var kb []byte
	for i := uint64(0); i < m.slots; i++ {
		if m.a.closed.Load() {
			return
		}
		off := m.slotOff(i)
		for tries := 0; tries < readRetries; tries++ {
			ver := mem.Load64(m.mem, off+sVersion)
			if ver&1 != 0 {
				runtime.Gosched()
				continue
			}
			meta := mem.Load64(m.mem, off+sMeta)
			if metaState(meta) != stateLive || !m.valid(meta) {
				if mem.Load64(m.mem, off+sVersion) != ver {
					continue
				}
				break
			}
			kb = mem.AppendBytes(kb[:0], m.mem, keyOff(off, meta), metaKeyLen(meta))
			deadline := int64(mem.Load64(m.mem, off+sDeadline))
			if mem.Load64(m.mem, off+sVersion) != ver {
				continue
			}
			if lapsed(deadline) {
				break
			}
			if !fn(string(kb), off, meta) {
				return
			}
			break
		}
	}
}

func hashKey(key string) uint64 { return xxhash.Sum64String(key) }
