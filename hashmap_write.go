package shmarena

import (
	"fmt"

	"github.com/shmarena/shmarena/internal/mem"
)

// This file: the locked write path.

// find looks key up holding its stripe. Only holders of the stripe change
// a slot of its segment, so the view stays valid until unlock.
func (m *Map) find(key string, h uint64) (view, bool) {
	return m.seek(key, h)
}

// locate finds key's slot, lapsed or not, or else the first slot an insert
// may claim (free.off < 0 when there is none within the probe bound). The
// caller holds stripe s, key's.
//
// In a map that has ever held a deadline, lapsed entries of other keys on
// the way are collected first (see collectPath), so keys with deadlines do
// not fill the table for good.
func (m *Map) locate(key string, h uint64, s uint64) (v view, free view, found bool) {
	if v, ok := m.seek(key, h); ok {
		return v, view{off: -1}, true
	}
	// The key is absent (its segment is ours, so it stays so).
	if mem.Load64(m.mem, m.base+mhDeadlines) != 0 {
		m.collectPath(s, h)
		m.sweepSome(s)
	}
	return v, m.firstFree(h), false
}

// firstFree finds, by the tags, the first slot from h's home that is empty
// or a tombstone, within the probe bound; off is -1 when there is none.
// The caller holds h's segment, so tags and slots agree, but a tag the
// slot belies (a damaged file) is passed over rather than trusted.
func (m *Map) firstFree(h uint64) view {
	_, sp, i := m.place(h)
	left := min(sp.len(), probeBound)
	for left > 0 {
		skip, _ := m.scanTags(sp, i, left, belowFree, 0)
		if skip == left {
			break
		}
		i, left = sp.add(i, skip), left-skip
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		meta := mem.Load64(m.mem, off+sMeta)
		if st := metaState(meta); ver&1 == 0 && (st == stateEmpty || st == stateTombstone) {
			return view{off: off, ver: ver, meta: meta}
		}
		i, left = sp.add(i, 1), left-1
	}
	return view{off: -1}
}

// seek finds key's live slot holding its stripe, skipping foreign slots by
// their tags as readKey does. seekNear decides the common cases first (the
// key at its first candidate; or that candidate empty): an overwrite of a
// 64-byte value at 65,536 slots ran 1,228 instructions through the general
// probe alone, 1,162 so.
func (m *Map) seek(key string, h uint64) (view, bool) {
	switch v, r := m.seekNear(key, h); r {
	case nearHit:
		return v, true
	case nearAbsent:
		return view{}, false
	}
	return m.seekProbe(key, h)
}

// seekProbe is seek's general probe, for what seekNear leaves undecided.
func (m *Map) seekProbe(key string, h uint64) (view, bool) {
	_, sp, i := m.place(h)
	wantTag := tagOf(h)
	for left := m.probeLimit(sp); left > 0; {
		skip, t := m.scanTags(sp, i, left, belowKey, wantTag)
		if skip == left || t == 0 {
			return view{}, false
		}
		i, left = sp.add(i, skip), left-skip
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		meta := mem.Load64(m.mem, off+sMeta)
		if ver&1 == 0 && m.holds(off, meta, key, h) {
			deadline := int64(mem.Load64(m.mem, deadlineOff(off, meta)))
			if mem.Load64(m.mem, off+sVersion) == ver { // a lock-free Add moves no version
				return view{off: off, ver: ver, meta: meta, deadline: deadline}, true
			}
		}
		i, left = sp.add(i, 1), left-1
	}
	return view{}, false
}

// seekNear is readNear for a holder of key's stripe, whose slots hold
// still: the first candidate among the eight tags from key's home decides
// a hit (key's slot, at rest, lapsed or not: seek's callers judge the
// deadline, and the general probe would return it too) or a miss (an
// empty slot: no entry moves while the stripe is held, so the general
// probe would stop there too); else nearUnsure.
// readNear itself is not asked: it reads the clock on a hit with a
// deadline, which a seek then paid twice (its caller reads it again),
// about 35 ns more than the general probe on a key with a TTL; and it
// counts a use in an evicting map.
func (m *Map) seekNear(key string, h uint64) (view, int) {
	i, d, first, ok := m.firstCandidate(h)
	if !ok {
		return view{}, nearUnsure
	}
	switch first {
	case tagOf(h):
	case 0: // no entry moves under the lock: absent, as the general probe ends
		return view{}, nearAbsent
	default:
		return view{}, nearUnsure
	}
	off := m.slotOff(i + d)
	ver := mem.Load64(m.mem, off+sVersion)
	meta := mem.Load64(m.mem, off+sMeta)
	if ver&1 != 0 || !m.holds(off, meta, key, h) {
		return view{}, nearUnsure
	}
	return view{off: off, ver: ver, meta: meta, deadline: int64(mem.Load64(m.mem, deadlineOff(off, meta)))}, nearHit
}

// collectPath removes the lapsed entries on h's probe path, up to the
// first empty slot. A removal may move entries back over the path (see
// remove), so each starts the walk again; a few suffice to keep the path
// clean, and the bound keeps an insert's cost bounded whatever the file
// holds.
func (m *Map) collectPath(s uint64, h uint64) {
	_, sp, home := m.place(h)
	for range 8 {
		removed := false
		for i, left := home, m.probeLimit(sp); left > 0 && !removed; i, left = sp.add(i, 1), left-1 {
			if metaState(mem.Load64(m.mem, m.slotOff(i)+sMeta)) == stateEmpty {
				break
			}
			var ok bool
			if removed, ok = m.expireAt(s, i); !ok {
				return
			}
		}
		if !removed {
			return
		}
	}
}

// sweepMore removes the lapsed entries among the next refusalSweep slots
// of segment s from its sweep cursor, and returns how many it removed:
// what a plain map does before it refuses a key for want of room, beyond
// the key's own probe path (see collectPath), since expiry is lazy and
// entries nobody reads or passes would otherwise hold their slots for
// good. Sweeping the whole segment took 10 ms at 1,048,576 slots with
// every writer of the segment waiting; refusals go round it instead, a
// segment of 65,536 slots in 256 of them.
func (m *Map) sweepMore(s uint64) (n int) {
	if mem.Load64(m.mem, m.base+mhDeadlines) == 0 {
		return 0
	}
	return m.sweepFromCursor(s, refusalSweep)
}

// refusalSweep is how many slots a refused insert sweeps (see sweepMore).
const refusalSweep = 256

// sweepStep is how many slots each insert into a map with deadlines
// sweeps for lapsed entries, beyond its own path: Redis's active expiry
// samples keys in the same spirit. Without it, entries that lapse where no
// read or insert passes hold their slots and lengthen every probe through
// them (misses after 100 capacities of TTL churn at 50% live cost 1.58x a
// fresh table's); with it a segment of 4,096 slots is swept every 1,024
// inserts into it.
const sweepStep = 4

// sweepSome looks at the next sweepStep slots of segment s from its sweep
// cursor and removes the lapsed entries among them.
func (m *Map) sweepSome(s uint64) { m.sweepFromCursor(s, sweepStep) }

// sweepFromCursor looks at the next n slots of segment s from its sweep
// cursor, removes the lapsed entries among them and returns how many it
// removed. A removal moves later entries back into the slot, so the slot
// is looked at again, at most n times in all.
func (m *Map) sweepFromCursor(s uint64, n uint64) (removed int) {
	sp := m.span(s)
	o := m.lockOff(s) + stSweep
	c := mem.Load64(m.mem, o)
	n = min(n, sp.len())
	mem.Put64(m.mem, o, c+n)
	for k, again := uint64(0), uint64(0); k < n; {
		gone, ok := m.expireAt(s, sp.lo+(c+k)%sp.len())
		switch {
		case !ok:
			return removed
		case gone:
			removed++
			if again++; again < n {
				continue
			}
		}
		k++
	}
	return removed
}

// expireAt removes the entry in slot i of segment s, held, if it is live
// and lapsed, counting it in Expired. ok is false when the stripe turned
// out to be lost (see end); the caller then changes nothing more.
func (m *Map) expireAt(s, i uint64) (removed, ok bool) {
	off := m.slotOff(i)
	meta := mem.Load64(m.mem, off+sMeta)
	deadline := int64(mem.Load64(m.mem, deadlineOff(off, meta)))
	ver := mem.Load64(m.mem, off+sVersion)
	if metaState(meta) != stateLive || ver&1 != 0 || !lapsed(deadline) {
		return false, true
	}
	if !m.remove(s, view{off: off, ver: ver, meta: meta, deadline: deadline}) {
		return false, false
	}
	m.stat(mhExpired)
	return true, true
}

// claim begins the free slot for a new key with hash h, holding its
// stripe s. It returns the slot's odd version (for end) and whether it was
// a tombstone.
func (m *Map) claim(s, h uint64, free view) (odd uint64, wasTomb bool) {
	i := m.slotIndex(free.off)
	odd = m.begin(s, free)
	m.setTag(i, tagOf(h))
	_, sp, home := m.place(h)
	m.noteDistance(sp, home, i)
	return odd, metaState(free.meta) == stateTombstone
}

func (m *Map) begun(ver, s uint64) uint64 { return (ver>>seqShift+1)<<seqShift | s<<1 | 1 }

// begin marks a slot the stripe holder owns as being written and returns
// the odd version it set, which end expects. The version is exchanged, a
// full barrier in every build: it orders the intent before it, and a pin's
// read of the counter after it (see pin).
func (m *Map) begin(s uint64, v view) (odd uint64) {
	m.setIntent(s, v.off)
	odd = m.begun(v.ver, s)
	mem.Swap64(m.mem, v.off+sVersion, odd)
	return odd
}

// setIntent names the slot at off in stripe s's intent word, for a
// recoverer should the holder die; the version change that follows orders
// it.
func (m *Map) setIntent(s uint64, off int) {
	i := m.slotIndex(off)
	mem.Put64(m.mem, m.lockOff(s)+8, i+1)
}

// end publishes a slot begun with version odd. It is a compare-and-swap
// from odd, so a writer whose stripe was taken over (another handle judged
// it dead and made the slot a tombstone, and may have begun it again since)
// finds out instead of publishing over the recoverer's work: it returns
// false, and the caller changes nothing more (see ErrLockLost).
func (m *Map) end(off int, odd uint64) bool {
	return mem.CAS64(m.mem, off+sVersion, odd, odd>>seqShift<<seqShift)
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
	s := m.stripeOf(e.h)
	old := mem.Load64(m.mem, off+sMeta)
	var meta uint64
	if m.external(len(e.key), len(e.val)) && !e.counter {
		ref := m.appendRecord(s, m.slotIndex(off), e.h, e.val)
		meta = metaOf(stateLive, flagExternal, len(e.key), len(e.val))
		mem.Put64(m.mem, off+sData, ref)
		mem.Write(m.mem, off+sData+8, e.key)
	} else if e.counter {
		meta = metaOf(stateLive, flagCounter, len(e.key), 8)
		mem.Put64(m.mem, off+sCount, uint64(e.n))
		mem.Write(m.mem, off+sData+8, e.key)
	} else {
		meta = metaOf(stateLive, 0, len(e.key), len(e.val))
		mem.Write(m.mem, off+sData, e.key)
		mem.Write(m.mem, off+sData+len(e.key), e.val)
	}
	mem.Put64(m.mem, off+sMeta, meta)
	mem.Put64(m.mem, off+sHash, e.h)
	mem.Put64(m.mem, deadlineOff(off, meta), uint64(e.deadline))
	m.releaseValue(s, old)
	if e.deadline != 0 {
		m.noteDeadlines()
	}
}

// overwrite writes e over the slot at off, which holds e's key and is
// being written. When the old value and the new one both sit in the slot
// (neither a counter nor in the value space), the key and its hash are
// there already, so only the value, its length and the deadline are
// written; else it is fill.
func (m *Map) overwrite(off int, e *entry) {
	old := mem.Load64(m.mem, off+sMeta)
	if e.counter || metaState(old) != stateLive || metaFlags(old) != 0 ||
		metaKeyLen(old) != len(e.key) || m.external(len(e.key), len(e.val)) {
		m.fill(off, e)
		return
	}
	mem.Write(m.mem, off+sData+len(e.key), e.val)
	mem.Put64(m.mem, off+sMeta, metaOf(stateLive, 0, len(e.key), len(e.val)))
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

// put writes e holding stripe s: over the key's slot v if found, else
// into the free slot free, or one made free (see makeRoom).
func (m *Map) put(s uint64, e *entry, v view, free view, found bool) error {
	if found {
		odd := m.begin(s, v)
		crashPoint("overwrite")
		m.overwrite(v.off, e)
		if !m.end(v.off, odd) {
			return m.errLockLost(s)
		}
		m.clearIntent(s)
		if m.q.on {
			m.touch(m.slotIndex(v.off))
		}
		return nil
	}
	if m.q.on {
		free = m.makeRoom(s, e.h, free)
	}
	if free.off < 0 && !m.q.on && m.sweepMore(s) > 0 {
		free = m.firstFree(e.h)
	}
	if free.off < 0 {
		if m.q.on {
			return m.replaceNear(s, e)
		}
		return m.refuseFull(s, e.h)
	}
	odd, wasTomb := m.claim(s, e.h, free)
	crashPoint("claimed")
	m.fill(free.off, e)
	if m.q.on {
		m.enqueue(s, m.slotIndex(free.off), e.h)
	}
	crashPoint("insert")
	if !m.end(free.off, odd) {
		return m.errLockLost(s)
	}
	if wasTomb {
		m.addCounts(s, 1, -1)
	} else {
		m.addCounts(s, 1, 0)
	}
	m.clearIntent(s)
	return nil
}

// refuseFull counts and returns a plain map's ErrFull for a new key of hash h:
// its segment is full, or has no free slot within the probe bound.
func (m *Map) refuseFull(s uint64, h uint64) error {
	m.stat(mhFull)
	sp := m.span(s)
	if m.used(s) < sp.len() {
		m.stat(mhProbeLimited)
		return fmt.Errorf("shmarena: map %s: %w: no free slot within %d of the key's home (%d of %d slots in its segment used)",
			quote(m.name), ErrFull, min(sp.len(), probeBound), m.used(s), sp.len())
	}
	return fmt.Errorf("shmarena: map %s: %w (%d slots; the key's segment of %d is full)", quote(m.name), ErrFull, m.slots, sp.len())
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
	// 1 <= len(key) <= maxKeyLen in one compare, so check inlines.
	if uint(len(key)-1) < maxKeyLen && len(key)+vlen <= m.maxPair && !m.a.closed.Load() {
		return nil
	}
	return m.checkSlow(key, vlen)
}

// checkSlow is check for a write that may fail, in check's order.
func (m *Map) checkSlow(key string, vlen int) error {
	if m.a.closed.Load() {
		return ErrClosed
	}
	if key == "" {
		return fmt.Errorf("shmarena: map %s: %w", quote(m.name), ErrEmptyKey)
	}
	return m.checkPair(len(key), vlen)
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
