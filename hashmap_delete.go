package shmarena

import (
	"github.com/shmarena/shmarena/internal/mem"
)

// This file: deletion without tombstones.
//
// A delete leaves no tombstone at rest: it moves the entries after the
// deleted one back over the hole, each as far as its probe path allows,
// until the run ends (Knuth's Algorithm R, "backward-shift deletion", as
// Chronicle Map does under its segment lock). The table is then as if the
// key had never been inserted, so probe chains never rot under churn: a
// table after a hundred capacities of inserts and deletes probes as a
// freshly filled one does.
//
// Readers take no lock, so a move must never make them miss a key that is
// present. A hit needs nothing: a key is found in a slot whose seqlock
// validates, and a moved key is whole in its new slot before its old one
// is cleared. A miss is what a move can fake (a reader passed the slot a
// key moved to before it arrived, then found its old slot cleared), so
// while entries move the segment's move version is odd, and a reader that
// missed probes again inside an even, unchanged move version before it
// believes the miss (see confirmMiss).

// remove deletes the live entry v holding stripe s, closing the hole it
// leaves. It reports false when the stripe turned out to be lost (see
// end); the caller then changes nothing more.
func (m *Map) remove(s uint64, v view) bool {
	sp := m.span(s)
	i := m.slotIndex(v.off)
	if next := sp.add(i, 1); sp.len() == 1 || next == i ||
		metaState(mem.Load64(m.mem, m.slotOff(next)+sMeta)) == stateEmpty {
		// Nothing behind it: no key's path crosses the slot, so it can
		// be emptied with no reader the wiser, and nothing moves.
		if !m.clearSlot(s, v, stateEmpty) {
			return false
		}
		m.addCounts(s, -1, 0)
		return true
	}
	m.beginMoves(s)
	ok := m.clearSlot(s, v, stateTombstone)
	if ok {
		m.addCounts(s, -1, 0)
		ok = m.closeHole(s, sp, i)
	}
	m.endMoves(s)
	return ok
}

// clearSlot makes the slot v, of stripe s, empty or a tombstone, as one
// write.
func (m *Map) clearSlot(s uint64, v view, state uint64) bool {
	odd := m.begin(s, v)
	crashPoint("delete")
	mem.Store64(m.mem, v.off+sMeta, metaOf(state, 0, 0, 0))
	mem.Store64(m.mem, v.off+sDeadline, 0)
	t := byte(tagTombstone)
	if state == stateEmpty {
		t = 0
	}
	m.setTag(m.slotIndex(v.off), t)
	if !m.end(v.off, odd) {
		return false
	}
	m.clearIntent(s)
	return true
}

// beginMoves and endMoves bracket moves in segment s: the move version is
// odd in between, and a reader's miss in the segment is believed only
// across an even, unchanged version.
func (m *Map) beginMoves(s uint64) {
	o := m.lockOff(s) + stMoveVer
	if v := mem.Load64(m.mem, o); v&1 == 0 {
		mem.Swap64(m.mem, o, v+1) // a full barrier: odd before any move
	}
}

func (m *Map) endMoves(s uint64) {
	o := m.lockOff(s) + stMoveVer
	if v := mem.Load64(m.mem, o); v&1 != 0 {
		mem.Store64(m.mem, o, v+1)
	}
}

// closeHole moves entries after the tombstone at hole back over it, each
// to the hole if its probe path passes there, until the run of entries
// ends, or until it is further from the hole than any key is from its
// home, then empties the last hole. Holding stripe s, inside beginMoves.
// So a delete looks at no more than the probe limit of slots past each
// hole, even in a segment with no empty slot, whose run is the whole
// segment. It stops at anything it does not expect
// (a tombstone, a slot of another segment's key), leaving that hole a
// tombstone, counted: a repair or a later insert clears it, and a
// tombstone misleads no reader.
func (m *Map) closeHole(s uint64, sp span, hole uint64) bool {
	reach := m.probeLimit(sp)
	j := sp.add(hole, 1)
	for n := uint64(1); n < sp.len(); n, j = n+1, sp.add(j, 1) {
		if sp.dist(hole, j) >= reach {
			// No key sits reach or more slots from home, so none from
			// here on has a path through the hole: the run may go on
			// (a full segment is one run), but the moves end.
			return m.emptyHole(s, hole)
		}
		off := m.slotOff(j)
		meta := mem.Load64(m.mem, off+sMeta)
		switch metaState(meta) {
		case stateEmpty:
			return m.emptyHole(s, hole)
		case stateLive:
		default:
			m.addCounts(s, 0, 1)
			return true
		}
		h := mem.Load64(m.mem, off+sHash)
		hs, _, home := m.place(h)
		if hs != s || !m.valid(meta) {
			m.addCounts(s, 0, 1)
			return true
		}
		if sp.dist(home, j) < sp.dist(hole, j) {
			continue // its path starts after the hole: it stays
		}
		if !m.move(s, j, hole) {
			return false
		}
		hole = j
	}
	return m.emptyHole(s, hole)
}

// emptyHole turns the tombstone at hole, the last of a run, into an empty
// slot.
func (m *Map) emptyHole(s uint64, hole uint64) bool {
	off := m.slotOff(hole)
	return m.clearSlot(s, view{off: off, ver: mem.Load64(m.mem, off+sVersion)}, stateEmpty)
}

// move copies the live entry at slot j into the tombstone at slot to, then
// makes j the tombstone. j is begun first, so a lock-free Add cannot land
// on it after the copy (its version swap fails, and it looks again); a
// recoverer finds j named in the move-from word and keeps it whole (see
// repairSegment). At most one slot is half written at any time: to, named
// by the intent word.
func (m *Map) move(s, j, to uint64) bool {
	from, dst := m.slotOff(j), m.slotOff(to)
	lk := m.lockOff(s)
	mem.Put64(m.mem, lk+stMoveFrom, j+1)
	oddFrom := m.begin(s, view{off: from, ver: mem.Load64(m.mem, from+sVersion)})
	oddTo := m.begin(s, view{off: dst, ver: mem.Load64(m.mem, dst+sVersion)})
	meta := mem.Load64(m.mem, from+sMeta)
	n := metaKeyLen(meta) + metaValLen(meta)
	if metaFlags(meta)&flagCounter != 0 {
		n = 8 + metaKeyLen(meta)
	}
	for k := 0; k < n; k += 8 { // data runs in whole words to the slot's end
		mem.Put64(m.mem, dst+sData+k, mem.Load64(m.mem, from+sData+k))
	}
	mem.Put64(m.mem, dst+sHash, mem.Load64(m.mem, from+sHash))
	mem.Put64(m.mem, dst+sDeadline, mem.Load64(m.mem, from+sDeadline))
	mem.Put64(m.mem, dst+sMeta, meta)
	m.setTag(to, m.tag(j))
	if m.q.on {
		m.setUse(to, m.use(j))
	}
	if !m.end(dst, oddTo) {
		return false
	}
	crashPoint("move")
	m.setIntent(s, from)
	mem.Store64(m.mem, from+sMeta, metaOf(stateTombstone, 0, 0, 0))
	mem.Store64(m.mem, from+sDeadline, 0)
	m.setTag(j, tagTombstone)
	if !m.end(from, oddFrom) {
		return false
	}
	mem.Put64(m.mem, lk+stMoveFrom, 0)
	m.clearIntent(s)
	m.stat(mhMoved)
	return true
}
