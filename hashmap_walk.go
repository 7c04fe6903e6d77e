package shmarena

import (
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/rlock"
)

// This file: walks (All, Keys) that take no lock and still yield every
// key present for the whole walk exactly once.
//
// Under the segment's lock entries move only back toward their home slot:
// a delete moves the entries after it back over its hole (see remove), a
// repair moves keys back to the first empty slot of their path, and
// nothing else moves a key. So a walk reads each segment's slots going
// down, from its last slot, round past its first, for as many slots again
// as the longest probe distance: a key present throughout is at or below
// the walk's position when the walk starts (counting positions round the
// segment, unrolled), and it moves down only within the probe distance
// from its first position, never below its home. Each look at a slot
// either sees the key there or leaves it below the walk's position, so
// the walk, going one slot down at a time to below every home, meets it.
// The look must be consistent for that: a slot being written is waited
// for, and a slot read as holding no key is believed only if no entry of
// the segment moved during the read (the move version, as confirmMiss
// does). A key met twice (it moved down ahead of the walk, or was
// deleted and stored again) is yielded once.

// walk calls fn with each live, unlapsed key of every segment, and its
// value when values is set, until fn returns false.
func (m *Map) walk(values bool, fn func(key string, val []byte) bool) {
	defer runtime.KeepAlive(m)
	for s := uint64(0); s < m.stripes; s++ {
		if m.a.closed.Load() || !m.walkSegment(s, values, fn) {
			return
		}
	}
}

// walkSegment walks segment s (see the file's comment) and reports whether
// fn asked for more.
func (m *Map) walkSegment(s uint64, values bool, fn func(key string, val []byte) bool) bool {
	sp := m.span(s)
	reach := min(mem.Load64(m.mem, m.base+mhMaxProbe), probeBound-1, sp.len()-1)
	seen := map[string]struct{}{}
	var kb []byte
	i := sp.hi - 1
	for n := sp.len() + reach; n > 0; n-- {
		key, val, ok := m.lookWalk(s, i, values, &kb)
		if ok {
			if _, dup := seen[key]; !dup {
				seen[key] = struct{}{}
				if !fn(key, val) || m.a.closed.Load() {
					return false
				}
			}
		}
		if i == sp.lo {
			i = sp.hi
		}
		i--
	}
	return true
}

// lookWalk reads slot i of segment s for a walk: its live, unlapsed key
// (and a copy of its value when values is set), or ok false when the slot
// held none at some moment at which no entry of s was moving.
func (m *Map) lookWalk(s, i uint64, values bool, kb *[]byte) (key string, val []byte, ok bool) {
	o := m.lockOff(s) + stMoveVer
	for {
		mv := mem.Load64(m.mem, o)
		stuck := false // moves left open that waiting cannot end: read the slot as it is
		if mv&1 != 0 {
			if stuck = !m.awaitHolder(o, mv, s); !stuck {
				continue
			}
		}
		if m.tag(i) > tagTombstone {
			var live bool
			if key, val, live, ok = m.readWalked(s, i, values, kb); live {
				return key, val, ok
			}
		}
		if stuck || mem.Load64(m.mem, o) == mv {
			return "", nil, false
		}
	}
}

// readWalked reads slot i consistently, waiting out a writer (see
// awaitHolder). live reports a live key there, ok that it had not lapsed.
func (m *Map) readWalked(s, i uint64, values bool, kb *[]byte) (key string, val []byte, live, ok bool) {
	off := m.slotOff(i)
	for {
		ver := mem.Load64(m.mem, off+sVersion)
		if ver&1 != 0 {
			if ver>>1&(1<<(seqShift-1)-1) != s || !m.awaitHolder(off+sVersion, ver, s) {
				return "", nil, false, false // damage, or a dead writer's slot
			}
			continue
		}
		meta := mem.Load64(m.mem, off+sMeta)
		if metaState(meta) != stateLive || !m.valid(meta) {
			if mem.Load64(m.mem, off+sVersion) == ver {
				return "", nil, false, false
			}
			continue
		}
		*kb = mem.AppendBytes((*kb)[:0], m.mem, keyOff(off, meta), metaKeyLen(meta))
		if values {
			val = m.appendValue([]byte{}, off, meta)
		}
		deadline := int64(mem.Load64(m.mem, deadlineOff(off, meta)))
		if mem.Load64(m.mem, off+sVersion) != ver {
			continue
		}
		return string(*kb), val, true, !lapsed(deadline)
	}
}

// awaitHolder waits for the word at off, which stripe s's holder is
// changing, to move on from ver, as a writer waits for the lock: for as
// long as the holder lives, repairing after a dead one. It returns false
// when waiting cannot help: the lock is free with the word still ver
// (damage, which Check reports), the holder died and this handle cannot
// repair (read-only), or the arena closed.
func (m *Map) awaitHolder(off int, ver, s uint64) bool {
	nap := time.Microsecond
	for spin := 0; ; spin++ {
		if mem.Load64(m.mem, off) != ver {
			return true
		}
		if spin < 128 {
			if spin >= 64 {
				runtime.Gosched()
			}
			continue
		}
		if m.a.closed.Load() {
			return false
		}
		switch o := rlock.Owner(m.mem, m.lockOff(s)); {
		case o == 0:
			if mem.Load64(m.mem, off) != ver {
				return true
			}
			if off != m.lockOff(s)+stMoveVer || m.a.readOnly {
				return false
			}
			m.repairDead(s) // moves left open with the lock free: repaired as await does
			return mem.Load64(m.mem, off) != ver
		case !aliveFn(m.a.own, o):
			if m.a.readOnly {
				return false
			}
			m.repairDead(s)
		}
		time.Sleep(nap)
		nap = min(2*nap, time.Millisecond)
	}
}
