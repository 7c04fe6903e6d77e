package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
)

// Values of any size: a read hit and a Store (an overwrite of a present
// key with a value of the same size) at 64 B, 1 KiB, 16 KiB and 256 KiB,
// for the cache a user of shmarena would build for values of mixed sizes
// (an evicting map with a value space: WithEviction, WithBytes, 128-byte
// slots so that a 64-byte value stays inline) against the in-process
// caches a Go program would use instead and Redis. One goroutine, the
// peers alternating within each round; every store holds the whole
// working set (its byte budget is 3x the working set), so a read is a hit.
//
// Every peer copies on the way in and out, as shmarena must: a read
// copies the value into the caller's buffer, a Store keeps a private copy
// of the caller's bytes (else a caller reusing its buffer would change
// the cached value). Ristretto's Set only enqueues the item (a
// background goroutine applies it), so its Store figure is the enqueue;
// the section waits for it between rounds.

// valueSizes are the sizes measured; valueKeys is the working set for
// one, at most valueWSBytes of values.
var valueSizes = []int{64, 1 << 10, 16 << 10, 256 << 10}

func valueKeys(vsize int, short bool) int {
	keys, ws := 4096, 128<<20
	if short {
		keys, ws = 512, 8<<20
	}
	return min(keys, ws/vsize)
}

// A valueStore is one peer of this section.
type valueStore interface {
	get(key string, dst []byte) ([]byte, bool)
	set(key string, val []byte) error
	close()
}

type valuePeer struct {
	name string
	open func(dir, addr string, vsize, keys int, budget int64) (valueStore, error)
}

var valuePeers = []valuePeer{
	{"shmarena", openShmValues},
	{"RWMutex map", func(string, string, int, int, int64) (valueStore, error) {
		return &rwValues{m: map[string][]byte{}}, nil
	}},
	{"ristretto v2", openRistretto},
	{"otter v2", openOtter},
	{"Redis", openRedisValues},
}

// --- shmarena: an evicting map with a value space ---

type shmValues struct {
	a *shmarena.Arena
	m *shmarena.Map
}

func shmValueOptions(keys int, budget int64) []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(max(2*keys, 4096)), shmarena.WithSlotSize(128),
		shmarena.WithBytes(max(budget, 32<<20)), shmarena.WithEviction()}
}

func openShmValues(dir, _ string, vsize, keys int, budget int64) (valueStore, error) {
	opts := shmValueOptions(keys, budget)
	n, err := shmarena.MapBytes(opts...)
	if err != nil {
		return nil, err
	}
	a, err := shmarena.Open(filepath.Join(dir, fmt.Sprintf("values-%d", vsize)), shmarena.WithSize(shmarena.MinSize+n))
	if err != nil {
		return nil, err
	}
	m, err := a.Map("values", opts...)
	if err != nil {
		a.Close()
		return nil, err
	}
	// As a cache's owner would, before latency matters: the value space is
	// written round and round, and a first write to each page of the
	// mapping costs a fault (5-7 µs here), which the Go heaps' peers
	// (whose freed memory the runtime reuses) do not pay.
	if _, err := a.Prefault(); err != nil {
		a.Close()
		return nil, err
	}
	return &shmValues{a: a, m: m}, nil
}

func (s *shmValues) get(k string, dst []byte) ([]byte, bool) { return s.m.AppendLoad(dst[:0], k) }
func (s *shmValues) set(k string, v []byte) error            { return s.m.Store(k, v) }
func (s *shmValues) close()                                  { s.a.Close() }

// --- a Go map behind sync.RWMutex ---

type rwValues struct {
	mu sync.RWMutex
	m  map[string][]byte
}

func (s *rwValues) get(k string, dst []byte) ([]byte, bool) {
	s.mu.RLock()
	v, ok := s.m[k]
	if ok {
		dst = append(dst[:0], v...)
	}
	s.mu.RUnlock()
	return dst, ok
}

func (s *rwValues) set(k string, val []byte) error {
	v := slices.Clone(val)
	s.mu.Lock()
	s.m[k] = v
	s.mu.Unlock()
	return nil
}

func (s *rwValues) close() {}

// --- ristretto v2: cost = the value's bytes ---

type ristrettoValues struct {
	c *ristretto.Cache[string, []byte]
}

func openRistretto(_, _ string, _, keys int, budget int64) (valueStore, error) {
	c, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		NumCounters: int64(10 * keys), MaxCost: budget, BufferItems: 64, IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, err
	}
	return &ristrettoValues{c: c}, nil
}

func (s *ristrettoValues) get(k string, dst []byte) ([]byte, bool) {
	v, ok := s.c.Get(k)
	if ok {
		dst = append(dst[:0], v...)
	}
	return dst, ok
}

func (s *ristrettoValues) set(k string, val []byte) error {
	s.c.Set(k, slices.Clone(val), int64(len(val))) // false: dropped by the set buffer (the read then misses)
	return nil
}

func (s *ristrettoValues) close() { s.c.Close() }

// --- otter v2: weigher = the value's bytes ---

type otterValues struct{ c *otter.Cache[string, []byte] }

func openOtter(_, _ string, _, _ int, budget int64) (valueStore, error) {
	c, err := otter.New(&otter.Options[string, []byte]{
		MaximumWeight: uint64(budget),
		Weigher:       func(_ string, v []byte) uint32 { return uint32(len(v)) },
	})
	if err != nil {
		return nil, err
	}
	return &otterValues{c: c}, nil
}

func (s *otterValues) get(k string, dst []byte) ([]byte, bool) {
	v, ok := s.c.GetIfPresent(k)
	if ok {
		dst = append(dst[:0], v...)
	}
	return dst, ok
}

func (s *otterValues) set(k string, val []byte) error {
	s.c.Set(k, slices.Clone(val))
	return nil
}

func (s *otterValues) close() {}

// --- Redis GET/SET, one per round trip ---

type redisValues struct{ c *redis.Client }

// valuesDB is the Redis database this section uses (the map section uses
// 1 and 2).
const valuesDB = 3

func openRedisValues(_, addr string, _, _ int, _ int64) (valueStore, error) {
	if addr == "" {
		return nil, fmt.Errorf("no Redis")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DB: valuesDB, Protocol: 2, DisableIdentity: true,
		ReadTimeout: -1, WriteTimeout: -1})
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return &redisValues{c: c}, nil
}

func (s *redisValues) get(k string, dst []byte) ([]byte, bool) {
	v, err := s.c.Get(context.Background(), k).Bytes()
	if err != nil {
		return dst, false
	}
	return append(dst[:0], v...), true
}

func (s *redisValues) set(k string, val []byte) error {
	return s.c.Set(context.Background(), k, val, 0).Err()
}

func (s *redisValues) close() { s.c.Close() }

// --- the harness ---

// valueCell is one peer's figures for one size and operation.
type valueCell struct {
	vsize int
	op    string // "read hit" or "store"
	peer  string
	ns    []float64 // ns per operation, per round
	bad   int       // reads that missed or returned the wrong length
}

type valuesResult struct {
	keys   map[int]int   // working set (keys) per size
	budget map[int]int64 // byte budget per size
	cells  []valueCell
}

func valuesBench(dir, addr string, short bool, dur time.Duration, reps int) (*valuesResult, []string, error) {
	res := &valuesResult{keys: map[int]int{}, budget: map[int]int64{}}
	var notes []string
	for _, vsize := range valueSizes {
		keys := valueKeys(vsize, short)
		budget := int64(3 * keys * vsize)
		res.keys[vsize], res.budget[vsize] = keys, budget
		ks := genKeys("val:", keys)
		order := shuffled(ks, uint64(vsize))
		val := valueOf(vsize)
		var stores []valueStore
		var names []string
		for _, p := range valuePeers {
			st, err := p.open(dir, addr, vsize, keys, budget)
			if err == nil {
				err = fillValues(st, ks, val)
			}
			if err != nil {
				notes = append(notes, fmt.Sprintf("values: %s (%d-byte values) skipped: %v", p.name, vsize, err))
				if st != nil {
					st.close()
				}
				continue
			}
			stores, names = append(stores, st), append(names, p.name)
		}
		for _, op := range []string{"read hit", "store"} {
			cells := make([]valueCell, len(stores))
			for i := range cells {
				cells[i] = valueCell{vsize: vsize, op: op, peer: names[i]}
			}
			for range reps {
				for i, st := range stores {
					settle(st)
					ns, bad := valueLoop(st, op, order, val, dur)
					cells[i].ns = append(cells[i].ns, ns)
					cells[i].bad += bad
				}
			}
			for _, c := range cells {
				logf("  %-12s %7dB %-8s %10.0f ns", c.peer, vsize, op, median(c.ns))
				if c.bad > 0 {
					notes = append(notes, fmt.Sprintf("values: %s %s (%d-byte values): %d reads missed or returned the wrong length", c.peer, op, vsize, c.bad))
				}
			}
			res.cells = append(res.cells, cells...)
		}
		for _, st := range stores {
			st.close()
		}
	}
	return res, notes, nil
}

// fillValues stores val under every key, then lets a cache that applies
// writes in the background (ristretto) catch up.
func fillValues(st valueStore, keys []string, val []byte) error {
	for _, k := range keys {
		if err := st.set(k, val); err != nil {
			return err
		}
	}
	settle(st)
	for _, k := range keys {
		if _, ok := st.get(k, nil); !ok {
			return fmt.Errorf("%q missing after the fill (the budget is too small for the working set)", k)
		}
	}
	return nil
}

// settle waits for ristretto's buffered sets to be applied, so that one
// round's enqueued writes are not applied during the next peer's round.
func settle(st valueStore) {
	if r, ok := st.(*ristrettoValues); ok {
		r.c.Wait()
	}
}

// valueLoop runs op over keys, round and round, for dur and returns the
// ns per operation and how many reads missed or came back the wrong size.
func valueLoop(st valueStore, op string, keys []string, val []byte, dur time.Duration) (ns float64, bad int) {
	buf := make([]byte, 0, len(val))
	n := 0
	start := time.Now()
	deadline := start.Add(dur)
	for i := 0; ; i++ {
		k := keys[i%len(keys)]
		if op == "store" {
			if err := st.set(k, val); err != nil {
				bad++
			}
		} else {
			var ok bool
			if buf, ok = st.get(k, buf); !ok || len(buf) != len(val) {
				bad++
			}
		}
		n++
		if i&15 == 15 && time.Now().After(deadline) {
			break
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n), bad
}

func (r *valuesResult) get(vsize int, op, peer string) (valueCell, bool) {
	for _, c := range r.cells {
		if c.vsize == vsize && c.op == op && c.peer == peer {
			return c, len(c.ns) > 0
		}
	}
	return valueCell{}, false
}

func fmtSize(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func (r *valuesResult) markdown(reps int) string {
	s := "## Values of any size: read hit and Store against in-process caches and Redis\n\n" +
		"shmarena as a cache of mixed sizes (`WithEviction`, `WithBytes`, 128-byte slots: a 64-byte value stays in its slot, " +
		"larger ones go to the value space) against a Go map behind `sync.RWMutex`, ristretto v2 (cost = bytes), " +
		"otter v2 (weigher = bytes) and Redis `GET`/`SET` over loopback (go-redis, one per round trip). " +
		"One goroutine; every peer holds the whole working set (byte budget 3x the working set), so every read is a hit; " +
		"a read copies the value into the caller's buffer, a Store keeps a private copy (an overwrite of a present key). " +
		"Ristretto's `Set` only enqueues the write (a background goroutine applies it): its Store column is the enqueue. " +
		fmt.Sprintf("ns per operation, median of %d alternating rounds with their range; \"x\" is the peer's time over shmarena's, "+
			"the median of the rounds' ratios (above 1: shmarena is faster).\n\n", reps) +
		"Command: `go run ./cmd/shmbench -only values` in bench/ (part of `bench/run.sh`).\n\n"
	for _, op := range []string{"read hit", "store"} {
		s += fmt.Sprintf("**%s**\n\n| value | keys | shmarena |", op)
		var others []string
		for _, p := range valuePeers[1:] {
			others = append(others, p.name)
			s += " " + p.name + " |"
		}
		s += "\n|---|---:|---:|" + strings.Repeat("---:|", len(others)) + "\n"
		for _, vsize := range valueSizes {
			us, ok := r.get(vsize, op, "shmarena")
			if !ok {
				continue
			}
			s += fmt.Sprintf("| %s | %d | %s |", fmtSize(vsize), r.keys[vsize], fmtNsRange(us.ns))
			for _, name := range others {
				them, ok := r.get(vsize, op, name)
				if !ok {
					s += " skipped |"
					continue
				}
				var ratios []float64
				for i := range min(len(us.ns), len(them.ns)) {
					ratios = append(ratios, them.ns[i]/us.ns[i])
				}
				s += fmt.Sprintf(" %s, %s |", fmtNsRange(them.ns),
					fmtRatioRange(median(ratios), slices.Min(ratios), slices.Max(ratios)))
			}
			s += "\n"
		}
		s += "\n"
	}
	return s
}

func fmtNsRange(ns []float64) string {
	return fmt.Sprintf("%s ns (%s-%s)", fmtNs(median(ns)), fmtNs(slices.Min(ns)), fmtNs(slices.Max(ns)))
}

func fmtNs(v float64) string {
	if v >= 10_000 {
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}
