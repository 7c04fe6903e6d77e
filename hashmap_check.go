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
	if maxProbe >= m.slots {
		add("longest probe distance %d is not below the %d slots", maxProbe, m.slots)
	}
	var used, tomb int64
	racy := false
	for i := uint64(0); i < m.slots; i++ {
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		if ver&1 != 0 {
			s := ver >> 1 & (1<<(seqShift-1) - 1)
			switch {
			case s >= m.stripes:
				add("slot %d: version %#x names stripe %d of %d", i, ver, s, m.stripes)
			case rlock.Owner(m.mem, m.lockOff(s)) == 0 && mem.Load64(m.mem, off+sVersion) == ver && !m.settles(off, ver):
				add("slot %d: being written (version %#x) with stripe %d unlocked", i, ver, s)
			default:
				racy = true // a writer at work, or a dead one's slot its recoverer repairs
			}
			continue
		}
		meta := mem.Load64(m.mem, off+sMeta)
		h := mem.Load64(m.mem, off+sHash)
		tag := mem.Load8(m.mem, m.tagBase+int(i)) & 0xff
		if mem.Load64(m.mem, off+sVersion) != ver {
			racy = true
			continue
		}
		switch metaState(meta) {
		case stateEmpty:
			if meta != 0 {
				add("slot %d: empty with meta %#x", i, meta)
			}
		case stateTombstone:
			tomb++
			if tag == 0 {
				add("slot %d: tombstone with tag 0 (searches stop there)", i)
			}
		case stateLive:
			used++
			if !m.valid(meta) {
				add("slot %d: live with key %d + value %d bytes, flags %#x; a slot holds %d", i, metaKeyLen(meta), metaValLen(meta), metaFlags(meta), m.maxPair)
				continue
			}
			key := string(mem.AppendBytes(nil, m.mem, keyOff(off, meta), metaKeyLen(meta)))
			if mem.Load64(m.mem, off+sVersion) != ver {
				racy = true
				continue
			}
			if want := xxh3.HashStringSeed(key, m.seed); h != want {
				add("slot %d: key %s stored with hash %#x, its hash is %#x", i, quote(key), h, want)
				continue
			}
			if tag != uint64(tagOf(h)) && tag != tagUnknown {
				add("slot %d: key %s has tag %d, its hash gives %d (lookups skip it)", i, quote(key), tag, tagOf(h))
			}
			if d := (i + m.slots - m.home(h)) % m.slots; d > maxProbe {
				add("slot %d: key %s is %d slots from home, beyond the longest probe distance %d (lookups miss it)", i, quote(key), d, maxProbe)
			}
		default:
			add("slot %d: state %d in meta %#x", i, metaState(meta), meta)
		}
	}
	used1, tomb1 := m.rawCounts()
	if racy || used0 != used1 || tomb0 != tomb1 {
		return out, true // the counts moved: nothing to compare
	}
	if used != used0 || tomb != tomb0 {
		out = append(out, fmt.Sprintf("counts say %d live and %d tombstones, the slots hold %d and %d", used0, tomb0, used, tomb))
		return out, false
	}
	return out, true
}

// rawCounts sums the stripes' shares as stored (negative sums included).
func (m *Map) rawCounts() (used, tomb int64) {
	for s := uint64(0); s < m.stripes; s++ {
		used += int64(mem.Load64(m.mem, m.lockOff(s)+stUsed))
		tomb += int64(mem.Load64(m.mem, m.lockOff(s)+stTomb))
	}
	return used, tomb
}

// settles reports whether the slot's version moves on within a
// millisecond: a writer that had released its stripe between the reads.
func (m *Map) settles(off int, ver uint64) bool {
	for end := time.Now().Add(time.Millisecond); time.Now().Before(end); {
		if mem.Load64(m.mem, off+sVersion) != ver {
			return true
		}
		time.Sleep(50 * time.Microsecond)
	}
	return false
}
