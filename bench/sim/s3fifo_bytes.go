package sim

// S3FIFOBytes simulates S3-FIFO under a budget in bytes exactly as
// libCacheSim's S3FIFO.c does with object sizes (1a1a11a/libCacheSim,
// libCacheSim/cache/eviction/S3FIFO.c, defaults
// "small-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=2"):
//
//   - the small FIFO holds 10% of the budget's bytes, the main FIFO the
//     rest; an entry costs its key+value bytes (SizedTrace.Entry);
//   - the ghost is a FIFO of the ids evicted unread from the small queue,
//     bounded by 90% of the budget counted in those ids' entry bytes (it is
//     a libCacheSim FIFO cache of that size), so it remembers about as many
//     keys as 90% of the budget holds;
//   - a miss is admitted only if its entry is smaller than the small FIFO
//     (S3FIFO_can_insert); it enters the main queue if the ghost held its
//     id (the id then leaves the ghost), else the small one (or the main
//     one, before the first eviction, when the small one is full);
//   - space is made before insertion, one eviction at a time, until the
//     entry fits: from the main queue when it holds more than its share or
//     the small one is empty (a 2-bit clock: an entry read since it last
//     went round goes round again, its count less one), else from the
//     small one (an entry read twice moves to main with count 0, one read
//     less goes to the ghost, and that is the eviction).
//
// Not safe for concurrent use.
type S3FIFOBytes struct {
	budget, smallCap, mainCap, ghostCap int64
	small, main, ghost                  keyQueue
	smallBytes, mainBytes, ghostBytes   int64
	obj                                 map[uint32]s3obj
	gh                                  map[uint32]ghostRec
	evicted                             bool
	seq                                 uint32
}

type s3obj struct {
	freq    int32
	inSmall bool
	bytes   int64
}

type ghostRec struct {
	seq   uint32
	bytes int64
}

// NewS3FIFOBytes returns an empty S3FIFOBytes of budget bytes.
func NewS3FIFOBytes(budget int64) *S3FIFOBytes {
	small := int64(float64(budget) * 0.10)
	return &S3FIFOBytes{budget: budget, smallCap: small, mainCap: budget - small,
		ghostCap: int64(float64(budget) * 0.90), obj: map[uint32]s3obj{}, gh: map[uint32]ghostRec{}}
}

// Used returns the bytes held.
func (s *S3FIFOBytes) Used() int64 { return s.smallBytes + s.mainBytes }

// Len returns the entries held.
func (s *S3FIFOBytes) Len() int { return len(s.obj) }

// Access implements SizedCache; it never fails.
func (s *S3FIFOBytes) Access(k uint32, _, entry int) (bool, error) {
	if o, ok := s.obj[k]; ok {
		o.freq++
		s.obj[k] = o
		return true, nil
	}
	hitGhost := false
	if g, ok := s.gh[k]; ok {
		delete(s.gh, k)
		s.ghostBytes -= g.bytes
		hitGhost = true
	}
	b := int64(entry)
	if b > s.smallCap || b > s.budget {
		return false, nil // S3FIFO_can_insert
	}
	for s.smallBytes+s.mainBytes+b > s.budget {
		s.evict()
	}
	switch {
	case hitGhost:
		s.toMain(k, b, 0)
	case b >= s.smallCap:
		// S3FIFO_insert refuses an entry the size of the small FIFO.
	case !s.evicted && s.smallBytes >= s.smallCap:
		s.toMain(k, b, 0)
	default:
		s.small.push(k)
		s.smallBytes += b
		s.obj[k] = s3obj{inSmall: true, bytes: b}
	}
	return false, nil
}

func (s *S3FIFOBytes) toMain(k uint32, b int64, freq int32) {
	s.main.push(k)
	s.mainBytes += b
	s.obj[k] = s3obj{freq: freq, bytes: b}
}

func (s *S3FIFOBytes) evict() {
	s.evicted = true
	if s.mainBytes > s.mainCap || s.smallBytes == 0 {
		s.evictMain()
	} else {
		s.evictSmall()
	}
}

func (s *S3FIFOBytes) evictSmall() {
	for s.smallBytes > 0 {
		k := s.small.pop()
		o := s.obj[k]
		s.smallBytes -= o.bytes
		if o.freq >= 2 {
			s.toMain(k, o.bytes, 0)
			continue
		}
		delete(s.obj, k)
		s.ghostAdd(k, o.bytes)
		return
	}
}

func (s *S3FIFOBytes) evictMain() {
	for s.mainBytes > 0 {
		k := s.main.pop()
		o := s.obj[k]
		if o.freq >= 1 {
			o.freq = min(o.freq, 3) - 1
			s.obj[k] = o
			s.main.push(k)
			continue
		}
		s.mainBytes -= o.bytes
		delete(s.obj, k)
		return
	}
}

// ghostAdd is libCacheSim's FIFO get on the ghost: an id already there is
// a hit and changes nothing; else it is inserted, the oldest ids leaving
// until it fits.
func (s *S3FIFOBytes) ghostAdd(k uint32, b int64) {
	if _, ok := s.gh[k]; ok || b > s.ghostCap {
		return
	}
	for s.ghostBytes+b > s.ghostCap && s.ghost.len() > 0 {
		e, seq := s.ghost.popSeq()
		if g, ok := s.gh[e]; ok && seq == g.seq {
			delete(s.gh, e)
			s.ghostBytes -= g.bytes
		}
	}
	s.seq++
	s.gh[k] = ghostRec{seq: s.seq, bytes: b}
	s.ghost.pushSeq(k, s.seq)
	s.ghostBytes += b
}

// keyQueue is a growable FIFO of keys (and, for the ghost, their sequence
// numbers: a removed id stays queued until popped and is recognised by
// its number).
type keyQueue struct {
	buf  []uint32
	seqs []uint32
	head int
}

func (q *keyQueue) len() int { return len(q.buf) - q.head }

func (q *keyQueue) compact() {
	if q.head > 1024 && q.head > len(q.buf)/2 {
		q.buf = append(q.buf[:0], q.buf[q.head:]...)
		if q.seqs != nil {
			q.seqs = append(q.seqs[:0], q.seqs[q.head:]...)
		}
		q.head = 0
	}
}

func (q *keyQueue) push(k uint32) {
	q.compact()
	q.buf = append(q.buf, k)
}

func (q *keyQueue) pushSeq(k, seq uint32) {
	q.compact()
	q.buf = append(q.buf, k)
	q.seqs = append(q.seqs, seq)
}

func (q *keyQueue) pop() uint32 {
	k := q.buf[q.head]
	q.head++
	return k
}

func (q *keyQueue) popSeq() (k, seq uint32) {
	seq = q.seqs[q.head]
	return q.pop(), seq
}
