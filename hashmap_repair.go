package shmarena

import (
	"github.com/shmarena/shmarena/internal/mem"
)

// This file: repairing a segment after its writer died.

// repairSegment puts segment s right after a holder died in it, holding
// its lock (or alone, after a reboot). A write leaves at most one slot
// half written, named by the intent word, and a move also a whole source
// slot, named by the move-from word; a delete may leave a tombstone, and a
// move a key in two slots. So, with the move version odd for readers:
//  1. a slot being written is kept if it is the move's whole source, else
//     it becomes a tombstone (an insert or overwrite that never finished
//     is lost, as if it had not begun);
//  2. of a key in two slots, the one further from home (a move's source,
//     which holds any add that landed after the copy) is kept;
//  3. every tombstone is emptied, and every key then cut off from its home
//     by an empty slot moves back to the first empty slot on its path;
//  4. the counts, the tags and an evicting map's queues are rebuilt from
//     the slots.
//
// Everything is bounded by the segment's size, whatever the file holds.
func (m *Map) repairSegment(s uint64) {
	sp := m.span(s)
	lk := m.lockOff(s)
	m.beginMoves(s)
	crashPoint("recover")
	from := mem.Load64(m.mem, lk+stMoveFrom)
	for i := sp.lo; i < sp.hi; i++ {
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		if ver&1 == 0 {
			continue
		}
		if meta := mem.Load64(m.mem, off+sMeta); from == i+1 && metaState(meta) == stateLive && m.valid(meta) {
			mem.Store64(m.mem, off+sVersion, m.rested(ver)) // the move's whole source: kept
		} else {
			m.clearAt(s, i, stateTombstone)
		}
	}
	m.dropDuplicates(s, sp)
	m.reseat(s, sp)
	m.recountSegment(s, sp)
	if m.q.on {
		m.rebuildQueues(s, sp)
	}
	mem.Store64(m.mem, lk+stMoveFrom, 0)
	mem.Store64(m.mem, lk+stIntent, 0)
	m.endMoves(s)
}

// rested returns the at-rest version after the odd version ver: the next
// sequence number, so a reader that began on the slot before sees the
// change.
func (m *Map) rested(ver uint64) uint64 { return (ver>>seqShift + 1) << seqShift }

// sound reports whether slot i holds a live entry of segment s whose
// lengths fit; anything else live there is damage, and becomes a
// tombstone.
func (m *Map) sound(s uint64, off int, meta uint64) bool {
	return metaState(meta) == stateLive && m.valid(meta) && m.stripeOf(mem.Load64(m.mem, off+sHash)) == s
}

// dropDuplicates makes a tombstone of every live slot of sp whose key a
// slot further along its probe path also holds, and of damaged live slots.
func (m *Map) dropDuplicates(s uint64, sp span) {
	seen := make(map[uint64][]uint64)
	for i := sp.lo; i < sp.hi; i++ {
		off := m.slotOff(i)
		meta := mem.Load64(m.mem, off+sMeta)
		if metaState(meta) == stateEmpty || metaState(meta) == stateTombstone {
			continue
		}
		if !m.sound(s, off, meta) {
			m.clearAt(s, i, stateTombstone)
			continue
		}
		h := mem.Load64(m.mem, off+sHash)
		seen[h] = append(seen[h], i)
	}
	for h, at := range seen {
		if len(at) < 2 {
			continue
		}
		_, _, home := m.place(h)
		for a := 0; a < len(at); a++ {
			for b := 0; b < len(at); b++ {
				if a == b || !m.sameKey(at[a], at[b]) {
					continue
				}
				if sp.dist(home, at[a]) < sp.dist(home, at[b]) {
					m.clearAt(s, at[a], stateTombstone)
					break
				}
			}
		}
	}
}

func (m *Map) sameKey(i, j uint64) bool {
	a, b := m.slotOff(i), m.slotOff(j)
	ma, mb := mem.Load64(m.mem, a+sMeta), mem.Load64(m.mem, b+sMeta)
	if metaState(ma) != stateLive || metaState(mb) != stateLive || metaKeyLen(ma) != metaKeyLen(mb) {
		return false
	}
	ka := mem.AppendBytes(nil, m.mem, keyOff(a, ma), metaKeyLen(ma))
	return mem.Equal(m.mem, keyOff(b, mb), ka)
}

// clearAt makes slot i of segment s empty or a tombstone, as one write,
// in a segment being repaired (no intent, no lost-lock check: the
// repairer holds the segment, or runs alone after a reboot). The odd
// version names s, as every writer's does, so a reader waits on s's
// holder and Check sees a write of s at work.
func (m *Map) clearAt(s, i uint64, state uint64) {
	off := m.slotOff(i)
	ver := m.begun(mem.Load64(m.mem, off+sVersion), s)
	mem.Store64(m.mem, off+sVersion, ver)
	crashPoint("repair")
	mem.Store64(m.mem, off+sMeta, metaOf(state, 0, 0, 0))
	mem.Store64(m.mem, off+sDeadline, 0)
	if state == stateEmpty {
		m.setTag(i, 0)
	} else {
		m.setTag(i, tagTombstone)
	}
	mem.Store64(m.mem, off+sVersion, m.rested(ver))
}

// reseat empties every tombstone of sp, then moves each key that an empty
// slot cuts off from its home back to the first empty slot of its path,
// sweeping until a sweep moves nothing (a move frees a slot later keys may
// need) and at most a few times. It sets every tag from its slot.
func (m *Map) reseat(s uint64, sp span) {
	for i := sp.lo; i < sp.hi; i++ {
		off := m.slotOff(i)
		if metaState(mem.Load64(m.mem, off+sMeta)) != stateLive {
			m.clearAt(s, i, stateEmpty)
		}
	}
	for range 4 {
		moved := false
		for i := sp.lo; i < sp.hi; i++ {
			off := m.slotOff(i)
			if metaState(mem.Load64(m.mem, off+sMeta)) != stateLive {
				continue
			}
			_, _, home := m.place(mem.Load64(m.mem, off+sHash))
			for k := home; k != i; k = sp.add(k, 1) {
				if metaState(mem.Load64(m.mem, m.slotOff(k)+sMeta)) == stateEmpty {
					m.move(s, i, k)
					m.clearAt(s, i, stateEmpty)
					moved = true
					break
				}
			}
		}
		if !moved {
			break
		}
	}
	for i := sp.lo; i < sp.hi; i++ {
		meta := mem.Load64(m.mem, m.slotOff(i)+sMeta)
		switch metaState(meta) {
		case stateLive:
			m.setTag(i, tagOf(mem.Load64(m.mem, m.slotOff(i)+sHash)))
		default:
			m.setTag(i, 0)
		}
	}
}

// recountSegment sets segment s's counts from its slots.
func (m *Map) recountSegment(s uint64, sp span) {
	var used uint64
	for i := sp.lo; i < sp.hi; i++ {
		if metaState(mem.Load64(m.mem, m.slotOff(i)+sMeta)) == stateLive {
			used++
		}
	}
	mem.Store64(m.mem, m.lockOff(s)+stUsed, used)
	mem.Store64(m.mem, m.lockOff(s)+stTomb, 0)
}
