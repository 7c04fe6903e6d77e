package shmarena

import (
	"context"
	"fmt"
	"time"
)

// KeyValue is the key-value interface that a Map in shared memory and the
// Redis backend (module github.com/shmarena/shmarena/redis) both implement,
// so that code written against it moves from one host to several by
// changing its constructor. Its verbs are Map's (sync.Map's names, Redis
// semantics for deadlines and counters); see Map for each verb's contract.
//
// Every method takes a context.Context because a network backend blocks on
// it: when ctx ends first the method returns an error wrapping ctx.Err()
// and the write may or may not have happened. A shared-memory backend's
// writes never block and ignore ctx; its reads look at ctx only while they
// wait out a key being written (see MapKeyValue). Errors of a network backend
// wrap the client's error (errors.Is and errors.As see through them); a
// network error never reads as a miss: the bool results are meaningful
// only when err is nil.
//
// Values are opaque bytes. A counter made by Add reads through Counter;
// what Load returns for a counter differs by backend (8 bytes little-endian
// in shared memory, decimal digits on Redis), so portable code reads
// counters with Counter only.
//
// Implementations are safe for concurrent use; each call is atomic with
// respect to every other call on the same key.
type KeyValue interface {
	// Load returns a copy of key's value, true when present.
	Load(ctx context.Context, key string) (value []byte, ok bool, err error)
	// AppendLoad appends key's value to dst: no allocation when dst has
	// room (in shared memory).
	AppendLoad(ctx context.Context, dst []byte, key string) (out []byte, ok bool, err error)
	// Store sets key to value (SET; WithTTL sets a deadline, WithKeepTTL
	// keeps the current one, as SET KEEPTTL).
	Store(ctx context.Context, key string, value []byte, opts ...WriteOption) error
	// LoadOrStore returns the present value (loaded true) or stores value.
	LoadOrStore(ctx context.Context, key string, value []byte, opts ...WriteOption) (actual []byte, loaded bool, err error)
	// Swap stores value and returns the previous one, if any.
	Swap(ctx context.Context, key string, value []byte, opts ...WriteOption) (previous []byte, loaded bool, err error)
	// CompareAndSwap stores new if the value equals old byte for byte,
	// keeping the deadline; an absent key never matches.
	CompareAndSwap(ctx context.Context, key string, old, new []byte) (swapped bool, err error)
	// CompareAndDelete deletes key if its value equals old.
	CompareAndDelete(ctx context.Context, key string, old []byte) (deleted bool, err error)
	// Delete removes key and reports whether it was present.
	Delete(ctx context.Context, key string) (deleted bool, err error)
	// LoadAndDelete removes key and returns its value (GETDEL).
	LoadAndDelete(ctx context.Context, key string) (value []byte, loaded bool, err error)
	// Add adds delta to the counter at key and returns the new value
	// (INCRBY). An absent or lapsed key starts at delta with opts applied;
	// a live counter keeps its deadline. ErrNotCounter when key holds
	// another value.
	Add(ctx context.Context, key string, delta int64, opts ...WriteOption) (n int64, err error)
	// Counter returns the counter at key, false when absent or not a
	// counter.
	Counter(ctx context.Context, key string) (n int64, ok bool, err error)
	// Expire sets key's deadline ttl from now (ttl <= 0 deletes the key,
	// as Redis EXPIRE k 0) and reports whether key was present.
	Expire(ctx context.Context, key string, ttl time.Duration) (ok bool, err error)
	// TTL returns how long key has left (0 and true for no deadline; 0
	// and false when absent).
	TTL(ctx context.Context, key string) (ttl time.Duration, ok bool, err error)
	// Clear removes every key of this map (atomic per key only with
	// CapAtomicClear).
	Clear(ctx context.Context) error
	// Capabilities says which guarantees beyond this contract hold.
	Capabilities() Capabilities
}

// WriteSettings are the resolved WriteOptions of one write, for backends
// outside this package.
type WriteSettings struct {
	// TTL is the deadline from now; 0 for none.
	TTL time.Duration
	// KeepTTL keeps the key's current deadline (SET KEEPTTL).
	KeepTTL bool
}

// ResolveWriteOptions folds opts as Map's writes do (the last WithTTL
// wins; any WithKeepTTL sets KeepTTL), and refuses what they refuse with
// ErrInvalid: a WithTTL of zero or less, or WithTTL with WithKeepTTL (see
// docs/ttl.md). Backends of KeyValue use it.
func ResolveWriteOptions(opts ...WriteOption) (WriteSettings, error) {
	c, err := writeOpts(opts)
	if err != nil {
		return WriteSettings{}, fmt.Errorf("shmarena: %w", err)
	}
	return WriteSettings{TTL: c.ttl, KeepTTL: c.keepTTL}, nil
}

// MapKeyValue is the KeyValue of a Map in shared memory. It is a value
// holding only the *Map, so converting it to KeyValue allocates nothing,
// and its read methods allocate nothing beyond what Map's do. Its writes
// ignore ctx: no Map write blocks for long (a write holds one segment
// lock for a bounded step), so there is nothing to cancel, and checking
// ctx would cost a call on every operation for nothing. Its reads (Load,
// AppendLoad, Counter, TTL) look at ctx only after Map's read gave up on
// a key being written, which a KeyValue caller could not tell from a
// miss: they read again while ctx lasts, for up to a second (see Load).
// BenchmarkKeyValueAdapter measures the cost against direct calls.
type MapKeyValue struct{ m *Map }

// NewKeyValue returns m as a KeyValue.
func NewKeyValue(m *Map) MapKeyValue { return MapKeyValue{m: m} }

// Map returns the adapted Map, for what KeyValue does not cover (Stats,
// Keys, All).
func (a MapKeyValue) Map() *Map { return a.m }

// Load is Map.Load, except that a read that gave up on a key being
// written (Map's busy miss, see Stats.Busy) reads again: while ctx lasts,
// for up to a second. A present key reads absent only after a writer sat
// inside its write that long (a stopped process, or a damaged file). When
// ctx ends first, the error wraps ctx.Err().
func (a MapKeyValue) Load(ctx context.Context, key string) ([]byte, bool, error) {
	v, ok, err := a.m.appendLoadPatiently(ctx, nil, key)
	if ok && v == nil {
		v = []byte{}
	}
	return v, ok, err
}

// AppendLoad is Map.AppendLoad, reading again after a busy give-up as
// Load does.
func (a MapKeyValue) AppendLoad(ctx context.Context, dst []byte, key string) ([]byte, bool, error) {
	return a.m.appendLoadPatiently(ctx, dst, key)
}

// Store is Map.Store.
func (a MapKeyValue) Store(_ context.Context, key string, value []byte, opts ...WriteOption) error {
	return a.m.Store(key, value, opts...)
}

// LoadOrStore is Map.LoadOrStore.
func (a MapKeyValue) LoadOrStore(_ context.Context, key string, value []byte, opts ...WriteOption) ([]byte, bool, error) {
	return a.m.LoadOrStore(key, value, opts...)
}

// Swap is Map.Swap.
func (a MapKeyValue) Swap(_ context.Context, key string, value []byte, opts ...WriteOption) ([]byte, bool, error) {
	return a.m.Swap(key, value, opts...)
}

// CompareAndSwap is Map.CompareAndSwap.
func (a MapKeyValue) CompareAndSwap(_ context.Context, key string, old, new []byte) (bool, error) {
	return a.m.CompareAndSwap(key, old, new)
}

// CompareAndDelete is Map.CompareAndDelete.
func (a MapKeyValue) CompareAndDelete(_ context.Context, key string, old []byte) (bool, error) {
	return a.m.CompareAndDelete(key, old), nil
}

// Delete is Map.Delete.
func (a MapKeyValue) Delete(_ context.Context, key string) (bool, error) {
	return a.m.Delete(key), nil
}

// LoadAndDelete is Map.LoadAndDelete.
func (a MapKeyValue) LoadAndDelete(_ context.Context, key string) ([]byte, bool, error) {
	v, ok := a.m.LoadAndDelete(key)
	return v, ok, nil
}

// Add is Map.Add.
func (a MapKeyValue) Add(_ context.Context, key string, delta int64, opts ...WriteOption) (int64, error) {
	return a.m.Add(key, delta, opts...)
}

// Counter is Map.Counter, reading again after a busy give-up as Load
// does.
func (a MapKeyValue) Counter(ctx context.Context, key string) (int64, bool, error) {
	return a.m.counterPatiently(ctx, key)
}

// Expire is Map.Expire.
func (a MapKeyValue) Expire(_ context.Context, key string, ttl time.Duration) (bool, error) {
	return a.m.Expire(key, ttl), nil
}

// TTL is Map.TTL, reading again after a busy give-up as Load does.
func (a MapKeyValue) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	return a.m.ttlPatiently(ctx, key)
}

// Clear is Map.Clear: atomic for each key.
func (a MapKeyValue) Clear(context.Context) error {
	a.m.Clear()
	return nil
}

// Capabilities of shared memory: lock-free reads, atomic Clear, counters
// that wrap.
func (a MapKeyValue) Capabilities() Capabilities {
	return CapLockFreeReads | CapAtomicClear | CapCounterWraps
}

var (
	_ KeyValue = MapKeyValue{}
	_ Queue    = RingQueue{}
)
