package shmarena

import (
	"sync/atomic"

	"github.com/shmarena/shmarena/internal/mem"
)

// This file: the lock-free read of a value in the value space.

// readNearExternal finishes readNear for a slot of key whose value lives
// in the value space (meta has flagExternal): slot i at off, whose header
// words are hdr and whose version ver and meta were loaded. It checks the slot as readNear does, copies
// the value out of its record once, straight into dst, and then validates
// the slot's version: the record's space is reused only after the slot
// stopped pointing at it (a new version), so a copy that raced with a
// move or a reuse is never returned. Anything it cannot decide is
// nearUnsure, and searchKey starts over.
//
// It exists so that a hit from the value space costs one probe and one
// copy, like an inline hit: through searchKey it paid a second probe,
// the move version and the general key check.
func (m *Map) readNearExternal(key string, h uint64, dst []byte, want bool, i uint64, off int, hdr *[4]uint64, ver, meta uint64, v *view) (out []byte, r int) {
	keyAt := off + sData + 8 // after the reference
	if ver&1 != 0 || atomic.LoadUint64(&hdr[sHash/8]) != h || !m.validExternal(meta) ||
		!mem.EqualString(m.mem, keyAt, key) {
		return dst, nearUnsure
	}
	deadline := int64(atomic.LoadUint64(&hdr[sDeadline/8]))
	out = dst
	if want {
		out = m.appendExternal(dst, off, meta)
	}
	if atomic.LoadUint64(&hdr[sVersion/8]) != ver || lapsed(deadline) {
		return dst, nearUnsure
	}
	if m.countUses {
		m.touch(i)
	}
	if v != nil {
		*v = view{off: off, ver: ver, meta: meta, deadline: deadline}
	}
	return out, nearHit
}
