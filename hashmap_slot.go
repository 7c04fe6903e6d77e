package shmarena

import (
	"math"
	"math/bits"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
)

// This file: slot addressing, tag bytes and the slot header fields.

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
func deadlineAfter(ttl time.Duration) int64 { return deadlineFrom(now(), ttl) }

// deadlineFrom is deadlineAfter from the clock reading n.
func deadlineFrom(n int64, ttl time.Duration) int64 {
	if int64(ttl) > math.MaxInt64-n {
		return math.MaxInt64
	}
	return n + int64(ttl)
}

func lapsed(deadline int64) bool { return deadline != 0 && deadline <= now() }
