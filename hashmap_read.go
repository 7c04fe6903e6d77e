package shmarena

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	"github.com/shmarena/shmarena/internal/rlock"
)

// This file: the lock-free read.

// A view is what one consistent read of a slot saw.
type view struct {
	off      int
	ver      uint64
	meta     uint64
	deadline int64
}

// readKey finds key and, when dst is not nil, appends its value. It takes
// no lock. found is false for an absent or lapsed key, and also for a busy
// one (counted in Busy) or a slot whose writer died (repair is started).
func (m *Map) readKey(key string, h uint64, dst []byte, want bool) (v view, out []byte, found bool) {
	out, found = m.read(key, h, dst, want, &v)
	return v, out, found
}

// read is readKey with the view of a hit written to *v (v may be nil)
// rather than returned: the hit's own path (readNear) then returns four
// words, not eight, and a caller that wants only the value asks for no
// view.
func (m *Map) read(key string, h uint64, dst []byte, want bool, v *view) (out []byte, found bool) {
	out, r := m.readNear(key, h, dst, want, v)
	switch r {
	case nearHit:
		return out, true
	case nearAbsent:
		return dst, false
	}
	out, r = m.readFar(key, h, dst, want, v, r)
	return out, r == nearHit
}

// readOutcome is read that tells a miss from a give-up: it returns nearHit,
// nearBusy (the read gave up on a slot or segment that kept changing, so
// the key may well be present) or another outcome, a miss.
func (m *Map) readOutcome(key string, h uint64, dst []byte, want bool, v *view) (out []byte, r int) {
	if out, r = m.readNear(key, h, dst, want, v); r == nearHit || r == nearAbsent {
		return out, r
	}
	return m.readFar(key, h, dst, want, v, r)
}

// readFar is read past readNear's first answer, r (neither nearHit nor
// nearAbsent). It returns nearHit, nearBusy, or another outcome for a miss.
//
// A miss is believed only if no entry of the key's segment moved while
// the probe ran (a delete moves entries back, and a reader may pass the
// slot a key moves to before it arrives, then find its old slot cleared):
// the segment's move version, loaded before the probe, must be even and
// unchanged after it; else confirmMiss probes again. A hit needs no move
// version (the slot's own version vouches for it), so the common hit is
// tried first, without it; a miss then loads it and probes again (in
// readNear, for a miss its first look decided: see absentNear).
func (m *Map) readFar(key string, h uint64, dst []byte, want bool, v *view, r int) (out []byte, outcome int) {
	mvOff := m.lockOff(m.stripeOf(h)) + stMoveVer
	mv := mem.Load64(m.mem, mvOff)
	if r == nearMiss { // believed only with the move version loaded first
		if out, r = m.readNear(key, h, dst, want, v); r == nearHit {
			return out, r
		}
	}
	if r == nearUnsure {
		switch out, r = m.searchKey(key, h, dst, want, v); r {
		case nearHit:
			return out, r
		case nearGaveUp, nearBusy:
			return dst, r
		}
	}
	if mv&1 == 0 && mem.Load64(m.mem, mvOff) == mv {
		return dst, nearMiss
	}
	return m.confirmMiss(key, h, dst, want, v)
}

// What readNear and searchKey found.
const (
	nearUnsure = iota // searchKey must decide
	nearHit
	nearMiss   // absent, unless entries moved meanwhile (see confirmMiss)
	nearGaveUp // absent as far as this read goes: lapsed, busy or a dead writer's
	nearAbsent // absent: a miss confirmed by the move version (see absentNear)
	nearBusy   // gave up on a slot or segment that kept changing (counted in Busy): maybe present
)

// readNear is read's common case in few instructions: a lookup costs
// about as much as the instructions it runs, and the general search's
// bounds checks and calls had doubled them. It decides only when the first
// candidate among the eight tags from key's home is empty (a miss, which
// absentNear confirms or leaves to readFar), or is key's slot, at rest,
// without a lapsed deadline (a hit: the slot's view goes to *v, unless v
// is nil). Anything else is nearUnsure, and searchKey starts over; so is
// a home in the segment's last seven slots (reading the segment's last
// eight tags there cost every hit more than the rare key saved).
func (m *Map) readNear(key string, h uint64, dst []byte, want bool, v *view) (out []byte, r int) {
	// firstCandidate, written out: the call cost 7 of a hit's 585
	// instructions (it is too large to inline).
	sp, i := m.homeSpan(h)
	if i+8 > sp.hi { // the window would pass the segment's last tag (or a segment of under 8 slots)
		return dst, nearUnsure
	}
	w := mem.Load8(m.mem, m.tagBase+int(i))
	t := tagOf(h)
	d := uint64(bits.TrailingZeros64(tagMatch(w, belowKey, t))) / 8
	if d == 8 {
		return dst, nearUnsure
	}
	if first := byte(w >> (d * 8)); first != t {
		if first == 0 {
			return dst, m.absentNear(h, i)
		}
		return dst, nearUnsure
	}
	off := m.slotOff(i + d)
	hdr := mem.Words4(m.mem, off)
	ver := atomic.LoadUint64(&hdr[sVersion/8])
	meta := atomic.LoadUint64(&hdr[sMeta/8])
	kl := len(key)
	keyAt := off + sData
	switch meta & 0xffffffff {
	case metaOf(stateLive, 0, kl, 0):
	case metaOf(stateLive, flagCounter, kl, 0): // the deadline, then the key
		if meta>>32 != 8 {
			return dst, nearUnsure
		}
		keyAt += 8
	default: // checked after the inline cases, which stay first
		if meta&0xffffffff == metaOf(stateLive, flagExternal, kl, 0) {
			return m.readNearExternal(key, h, dst, want, i+d, off, hdr, ver, meta, v)
		}
		return dst, nearUnsure
	}
	if ver&1 != 0 || atomic.LoadUint64(&hdr[sHash/8]) != h || uint64(kl)+meta>>32 > uint64(m.maxPair) {
		return dst, nearUnsure
	}
	if uint(kl-8) <= 32-8 { // most keys: compared inline
		if !mem.EqualMid(m.mem, keyAt, key) {
			return dst, nearUnsure
		}
	} else if !mem.EqualString(m.mem, keyAt, key) {
		return dst, nearUnsure
	}
	out = dst
	var deadline int64
	if keyAt == off+sData {
		deadline = int64(atomic.LoadUint64(&hdr[sDeadline/8]))
		if want {
			out = mem.AppendBytes(dst, m.mem, keyAt+kl, int(meta>>32))
		}
	} else { // a counter: its deadline in the first data word
		deadline = int64(mem.Load64(m.mem, off+sData))
		if want {
			out = m.appendValue(dst, off, meta)
		}
	}
	if atomic.LoadUint64(&hdr[sVersion/8]) != ver || lapsed(deadline) {
		return dst, nearUnsure
	}
	if m.countUses {
		m.touch(i + d)
	}
	if v != nil {
		*v = view{off: off, ver: ver, meta: meta, deadline: deadline}
	}
	return out, nearHit
}

// firstCandidate is the near reads' look at the tags (seekNear's;
// readNear writes it out): of the eight from key hash h's home i, the first that is
// h's tag or free is slot i+d, whose tag is first. ok is false when the
// window would pass the segment's last tag (or a segment of under 8
// slots) or holds no candidate.
func (m *Map) firstCandidate(h uint64) (i, d uint64, first byte, ok bool) {
	sp, i := m.homeSpan(h)
	if i+8 > sp.hi {
		return 0, 0, 0, false
	}
	w := mem.Load8(m.mem, m.tagBase+int(i))
	if d = uint64(bits.TrailingZeros64(tagMatch(w, belowKey, tagOf(h)))) / 8; d == 8 {
		return 0, 0, 0, false
	}
	return i, d, byte(w >> (d * 8)), true
}

// absentNear decides the miss readNear's probe saw (the first candidate
// from slot i, the home of key hash h, on was an empty slot) as readFar would, without
// the second call: it loads the segment's move version, looks at the tags
// again, and believes the miss (nearAbsent) only if the first candidate
// is still empty and the move version was even and is unchanged. Else
// nearMiss: readFar decides. So a miss costs one probe more than a hit,
// not a second lookup (readNear's miss once took readFar's path, about
// 60 instructions more).
func (m *Map) absentNear(h, i uint64) int {
	o := m.lockOff(m.stripeOf(h)) + stMoveVer
	mv := mem.Load64(m.mem, o)
	w := mem.Load8(m.mem, m.tagBase+int(i))
	d := uint64(bits.TrailingZeros64(tagMatch(w, belowKey, tagOf(h)))) / 8
	if d == 8 || byte(w>>(d*8)) != 0 || mv&1 != 0 || mem.Load64(m.mem, o) != mv {
		return nearMiss
	}
	return nearAbsent
}

// searchKey is read's general search: it probes up to the probe limit,
// waits out writers, and collects a lapsed entry. It returns nearHit,
// nearMiss, nearGaveUp or nearBusy, and the view of what it found in *v.
func (m *Map) searchKey(key string, h uint64, dst []byte, want bool, v *view) (out []byte, r int) {
	n0 := len(dst)
	sp, i := m.homeSpan(h)
	wantTag := tagOf(h)
	for left := m.probeLimit(sp); left > 0; {
		skip, t := m.scanTags(sp, i, left, belowKey, wantTag)
		if skip == left || t == 0 {
			return dst, nearMiss
		}
		i, left = sp.add(i, skip), left-skip
		off := m.slotOff(i)
		for tries := 0; ; tries++ {
			if tries == readRetries {
				m.stat(mhBusy)
				return dst, nearBusy
			}
			ver := mem.Load64(m.mem, off+sVersion)
			if ver&1 != 0 {
				if r := m.awaitWriter(off, ver); r != nearUnsure {
					return dst, r
				}
				continue
			}
			meta := mem.Load64(m.mem, off+sMeta)
			st := metaState(meta)
			isKey := m.holds(off, meta, key, h)
			if !isKey {
				if mem.Load64(m.mem, off+sVersion) != ver {
					continue
				}
				if st == stateEmpty {
					return dst, nearMiss
				}
				break
			}
			deadline := int64(mem.Load64(m.mem, deadlineOff(off, meta)))
			if want {
				dst = m.appendValue(dst[:n0], off, meta)
			}
			if mem.Load64(m.mem, off+sVersion) != ver {
				continue
			}
			if v != nil {
				*v = view{off: off, ver: ver, meta: meta, deadline: deadline}
			}
			if lapsed(deadline) {
				m.collect(key, h)
				return dst[:n0], nearGaveUp
			}
			if m.countUses {
				m.touch(i)
			}
			return dst, nearHit
		}
		i, left = sp.add(i, 1), left-1
	}
	return dst, nearMiss
}

// confirmMiss decides a read that missed: it probes again inside an even,
// unchanged move version of the key's segment, so a miss faked by entries
// moving back (see remove) is retried, and a real one is believed. It
// returns nearHit, nearBusy, or another outcome for a miss.
func (m *Map) confirmMiss(key string, h uint64, dst []byte, want bool, v *view) (out []byte, r int) {
	s := m.stripeOf(h)
	o := m.lockOff(s) + stMoveVer
	for range readRetries {
		mv := mem.Load64(m.mem, o)
		if mv&1 != 0 {
			if !m.await(o, mv, s) {
				return dst, nearBusy
			}
			continue
		}
		// On a give-up searchKey's slice may hold a torn copy: return dst.
		switch out, r = m.searchKey(key, h, dst, want, v); r {
		case nearHit:
			return out, r
		case nearGaveUp, nearBusy:
			return dst, r
		}
		if mem.Load64(m.mem, o) == mv {
			return dst, nearMiss
		}
	}
	m.stat(mhBusy)
	return dst, nearBusy
}

// probeLimit bounds a search in segment sp: no key sits further from its
// home than the longest distance any insert went, nor past the probe
// bound.
func (m *Map) probeLimit(sp span) uint64 {
	return min(mem.Load64(m.mem, m.base+mhMaxProbe), probeBound-1, sp.len()-1) + 1
}

// noteDistance raises the longest probe distance to cover slot i of a key
// whose home is home, before the key is published.
func (m *Map) noteDistance(sp span, home, i uint64) {
	d := sp.dist(home, i)
	for {
		cur := mem.Load64(m.mem, m.base+mhMaxProbe)
		if cur >= d || mem.CAS64(m.mem, m.base+mhMaxProbe, cur, d) {
			return
		}
	}
}

func (m *Map) appendValue(dst []byte, off int, meta uint64) []byte {
	if metaFlags(meta)&flagExternal != 0 {
		return m.appendExternal(dst, off, meta)
	}
	if metaFlags(meta)&flagCounter != 0 {
		c := mem.Load64(m.mem, off+sCount)
		return append(dst, byte(c), byte(c>>8), byte(c>>16), byte(c>>24),
			byte(c>>32), byte(c>>40), byte(c>>48), byte(c>>56))
	}
	return mem.AppendBytes(dst, m.mem, off+sData+metaKeyLen(meta), metaValLen(meta))
}

// awaitWriter waits for a slot being written to settle (a dead writer's
// is repaired meanwhile, see await). It returns nearUnsure when the slot
// moved on and should be read again, nearBusy when the writer kept
// writing past oddPatience, and nearGaveUp for a version no writer of
// this map sets (a damaged file: the key reads as absent).
func (m *Map) awaitWriter(off int, ver uint64) int {
	s := ver >> 1 & (1<<(seqShift-1) - 1)
	if s >= m.stripes {
		return nearGaveUp
	}
	if !m.await(off+sVersion, ver, s) {
		return nearBusy
	}
	return nearUnsure
}

// await waits for the word at off to move on from ver, which stripe s's
// holder will do: it spins, then yields, and asks after oddCheckAfter, and
// then as often, whether the holder lives, repairing after a dead one. It
// returns false when the reader should give up: past oddPatience (busy).
func (m *Map) await(off int, ver uint64, s uint64) bool {
	var start, nextCheck time.Time
	for spin := 0; ; spin++ {
		if mem.Load64(m.mem, off) != ver {
			return true
		}
		if spin < 64 {
			continue
		}
		runtime.Gosched()
		if spin%64 != 0 {
			continue
		}
		now := time.Now()
		if start.IsZero() {
			start, nextCheck = now, now.Add(oddCheckAfter)
			continue
		}
		if !now.Before(nextCheck) {
			nextCheck = now.Add(oddCheckAfter)
			if !m.stripeOwnerAlive(s) {
				// Then look again before judging patience: the word
				// moves on once repaired, here or by a recoverer that
				// took the stripe first. On a busy machine the first
				// question may come after oddPatience, and a reader
				// that had just repaired the stripe must not call it busy.
				// Only the look, not another round: a damaged word that
				// no repair moves must still meet the patience check,
				// which a machine whose every round is a question due
				// would otherwise never reach.
				m.repairDead(s)
				if mem.Load64(m.mem, off) != ver {
					return true
				}
			}
		}
		if now.Sub(start) > oddPatience {
			m.stat(mhBusy)
			return false
		}
	}
}

// aliveFn is (*owner.Handle).Alive; a variable so tests can fake a dead
// owner.
var aliveFn = (*owner.Handle).Alive

// stripeOwnerAlive reports whether stripe s is held by a live handle.
func (m *Map) stripeOwnerAlive(s uint64) bool {
	o := rlock.Owner(m.mem, m.lockOff(s))
	return o != 0 && aliveFn(m.a.own, o)
}

// collect turns key's lapsed entry into a tombstone if its stripe is free
// right now; a busy stripe means a writer is there and will see it.
func (m *Map) collect(key string, h uint64) {
	s := m.stripeOf(h)
	if !m.a.enter(s) {
		return
	}
	defer m.a.exit(s)
	ok, recovered := rlock.TryAcquire(m.mem, m.lockOff(s), m.a.own)
	if !ok {
		return
	}
	if recovered {
		m.afterTakeover(s)
		return
	}
	if v, found := m.find(key, h); found && lapsed(v.deadline) {
		m.remove(s, v)
		m.stat(mhExpired)
	}
	m.release(s)
}
