package shmarena

import (
	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
)

// This file: eviction (WithEviction), S3-FIFO per segment.
//
// Each segment keeps two FIFO queues of the hashes of its keys, in the
// region: a small one that new keys enter, of a tenth of the segment, and a
// main one, of the segment's size. Each slot has a use byte beside the
// tags, not in the slot, so a reader's write never touches the cache lines
// other readers validate: the low two bits count reads since the key
// entered or last went around (capped at 3: a hot key stops writing), bit
// 2 says the key's entry is in the small queue. Queue entries are hashes,
// not slot numbers, because a delete moves entries (see remove); popping
// one finds its slot by probing, and an entry whose key is gone, or that
// the use byte says belongs to the other queue, is dropped.
//
// The queues are advisory: a writer that dies mid-update leaves them
// rebuilt from the slots by the repair (see repairSegment), and a queue
// whose head and tail make no sense is rebuilt likewise.
//
// S3-FIFO: Juncheng Yang et al., "FIFO queues are all you need for cache
// eviction", SOSP 2023; the small-queue-full rule follows libCacheSim's
// S3FIFO.c (a new key goes to the main queue when the small one is full).
// The ghost, which remembers keys evicted from the small queue so that
// one coming back goes straight to the main queue, is a table of 32-bit
// fingerprints per segment, one for each of 9/10 of the segment's
// capacity, each fingerprint in the entry it hashes to (a newer one
// replaces an older): FIFO order is approximated by replacement, and a
// false hit only admits a key to the main queue early. Measured with
// bench/cmd/hitratio it is worth 1.5 to 3.2 points of hit ratio at 10%
// cache sizes and costs 0.2 to 0.6 at 0.1% (see bench/results.md).

const (
	useCount = 3 // the read-count bits
	useSmall = 4 // the key's queue entry is in the small queue

	// Queue heads and tails in a stripe's entry, counted up forever.
	stSmallHead = 64
	stSmallTail = 72
	stMainHead  = 80
	stMainTail  = 88
)

type queues struct {
	on       bool
	useBase  int // one use byte per slot
	base     int // per segment: small queue, main queue (8 bytes an entry), ghost (4)
	smallCap uint64
	mainCap  uint64
	ghostCap uint64
	stride   int // bytes per segment
}

// queueCaps returns the small and main queue and ghost capacities, in
// entries, of a map's segments: sized for its longest segment.
func queueCaps(slots, stripes int64) (small, main, ghost int64) {
	longest := slots/stripes + slots%stripes
	return max(1, longest/10), longest, max(1, int64(capacity(uint64(longest)))*9/10)
}

// queueBytes is the bytes of queues one segment takes.
func queueBytes(slots, stripes int64) int64 {
	small, main, ghost := queueCaps(slots, stripes)
	return 8*(small+main) + (4*ghost+7)&^7
}

func newQueues(m *Map) queues {
	slots, stripes := int64(m.slots), int64(m.stripes)
	small, main, ghost := queueCaps(slots, stripes)
	useBase := m.tagBase + int(layout.Align(slots))
	return queues{
		on:       true,
		useBase:  useBase,
		base:     useBase + int(layout.Align(slots)),
		smallCap: uint64(small),
		mainCap:  uint64(main),
		ghostCap: uint64(ghost),
		stride:   int(queueBytes(slots, stripes)),
	}
}

// ghostEntry returns where key h's fingerprint goes in segment s's ghost,
// and the fingerprint (never 0, which marks an empty entry).
func (m *Map) ghostEntry(s, h uint64) (off int, fp uint32) {
	fp = uint32(h>>32^h>>11) | 1
	i := uint64(fp) * 0x9e3779b1 % m.q.ghostCap
	return m.ghostBase(s) + int(i)*4, fp
}

func (m *Map) ghostBase(s uint64) int {
	return m.q.base + int(s)*m.q.stride + int(m.q.smallCap+m.q.mainCap)*8
}

// forget remembers key h as evicted from segment s's small queue.
func (m *Map) forget(s, h uint64) {
	off, fp := m.ghostEntry(s, h)
	mem.Store32(m.mem, off, fp)
}

// recalled reports whether key h was evicted from the small queue lately,
// and forgets it: it comes back once.
func (m *Map) recalled(s, h uint64) bool {
	off, fp := m.ghostEntry(s, h)
	if mem.Load32(m.mem, off) != fp {
		return false
	}
	mem.Store32(m.mem, off, 0)
	return true
}

// clearGhost forgets every key of segment s.
func (m *Map) clearGhost(s uint64) {
	base := m.ghostBase(s)
	for i := range int(m.q.ghostCap) {
		mem.Store32(m.mem, base+4*i, 0)
	}
}

// capacity is how many live entries a segment of n slots holds before an
// insert evicts: 7/8 of it, so a miss probes about 30 slots at worst
// rather than the whole segment.
func capacity(n uint64) uint64 { return max(1, n-n/8) }

func (m *Map) use(i uint64) byte { return mem.LoadByte(m.mem, m.q.useBase+int(i)) }

func (m *Map) setUse(i uint64, u byte) { mem.StoreByte(m.mem, m.q.useBase+int(i), u) }

// touch counts a use of slot i: at most one byte written, and none once
// the count is at its cap. A lost race loses a count, which is harmless.
func (m *Map) touch(i uint64) {
	off := m.q.useBase + int(i)
	if u := mem.LoadByte(m.mem, off); u&useCount < useCount {
		mem.CASByte(m.mem, off, u, u+1)
	}
}

// A fifo is one of a segment's queues.
type fifo struct {
	head, tail int // offsets of the counters
	ring       int // offset of entry 0
	cap        uint64
}

func (m *Map) small(s uint64) fifo {
	lk := m.lockOff(s)
	return fifo{lk + stSmallHead, lk + stSmallTail, m.q.base + int(s)*m.q.stride, m.q.smallCap}
}

func (m *Map) main(s uint64) fifo {
	lk := m.lockOff(s)
	return fifo{lk + stMainHead, lk + stMainTail, m.q.base + int(s)*m.q.stride + int(m.q.smallCap)*8, m.q.mainCap}
}

// len returns the queue's length, or false when its counters make no
// sense (a damaged file): the caller rebuilds the queues.
func (q fifo) len(b []byte) (uint64, bool) {
	h, t := mem.Load64(b, q.head), mem.Load64(b, q.tail)
	if t < h || t-h > q.cap {
		return 0, false
	}
	return t - h, true
}

func (q fifo) push(b []byte, h uint64) bool {
	n, ok := q.len(b)
	if !ok || n == q.cap {
		return false
	}
	t := mem.Load64(b, q.tail)
	mem.Put64(b, q.ring+int(t%q.cap)*8, h)
	mem.Put64(b, q.tail, t+1)
	return true
}

func (q fifo) pop(b []byte) (uint64, bool) {
	if n, ok := q.len(b); !ok || n == 0 {
		return 0, false
	}
	hd := mem.Load64(b, q.head)
	h := mem.Load64(b, q.ring+int(hd%q.cap)*8)
	mem.Put64(b, q.head, hd+1)
	return h, true
}

func (q fifo) reset(b []byte) {
	mem.Put64(b, q.head, 0)
	mem.Put64(b, q.tail, 0)
}

// enqueue puts a new key (hash h, slot i) at the tail of the small queue,
// or of the main one when the small one is full or the ghost recalls it.
func (m *Map) enqueue(s, i, h uint64) {
	if !m.recalled(s, h) && m.small(s).push(m.mem, h) {
		m.setUse(i, useSmall)
		return
	}
	m.setUse(i, 0)
	if !m.main(s).push(m.mem, h) {
		m.rebuildQueues(s, m.span(s)) // full of entries of deleted keys
	}
}

// makeRoom evicts from segment s while it holds its capacity, and returns
// the free slot for a new key of hash h (which an eviction's moves may
// have changed).
func (m *Map) makeRoom(s, h uint64, free view) view {
	sp := m.span(s)
	if m.used(s) < capacity(sp.len()) {
		return free
	}
	for tries := 0; tries < 4 && m.used(s) >= capacity(sp.len()); tries++ {
		if !m.evictOne(s, sp) {
			break
		}
	}
	return m.firstFree(h)
}

// Bounds on one eviction's work under the segment lock. When every key
// was read since its last pass, S3-FIFO would send the whole main queue
// round (up to three times, as the counts fall) before it evicts: 69 ms
// at 65,536 slots. Instead, after maxReinserts reinsertions (a key read
// in the small queue moving to main, or one read in main going round
// again) the next key popped is evicted whatever its count, as a CLOCK
// hand that has swept far enough evicts where it stands; so are the keys
// popped after maxStalePops entries of keys no longer there.
const (
	maxReinserts = 64
	maxStalePops = 4096
)

// evictOne evicts one entry of segment s by S3-FIFO, a lapsed one first
// met, and reports whether it did (false when the queues hold no live
// key within the bounds above, the insert then takes a free slot anyway).
// Each eviction pops at most maxReinserts+maxStalePops+1 entries, plus
// one rebuild of damaged or empty queues.
func (m *Map) evictOne(s uint64, sp span) bool {
	smallQ, mainQ := m.small(s), m.main(s)
	target := capacity(sp.len()) / 10
	rebuilt := false
	reinserts, stale := 0, 0
	for stale <= maxStalePops {
		ns, ok1 := smallQ.len(m.mem)
		nm, ok2 := mainQ.len(m.mem)
		if !ok1 || !ok2 || ns+nm == 0 {
			if rebuilt {
				return false
			}
			m.rebuildQueues(s, sp)
			rebuilt = true
			continue
		}
		fromSmall := ns > 0 && (ns >= target || nm == 0)
		q := mainQ
		if fromSmall {
			q = smallQ
		}
		h, _ := q.pop(m.mem)
		i, v, ok := m.findHash(sp, h)
		if !ok || (m.use(i)&useSmall != 0) != fromSmall {
			stale++
			continue // its key is gone, or it went to the other queue
		}
		u := m.use(i)
		switch {
		case lapsed(v.deadline):
			return m.evict(s, v, mhExpired)
		case u&useCount == 0 || reinserts >= maxReinserts:
			if fromSmall {
				m.forget(s, h)
			}
			return m.evict(s, v, mhEvicted)
		case fromSmall: // read while in the small queue: into the main one
			m.setUse(i, 0)
			if !mainQ.push(m.mem, h) {
				m.rebuildQueues(s, sp)
			}
		default: // read since it last went around: around again
			m.setUse(i, u-1)
			mainQ.push(m.mem, h)
		}
		reinserts++
	}
	return false
}

// evict removes the entry v, counting it in field.
func (m *Map) evict(s uint64, v view, field int) bool {
	crashPoint("evict")
	if !m.remove(s, v) {
		return false
	}
	m.stat(field)
	return true
}

// findHash finds the live slot of segment sp holding the key of hash h,
// by the tags, within the probe limit.
func (m *Map) findHash(sp span, h uint64) (uint64, view, bool) {
	_, hsp, i := m.place(h)
	if hsp != sp { // a damaged queue entry: another segment's hash
		return 0, view{}, false
	}
	want := tagOf(h)
	for left := m.probeLimit(sp); left > 0; {
		skip, t := m.scanTags(sp, i, left, belowKey, want)
		if skip == left || t == 0 {
			break
		}
		i, left = sp.add(i, skip), left-skip
		off := m.slotOff(i)
		meta := mem.Load64(m.mem, off+sMeta)
		if metaState(meta) == stateLive && mem.Load64(m.mem, off+sHash) == h {
			return i, view{off: off, ver: mem.Load64(m.mem, off+sVersion), meta: meta,
				deadline: int64(mem.Load64(m.mem, deadlineOff(off, meta)))}, true
		}
		i, left = sp.add(i, 1), left-1
	}
	return 0, view{}, false
}

// replaceNear writes a new key over an entry within the probe bound of
// its home, when an evicting map finds no free slot there (keys chosen to
// collide, or a segment packed by them): the entry S3-FIFO would evict
// first among those there, as far as a slot tells (see victimNear). The
// slot stays occupied, so no other key's path changes.
func (m *Map) replaceNear(s uint64, e *entry) error {
	_, sp, home := m.place(e.h)
	m.stat(mhProbeLimited)
	victim, field := m.victimNear(sp, home)
	off := m.slotOff(victim)
	v := view{off: off, ver: mem.Load64(m.mem, off+sVersion), meta: mem.Load64(m.mem, off+sMeta)}
	if field == mhEvicted && m.use(victim) == useSmall {
		m.forget(s, mem.Load64(m.mem, off+sHash)) // left the small queue unread, as evictOne's
	}
	crashPoint("evict")
	odd := m.begin(s, v)
	m.setTag(victim, tagOf(e.h))
	m.noteDistance(sp, home, victim)
	m.fill(off, e)
	m.enqueue(s, victim, e.h)
	if !m.end(off, odd) {
		return m.errLockLost(s)
	}
	m.clearIntent(s)
	if metaState(v.meta) == stateLive {
		m.stat(field)
	} else {
		m.addCounts(s, 1, 0)
	}
	return nil
}

// victimNear picks the entry replaceNear overwrites, within the probe
// bound from home, and the counter its loss counts in: a lapsed entry if
// there is one, else by S3-FIFO's order of eviction as the use bytes tell
// it: a key unread in the small queue (evicted next, when the small queue
// is at its share), then one unread in main, then the least read. A slot
// does not tell a key's place in its queue, so among equals the first
// from home is taken.
func (m *Map) victimNear(sp span, home uint64) (victim uint64, field int) {
	n := min(sp.len(), probeBound)
	victim, best := sp.add(home, n-1), 4
	for k, i := uint64(0), home; k < n; k, i = k+1, sp.add(i, 1) {
		off := m.slotOff(i)
		meta := mem.Load64(m.mem, off+sMeta)
		if metaState(meta) != stateLive {
			continue
		}
		if lapsed(int64(mem.Load64(m.mem, deadlineOff(off, meta)))) {
			return i, mhExpired
		}
		if r := evictRank(m.use(i)); r < best {
			victim, best = i, r
		}
	}
	return victim, mhEvicted
}

// evictRank orders use bytes by how soon S3-FIFO evicts their keys: 0 for
// unread in the small queue, then 1 + the read count for main, and the
// small queue's read keys (which go to main first) last.
func evictRank(u byte) int {
	switch {
	case u == useSmall:
		return 0
	case u&useSmall != 0:
		return 4
	default:
		return 1 + int(u&useCount)
	}
}

// rebuildQueues refills segment s's queues from its slots: every live key
// into the main queue, in slot order, keeping its read count.
func (m *Map) rebuildQueues(s uint64, sp span) {
	smallQ, mainQ := m.small(s), m.main(s)
	smallQ.reset(m.mem)
	mainQ.reset(m.mem)
	for i := sp.lo; i < sp.hi; i++ {
		off := m.slotOff(i)
		if metaState(mem.Load64(m.mem, off+sMeta)) != stateLive {
			m.setUse(i, 0)
			continue
		}
		m.setUse(i, m.use(i)&useCount)
		mainQ.push(m.mem, mem.Load64(m.mem, off+sHash))
	}
}
