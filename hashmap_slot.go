package shmarena

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
)

// This file: segments, slot addressing, tag bytes and the slot header
// fields.

// A span is one segment's slots, [lo, hi). Each stripe lock owns one
// segment: a key's stripe comes from the low 32 bits of its hash, its home
// slot within the segment from the high bits, and its probe wraps within
// the segment. So every slot a write touches belongs to the lock it holds,
// and a delete may move entries back (see closeHole) with no other writer
// in the way.
type span struct{ lo, hi uint64 }

// span returns stripe s's segment: segLen slots each, the last one also
// taking the remainder of the division.
func (m *Map) span(s uint64) span {
	lo := s * m.segLen
	if s == m.stripes-1 {
		return span{lo, m.slots}
	}
	return span{lo, lo + m.segLen}
}

func (sp span) len() uint64 { return sp.hi - sp.lo }

// add returns slot i+d, wrapping within the segment (d < len).
func (sp span) add(i, d uint64) uint64 {
	if i += d; i >= sp.hi {
		i -= sp.hi - sp.lo
	}
	return i
}

// dist returns how many slots slot to lies past slot from, wrapping.
func (sp span) dist(from, to uint64) uint64 {
	if to >= from {
		return to - from
	}
	return to + sp.len() - from
}

// place returns key h's stripe, that stripe's segment and h's home slot.
func (m *Map) place(h uint64) (s uint64, sp span, home uint64) {
	s = m.stripeOf(h)
	sp = m.span(s)
	return s, sp, sp.lo + sp.at(h)
}

// homeSpan is place for a reader, which needs no stripe.
func (m *Map) homeSpan(h uint64) (sp span, home uint64) {
	sp = m.span(m.stripeOf(h))
	return sp, sp.lo + sp.at(h)
}

// at scales h's high bits to a slot of the segment, from its start.
func (sp span) at(h uint64) uint64 {
	hi, _ := bits.Mul64(h, sp.len())
	return hi
}

// home returns h's home slot.
func (m *Map) home(h uint64) uint64 {
	_, _, i := m.place(h)
	return i
}

func (m *Map) stripeOf(h uint64) uint64 {
	return (uint64(uint32(h)) * m.stripes) >> 32
}

func (m *Map) slotOff(i uint64) int { return m.slotBase + int(i)*m.slotSize }

func (m *Map) slotIndex(off int) uint64 { return uint64(off-m.slotBase) / uint64(m.slotSize) }

// Tags let a search skip slots without touching them: 64 slots' tags share
// a cache line. A slot's tag is 0 while it is empty, tagTombstone while it
// is a tombstone (a delete's hole while entries move back over it, or a
// dead writer's leftover until repair), else the tag of the key it holds
// (tagOf its hash). Writers set a slot's tag under its segment's lock while
// the slot is being written: before the key is published, and after it is
// gone. So a tag that is neither the key's own nor tagUnknown proves the
// slot holds (or held) another key, or none, and a reader skips it; a tag
// of 0 ends a search, which a reader then checks against the segment's
// move version (see confirmMiss). tagUnknown is not written any more; a
// reader treats it as "look at the slot".
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

// tagMatch flags the bytes of a tag word a scan must stop at: those below
// below, and those equal to want. The lowest flagged byte is never a
// borrow; higher ones may be, so a caller that goes past the lowest checks
// the byte itself.
func tagMatch(w uint64, below, want byte) uint64 {
	return bytesBelow(w, below) | bytesEqual(w, want)
}

// A search for a key stops at tags 0 (empty), tagUnknown and the key's
// own; a search for a free slot at 0 and tagTombstone (want 0 adds
// nothing).
const (
	belowKey  = tagUnknown + 1
	belowFree = tagTombstone + 1
)

// scanTags is the one tag scan: it looks at most left slots of segment sp
// from slot i on, wrapping, for the first slot whose tag tagMatch flags,
// and returns how many slots it skipped before that one and its tag, or
// left when there is none. It tests eight tags per load: an unaligned
// load of the eight from i on, never past the segment's end.
func (m *Map) scanTags(sp span, i, left uint64, below, want byte) (skip uint64, t byte) {
	for skip < left {
		n := min(8, sp.hi-i, left-skip)
		w := mem.Load8(m.mem, m.tagBase+int(i))
		if cand := tagMatch(w, below, want) & (1<<(n*8) - 1); cand != 0 {
			b := uint64(bits.TrailingZeros64(cand)) / 8
			return skip + b, byte(w >> (b * 8))
		}
		skip += n
		if i += n; i == sp.hi {
			i = sp.lo
		}
	}
	return left, 0
}

// setTag sets slot i's tag; the caller holds the slot's segment.
func (m *Map) setTag(i uint64, t byte) { mem.StoreByte(m.mem, m.tagBase+int(i), t) }

func (m *Map) tag(i uint64) byte { return mem.LoadByte(m.mem, m.tagBase+int(i)) }

func (m *Map) lockOff(s uint64) int { return m.base + mapHeader + int(s)*stripeStride }

func (m *Map) stat(field int) {
	if !m.a.readOnly { // a read-only handle counts nothing (see ReadOnly)
		mem.Add64(m.mem, m.base+field, 1)
	}
}

func metaOf(state, flags uint64, klen, vlen int) uint64 {
	return state | flags<<8 | uint64(klen)<<16 | uint64(vlen)<<32
}

func metaState(meta uint64) uint64 { return meta & 0xff }
func metaFlags(meta uint64) uint64 { return meta >> 8 & 0xff }
func metaKeyLen(meta uint64) int   { return int(meta >> 16 & 0xffff) }
func metaValLen(meta uint64) int   { return int(meta >> 32) }

// keyOff returns where a slot's key starts: after the 8-byte deadline of
// a counter, or the 8-byte reference of a value in the value space.
func keyOff(off int, meta uint64) int {
	if metaFlags(meta)&(flagCounter|flagExternal) != 0 {
		return off + sData + 8
	}
	return off + sData
}

// deadlineOff returns where the deadline of the slot at off, whose meta
// word is meta, is: a counter's value takes the deadline's header word,
// beside the version (see the slot layout), and its deadline the first
// data word.
func deadlineOff(off int, meta uint64) int {
	if metaFlags(meta)&flagCounter != 0 {
		return off + sData
	}
	return off + sDeadline
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
	if metaFlags(meta)&flagExternal != 0 {
		return m.validExternal(meta)
	}
	if meta>>32 > uint64(m.maxPair) {
		return false
	}
	kl, vl := metaKeyLen(meta), metaValLen(meta)
	if kl == 0 || kl+vl > m.maxPair {
		return false
	}
	return metaFlags(meta)&flagCounter == 0 || vl == 8
}

// now returns the wall clock in Unix nanoseconds, for deadlines, which
// are wall-clock times so that every process, and a process after a
// reboot, reads them alike. A map with deadlines reads it on every hit,
// and time.Now reads two clocks (wall and monotonic); now reads only the
// monotonic one and adds the offset to the wall clock taken by its last
// full read, which it repeats every clockResync: a step of the wall clock
// (a settimeofday, an NTP step) shows within clockResync, the skew of
// the two clocks between reads (NTP slews both) is negligible.
func now() int64 {
	mono := int64(time.Since(clockStart))
	if mono-clockSynced.Load() < int64(clockResync) {
		return mono + clockOffset.Load()
	}
	t := time.Now()
	mono = int64(t.Sub(clockStart))
	// Two words: a reader pairing a new offset with an old sync time (or
	// the reverse) still adds a valid offset, at worst resyncing again.
	clockOffset.Store(t.UnixNano() - mono)
	clockSynced.Store(mono)
	return t.UnixNano()
}

const clockResync = 10 * time.Millisecond

var (
	clockStart  = time.Now() // the monotonic origin, and the first sync
	clockOffset atomic.Int64 // wall minus monotonic, at the last sync
	clockSynced atomic.Int64 // monotonic time of the last sync
)

func init() { clockOffset.Store(clockStart.UnixNano()) }

// deadlineAfter returns the deadline ttl (> 0) from now, saturating at the
// largest time rather than wrapping into the past: a "forever" TTL such as
// math.MaxInt64 must not expire the entry at once.
func deadlineAfter(ttl time.Duration) int64 { return deadlineFrom(now(), ttl) }

// deadlineFrom is deadlineAfter from the clock reading n.
func deadlineFrom(n int64, ttl time.Duration) int64 {
	if int64(ttl) > math.MaxInt64-n {
		return math.MaxInt64
	}
	return n + int64(ttl)
}

func lapsed(deadline int64) bool { return deadline != 0 && deadline <= now() }
