package sim

import "cmp"

// S3Config shapes an S3-FIFO simulator. The zero value of every field but
// Capacity gives the reference: libCacheSim's S3FIFO.c defaults
// (1a1a11a/libCacheSim, libCacheSim/cache/eviction/S3FIFO.c:
// "small-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=2").
type S3Config struct {
	// Capacity is the number of entries the whole cache holds.
	Capacity int
	// NoGhost drops the ghost (shmarena before its ghost, and the "no
	// ghost" columns).
	NoGhost bool
	// FingerprintGhost replaces the ghost FIFO with shmarena's ghost
	// (hashmap_evict.go: forget, recalled, ghostEntry): per
	// segment, a direct-mapped table of 32-bit fingerprints of the keys
	// evicted unread from the small queue, a newer fingerprint replacing
	// whatever its entry held; a new key whose fingerprint its entry holds
	// goes to the main queue, and the entry is cleared. The table has 9/10
	// of a segment's capacity entries (of the longest segment's, with
	// SegmentSlots, as the map sizes it) and, as in the map, is looked up
	// after the evictions that make room for the key. Ignored with
	// NoGhost.
	FingerprintGhost bool
	// Threshold is the read count at which an entry leaving the small
	// queue moves to the main one rather than out; 0 means 2, as in
	// libCacheSim. shmarena moves an entry read once (1).
	Threshold int
	// Segments splits the cache into independent S3-FIFO caches chosen
	// by a hash of the key, as shmarena's segments are; 0 means 1.
	// With SegmentSlots set, segment i holds capacity(its slots) entries
	// the way shmarena sizes them; else Capacity is split evenly.
	Segments int
	// SegmentSlots, when non-zero, is the map's slot count: segments get
	// slots/Segments slots each (the last the remainder) and hold 7/8 of
	// them, like shmarena's; Capacity is then ignored.
	SegmentSlots int
	// Live, with SegmentSlots, replaces MapCapacity as the entries a
	// segment of n slots holds: for what-if runs.
	Live func(n int) int
}

// S3FIFO simulates S3-FIFO (Yang et al., SOSP 2023) exactly as
// libCacheSim's S3FIFO.c does: a small FIFO of 10% of the capacity that
// new keys enter, a main FIFO of the rest with a 2-bit clock (an entry
// read since it last went around goes around again, its count less one),
// and a ghost FIFO of 90% of the capacity holding ids evicted from the
// small queue (a miss on a ghost id enters the main queue). Before the
// first eviction, a new key enters the main queue when the small one is
// full. S3Config changes it towards shmarena's map, down to the map's
// model (MapModel). Not safe for concurrent use.
type S3FIFO struct {
	thr  uint8
	ghst bool
	fp   bool // FingerprintGhost
	segs []s3seg
	obj  map[uint32]uint8 // key -> read count (saturating at 3) | inSmall
	gh   map[uint32]uint32
	seq  uint32
}

const s3InSmall = 0x80

type s3seg struct {
	cap, smallCap, mainCap, ghostCap int
	small, main                      ring
	ghost                            ghostQ
	nghost                           int
	evicted                          bool
	fps                              []uint32 // FingerprintGhost's table; 0 is empty
}

// NewS3FIFO returns an empty S3-FIFO simulator shaped by c.
func NewS3FIFO(c S3Config) *S3FIFO {
	s := &S3FIFO{thr: 2, ghst: !c.NoGhost, fp: !c.NoGhost && c.FingerprintGhost, obj: map[uint32]uint8{}, gh: map[uint32]uint32{}}
	if c.Threshold > 0 {
		s.thr = uint8(min(c.Threshold, 3))
	}
	n := max(1, c.Segments)
	caps := make([]int, n)
	fpLen := 0 // 0: 9/10 of each segment's own capacity
	if c.SegmentSlots > 0 {
		seg := c.SegmentSlots / n
		live := MapCapacity
		if c.Live != nil {
			live = c.Live
		}
		fpLen = max(1, live(seg+c.SegmentSlots%n)*9/10) // queueCaps in the core's hashmap_evict.go
		for i := range caps {
			sl := seg
			if i == n-1 {
				sl = c.SegmentSlots - seg*(n-1)
			}
			if c.Live != nil {
				caps[i] = c.Live(sl)
			} else {
				caps[i] = MapCapacity(sl)
			}
		}
	} else {
		for i := range caps {
			caps[i] = c.Capacity / n
		}
		caps[n-1] += c.Capacity % n
	}
	for _, cp := range caps {
		cp = max(1, cp)
		small := int(float64(cp) * 0.10)
		g := s3seg{cap: cp, smallCap: small, mainCap: cp - small,
			ghostCap: int(float64(cp) * 0.90), small: newRing(cp), main: newRing(cp)}
		if s.fp {
			g.fps = make([]uint32, cmp.Or(fpLen, max(1, cp*9/10)))
		}
		s.segs = append(s.segs, g)
	}
	return s
}

// MapCapacity is how many live entries a shmarena segment of n slots
// holds: 7/8 of them (function capacity in the core's hashmap_evict.go).
func MapCapacity(n int) int { return max(1, n-n/8) }

// Capacity returns the entries the simulator holds when full.
func (s *S3FIFO) Capacity() int {
	n := 0
	for i := range s.segs {
		n += s.segs[i].cap
	}
	return n
}

// Len returns the entries held.
func (s *S3FIFO) Len() int { return len(s.obj) }

// segOf returns the segment of key k, whose hash is h = mix64(k): chosen
// by h's low 32 bits, as the map's stripeOf does.
func (s *S3FIFO) segOf(h uint64) *s3seg {
	return &s.segs[(uint64(uint32(h))*uint64(len(s.segs)))>>32]
}

// Access implements Cache; it never fails.
func (s *S3FIFO) Access(k uint32) (bool, error) {
	if f, ok := s.obj[k]; ok {
		if f&3 < 3 {
			s.obj[k] = f + 1
		}
		return true, nil
	}
	h := mix64(uint64(k))
	g := s.segOf(h)
	hitGhost := false
	if s.ghst && !s.fp {
		if _, ok := s.gh[k]; ok {
			delete(s.gh, k)
			g.nghost--
			hitGhost = true
		}
	}
	for g.small.n+g.main.n >= g.cap {
		s.evict(g)
	}
	if s.fp {
		hitGhost = g.recalled(h)
	}
	switch {
	case hitGhost:
		g.main.push(k)
		s.obj[k] = 0
	case !g.evicted && g.small.n >= g.smallCap:
		g.main.push(k)
		s.obj[k] = 0
	default:
		g.small.push(k)
		s.obj[k] = s3InSmall
	}
	return false, nil
}

func (s *S3FIFO) evict(g *s3seg) {
	g.evicted = true
	if g.main.n > g.mainCap || g.small.n == 0 {
		s.evictMain(g)
	} else {
		s.evictSmall(g)
	}
}

func (s *S3FIFO) evictSmall(g *s3seg) {
	for g.small.n > 0 {
		k := g.small.pop()
		if s.obj[k]&3 >= s.thr {
			s.obj[k] = 0 // a new object in main: count 0, as libCacheSim's insert
			g.main.push(k)
			continue
		}
		delete(s.obj, k)
		switch {
		case s.fp:
			g.forget(mix64(uint64(k)))
		case s.ghst:
			s.ghostAdd(g, k)
		}
		return
	}
}

func (s *S3FIFO) evictMain(g *s3seg) {
	for g.main.n > 0 {
		k := g.main.pop()
		f := s.obj[k] & 3
		if f >= 1 {
			s.obj[k] = f - 1
			g.main.push(k)
			continue
		}
		delete(s.obj, k)
		return
	}
}

func (s *S3FIFO) ghostAdd(g *s3seg, k uint32) {
	if _, ok := s.gh[k]; ok {
		return // libCacheSim's FIFO get: already there is a hit, no change
	}
	for g.nghost >= g.ghostCap && g.ghost.len() > 0 {
		e := g.ghost.pop()
		if q, ok := s.gh[e.key]; ok && q == e.seq {
			delete(s.gh, e.key)
			g.nghost--
		}
	}
	if g.ghostCap == 0 {
		return
	}
	s.seq++
	s.gh[k] = s.seq
	g.ghost.push(ghostEntry{k, s.seq})
	g.nghost++
}

// fingerprint returns the entry of g's fingerprint table a key of hash h
// goes to and its fingerprint (never 0), as the map's ghostEntry does.
func (g *s3seg) fingerprint(h uint64) (int, uint32) {
	fp := uint32(h>>32^h>>11) | 1
	return int(uint64(fp) * 0x9e3779b1 % uint64(len(g.fps))), fp
}

// forget remembers the key of hash h as evicted from g's small queue.
func (g *s3seg) forget(h uint64) {
	i, fp := g.fingerprint(h)
	g.fps[i] = fp
}

// recalled reports whether g's fingerprint table remembers the key of
// hash h, and clears its entry if so.
func (g *s3seg) recalled(h uint64) bool {
	i, fp := g.fingerprint(h)
	if g.fps[i] != fp {
		return false
	}
	g.fps[i] = 0
	return true
}

// ring is a fixed-capacity FIFO of keys.
type ring struct {
	buf     []uint32
	head, n int
}

func newRing(c int) ring { return ring{buf: make([]uint32, c+1)} }

func (r *ring) push(k uint32) {
	if r.n == len(r.buf) {
		panic("sim: ring overflow") // a simulator bug, not data
	}
	r.buf[(r.head+r.n)%len(r.buf)] = k
	r.n++
}

func (r *ring) pop() uint32 {
	k := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return k
}

// ghostQ is a growable FIFO of ghost entries; removed ids stay in it until
// popped and are recognised by their sequence number.
type ghostEntry struct{ key, seq uint32 }

type ghostQ struct {
	buf  []ghostEntry
	head int
}

func (q *ghostQ) len() int { return len(q.buf) - q.head }

func (q *ghostQ) push(e ghostEntry) {
	if q.head > 1024 && q.head > len(q.buf)/2 {
		q.buf = append(q.buf[:0], q.buf[q.head:]...)
		q.head = 0
	}
	q.buf = append(q.buf, e)
}

func (q *ghostQ) pop() ghostEntry {
	e := q.buf[q.head]
	q.head++
	return e
}

// mix64 is SplitMix64's finaliser: a stand-in for the map's key hash when
// choosing a simulated segment.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
