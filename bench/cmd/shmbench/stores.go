package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
	bolt "go.etcd.io/bbolt"
)

// Op is one benchmarked map operation.
type Op int

// The operations, in the order they run (delete last: it empties keys).
const (
	OpReadHit Op = iota
	OpReadMiss
	OpOverwrite
	OpAdd
	OpMixed
	OpInsert
	OpDelete
	numOps
)

var opNames = [...]string{"read hit", "read miss", "overwrite", "counter add", "mixed 90/10", "insert", "delete"}

func (o Op) String() string { return opNames[o] }

// batch is how many operations a store is handed at once: the pipelined
// Redis peer sends them as one pipeline, every other store loops.
const batch = 16

// A Store is one peer. Do performs len(keys) operations of kind op; for
// OpMixed, bit i of wmask set makes keys[i] an overwrite, else a read.
// It returns how many operations did not do what they should (a read hit
// that missed, a delete of an absent key...): the harness reports them.
type Store interface {
	Do(op Op, keys []string, wmask uint32, val []byte) (bad int)
	// Fill stores val under every key and a zero counter under every
	// counter key, untimed and as fast as the store allows.
	Fill(keys []string, val []byte, counters []string) error
	Close() error
}

// peer describes how to open a store, in the parent and in a worker.
type peer struct {
	name string
	// shared: a second process can open the same data (else the 2-way run
	// uses a second goroutine on the same handle, or is skipped).
	shared bool
	// twoNA, when set, is why there is no 2-process run.
	twoNA string
	open  func(env *benchEnv, vsize int, create bool) (Store, error)
}

func b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// --- shmarena ---

// shmStore keeps values in one map and counters in another, sized for
// their entries (a Redis keyspace holds both; a shmarena user sizes a map
// per kind of entry).
type shmStore struct {
	a   *shmarena.Arena
	m   *shmarena.Map // values
	c   *shmarena.Map // counters
	buf []byte
}

func shmSlotSize(vsize int) int { return (32 + keyLen + vsize + 7) &^ 7 }

const ctrSlotSize = 32 + 8 + keyLen

// ctrSlots sizes the counters map as the README tells a user to size a
// plain map: 4/3 of the keys it holds (75% full). The Go map it is
// compared with sits at the same load (100,000 entries in 131,072 slots);
// a counters map as large as the values map (38% full at 100,000 keys)
// spread the counters over twice the memory, 16 MiB against the Go map's
// 7, and twice the pages: in one scratch run alternating blocks of 1M
// adds (three rounds) it made 0.70-0.85x the Go map's adds, against
// 0.76-0.89x sized so.
func ctrSlots(nkeys int) int { return (nkeys*4 + 2) / 3 }

func openShm(env *benchEnv, vsize int, create bool) (Store, error) {
	path := filepath.Join(env.dir, fmt.Sprintf("arena-%d", vsize))
	slots := env.mapSlots
	vals, err := shmarena.MapBytes(shmarena.WithSlots(slots), shmarena.WithSlotSize(shmSlotSize(vsize)))
	if err != nil {
		return nil, err
	}
	ctrs, err := shmarena.MapBytes(shmarena.WithSlots(ctrSlots(env.nkeys)), shmarena.WithSlotSize(ctrSlotSize))
	if err != nil {
		return nil, err
	}
	size := shmarena.MinSize + vals + ctrs
	var opts []shmarena.OpenOption
	if create {
		opts = append(opts, shmarena.WithSize(size))
	}
	a, err := shmarena.Open(path, opts...)
	if err != nil {
		return nil, err
	}
	m, err := a.Map("values", shmarena.WithSlots(slots), shmarena.WithSlotSize(shmSlotSize(vsize)))
	if err != nil {
		a.Close()
		return nil, err
	}
	c, err := a.Map("counters", shmarena.WithSlots(ctrSlots(env.nkeys)), shmarena.WithSlotSize(ctrSlotSize))
	if err != nil {
		a.Close()
		return nil, err
	}
	return &shmStore{a: a, m: m, c: c, buf: make([]byte, 0, vsize)}, nil
}

func (s *shmStore) Do(op Op, keys []string, wmask uint32, val []byte) (bad int) {
	m := s.m
	var ok bool
	switch op {
	case OpReadHit:
		for _, k := range keys {
			if s.buf, ok = m.AppendLoad(s.buf[:0], k); !ok {
				bad++
			}
		}
	case OpReadMiss:
		for _, k := range keys {
			if s.buf, ok = m.AppendLoad(s.buf[:0], k); ok {
				bad++
			}
		}
	case OpOverwrite, OpInsert:
		for _, k := range keys {
			if m.Store(k, val) != nil {
				bad++
			}
		}
	case OpAdd:
		for _, k := range keys {
			if _, err := s.c.Add(k, 1); err != nil {
				bad++
			}
		}
	case OpDelete:
		for _, k := range keys {
			if !m.Delete(k) {
				bad++
			}
		}
	case OpMixed:
		for i, k := range keys {
			if wmask&(1<<i) != 0 {
				if m.Store(k, val) != nil {
					bad++
				}
			} else if s.buf, ok = m.AppendLoad(s.buf[:0], k); !ok {
				bad++
			}
		}
	}
	return bad
}

func (s *shmStore) Fill(keys []string, val []byte, counters []string) error {
	for _, k := range keys {
		if err := s.m.Store(k, val); err != nil {
			return err
		}
	}
	for _, k := range counters {
		if _, err := s.c.Add(k, 0); err != nil {
			return err
		}
	}
	return nil
}

func (s *shmStore) Close() error { return s.a.Close() }

// --- Go map behind sync.RWMutex ---

type rwStore struct {
	mu sync.RWMutex
	m  map[string][]byte
	c  map[string]int64
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func openRW(env *benchEnv, vsize int, create bool) (Store, error) {
	return &rwStore{m: make(map[string][]byte), c: make(map[string]int64)}, nil
}

func (s *rwStore) get(k string, buf []byte) ([]byte, bool) {
	s.mu.RLock()
	v, ok := s.m[k]
	if ok {
		buf = append(buf[:0], v...)
	}
	s.mu.RUnlock()
	return buf, ok
}

// set stores a private copy of val. A new key is stored as a private copy
// too (strings.Clone), as a key that arrived in a request would be: the
// lookups then compare key bytes, as shmarena's do, instead of finding the
// very string they look up by pointer.
func (s *rwStore) set(k string, val []byte) {
	v := make([]byte, len(val))
	copy(v, val)
	s.mu.Lock()
	if _, ok := s.m[k]; !ok {
		k = strings.Clone(k)
	}
	s.m[k] = v
	s.mu.Unlock()
}

func (s *rwStore) Do(op Op, keys []string, wmask uint32, val []byte) (bad int) {
	bp := bufPool.Get().(*[]byte)
	buf := *bp
	var ok bool
	switch op {
	case OpReadHit:
		for _, k := range keys {
			if buf, ok = s.get(k, buf); !ok {
				bad++
			}
		}
	case OpReadMiss:
		for _, k := range keys {
			if buf, ok = s.get(k, buf); ok {
				bad++
			}
		}
	case OpOverwrite, OpInsert:
		for _, k := range keys {
			s.set(k, val)
		}
	case OpAdd:
		for _, k := range keys {
			s.mu.Lock()
			s.c[k]++
			s.mu.Unlock()
		}
	case OpDelete:
		for _, k := range keys {
			s.mu.Lock()
			_, ok = s.m[k]
			delete(s.m, k)
			s.mu.Unlock()
			if !ok {
				bad++
			}
		}
	case OpMixed:
		for i, k := range keys {
			if wmask&(1<<i) != 0 {
				s.set(k, val)
			} else if buf, ok = s.get(k, buf); !ok {
				bad++
			}
		}
	}
	*bp = buf
	bufPool.Put(bp)
	return bad
}

func (s *rwStore) Fill(keys []string, val []byte, counters []string) error {
	for _, k := range keys {
		s.set(k, val)
	}
	s.mu.Lock()
	for _, k := range counters {
		s.c[strings.Clone(k)] = 0
	}
	s.mu.Unlock()
	return nil
}

func (s *rwStore) Close() error { return nil }

// --- sync.Map ---

type syncStore struct {
	m sync.Map // string -> []byte or *atomic.Int64
}

func openSync(env *benchEnv, vsize int, create bool) (Store, error) { return &syncStore{}, nil }

func (s *syncStore) Do(op Op, keys []string, wmask uint32, val []byte) (bad int) {
	bp := bufPool.Get().(*[]byte)
	buf := *bp
	get := func(k string) bool {
		v, ok := s.m.Load(k)
		if ok {
			buf = append(buf[:0], v.([]byte)...)
		}
		return ok
	}
	set := func(k string) {
		v := make([]byte, len(val))
		copy(v, val)
		if op == OpInsert {
			k = strings.Clone(k) // a private key, as in rwStore.set
		}
		s.m.Store(k, v)
	}
	switch op {
	case OpReadHit:
		for _, k := range keys {
			if !get(k) {
				bad++
			}
		}
	case OpReadMiss:
		for _, k := range keys {
			if get(k) {
				bad++
			}
		}
	case OpOverwrite, OpInsert:
		for _, k := range keys {
			set(k)
		}
	case OpAdd:
		for _, k := range keys {
			c, ok := s.m.Load(k)
			if !ok {
				c, _ = s.m.LoadOrStore(k, new(atomic.Int64))
			}
			c.(*atomic.Int64).Add(1)
		}
	case OpDelete:
		for _, k := range keys {
			if _, ok := s.m.LoadAndDelete(k); !ok {
				bad++
			}
		}
	case OpMixed:
		for i, k := range keys {
			if wmask&(1<<i) != 0 {
				set(k)
			} else if !get(k) {
				bad++
			}
		}
	}
	*bp = buf
	bufPool.Put(bp)
	return bad
}

func (s *syncStore) Fill(keys []string, val []byte, counters []string) error {
	for _, k := range keys {
		v := make([]byte, len(val))
		copy(v, val)
		s.m.Store(strings.Clone(k), v)
	}
	for _, k := range counters {
		s.m.Store(strings.Clone(k), new(atomic.Int64))
	}
	return nil
}

func (s *syncStore) Close() error { return nil }

// --- bbolt (NoSync), one transaction per operation ---

type boltStore struct {
	db  *bolt.DB
	buf []byte
}

var bucket = []byte("bench")

func openBolt(env *benchEnv, vsize int, create bool) (Store, error) {
	path := filepath.Join(env.dir, fmt.Sprintf("bolt-%d.db", vsize))
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, Timeout: 0})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucket); return err }); err != nil {
		db.Close()
		return nil, err
	}
	return &boltStore{db: db, buf: make([]byte, 0, vsize)}, nil
}

var errMiss = errors.New("miss")

func (s *boltStore) get(k string) bool {
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get(b(k))
		if v == nil {
			return errMiss
		}
		s.buf = append(s.buf[:0], v...)
		return nil
	})
	return err == nil
}

func (s *boltStore) set(k string, val []byte) bool {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(b(k), val) }) == nil
}

func (s *boltStore) Do(op Op, keys []string, wmask uint32, val []byte) (bad int) {
	switch op {
	case OpReadHit:
		for _, k := range keys {
			if !s.get(k) {
				bad++
			}
		}
	case OpReadMiss:
		for _, k := range keys {
			if s.get(k) {
				bad++
			}
		}
	case OpOverwrite, OpInsert:
		for _, k := range keys {
			if !s.set(k, val) {
				bad++
			}
		}
	case OpAdd:
		for _, k := range keys {
			err := s.db.Update(func(tx *bolt.Tx) error {
				bk := tx.Bucket(bucket)
				var n uint64
				if v := bk.Get(b(k)); len(v) == 8 {
					n = binary.LittleEndian.Uint64(v)
				}
				var w [8]byte
				binary.LittleEndian.PutUint64(w[:], n+1)
				return bk.Put(b(k), w[:])
			})
			if err != nil {
				bad++
			}
		}
	case OpDelete:
		for _, k := range keys {
			err := s.db.Update(func(tx *bolt.Tx) error {
				bk := tx.Bucket(bucket)
				if bk.Get(b(k)) == nil {
					return errMiss
				}
				return bk.Delete(b(k))
			})
			if err != nil {
				bad++
			}
		}
	case OpMixed:
		for i, k := range keys {
			if wmask&(1<<i) != 0 {
				if !s.set(k, val) {
					bad++
				}
			} else if !s.get(k) {
				bad++
			}
		}
	}
	return bad
}

func (s *boltStore) Fill(keys []string, val []byte, counters []string) error {
	for len(keys) > 0 {
		n := min(len(keys), 10000)
		err := s.db.Update(func(tx *bolt.Tx) error {
			bk := tx.Bucket(bucket)
			for _, k := range keys[:n] {
				if err := bk.Put([]byte(k), val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		keys = keys[n:]
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		for _, k := range counters {
			if err := bk.Put([]byte(k), make([]byte, 8)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) Close() error { return s.db.Close() }

// --- Redis: one command per round trip, or pipelined ---

type redisStore struct {
	c    *redis.Client
	pipe bool
	buf  []byte
}

func redisOpener(pipelined bool) func(env *benchEnv, vsize int, create bool) (Store, error) {
	return func(env *benchEnv, vsize int, create bool) (Store, error) {
		c := redis.NewClient(&redis.Options{Addr: env.redisAddr, PoolSize: 4, DB: dbFor(vsize),
			Protocol: 2, DisableIdentity: true, ReadTimeout: -1, WriteTimeout: -1})
		if err := c.Ping(context.Background()).Err(); err != nil {
			c.Close()
			return nil, err
		}
		if create {
			if err := c.FlushDB(context.Background()).Err(); err != nil {
				c.Close()
				return nil, err
			}
		}
		return &redisStore{c: c, pipe: pipelined}, nil
	}
}

// dbFor keeps each value size in its own Redis database.
func dbFor(vsize int) int {
	if vsize > 64 {
		return 2
	}
	return 1
}

func (s *redisStore) Do(op Op, keys []string, wmask uint32, val []byte) (bad int) {
	ctx := context.Background()
	if s.pipe {
		p := s.c.Pipeline()
		cmds := make([]redis.Cmder, len(keys))
		for i, k := range keys {
			cmds[i] = s.cmd(ctx, p, op, k, wmask&(1<<i) != 0, val)
		}
		_, _ = p.Exec(ctx)
		for i, c := range cmds {
			if !s.ok(op, c, wmask&(1<<i) != 0) {
				bad++
			}
		}
		return bad
	}
	for i, k := range keys {
		if !s.ok(op, s.cmd(ctx, s.c, op, k, wmask&(1<<i) != 0, val), wmask&(1<<i) != 0) {
			bad++
		}
	}
	return bad
}

func (s *redisStore) cmd(ctx context.Context, c redis.Cmdable, op Op, k string, write bool, val []byte) redis.Cmder {
	switch op {
	case OpReadHit, OpReadMiss:
		return c.Get(ctx, k)
	case OpOverwrite, OpInsert:
		return c.Set(ctx, k, val, 0)
	case OpAdd:
		return c.Incr(ctx, k)
	case OpDelete:
		return c.Del(ctx, k)
	}
	if write {
		return c.Set(ctx, k, val, 0)
	}
	return c.Get(ctx, k)
}

func (s *redisStore) ok(op Op, c redis.Cmder, write bool) bool {
	switch op {
	case OpReadMiss:
		return c.Err() == redis.Nil
	case OpDelete:
		return c.Err() == nil && c.(*redis.IntCmd).Val() == 1
	case OpReadHit:
		v, err := c.(*redis.StringCmd).Bytes()
		s.buf = append(s.buf[:0], v...)
		return err == nil
	}
	return c.Err() == nil
}

func (s *redisStore) Fill(keys []string, val []byte, counters []string) error {
	ctx := context.Background()
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		p := s.c.Pipeline()
		for _, k := range keys[:n] {
			p.Set(ctx, k, val, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		keys = keys[n:]
	}
	for len(counters) > 0 {
		n := min(len(counters), 1000)
		p := s.c.Pipeline()
		for _, k := range counters[:n] {
			p.Set(ctx, k, 0, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		counters = counters[n:]
	}
	return nil
}

func (s *redisStore) Close() error { return s.c.Close() }

// peers lists every store, ours first. LMDB is added by lmdb.go when built
// with the lmdb tag.
func peers(env *benchEnv) []peer {
	ps := []peer{
		{name: "shmarena", shared: true, open: openShm},
		{name: "RWMutex map", open: openRW},
		{name: "sync.Map", open: openSync},
		{name: "bbolt", twoNA: "bbolt takes an exclusive flock for a read-write handle: one writer process", open: openBolt},
	}
	if lmdbOpen != nil {
		ps = append(ps, peer{name: "LMDB", shared: true, open: lmdbOpen})
	}
	if env.redisAddr != "" {
		ps = append(ps,
			peer{name: "Redis", shared: true, open: redisOpener(false)},
			peer{name: "Redis pipe16", shared: true, open: redisOpener(true)})
	}
	return ps
}

// lmdbOpen is set by lmdb.go (build tag lmdb).
var lmdbOpen func(env *benchEnv, vsize int, create bool) (Store, error)

// lmdbMissing explains the missing LMDB peer when lmdb.go is not built.
const lmdbMissing = "LMDB not measured: the maintained Go binding github.com/PowerDNS/lmdb-go (and the older github.com/bmatsuo/lmdb-go) " +
	"are refused by this machine's Go module proxy (403 \"not available\"), so no binding could be fetched."

// Warm reads every key once, untimed (see warm): the counters map for
// counter adds, the values map otherwise. A miss ends at its tag byte
// without touching the slot an insert would write, so before inserts it
// also calls Arena.Prefault, as a worker that wants warm pages would.
func (s *shmStore) Warm(op Op, keys []string) {
	m := s.m
	if op == OpAdd {
		m = s.c
	}
	for _, k := range keys {
		s.buf, _ = m.AppendLoad(s.buf[:0], k)
	}
	if op == OpInsert {
		_, _ = s.a.Prefault()
	}
}
