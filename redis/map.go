package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
)

// Map is a shmarena.KeyValue over Redis strings: each key is the Redis
// string prefix+key. Deadlines are Redis's (PX, KEEPTTL, PEXPIRE), with
// millisecond resolution: a TTL is rounded up to a whole millisecond.
// Counters are Redis integers (INCRBY): Load returns a counter's decimal
// digits, and a stored value of decimal digits counts as a counter.
// CompareAndSwap, CompareAndDelete and Add are Lua scripts, loaded once and run by hash (EVALSHA), so each is atomic on the
// server.
//
// A Map is safe for concurrent use by goroutines; any number of processes
// and hosts may use the same prefix.
type Map struct {
	c      goredis.UniversalClient
	prefix string
}

// NewMap returns the Map of the keys under prefix on c (a *goredis.Client,
// a failover client or a *goredis.ClusterClient). Choose a prefix no other
// data shares: Clear removes every key that starts with it. A prefix
// holding a hash tag ("{m}:") pins the map to one slot of a cluster; the
// default is to spread.
func NewMap(c goredis.UniversalClient, prefix string) *Map {
	return &Map{c: c, prefix: prefix}
}

// Client returns the client the map talks through.
func (m *Map) Client() goredis.UniversalClient { return m.c }

// Prefix returns the map's key prefix.
func (m *Map) Prefix() string { return m.prefix }

// Capabilities: many hosts; replication on a cluster (a single server's
// replicas are the deployment's, not declared); an atomic Clear only on
// one server (SCAN's guarantee, see Clear); counters refuse overflow.
func (m *Map) Capabilities() shmarena.Capabilities { return capabilities(m.c, shmarena.CapAtomicClear) }

// capabilities are a store's on c: a cluster replicates (and visits its
// masters one by one); a client-side sharded Ring visits its shards one by
// one; one server (or Sentinel's master) adds single.
func capabilities(c goredis.UniversalClient, single shmarena.Capabilities) shmarena.Capabilities {
	switch c.(type) {
	case *goredis.ClusterClient:
		return shmarena.CapMultiHost | shmarena.CapReplication
	case *goredis.Ring:
		return shmarena.CapMultiHost
	}
	return shmarena.CapMultiHost | single
}

func (m *Map) key(k string) string { return m.prefix + k }

// wrap names the operation and key in a client error, keeping it
// reachable by errors.Is and errors.As.
func wrap(op, key string, err error) error {
	return fmt.Errorf("shmarena/redis: %s %q: %w", op, key, err)
}

// checkKey refuses the empty key as Map does.
func checkKey(k string) error {
	if k == "" {
		return fmt.Errorf("shmarena/redis: %w", shmarena.ErrEmptyKey)
	}
	return nil
}

// pxArgs are the deadline arguments of a SET for ws.
func pxArgs(args []any, ws shmarena.WriteSettings) []any {
	switch {
	case ws.KeepTTL:
		return append(args, "KEEPTTL")
	case ws.TTL > 0:
		return append(args, "PX", millis(ws.TTL))
	}
	return args
}

// millis is d in whole milliseconds, rounded up (Redis's resolution).
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Load returns key's value (GET).
func (m *Map) Load(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := m.c.Get(ctx, m.key(key)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrap("GET", key, err)
	}
	return v, true, nil
}

// AppendLoad appends key's value to dst (GET).
func (m *Map) AppendLoad(ctx context.Context, dst []byte, key string) ([]byte, bool, error) {
	v, ok, err := m.Load(ctx, key)
	if !ok || err != nil {
		return dst, false, err
	}
	return append(dst, v...), true, nil
}

// Store sets key (SET, with PX or KEEPTTL).
func (m *Map) Store(ctx context.Context, key string, value []byte, opts ...shmarena.WriteOption) error {
	if err := checkKey(key); err != nil {
		return err
	}
	ws, err := shmarena.ResolveWriteOptions(opts...)
	if err != nil {
		return err
	}
	args := pxArgs([]any{"SET", m.key(key), value}, ws)
	if err := m.c.Do(ctx, args...).Err(); err != nil {
		return wrap("SET", key, err)
	}
	return nil
}

// LoadOrStore is SET NX GET: the present value, or value stored.
func (m *Map) LoadOrStore(ctx context.Context, key string, value []byte, opts ...shmarena.WriteOption) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	ws, err := shmarena.ResolveWriteOptions(opts...)
	if err != nil {
		return nil, false, err
	}
	ws.KeepTTL = false // a new key has no deadline to keep
	args := pxArgs([]any{"SET", m.key(key), value, "NX", "GET"}, ws)
	old, err := m.c.Do(ctx, args...).Text()
	if errors.Is(err, goredis.Nil) {
		return value, false, nil
	}
	if err != nil {
		return nil, false, wrap("SET NX GET", key, err)
	}
	return []byte(old), true, nil
}

// Swap is SET GET: stores value, returns the previous one.
func (m *Map) Swap(ctx context.Context, key string, value []byte, opts ...shmarena.WriteOption) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	ws, err := shmarena.ResolveWriteOptions(opts...)
	if err != nil {
		return nil, false, err
	}
	args := pxArgs([]any{"SET", m.key(key), value, "GET"}, ws)
	old, err := m.c.Do(ctx, args...).Text()
	if errors.Is(err, goredis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrap("SET GET", key, err)
	}
	return []byte(old), true, nil
}

// CompareAndSwap stores new if the value equals old, keeping the deadline
// (one script).
func (m *Map) CompareAndSwap(ctx context.Context, key string, old, new []byte) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	n, err := scriptCAS.Run(ctx, m.c, []string{m.key(key)}, old, new).Int()
	if err != nil {
		return false, wrap("compare-and-swap", key, err)
	}
	return n == 1, nil
}

// CompareAndDelete deletes key if its value equals old (one script).
func (m *Map) CompareAndDelete(ctx context.Context, key string, old []byte) (bool, error) {
	n, err := scriptCAD.Run(ctx, m.c, []string{m.key(key)}, old).Int()
	if err != nil {
		return false, wrap("compare-and-delete", key, err)
	}
	return n == 1, nil
}

// Delete removes key (DEL).
func (m *Map) Delete(ctx context.Context, key string) (bool, error) {
	n, err := m.c.Del(ctx, m.key(key)).Result()
	if err != nil {
		return false, wrap("DEL", key, err)
	}
	return n == 1, nil
}

// LoadAndDelete removes key and returns its value (GETDEL).
func (m *Map) LoadAndDelete(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := m.c.GetDel(ctx, m.key(key)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrap("GETDEL", key, err)
	}
	return v, true, nil
}

// Add is INCRBY in one script that gives a key it creates the deadline of
// opts (a live counter keeps its own). ErrNotCounter when the value is not
// a decimal integer; Redis refuses overflow with an error, where shared
// memory wraps.
func (m *Map) Add(ctx context.Context, key string, delta int64, opts ...shmarena.WriteOption) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	ws, err := shmarena.ResolveWriteOptions(opts...)
	if err != nil {
		return 0, err
	}
	var ms int64
	if ws.TTL > 0 {
		ms = millis(ws.TTL)
	}
	s, err := scriptAdd.Run(ctx, m.c, []string{m.key(key)}, delta, ms).Text()
	if err != nil {
		if isNotInteger(err) {
			return 0, fmt.Errorf("shmarena/redis: INCRBY %q: %w (%v)", key, shmarena.ErrNotCounter, err)
		}
		return 0, wrap("INCRBY", key, err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, wrap("INCRBY", key, err)
	}
	return n, nil
}

// isNotInteger reports Redis's refusal of INCRBY on a value that is not
// an integer (not the overflow refusal, which says "overflow").
func isNotInteger(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "not an integer") && !strings.Contains(msg, "overflow")
}

// Counter returns the integer at key (GET and parse).
func (m *Map) Counter(ctx context.Context, key string) (int64, bool, error) {
	v, ok, err := m.Load(ctx, key)
	if !ok || err != nil {
		return 0, false, err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, false, nil
	}
	return n, true, nil
}

// Expire sets key's deadline (PEXPIRE), or deletes key for ttl <= 0
// (DEL), as Redis's EXPIRE k 0 and Map.Expire do.
func (m *Map) Expire(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if ttl > 0 {
		ok, err := m.c.PExpire(ctx, m.key(key), time.Duration(millis(ttl))*time.Millisecond).Result()
		if err != nil {
			return false, wrap("PEXPIRE", key, err)
		}
		return ok, nil
	}
	// EXPIRE k 0 deletes k, as Map.Expire does (docs/ttl.md).
	n, err := m.c.Del(ctx, m.key(key)).Result()
	if err != nil {
		return false, wrap("DEL", key, err)
	}
	return n == 1, nil
}

// TTL returns key's time left (PTTL).
func (m *Map) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	ms, err := m.c.Do(ctx, "PTTL", m.key(key)).Int64()
	if err != nil {
		return 0, false, wrap("PTTL", key, err)
	}
	switch {
	case ms == -2:
		return 0, false, nil
	case ms < 0:
		return 0, true, nil
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// Clear removes every key under the prefix: on each master (every master
// of a cluster, one after another) it walks the keys with SCAN MATCH and
// removes them with UNLINK. It is not atomic: a key stored while Clear
// runs may survive it, and on a cluster a slot that migrates during the
// walk may hide keys from it (hence no CapAtomicClear there). On one
// server, every key present for the whole walk is removed (SCAN's
// guarantee).
func (m *Map) Clear(ctx context.Context) error {
	match := globEscape(m.prefix) + "*"
	each := func(ctx context.Context, node *goredis.Client) error { return clearNode(ctx, node, match) }
	switch c := m.c.(type) {
	case *goredis.ClusterClient:
		return c.ForEachMaster(ctx, each)
	case *goredis.Ring:
		return c.ForEachShard(ctx, each)
	}
	return clearNode(ctx, m.c, match)
}

// clearNode unlinks the keys matching match on one node, a batch of SCAN
// at a time, one UNLINK per key (keys of a batch may lie in different
// slots), pipelined.
func clearNode(ctx context.Context, c goredis.Cmdable, match string) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, 512).Result()
		if err != nil {
			return wrap("SCAN", match, err)
		}
		if len(keys) > 0 {
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for _, k := range keys {
					p.Unlink(ctx, k)
				}
				return nil
			})
			if err != nil {
				return wrap("UNLINK", match, err)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// globEscape escapes the glob characters of s for SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

var _ shmarena.KeyValue = (*Map)(nil)

// errShortReply means a script answered with fewer values than it sends:
// a server that is not Redis, or a damaged script cache.
var errShortReply = errors.New("script reply has the wrong length")
