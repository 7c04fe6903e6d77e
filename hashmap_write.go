package shmarena

import (
	"fmt"
	"math/bits"

	"github.com/shmarena/shmarena/internal/mem"
)

// This file: the locked write path.

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
		if !mem.CAS64(m.mem, m.lockOff(other), 0, m.a.self) {
			return v, false
		}
		defer m.release(other)
	}
	if mem.Load64(m.mem, v.off+sVersion) != v.ver {
		return v, false
	}
	if !m.remove(other, v) {
		return v, false
	}
	m.stat(mhExpired)
	v.ver = mem.Load64(m.mem, v.off+sVersion)
	v.meta = mem.Load64(m.mem, v.off+sMeta)
	v.deadline = 0
	return v, true
}

// claim takes a free slot for a new key, starting at free and moving on
// when another stripe's writer takes it first. It returns the slot, begun
// for writing by stripe s, its odd version (for end), and whether it was a
// tombstone.
func (m *Map) claim(s, h uint64, free view) (off int, odd uint64, wasTomb bool, ok bool) {
	if free.off < 0 {
		return 0, 0, false, false
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
			if odd = m.begun(ver, s); mem.CAS64(m.mem, off+sVersion, ver, odd) {
				m.setTag(i, tagOf(h))
				m.noteDistance(m.home(h), i)
				return off, odd, st == stateTombstone, true
			}
		}
		if i++; i == m.slots {
			i = 0
		}
	}
	mem.Put64(m.mem, intent, 0)
	return 0, 0, false, false
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

// remove makes the live slot v a tombstone. Caller holds stripe s. It
// reports false when the stripe turned out to be lost (see end).
func (m *Map) remove(s uint64, v view) bool {
	odd := m.begin(s, v)
	crashPoint("delete")
	mem.Store64(m.mem, v.off+sMeta, metaOf(stateTombstone, 0, 0, 0))
	mem.Store64(m.mem, v.off+sDeadline, 0)
	// Before end: once the slot is at rest another stripe's insert may
	// claim it and tag it, and a late tombstone tag would hide that key.
	m.setTag(m.slotIndex(v.off), tagTombstone)
	if !m.end(v.off, odd) {
		return false
	}
	m.addCounts(s, -1, 1)
	m.clearIntent(s)
	return true
}

// put writes e holding stripe s: over the key's slot v if found, else
// into a free slot claimed from free on.
func (m *Map) put(s uint64, e *entry, v view, free view, found bool) error {
	if found {
		odd := m.begin(s, v)
		crashPoint("overwrite")
		m.fill(v.off, e)
		if !m.end(v.off, odd) {
			return m.errLockLost(s)
		}
		m.clearIntent(s)
		return nil
	}
	off, odd, wasTomb, ok := m.claim(s, e.h, free)
	if !ok {
		m.stat(mhFull)
		return fmt.Errorf("shmarena: map %s: %w (%d slots)", quote(m.name), ErrFull, m.slots)
	}
	crashPoint("claimed")
	m.fill(off, e)
	crashPoint("insert")
	if !m.end(off, odd) {
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
		return fmt.Errorf("shmarena: map %s: %w", quote(m.name), ErrEmptyKey)
	}
	if len(key) > maxKeyLen || len(key)+vlen > m.maxPair {
		return fmt.Errorf("shmarena: map %s: %w: key %d + value %d bytes, slot holds %d", quote(m.name), ErrTooLarge, len(key), vlen, m.maxPair)
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
