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
// counts, each as one line (nil for a healthy map). The map may be in use
// meanwhile: a slot being written (odd version) under a held stripe lock
// is normal and skipped, and the counts are compared only when they held
// still for the whole scan; the scan is tried again (up to 3 times) before
// a count mismatch is reported, since a delete and an insert racing the
// scan can hide each other from it.
func (m *Map) checkInvariants() []string {
	var out []string
	for try := 0; try < 3; try++ {
		var countsOK bool
		out, countsOK = m.checkOnce()
		if countsOK {
			return out
		}
		time.Sleep(time.Millisecond)
	}
	return out
}

// checkOnce scans every slot once; countsOK is false when the only
// findings may be an artefact of writes racing the scan.
func (m *Map) checkOnce() (out []string, countsOK bool) {
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	used0, tomb0 := m.rawCounts()
	maxProbe := mem.Load64(m.mem, m.base+mhMaxProbe)
	racy := false
	for s := uint64(0); s < m.stripes; s++ {
		sp := m.span(s)
		lk := m.lockOff(s)
		held := rlock.Owner(m.mem, lk) != 0
		if mv := mem.Load64(m.mem, lk+stMoveVer); mv&1 != 0 && !held && !m.settles(lk+stMoveVer, mv) {
			add("segment %d: entries moving (move version %d) with its lock free", s, mv)
		}
		racy = m.checkQueues(s, add) || racy
		for i := sp.lo; i < sp.hi; i++ {
			racy = m.checkSlot(s, sp, i, maxProbe, held, add) || racy
		}
	}
	used1, tomb1 := m.rawCounts()
	if racy || used0 != used1 || tomb0 != tomb1 {
		return out, true // the counts moved: nothing to compare
	}
	var used, tomb int64
	for i := uint64(0); i < m.slots; i++ {
		switch metaState(mem.Load64(m.mem, m.slotOff(i)+sMeta)) {
		case stateLive:
			used++
		case stateTombstone:
			tomb++
		}
	}
	if used != used0 || tomb != tomb0 {
		out = append(out, fmt.Sprintf("counts say %d live and %d tombstones, the slots hold %d and %d", used0, tomb0, used, tomb))
		return out, false
	}
	return out, true
}

// checkSlot checks slot i of segment s (span sp) and reports whether a
// writer raced the read. held says the segment's lock is held: a slot
// being written, or a tombstone, is then a writer at work.
func (m *Map) checkSlot(s uint64, sp span, i, maxProbe uint64, held bool, add func(string, ...any)) (racy bool) {
	off := m.slotOff(i)
	ver := mem.Load64(m.mem, off+sVersion)
	if ver&1 != 0 {
		switch w := ver >> 1 & (1<<(seqShift-1) - 1); {
		case w != s:
			add("slot %d: version %#x names stripe %d, its segment is %d", i, ver, w, s)
		case !held && mem.Load64(m.mem, off+sVersion) == ver && !m.settles(off+sVersion, ver):
			add("slot %d: being written (version %#x) with stripe %d unlocked", i, ver, s)
		default:
			return true // a writer at work, or a dead one's slot its recoverer repairs
		}
		return false
	}
	meta := mem.Load64(m.mem, off+sMeta)
	h := mem.Load64(m.mem, off+sHash)
	tag := uint64(m.tag(i))
	if mem.Load64(m.mem, off+sVersion) != ver {
		return true
	}
	switch metaState(meta) {
	case stateEmpty:
		if meta != 0 {
			add("slot %d: empty with meta %#x", i, meta)
		}
		if tag != 0 {
			add("slot %d: empty with tag %d", i, tag)
		}
	case stateTombstone:
		if held {
			return true // a delete's hole while entries move
		}
		add("slot %d: a tombstone at rest (deletes leave none)", i)
		if tag == 0 {
			add("slot %d: tombstone with tag 0 (searches stop there)", i)
		}
	case stateLive:
		if !m.valid(meta) {
			add("slot %d: live with key %d + value %d bytes, flags %#x; a slot holds %d", i, metaKeyLen(meta), metaValLen(meta), metaFlags(meta), m.maxPair)
			return false
		}
		key := string(mem.AppendBytes(nil, m.mem, keyOff(off, meta), metaKeyLen(meta)))
		if mem.Load64(m.mem, off+sVersion) != ver {
			return true
		}
		if want := xxh3.HashStringSeed(key, m.seed); h != want {
			add("slot %d: key %s stored with hash %#x, its hash is %#x", i, quote(key), h, want)
			return false
		}
		hs, _, home := m.place(h)
		if hs != s {
			add("slot %d: key %s belongs to segment %d, not %d (lookups miss it)", i, quote(key), hs, s)
			return false
		}
		if tag != uint64(tagOf(h)) {
			add("slot %d: key %s has tag %d, its hash gives %d (lookups skip it)", i, quote(key), tag, tagOf(h))
		}
		d := sp.dist(home, i)
		if d > maxProbe || d >= probeBound {
			add("slot %d: key %s is %d slots from home, beyond the longest probe distance %d (lookups miss it)", i, quote(key), d, min(maxProbe, probeBound-1))
		}
		for k := home; k != i; k = sp.add(k, 1) {
			if metaState(mem.Load64(m.mem, m.slotOff(k)+sMeta)) == stateEmpty && !held {
				add("slot %d: key %s is cut off from its home %d by the empty slot %d (lookups miss it)", i, quote(key), home, k)
				break
			}
		}
	default:
		add("slot %d: state %d in meta %#x", i, metaState(meta), meta)
	}
	return false
}

// checkQueues checks an evicting map's queue counters for segment s and
// reports whether they moved under the read.
func (m *Map) checkQueues(s uint64, add func(string, ...any)) (racy bool) {
	if !m.q.on {
		return false
	}
	for _, q := range []struct {
		name string
		f    fifo
	}{{"small", m.small(s)}, {"main", m.main(s)}} {
		h, t := mem.Load64(m.mem, q.f.head), mem.Load64(m.mem, q.f.tail)
		if _, ok := q.f.len(m.mem); !ok {
			if mem.Load64(m.mem, q.f.head) != h || mem.Load64(m.mem, q.f.tail) != t {
				return true
			}
			add("segment %d: %s queue head %d, tail %d, for %d entries (rebuilt at the next eviction)", s, q.name, h, t, q.f.cap)
		}
	}
	return false
}

// rawCounts sums the stripes' shares as stored (negative sums included).
func (m *Map) rawCounts() (used, tomb int64) {
	for s := uint64(0); s < m.stripes; s++ {
		used += int64(mem.Load64(m.mem, m.lockOff(s)+stUsed))
		tomb += int64(mem.Load64(m.mem, m.lockOff(s)+stTomb))
	}
	return used, tomb
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
