package shmarena

import (
	"fmt"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/rlock"
	"github.com/zeebo/xxh3"
)

// This file: a map's deep validation, for Arena.Check (shmarena check).
// It knows the slot layout of hashmap.go and is self-contained so that a
// layout change rewrites it alone. It only reads.

// checkInvariants returns what is wrong with the map's slots, tags and
// counts, each as one line (nil for a healthy map), and the segments it
// could not judge. The map may be in use meanwhile. Findings a writer at
// work could cause (a delete's hole while entries move, a key cut off by
// it, a key in two slots, counts that lag the slots, intent and move-from
// words set) are reported only from a still read of the segment: its lock
// free and its write count and move version unchanged before and after.
// A segment that never holds still for stillTries looks is named in
// unjudged instead, unless a dead process holds it (see heldByDead); damage that no writer causes (lengths, hashes, tags,
// versions) is reported from any consistent read of its slot.
func (m *Map) checkInvariants() (problems, unjudged []string) {
	for s := uint64(0); s < m.stripes; s++ {
		p, judged := m.checkSegment(s)
		problems = append(problems, p...)
		if !judged && !m.heldByDead(s) {
			unjudged = append(unjudged, fmt.Sprintf("segment %d not judged: writers kept it busy through %d looks (counts, holes, duplicates and intent words unchecked; check again when it is quieter)", s, stillTries))
		}
	}
	return problems, unjudged
}

// heldByDead reports whether segment s's lock is held by a dead process:
// Locks lists it and RecoverLocks (or the next writer) repairs it, so
// Check does not call it busy.
func (m *Map) heldByDead(s uint64) bool {
	o := rlock.Owner(m.mem, m.lockOff(s))
	return o != 0 && !aliveFn(m.a.own, o)
}

// checkSegment looks at a segment up to stillTries times, napping a
// little longer before each, for a moment when it holds still, and reads
// it whole at most stillScans of those times (only when its lock is free
// as the read begins): a bounded wait (about 3.5 ms of naps) and a
// bounded cost for a segment whose writers never pause.
const (
	stillTries = 8
	stillScans = 3
)

// still is what checkSegment compares before and after a read.
type still struct{ owner, writes, moves, used, tomb uint64 }

func (m *Map) stillness(s uint64) still {
	lk := m.lockOff(s)
	return still{rlock.Owner(m.mem, lk), mem.Load64(m.mem, lk+stWrites), mem.Load64(m.mem, lk+stMoveVer),
		mem.Load64(m.mem, lk+stUsed), mem.Load64(m.mem, lk+stTomb)}
}

// checkSegment checks segment s, looking up to stillTries times for a
// still read of it (see stillScans), and reports whether one was.
func (m *Map) checkSegment(s uint64) (problems []string, judged bool) {
	var hard []string
	nap := 50 * time.Microsecond
	for try, scans := 0, 0; try < stillTries && scans < stillScans; try++ {
		if try > 0 {
			time.Sleep(nap)
			nap = min(2*nap, time.Millisecond)
		}
		before := m.stillness(s)
		if scans > 0 && (before.owner != 0 || before.moves&1 != 0) {
			continue // a read now could not be judged
		}
		var soft []string
		hard = hard[:0]
		live, tomb := m.scanSegment(s, &hard, &soft)
		scans++
		if after := m.stillness(s); before != after || before.owner != 0 || before.moves&1 != 0 {
			continue
		}
		if live != int64(before.used) || tomb != int64(before.tomb) {
			soft = append(soft, fmt.Sprintf("segment %d: counts say %d live and %d tombstones, the slots hold %d and %d",
				s, int64(before.used), int64(before.tomb), live, tomb))
		}
		return append(hard, soft...), true
	}
	if mv := mem.Load64(m.mem, m.lockOff(s)+stMoveVer); mv&1 != 0 && rlock.Owner(m.mem, m.lockOff(s)) == 0 &&
		!m.settles(m.lockOff(s)+stMoveVer, mv) {
		hard = append(hard, fmt.Sprintf("segment %d: entries moving (move version %d) with its lock free", s, mv))
	}
	return hard, false
}

// scanSegment reads segment s's slots once, appending damage no writer
// causes to hard and what a writer at work could cause to soft, and
// returns the live entries and tombstones it saw.
func (m *Map) scanSegment(s uint64, hard, soft *[]string) (live, tomb int64) {
	sp := m.span(s)
	m.checkQueues(s, func(f string, a ...any) { *hard = append(*hard, fmt.Sprintf(f, a...)) })
	at := map[string]uint64{} // where each key was met
	for i := sp.lo; i < sp.hi; i++ {
		st, key := m.checkSlot(s, sp, i, hard, soft)
		switch st {
		case stateLive:
			live++
			if key == "" {
				break
			}
			if j, twice := at[key]; twice {
				*soft = append(*soft, fmt.Sprintf("slot %d: key %s is also in slot %d (a delete removes one, and lookups find the other)", i, quote(key), j))
			}
			at[key] = i
		case stateTombstone:
			tomb++
		}
	}
	lk := m.lockOff(s)
	if w := mem.Load64(m.mem, lk+stIntent); w != 0 {
		*soft = append(*soft, fmt.Sprintf("segment %d: intent word names slot %d with no write under way (a recovery would clear that slot)", s, w-1))
	}
	if w := mem.Load64(m.mem, lk+stMoveFrom); w != 0 {
		*soft = append(*soft, fmt.Sprintf("segment %d: move-from word names slot %d with no move under way (a recovery would keep that slot over its copy)", s, w-1))
	}
	return live, tomb
}

// checkSlot checks slot i of segment s (span sp) and returns its state
// as read (an odd slot reads as none: a writer at work, or damage that
// repair fixes) and, for a sound live entry, its key.
func (m *Map) checkSlot(s uint64, sp span, i uint64, hard, soft *[]string) (state uint64, key string) {
	addHard := func(f string, a ...any) { *hard = append(*hard, fmt.Sprintf(f, a...)) }
	addSoft := func(f string, a ...any) { *soft = append(*soft, fmt.Sprintf(f, a...)) }
	off := m.slotOff(i)
	ver := mem.Load64(m.mem, off+sVersion)
	if ver&1 != 0 {
		switch w := ver >> 1 & (1<<(seqShift-1) - 1); {
		case w != s:
			addHard("slot %d: version %#x names stripe %d, its segment is %d", i, ver, w, s)
		case rlock.Owner(m.mem, m.lockOff(s)) == 0 && mem.Load64(m.mem, off+sVersion) == ver && !m.settles(off+sVersion, ver):
			addHard("slot %d: being written (version %#x) with stripe %d unlocked", i, ver, s)
		}
		return 255, ""
	}
	meta := mem.Load64(m.mem, off+sMeta)
	h := mem.Load64(m.mem, off+sHash)
	tag := uint64(m.tag(i))
	if mem.Load64(m.mem, off+sVersion) != ver {
		return 255, ""
	}
	switch metaState(meta) {
	case stateEmpty:
		if meta != 0 {
			addHard("slot %d: empty with meta %#x", i, meta)
		}
		if tag != 0 {
			addHard("slot %d: empty with tag %d", i, tag)
		}
	case stateTombstone:
		addSoft("slot %d: a tombstone at rest (deletes leave none)", i)
		if tag == 0 {
			addHard("slot %d: tombstone with tag 0 (searches stop there)", i)
		}
	case stateLive:
		if !m.valid(meta) {
			addHard("slot %d: live with key %d + value %d bytes, flags %#x; a slot holds %d", i, metaKeyLen(meta), metaValLen(meta), metaFlags(meta), m.maxPair)
			return stateLive, ""
		}
		key = string(mem.AppendBytes(nil, m.mem, keyOff(off, meta), metaKeyLen(meta)))
		if mem.Load64(m.mem, off+sVersion) != ver {
			return 255, ""
		}
		if want := xxh3.HashStringSeed(key, m.seed); h != want {
			addHard("slot %d: key %s stored with hash %#x, its hash is %#x", i, quote(key), h, want)
			return stateLive, ""
		}
		hs, _, home := m.place(h)
		if hs != s {
			addHard("slot %d: key %s belongs to segment %d, not %d (lookups miss it)", i, quote(key), hs, s)
			return stateLive, ""
		}
		if tag != uint64(tagOf(h)) {
			addHard("slot %d: key %s has tag %d, its hash gives %d (lookups skip it)", i, quote(key), tag, tagOf(h))
		}
		// Read the longest distance now: an insert raises it before it
		// publishes a key further from home.
		maxProbe := mem.Load64(m.mem, m.base+mhMaxProbe)
		if d := sp.dist(home, i); d > maxProbe || d >= probeBound {
			addHard("slot %d: key %s is %d slots from home, beyond the longest probe distance %d (lookups miss it)", i, quote(key), d, min(maxProbe, probeBound-1))
		}
		for k := home; k != i; k = sp.add(k, 1) {
			if metaState(mem.Load64(m.mem, m.slotOff(k)+sMeta)) == stateEmpty {
				addSoft("slot %d: key %s is cut off from its home %d by the empty slot %d (lookups miss it)", i, quote(key), home, k)
				break
			}
		}
	default:
		addHard("slot %d: state %d in meta %#x", i, metaState(meta), meta)
	}
	return metaState(meta), key
}

// checkQueues checks an evicting map's queue counters for segment s: a
// holder keeps them consistent at every store, so a read that finds them
// impossible twice has found damage.
func (m *Map) checkQueues(s uint64, add func(string, ...any)) {
	if !m.q.on {
		return
	}
	for _, q := range []struct {
		name string
		f    fifo
	}{{"small", m.small(s)}, {"main", m.main(s)}} {
		h, t := mem.Load64(m.mem, q.f.head), mem.Load64(m.mem, q.f.tail)
		if _, ok := q.f.len(m.mem); !ok {
			if mem.Load64(m.mem, q.f.head) != h || mem.Load64(m.mem, q.f.tail) != t {
				continue
			}
			add("segment %d: %s queue head %d, tail %d, for %d entries (rebuilt at the next eviction)", s, q.name, h, t, q.f.cap)
		}
	}
}

// settles reports whether the word at off moves on from ver within a
// millisecond: a writer that had released its stripe between the reads.
func (m *Map) settles(off int, ver uint64) bool {
	for end := time.Now().Add(time.Millisecond); time.Now().Before(end); {
		if mem.Load64(m.mem, off) != ver {
			return true
		}
		time.Sleep(50 * time.Microsecond)
	}
	return false
}
