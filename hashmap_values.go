package shmarena

import (
	"fmt"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
)

// This file: the value space (WithBytes), where values too large for their
// slot live, and its layout, allocation and lock-free read.
//
// Each segment owns a share of the value space: a circular log of records
// written at its tail and reclaimed at its head, under the segment's write
// lock, so the allocator needs no lock of its own (freecache and Segcache
// keep values the same way). A record is
//
//	0  its size in bytes (header and padding included, a multiple of 16)
//	   | the slot index of its owner << 32 (padHint for padding)
//	8  the owner's key hash
//	16 the value, padded to 16 bytes; it may run past the share's end
//	   and on from its start
//
// A slot whose value lives there has flagExternal; its first data word is
// the reference segment<<40 | the record's offset in the share, then comes
// the key. A record is live exactly while its owner slot is live, holds
// that reference and is at rest: an overwrite, a delete or a move of the
// record rewrites the slot (a new version), so a record nobody points at
// is dead space, passed over when the head reaches it. A crash therefore
// leaves at worst a dead record, never a leak, and a repair rebuilds the
// headers, the live bytes and the tail from the slots alone (see
// rebuildValues).
//
// A reader copies the value out of the record and then validates the
// slot's version, as for an inline value: space is reused only after the
// head passes it, which happens only after the slot stopped pointing at it
// (a version change), so a copy that raced with a reuse fails validation.
//
// Each share starts with a header:
//
//	0 head, 8 tail: log positions counted up forever (offset = position
//	  mod share), tail-head <= share
//	16 live bytes: the sizes of live records
//	24 bytes moved by compaction and reinsertion, counted up forever
const (
	vsHeader = 64
	vsHead   = 0
	vsTail   = 8
	vsLive   = 16
	vsMoved  = 24

	recHeader = 16
	padHint   = 1<<32 - 1

	refShift = 40
	refMask  = 1<<refShift - 1

	flagExternal = 2 // meta flag: the value lives in the value space

	// minShare is the smallest value space a segment may have, in bytes.
	minShare = 4096
	// maxShare keeps a record's size, and a padding run's, in 32 bits.
	maxShare = 1<<32 - 64
	// maxValueCap bounds MaxValue whatever the share: a value is copied
	// whole under the segment lock when written.
	maxValueCap = 1 << 30
)

// WithBytes gives a map a value space of about n bytes, shared out evenly
// among its segments (rounded down to 64 bytes per segment, at least 4 KiB
// each, at most 4 GiB each; else ErrInvalid). A value whose key and value
// fit the slot (MaxPair) stays in the slot, as in a map without the
// option; a larger one, up to MaxValue, goes to the value space of its
// key's segment, and its slot keeps the key and an 8-byte reference. Each
// value there costs its size rounded up to 16 bytes plus a 16-byte header
// (see MapStats.BytesUsed). It is part of the map's shape. MapBytes counts
// the value space. See docs/values.md for how space is allocated and
// reclaimed.
func WithBytes(n int64) RegionOption { return func(c *regionConfig) { c.bytes = n } }

// valueShape checks and rounds cfg.bytes over cfg.stripes segments.
func valueShape(cfg *regionConfig) error {
	if cfg.bytes == 0 {
		return nil
	}
	share := cfg.bytes / cfg.stripes &^ 63
	if cfg.bytes < 0 || share < minShare || share > maxShare {
		return fmt.Errorf("WithBytes(%d) gives each of the map's %d segments %d bytes, outside [%d, %d]; ask for %d to %d bytes",
			cfg.bytes, cfg.stripes, max(share, 0), minShare, int64(maxShare), minShare*cfg.stripes, maxShare*cfg.stripes)
	}
	cfg.bytes = share * cfg.stripes
	return nil
}

// valuesLength is the bytes a value space of total bytes over stripes
// segments takes.
func valuesLength(bytes, stripes int64) int64 {
	if bytes == 0 {
		return 0
	}
	return stripes * (vsHeader + bytes/stripes)
}

// valueSpace is where a map's value space lies.
type valueSpace struct {
	base  int    // segment 0's header
	share uint64 // bytes of records per segment; 0 for a map without a value space
	max   int    // MaxValue for the value space
}

func newValueSpace(regionOff int, bytes, stripes int64, mapLen int64) valueSpace {
	if bytes == 0 {
		return valueSpace{}
	}
	share := uint64(bytes / stripes)
	return valueSpace{
		base:  regionOff + int(layout.Align(mapLen)),
		share: share,
		// Rounded down to a record's 16-byte grain, so that the largest
		// record fits within the share less the reserve.
		max: int(min((share-reserve(share))&^15-recHeader, maxValueCap)),
	}
}

// vsOff returns where segment s's share header is; its records follow.
func (m *Map) vsOff(s uint64) int { return m.vs.base + int(s)*(vsHeader+int(m.vs.share)) }

func recordSize(vlen int) uint64 { return recHeader + (uint64(vlen)+15)&^15 }

// MaxValue returns the largest value, in bytes, Store takes: with
// WithBytes the value space's limit (the smaller of 31/32 of a segment's
// share, rounded down to a multiple of 16, less a 16-byte header, and
// 1 GiB) for a key of up to MaxPair-8
// bytes, else MaxPair less one byte of key. A larger value is refused with
// ErrTooLarge.
func (m *Map) MaxValue() int {
	return max(m.vs.max, m.maxPair-1)
}

// external reports whether a value of vlen bytes for a key of klen bytes
// goes to the value space.
func (m *Map) external(klen, vlen int) bool { return klen+vlen > m.maxPair && m.vs.share != 0 }

// checkPair returns ErrTooLarge, naming both sizes, when a key of klen
// bytes and a value of vlen bytes fit neither the slot nor the value space.
func (m *Map) checkPair(klen, vlen int) error {
	switch {
	case klen > maxKeyLen:
		return fmt.Errorf("shmarena: map %s: %w: key %d bytes, at most %d", quote(m.name), ErrTooLarge, klen, maxKeyLen)
	case klen+vlen <= m.maxPair:
		return nil
	case m.vs.share == 0:
		return fmt.Errorf("shmarena: map %s: %w: key %d + value %d bytes, slot holds %d (WithBytes gives larger values room)",
			quote(m.name), ErrTooLarge, klen, vlen, m.maxPair)
	case vlen > m.vs.max:
		return fmt.Errorf("shmarena: map %s: %w: value %d bytes, MaxValue is %d", quote(m.name), ErrTooLarge, vlen, m.vs.max)
	case klen+8 > m.maxPair:
		return fmt.Errorf("shmarena: map %s: %w: key %d bytes with a value in the value space, slot holds a key of at most %d",
			quote(m.name), ErrTooLarge, klen, m.maxPair-8)
	}
	return nil
}

// validExternal is valid for a slot whose value is in the value space.
func (m *Map) validExternal(meta uint64) bool {
	kl := metaKeyLen(meta)
	return m.vs.share != 0 && metaFlags(meta) == flagExternal && kl != 0 && kl+8 <= m.maxPair &&
		meta>>32 <= uint64(m.vs.max)
}

// refOf splits a reference; ok is false for one out of bounds.
func (m *Map) refOf(ref uint64, vlen int) (s, at uint64, ok bool) {
	s, at = ref>>refShift, ref&refMask
	ok = s < m.stripes && at < m.vs.share && at&15 == 0 && recordSize(vlen) <= m.vs.share
	return s, at, ok
}

// appendExternal appends the value of the slot at off, whose meta is meta,
// from the value space: part of a read its caller validates by the slot's
// version. A reference out of bounds appends nothing (the version check
// then fails, or the file is damaged and Check says so).
func (m *Map) appendExternal(dst []byte, off int, meta uint64) []byte {
	n := metaValLen(meta)
	s, at, ok := m.refOf(mem.Load64(m.mem, off+sData), n)
	if !ok {
		return dst
	}
	if valueReadHook != nil {
		valueReadHook()
	}
	base := m.vsOff(s) + vsHeader
	from := at + recHeader // at < share: one subtraction wraps it (no division on the read path)
	if from >= m.vs.share {
		from -= m.vs.share
	}
	first := min(uint64(n), m.vs.share-from)
	dst = mem.AppendBytes(dst, m.mem, base+int(from), int(first))
	if rest := n - int(first); rest > 0 {
		dst = mem.AppendBytes(dst, m.mem, base, rest)
	}
	return dst
}

// valueReadHook, set by a test, runs inside a read of the value space
// between loading the reference and copying, where a writer may move or
// reuse the record.
var valueReadHook func()

// externalEqual compares the value-space value of slot v with b, holding
// its stripe.
func (m *Map) externalEqual(v view, b []byte) bool {
	s, at, ok := m.refOf(mem.Load64(m.mem, v.off+sData), len(b))
	if !ok {
		return false
	}
	base := m.vsOff(s) + vsHeader
	from := (at + recHeader) % m.vs.share
	first := min(uint64(len(b)), m.vs.share-from)
	return mem.Equal(m.mem, base+int(from), b[:first]) && mem.Equal(m.mem, base, b[first:])
}

// vsWord and vsPut read and write segment s's share header.
func (m *Map) vsWord(s uint64, f int) uint64   { return mem.Load64(m.mem, m.vsOff(s)+f) }
func (m *Map) vsPut(s uint64, f int, v uint64) { mem.Store64(m.mem, m.vsOff(s)+f, v) }

// vsFree returns segment s's unheld bytes, or 0 when its head and tail make
// no sense (a damaged file: see rebuildValues).
func (m *Map) vsFree(s uint64) uint64 {
	h, t := m.vsWord(s, vsHead), m.vsWord(s, vsTail)
	if t < h || t-h > m.vs.share {
		return 0
	}
	return m.vs.share - (t - h)
}

// writeBytes writes b at log position pos of segment s's share,
// wrapping at its end.
func (m *Map) writeBytes(s, pos uint64, b []byte) {
	base := m.vsOff(s) + vsHeader
	at := pos % m.vs.share
	first := min(uint64(len(b)), m.vs.share-at)
	mem.Write(m.mem, base+int(at), b[:first])
	if first < uint64(len(b)) {
		mem.Write(m.mem, base, b[first:])
	}
}

// putRecordHeader writes the header of the record at log position pos.
func (m *Map) putRecordHeader(s, pos, size, hint, h uint64) {
	o := m.vsOff(s) + vsHeader + int(pos%m.vs.share)
	mem.Put64(m.mem, o, size|hint<<32)
	mem.Put64(m.mem, o+8, h)
}

// recordHeader reads the header of the record at log position pos.
func (m *Map) recordHeader(s, pos uint64) (size, hint, h uint64) {
	o := m.vsOff(s) + vsHeader + int(pos%m.vs.share)
	w := mem.Load64(m.mem, o)
	return w & (1<<32 - 1), w >> 32, mem.Load64(m.mem, o+8)
}

// appendRecord writes a record of value val for slot i (key hash h) at
// segment s's tail and returns its reference. The caller made room (see
// roomFor) and holds s.
func (m *Map) appendRecord(s, i, h uint64, val []byte) uint64 {
	size := recordSize(len(val))
	t := m.vsWord(s, vsTail)
	m.putRecordHeader(s, t, size, i, h)
	m.writeBytes(s, t+recHeader, val)
	crashPoint("value-alloc")
	m.vsPut(s, vsTail, t+size)
	m.vsPut(s, vsLive, m.vsWord(s, vsLive)+size)
	return s<<refShift | t%m.vs.share
}

// releaseValue accounts for the end of a live slot's value-space value
// (meta its meta): an overwrite or a delete makes its record dead.
// Holding s.
func (m *Map) releaseValue(s, meta uint64) {
	if metaState(meta) != stateLive || metaFlags(meta)&flagExternal == 0 {
		return
	}
	size, live := recordSize(metaValLen(meta)), m.vsWord(s, vsLive)
	m.vsPut(s, vsLive, live-min(size, live))
}

// resetValues empties segment s's value space (Clear), holding s, after
// its slots were emptied.
func (m *Map) resetValues(s uint64) {
	if m.vs.share == 0 {
		return
	}
	m.vsPut(s, vsHead, m.vsWord(s, vsTail))
	m.vsPut(s, vsLive, 0)
}

// valueStats sums the value space's figures over the segments.
func (m *Map) valueStats(st *MapStats) {
	if m.vs.share == 0 {
		return
	}
	for s := uint64(0); s < m.stripes; s++ {
		h, t, live := m.vsWord(s, vsHead), m.vsWord(s, vsTail), m.vsWord(s, vsLive)
		st.BytesUsed += int64(live)
		if t >= h && t-h >= live {
			st.BytesDead += int64(t - h - live)
		}
		st.BytesMoved += m.vsWord(s, vsMoved)
	}
	st.BytesCapacity = int64(m.vs.share * m.stripes)
}
