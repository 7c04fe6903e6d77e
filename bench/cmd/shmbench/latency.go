package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
)

// The latency section: one operation at a time, each timed on its own
// (two monotonic clock reads around it), for a distribution instead of a
// rate. Each cell runs latWarm untimed, then records every operation for
// latDur. "2 procs" adds a second process doing the same on the same key
// or ring (the contender), so the two meet on one stripe, one slot, one
// publish lock or one group lock; for Load the contender stores to the
// key being read.

// The operations.
const (
	latLoad    = "Load"
	latStore   = "Store"
	latAdd     = "Add"
	latPublish = "Publish"
	latClaim   = "Claim+Ack"
)

var latOps = []string{latLoad, latStore, latAdd, latPublish, latClaim}

// latPeers: shmarena; a Go map behind sync.RWMutex (and for the ring
// operations a ring of preallocated slots behind a sync.Mutex, and a
// queue with a pending set behind one for Claim+Ack), two goroutines for
// "2"; Redis over loopback (GET, SET, INCR, XADD, XREADGROUP COUNT 1 +
// XACK), a second client process for "2".
var latPeers = []string{"shmarena", "RWMutex map", "Redis"}

const (
	latKey      = "lat:key:000000000000000"
	latCtr      = "lat:ctr:000000000000000"
	latPrepN    = 32 // records published (untimed) before each run of claims
	latRedisDB  = 3
	latMaxLats  = 4 << 20
	latRingSize = 4096
)

type latResult struct {
	op, peer            string
	procs               int
	note                string
	n                   int
	busy                int // operations that returned busy (not found)
	p50, p99, p999, max time.Duration
}

// A latTarget is one peer's handle in one process.
type latTarget interface {
	// prep does untimed work before a run of Claim+Ack: it publishes
	// latPrepN records.
	prep() error
	// do performs one operation; false when there was nothing to claim
	// (such a call is not counted).
	do(op string) (bool, error)
	close()
}

// --- shmarena ---

type shmLat struct {
	a       *shmarena.Arena
	m       *shmarena.Map
	pub, cl *shmarena.Ring
	g       *shmarena.Group
	buf     []byte
	val     []byte
	busy    int // Loads that found the key busy (see takeBusy)
}

// takeBusy returns and clears how many Loads returned not-found since the
// last call: Map.AppendLoad gives up on a key whose slot another process
// keeps rewriting (64 changed versions in a row) or holds odd for 5 ms (a
// writer descheduled inside its write), and reports it absent (counted in
// the map's Busy statistic). Such a Load is timed like any other.
func (s *shmLat) takeBusy() int { n := s.busy; s.busy = 0; return n }

func latArenaOpts() (int64, []shmarena.RegionOption, []shmarena.RegionOption, []shmarena.RegionOption, error) {
	mopts := []shmarena.RegionOption{shmarena.WithSlots(1024), shmarena.WithSlotSize(128)}
	popts := []shmarena.RegionOption{shmarena.WithSlots(latRingSize), shmarena.WithSlotSize(256)}
	copts := []shmarena.RegionOption{shmarena.WithSlots(latRingSize), shmarena.WithSlotSize(256), shmarena.WithMaxInFlight(256)}
	size := int64(shmarena.MinSize)
	mb, err := shmarena.MapBytes(mopts...)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	pb, err := shmarena.RingBytes(popts...)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	cb, err := shmarena.RingBytes(copts...)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	return size + mb + pb + cb + 1<<20, mopts, popts, copts, nil
}

func openShmLat(dir string, create bool) (*shmLat, error) {
	size, mopts, popts, copts, err := latArenaOpts()
	if err != nil {
		return nil, err
	}
	var oo []shmarena.OpenOption
	if create {
		oo = append(oo, shmarena.WithSize(size))
	}
	a, err := shmarena.Open(filepath.Join(dir, "lat-arena"), oo...)
	if err != nil {
		return nil, err
	}
	s := &shmLat{a: a, val: valueOf(64), buf: make([]byte, 0, 64)}
	if s.m, err = a.Map("lat", mopts...); err == nil {
		if s.pub, err = a.Ring("pub", popts...); err == nil {
			if s.cl, err = a.Ring("claim", copts...); err == nil {
				s.g, err = s.cl.Group("g", shmarena.WithAck(30*time.Second))
			}
		}
	}
	if err == nil && create {
		if err = s.m.Store(latKey, s.val); err == nil {
			_, err = s.m.Add(latCtr, 0)
		}
	}
	if err != nil {
		a.Close()
		return nil, err
	}
	return s, nil
}

func (s *shmLat) prep() error {
	for range latPrepN {
		if _, err := s.cl.Publish("t", s.val); err != nil && !errors.Is(err, shmarena.ErrRingFull) {
			return err
		}
	}
	return nil
}

func (s *shmLat) do(op string) (bool, error) {
	var err error
	switch op {
	case latLoad:
		var ok bool
		if s.buf, ok = s.m.AppendLoad(s.buf[:0], latKey); !ok {
			s.busy++
		}
	case latStore:
		err = s.m.Store(latKey, s.val)
	case latAdd:
		_, err = s.m.Add(latCtr, 1)
	case latPublish:
		_, err = s.pub.Publish("t", s.val)
	case latClaim:
		recs := s.g.Claim(1)
		if len(recs) == 0 {
			return false, nil
		}
		err = s.g.Ack(recs...)
	}
	return err == nil, err
}

func (s *shmLat) close() { s.a.Close() }

// --- Go map behind an RWMutex; a mutex ring; a mutex queue ---

type muShared struct {
	rw *rwStore

	pmu  sync.Mutex
	ring [latRingSize][64]byte
	head uint64

	qmu        sync.Mutex
	q          [latRingSize][64]byte
	qhead, qtl uint64
	pending    map[uint64]struct{}
}

type muLat struct {
	s   *muShared
	buf []byte
	val []byte
	rec [64]byte
}

func newMuShared() *muShared {
	s := &muShared{rw: &rwStore{m: map[string][]byte{}, c: map[string]int64{}}, pending: map[uint64]struct{}{}}
	s.rw.Fill([]string{latKey}, valueOf(64), []string{latCtr})
	return s
}

func (t *muLat) prep() error {
	s := t.s
	s.qmu.Lock()
	for range latPrepN {
		if s.qtl-s.qhead < latRingSize {
			copy(s.q[s.qtl%latRingSize][:], t.val)
			s.qtl++
		}
	}
	s.qmu.Unlock()
	return nil
}

func (t *muLat) do(op string) (bool, error) {
	s := t.s
	switch op {
	case latLoad:
		var ok bool
		if t.buf, ok = s.rw.get(latKey, t.buf); !ok {
			return false, errors.New("RWMutex map: the latency key is missing")
		}
	case latStore:
		s.rw.set(latKey, t.val)
	case latAdd:
		s.rw.mu.Lock()
		s.rw.c[latCtr]++
		s.rw.mu.Unlock()
	case latPublish:
		s.pmu.Lock()
		copy(s.ring[s.head%latRingSize][:], t.val)
		s.head++
		s.pmu.Unlock()
	case latClaim:
		// Claim: take the oldest record into the pending set; Ack: drop
		// it from the set. Two lock round trips, as the acking group's.
		s.qmu.Lock()
		if s.qhead == s.qtl {
			s.qmu.Unlock()
			return false, nil
		}
		seq := s.qhead
		s.qhead++
		t.rec = s.q[seq%latRingSize]
		s.pending[seq] = struct{}{}
		s.qmu.Unlock()
		s.qmu.Lock()
		delete(s.pending, seq)
		s.qmu.Unlock()
	}
	return true, nil
}

func (t *muLat) close() {}

// --- Redis ---

type redisLat struct {
	c        *redis.Client
	val      []byte
	consumer string
}

func openRedisLat(addr, consumer string, create bool) (*redisLat, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DB: latRedisDB, PoolSize: 2, Protocol: 2, DisableIdentity: true,
		ReadTimeout: -1, WriteTimeout: -1})
	t := &redisLat{c: c, val: valueOf(64), consumer: consumer}
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, err
	}
	if create {
		err := c.FlushDB(ctx).Err()
		if err == nil {
			err = c.Set(ctx, latKey, t.val, 0).Err()
		}
		if err == nil {
			err = c.Set(ctx, latCtr, 0, 0).Err()
		}
		if err == nil {
			err = c.XGroupCreateMkStream(ctx, "lat:claim", "g", "$").Err()
		}
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	return t, nil
}

func (t *redisLat) prep() error {
	ctx := context.Background()
	p := t.c.Pipeline()
	for range latPrepN {
		p.XAdd(ctx, &redis.XAddArgs{Stream: "lat:claim", MaxLen: 10000, Approx: true, Values: []any{"p", t.val}})
	}
	_, err := p.Exec(ctx)
	return err
}

func (t *redisLat) do(op string) (bool, error) {
	ctx := context.Background()
	var err error
	switch op {
	case latLoad:
		err = t.c.Get(ctx, latKey).Err()
	case latStore:
		err = t.c.Set(ctx, latKey, t.val, 0).Err()
	case latAdd:
		err = t.c.Incr(ctx, latCtr).Err()
	case latPublish:
		err = t.c.XAdd(ctx, &redis.XAddArgs{Stream: "lat:pub", MaxLen: 10000, Approx: true, Values: []any{"p", t.val}}).Err()
	case latClaim:
		res, err := t.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: t.consumer,
			Streams: []string{"lat:claim", ">"}, Count: 1, Block: -1}).Result()
		if errors.Is(err, redis.Nil) || (err == nil && (len(res) == 0 || len(res[0].Messages) == 0)) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		err = t.c.XAck(ctx, "lat:claim", "g", res[0].Messages[0].ID).Err()
		return err == nil, err
	}
	return err == nil, err
}

func (t *redisLat) close() { t.c.Close() }

// --- measuring ---

// latLoop runs op on t: untimed for warm, then timed one by one for dur
// (or until latMaxLats samples). Claim+Ack publishes latPrepN records,
// untimed, before each run of claims.
func latLoop(t latTarget, op string, warm, dur time.Duration, record bool) ([]time.Duration, error) {
	var lats []time.Duration
	if record {
		lats = make([]time.Duration, 0, 1<<16)
	}
	start := time.Now()
	for i := 0; ; i++ {
		if op == latClaim && i%latPrepN == 0 {
			if err := t.prep(); err != nil {
				return nil, err
			}
		}
		t0 := time.Now()
		ok, err := t.do(op)
		d := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		el := t0.Add(d).Sub(start)
		if record && ok && el >= warm {
			lats = append(lats, d)
		}
		if el >= warm+dur || len(lats) >= latMaxLats {
			return lats, nil
		}
	}
}

// contenderOp is what the second process does while op is measured.
func contenderOp(op string) string {
	if op == latLoad {
		return latStore // a reader meets a writer of its key
	}
	return op
}

// latWorker is the contender process: it opens the peer's shared state
// and runs op from the parent's "go" for warm+dur and a little more.
func latWorker(peer, dir, addr, op string, d time.Duration) error {
	var t latTarget
	var err error
	switch peer {
	case "shmarena":
		t, err = openShmLat(dir, false)
	case "Redis":
		t, err = openRedisLat(addr, "c2", false)
	default:
		err = fmt.Errorf("no latency peer %q", peer)
	}
	if err != nil {
		return err
	}
	defer t.close()
	if err := awaitGo(); err != nil {
		return err
	}
	_, err = latLoop(t, op, 0, d, false)
	return err
}

func percentiles(lats []time.Duration) (p50, p99, p999, mx time.Duration) {
	slices.Sort(lats)
	at := func(q float64) time.Duration { return lats[min(int(q*float64(len(lats))), len(lats)-1)] }
	return at(0.50), at(0.99), at(0.999), lats[len(lats)-1]
}

// clockCost is the median time of two back-to-back clock reads: part of
// every latency figure.
func clockCost() time.Duration {
	lats := make([]time.Duration, 100_000)
	for i := range lats {
		t0 := time.Now()
		lats[i] = time.Since(t0)
	}
	p50, _, _, _ := percentiles(lats)
	return p50
}

func latencyBench(dir, addr string, short bool) ([]latResult, []string, error) {
	warmD, dur := 100*time.Millisecond, time.Second
	if short {
		warmD, dur = 20*time.Millisecond, 60*time.Millisecond
	}
	var out []latResult
	var notes []string
	for _, peer := range latPeers {
		if peer == "Redis" && addr == "" {
			notes = append(notes, "Latency: Redis rows skipped: no Redis.")
			continue
		}
		var t latTarget
		var shared *muShared
		var err error
		switch peer {
		case "shmarena":
			t, err = openShmLat(dir, true)
		case "RWMutex map":
			shared = newMuShared()
			t = &muLat{s: shared, val: valueOf(64), buf: make([]byte, 0, 64)}
		case "Redis":
			t, err = openRedisLat(addr, "c1", true)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("latency %s: %w", peer, err)
		}
		for _, op := range latOps {
			for procs := 1; procs <= 2; procs++ {
				if b, ok := t.(interface{ takeBusy() int }); ok {
					b.takeBusy() // the warm-up's do not count
				}
				res := latResult{op: op, peer: peer, procs: procs}
				var lats []time.Duration
				switch {
				case procs == 1:
					lats, err = latLoop(t, op, warmD, dur, true)
				case shared != nil:
					res.note = "2 goroutines"
					other := &muLat{s: shared, val: valueOf(64), buf: make([]byte, 0, 64)}
					var wg sync.WaitGroup
					var oerr error
					wg.Go(func() { _, oerr = latLoop(other, contenderOp(op), 0, warmD+dur+50*time.Millisecond, false) })
					lats, err = latLoop(t, op, warmD, dur, true)
					wg.Wait()
					err = errors.Join(err, oerr)
				default:
					var c *child
					c, err = spawn("-worker=lat", "-w.peer="+peer, "-w.dir="+dir, "-w.redis="+addr, "-w.arg="+contenderOp(op),
						fmt.Sprint("-w.dur=", warmD+dur+50*time.Millisecond))
					if err != nil {
						break
					}
					if err = c.start(); err != nil {
						break
					}
					lats, err = latLoop(t, op, warmD, dur, true)
					if _, werr := c.wait(); err == nil {
						err = werr
					}
				}
				if err != nil {
					t.close()
					return nil, nil, fmt.Errorf("latency %s %s x%d: %w", peer, op, procs, err)
				}
				if len(lats) == 0 {
					t.close()
					return nil, nil, fmt.Errorf("latency %s %s x%d: no operation completed", peer, op, procs)
				}
				if b, ok := t.(interface{ takeBusy() int }); ok {
					res.busy = b.takeBusy()
				}
				res.n = len(lats)
				res.p50, res.p99, res.p999, res.max = percentiles(lats)
				logf("  %-12s %-9s x%d  p50 %9v p99 %9v p999 %9v max %9v (%d)", peer, op, procs, res.p50, res.p99, res.p999, res.max, res.n)
				out = append(out, res)
			}
		}
		t.close()
	}
	notes = append(notes, fmt.Sprintf("Latency: each operation timed alone by two monotonic clock reads (which add about %v to every figure here); %v untimed, then %v recorded per cell; "+
		"\"2\" = a second process (a second goroutine for the in-process peer) doing the same operation on the same key or ring meanwhile (storing the key, for Load). "+
		"The in-process peer for Publish is a ring of preallocated 64-byte slots behind a sync.Mutex; for Claim+Ack a queue with a pending set behind one (two lock round trips). "+
		"Redis: GET, SET, INCR, XADD, XREADGROUP COUNT 1 + XACK on a group; Claim+Ack runs after an untimed batch of %d publishes.",
		clockCost(), warmD, dur, latPrepN))
	return out, notes, nil
}
