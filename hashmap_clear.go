package shmarena

import (
	"github.com/shmarena/shmarena/internal/mem"
)

// Clear removes every entry, in every process, as sync.Map.Clear (Go 1.23)
// does: it empties one segment at a time under the segment's lock, so an
// operation on a key running at the same time sees the key either as it
// was or as cleared, never half of each. A reader that misses during a
// segment's clearing waits for it to end before it believes the miss. It
// costs one segment lock at a time and a write of every slot. The counts
// (Len, Stats.Used and Tombstones) fall to zero; the event counters
// (Evicted, Expired and the rest) are kept. Keys stored while Clear runs
// may or may not survive it. After Close, and on a handle opened
// ReadOnly, it does nothing.
func (m *Map) Clear() {
	defer catchFault(m.a, guard(), nil)
	for s := uint64(0); s < m.stripes; s++ {
		if !m.lock(s) {
			return
		}
		m.clearSegment(s)
		m.unlock(s)
	}
}

// clearSegment empties segment s, holding its lock.
func (m *Map) clearSegment(s uint64) {
	sp := m.span(s)
	m.beginMoves(s)
	crashPoint("clear")
	for i := sp.lo; i < sp.hi; i++ {
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		if metaState(mem.Load64(m.mem, off+sMeta)) == stateEmpty && ver&1 == 0 {
			continue
		}
		odd := m.begin(s, view{off: off, ver: ver})
		mem.Store64(m.mem, off+sMeta, metaOf(stateEmpty, 0, 0, 0))
		mem.Store64(m.mem, off+sDeadline, 0)
		m.setTag(i, 0)
		if m.q.on {
			m.setUse(i, 0)
		}
		if !m.end(off, odd) {
			break // lost: the recoverer repairs the segment
		}
	}
	if m.q.on {
		m.small(s).reset(m.mem)
		m.main(s).reset(m.mem)
		m.clearGhost(s)
	}
	mem.Store64(m.mem, m.lockOff(s)+stUsed, 0)
	mem.Store64(m.mem, m.lockOff(s)+stTomb, 0)
	m.clearIntent(s)
	m.endMoves(s)
}
