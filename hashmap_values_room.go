package shmarena

import (
	"fmt"

	"github.com/shmarena/shmarena/internal/mem"
)

// This file: making room in a segment's value space, holding its lock.
//
// Room is made at the head of the log. A dead record there is passed over.
// A live one is moved to the tail (the record is copied, then its slot
// rewritten to point at the copy, then the head passes the original): on
// an evicting map only if it was read since it last came round (the slot's
// S3-FIFO read count, which the move lowers by one), else its entry is
// evicted; on a plain map always, cleaning on past what the write needs
// so that the free space holds the records it meets (cleanAhead), and
// when the free space is still smaller than the record, the live records
// in front of enough dead ones are first compacted in place (lift). So
// free space is always one run, nothing fragments, and a plain map refuses
// a value only when the live records and it would pass the share less the
// reserve.

// reserve is the part of a share a plain map keeps free: a log cleaned
// at its head moves u/(1-u) live bytes for each byte it frees when a
// fraction u of it is live, so a share kept below 31/32 live moves at
// most about 31 bytes per byte stored where it is that full (in
// BenchmarkValuesMemory, where segments are seldom all full, 10 to 14;
// 1/16 held back 3% more of the space for 5; 1/64, 20).
func reserve(share uint64) uint64 { return share / 32 }

// liftSlack is the free space a lift makes beyond what is needed: moving
// a record to the tail leaves the free space as it was, so with a record's
// size to spare the head's records move to the tail for many stores after
// (lifting instead, each lift would move again the records the last one
// lifted).
func liftSlack(share uint64) uint64 { return max(64<<10, share/64) }

// cleanAhead is the free run a plain map's cleaning leaves beyond what
// the write needs, so that the live records it meets at the head move to
// the tail (which needs their size free) rather than being lifted. It is
// at most half the reserve, so that it is always there to be had.
func cleanAhead(share uint64) uint64 { return min(reserve(share)/2, 64<<10) }

// reinsertBudget bounds the bytes one write moves to the tail on an
// evicting map beyond twice its own record: past it, live records at the
// head are evicted whatever their reads. It bounds the work under the lock
// (freecache does the same with a few moves per eviction).
const reinsertBudget = 64 << 10

// moveSlack is the free space an evicting map's writer leaves beyond its
// own record: a record read since it last came round is moved to the
// tail only if the free space holds it, so with none to spare the head's
// larger records were evicted however often they were read (on a
// log-normal mix of sizes, 3 points of hit ratio below a CLOCK by bytes,
// measured with bench/cmd/hitratio -bytes). 16 KiB holds all but 0.3% of
// that mix's values; a small share spares a 32nd of itself.
func moveSlack(share uint64) uint64 { return min(16<<10, share/32) }

// A record is what the head holds.
type record struct {
	pos, size uint64
	slot      uint64 // its owner, when live
	live      bool
}

// headRecord reads the record at segment s's head. ok is false when the
// header makes no sense (a damaged file): the caller rebuilds.
func (m *Map) headRecord(s uint64) (r record, ok bool) {
	h, t := m.vsWord(s, vsHead), m.vsWord(s, vsTail)
	if t <= h || t-h > m.vs.share {
		return r, false
	}
	size, hint, _ := m.recordHeader(s, h)
	if size < recHeader || size&15 != 0 || size > t-h {
		return r, false
	}
	r = record{pos: h, size: size, slot: hint}
	r.live = m.owns(s, hint, h%m.vs.share, size)
	return r, true
}

// owns reports whether slot i, of segment s, is at rest, live and points
// at the record of size bytes at offset at.
func (m *Map) owns(s, i, at, size uint64) bool {
	sp := m.span(s)
	if i < sp.lo || i >= sp.hi {
		return false
	}
	off := m.slotOff(i)
	meta := mem.Load64(m.mem, off+sMeta)
	return mem.Load64(m.mem, off+sVersion)&1 == 0 && metaState(meta) == stateLive &&
		metaFlags(meta)&flagExternal != 0 && mem.Load64(m.mem, off+sData) == s<<refShift|at &&
		recordSize(metaValLen(meta)) == size
}

// roomFor makes room in segment s for the value of vlen bytes that key
// (hash h) is about to take, if it goes to the value space. v, free and
// found are what locate found; roomFor returns them as they stand after
// (an evicting map's evictions move entries). On a plain map a live entry
// of the key whose value is in the value space is begun first, so its
// record counts as free; put begins it again (the same version) and ends
// it, and an error ends it unchanged.
func (m *Map) roomFor(s uint64, key string, h uint64, vlen int, v, free view, found bool) (view, view, bool, error) {
	if !m.external(len(key), vlen) {
		return v, free, found, nil
	}
	need := recordSize(vlen)
	if m.q.on {
		if m.vsFree(s) >= need {
			return v, free, found, nil
		}
		if err := m.evictBytes(s, h, need); err != nil {
			return v, free, found, err
		}
		v, free, found = m.locate(key, h, s)
		return v, free, found, nil
	}
	var freed uint64
	var odd uint64
	pinned := found && metaFlags(v.meta)&flagExternal != 0
	if pinned {
		freed = recordSize(metaValLen(v.meta))
		odd = m.begin(s, v)
	}
	err := m.compactFor(s, need, freed)
	if err != nil && pinned && m.end(v.off, odd) {
		m.clearIntent(s)
	}
	return v, free, found, err
}

// evictBytes frees need bytes in segment s of an evicting map, evicting
// in log order with reinsertion (see the file's comment). The entry of
// key hash h, being written, is moved rather than evicted while there is
// room to move it.
func (m *Map) evictBytes(s, h, need uint64) error {
	budget := 2*need + reinsertBudget
	rebuilt := false
	need = min(need+moveSlack(m.vs.share), m.vs.share) // the slack never asks for more than the share
	for steps := 0; m.vsFree(s) < need; steps++ {
		if steps > int(m.vs.share/recHeader)*2+64 {
			return m.errValueSpace(s, "made no room")
		}
		r, ok := m.headRecord(s)
		if !ok {
			if rebuilt {
				return m.errValueSpace(s, "unreadable")
			}
			if err := m.rebuildValues(s); err != nil {
				return err
			}
			rebuilt = true
			continue
		}
		if !r.live {
			m.vsPut(s, vsHead, r.pos+r.size)
			continue
		}
		off := m.slotOff(r.slot)
		u := m.use(r.slot)
		mine := mem.Load64(m.mem, off+sHash) == h
		if (mine || u&useCount > 0 && budget >= r.size) && m.vsFree(s) >= r.size {
			if mine {
				h = 0 // once: then it may be evicted like any other
			} else {
				budget -= r.size
				m.setUse(r.slot, u-1)
			}
			if err := m.moveRecord(s, r); err != nil {
				return err
			}
			continue
		}
		if err := m.evictAt(s, off); err != nil {
			return err
		}
		m.vsPut(s, vsHead, r.pos+r.size)
	}
	return nil
}

// evictAt evicts the live entry in the slot at off of segment s (lapsed
// ones count as expired).
func (m *Map) evictAt(s uint64, off int) error {
	meta := mem.Load64(m.mem, off+sMeta)
	v := view{off: off, ver: mem.Load64(m.mem, off+sVersion), meta: meta,
		deadline: int64(mem.Load64(m.mem, deadlineOff(off, meta)))}
	crashPoint("value-evict")
	if !m.remove(s, v) {
		return m.errLockLost(s)
	}
	if lapsed(v.deadline) {
		m.stat(mhExpired)
	} else {
		m.stat(mhEvicted)
	}
	return nil
}

// compactFor frees need bytes in segment s of a plain map, counting freed
// bytes of live records as free (a pinned entry's value, about to be
// replaced), or returns ErrFull when the live records leave too little.
func (m *Map) compactFor(s, need, freed uint64) error {
	live := m.vsWord(s, vsLive)
	if live-min(live, freed)+need > m.vs.share-reserve(m.vs.share) {
		m.stat(mhFull)
		return fmt.Errorf("shmarena: map %s: %w: a value of %d bytes (%d with its record header) does not fit its segment's value space: %d of %d bytes held by live values",
			quote(m.name), ErrFull, need-recHeader, need, live-min(live, freed), m.vs.share-reserve(m.vs.share))
	}
	// Clean ahead of need, so that a live record at the head finds room
	// at the tail: with the free run at zero, most would have to be
	// lifted, and lifted records stay at the head to be lifted again.
	want := min(need+cleanAhead(m.vs.share), m.vs.share-(live-min(live, freed)))
	rebuilt := false
	for steps := 0; m.vsFree(s) < want; steps++ {
		if steps > 2*int(m.vs.share/recHeader)+64 {
			return m.lift(s, need)
		}
		r, ok := m.headRecord(s)
		if !ok {
			if rebuilt {
				return m.errValueSpace(s, "unreadable")
			}
			if err := m.rebuildValues(s); err != nil {
				return err
			}
			rebuilt = true
			continue
		}
		switch {
		case !r.live:
			m.vsPut(s, vsHead, r.pos+r.size)
		case m.vsFree(s) >= r.size:
			if err := m.moveRecord(s, r); err != nil {
				return err
			}
		default: // no room to move it: make some behind it, and to spare
			if err := m.lift(s, max(need, r.size)+liftSlack(m.vs.share)); err != nil {
				return err
			}
			// The record is at the head again: move it on now, or the
			// next write's cleaning would find it there and lift again.
			if r, ok := m.headRecord(s); ok && r.live && m.vsFree(s) >= r.size {
				if err := m.moveRecord(s, r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// moveRecord moves the live record r at segment s's head to its tail:
// copy, point the slot at the copy (a new version, so a reader of the
// original fails validation), then pass the original. The caller checked
// that the free space holds it. A crash leaves one of the two copies
// dead, whichever the slot does not point at.
func (m *Map) moveRecord(s uint64, r record) error {
	t := m.vsWord(s, vsTail)
	m.copyLog(s, t, r.pos, r.size)
	m.vsPut(s, vsTail, t+r.size)
	crashPoint("value-move")
	if err := m.repoint(s, r.slot, t); err != nil {
		return err
	}
	m.vsPut(s, vsHead, r.pos+r.size)
	m.vsPut(s, vsMoved, m.vsWord(s, vsMoved)+r.size)
	return nil
}

// repoint points slot i, of segment s, at the record at log position pos,
// as one write of the slot.
func (m *Map) repoint(s, i, pos uint64) error {
	off := m.slotOff(i)
	odd := m.begin(s, view{off: off, ver: mem.Load64(m.mem, off+sVersion)})
	mem.Put64(m.mem, off+sData, s<<refShift|pos%m.vs.share)
	if !m.end(off, odd) {
		return m.errLockLost(s)
	}
	m.clearIntent(s)
	return nil
}

// copyLog copies n bytes of segment s's log from position from to
// position to, wrapping at the share's end, as memmove does when they
// overlap: piece by piece from the start when copying down, from the end
// when copying up.
func (m *Map) copyLog(s, to, from, n uint64) {
	base := m.vsOff(s) + vsHeader
	if to <= from {
		for n > 0 {
			a, b := from%m.vs.share, to%m.vs.share
			k := min(n, m.vs.share-a, m.vs.share-b)
			mem.Move(m.mem, base+int(b), base+int(a), int(k))
			from, to, n = from+k, to+k, n-k
		}
		return
	}
	for n > 0 { // the last piece first: [from+n-k, from+n) to [to+n-k, to+n)
		a, b := (from+n-1)%m.vs.share+1, (to+n-1)%m.vs.share+1
		k := min(n, a, b)
		mem.Move(m.mem, base+int(b-k), base+int(a-k), int(k))
		n -= k
	}
}

// lift frees need bytes at segment s's head in place, for a plain map
// whose head record is larger than its free space: it reads records from
// the head until the dead ones among them, with the free space, add up to
// need, then moves the live ones among them up, the last first, so that
// they end where the last record read ended, each with its slot begun
// while it moves (a move may overlap the original); the head then passes
// the space the dead ones held. It moves only the live bytes in front of
// the dead ones it needs, not the whole share. A crash leaves garbage
// between records, which a repair turns into padding (see rebuildValues):
// the slots say where every live record is.
func (m *Map) lift(s, need uint64) error {
	head, tail := m.vsWord(s, vsHead), m.vsWord(s, vsTail)
	if tail < head || tail-head > m.vs.share {
		return m.rebuildValues(s)
	}
	var live []record
	free, p := m.vsFree(s), head
	for p < tail && free < need {
		size, hint, _ := m.recordHeader(s, p)
		if size < recHeader || size&15 != 0 || size > tail-p {
			return m.rebuildValues(s)
		}
		if m.owns(s, hint, p%m.vs.share, size) {
			live = append(live, record{pos: p, size: size, slot: hint, live: true})
		} else {
			free += size
		}
		p += size
	}
	end := p
	for k := len(live) - 1; k >= 0; k-- {
		r := live[k]
		end -= r.size
		if end == r.pos {
			continue
		}
		off := m.slotOff(r.slot)
		odd := m.begin(s, view{off: off, ver: mem.Load64(m.mem, off+sVersion)})
		m.copyLog(s, end, r.pos, r.size)
		crashPoint("value-lift")
		mem.Put64(m.mem, off+sData, s<<refShift|end%m.vs.share)
		if !m.end(off, odd) {
			return m.errLockLost(s)
		}
		m.clearIntent(s)
		m.vsPut(s, vsMoved, m.vsWord(s, vsMoved)+r.size)
	}
	m.vsPut(s, vsHead, end)
	return nil
}

func (m *Map) errValueSpace(s uint64, what string) error {
	return fmt.Errorf("shmarena: map %s: %w: segment %d's value space %s (run Check)", quote(m.name), ErrCorrupt, s, what)
}
