package ratelimit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/shmarena/shmarena"
)

// ErrInvalid means a Limit or a cost is out of range; nothing was changed.
var ErrInvalid = errors.New("invalid argument")

// ErrContended means a decision lost its compare-and-swap to other
// processes more than maxAttempts times in a row: it was neither allowed
// nor stored. It takes thousands of writers on one key to see it.
var ErrContended = errors.New("ratelimit: too much contention on one key")

const maxAttempts = 1000

// An Evaluator makes a whole GCRA decision inside the store, in one step,
// on the store's clock: the Redis backend implements it with one Lua script
// (redis_rate's), so a decision costs one round trip instead of a
// load-and-compare-and-swap loop. The key is the store's key (the
// limiter's prefix included). A store that implements KeyValue and
// Evaluator is used through Evaluator only; keys written by one path are
// not read by the other.
type Evaluator interface {
	AllowGCRA(ctx context.Context, key string, limit Limit, n int) (Result, error)
	ResetGCRA(ctx context.Context, key string) error
}

// A Limiter decides, per key, whether an event is allowed under a Limit.
// It is safe for concurrent use by goroutines, and every process (or host)
// whose Limiter shares the store shares the limits exactly.
type Limiter struct {
	kv     shmarena.KeyValue
	eval   Evaluator
	prefix string
	now    func() int64 // Unix nanoseconds
}

// An Option configures NewLimiter.
type Option func(*Limiter)

// WithPrefix puts prefix before every key in the store (redis_rate uses
// "rate:"). The default is none: give the limiter a map of its own (a
// shmarena Map, a Redis backend prefix) and keys cost no allocation.
func WithPrefix(prefix string) Option { return func(l *Limiter) { l.prefix = prefix } }

// NewLimiter returns a Limiter over store. In shared memory the clock is
// the host's wall clock (time.Now), the same in every process; a clock
// stepped back makes keys wait longer, never allow more.
func NewLimiter(store shmarena.KeyValue, opts ...Option) *Limiter {
	l := &Limiter{kv: store, now: func() int64 { return time.Now().UnixNano() }}
	if e, ok := store.(Evaluator); ok {
		l.eval = e
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN reports whether n events may happen now for key under limit,
// and if so records them (n = 0 only asks). A request costing more than
// limit.Burst is never allowed. Errors: ErrInvalid (limit or n out of
// range), the store's errors (wrapped), ErrContended; on error the result
// is the zero Result and nothing is recorded... except that a store error
// on a network may leave the write done or not, as for any write.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	if err := limit.valid(); err != nil {
		return Result{}, err
	}
	if n < 0 {
		return Result{}, fmt.Errorf("ratelimit: %w: cost %d is negative", ErrInvalid, n)
	}
	if l.prefix != "" {
		key = l.prefix + key
	}
	if l.eval != nil {
		return l.eval.AllowGCRA(ctx, key, limit, n)
	}
	return l.allowCAS(ctx, key, limit, n)
}

// Reset forgets key's history: its next request finds a full burst.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if l.prefix != "" {
		key = l.prefix + key
	}
	if l.eval != nil {
		return l.eval.ResetGCRA(ctx, key)
	}
	_, err := l.kv.Delete(ctx, key)
	return err
}

// allowCAS is GCRA over a KeyValue: load the TAT, decide, store the new
// TAT with a compare-and-swap (a create with LoadOrStore), and try again
// from the load when another process got there first. The stored value is
// the TAT, 8 bytes little-endian.
func (l *Limiter) allowCAS(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	var oldBuf, newBuf [8]byte
	for range maxAttempts {
		old, ok, err := l.kv.AppendLoad(ctx, oldBuf[:0], key)
		if err != nil {
			return Result{}, err
		}
		var tat int64
		if ok && len(old) == 8 {
			tat = int64(binary.LittleEndian.Uint64(old))
		}
		now := l.now()
		res, newTAT := decide(limit, n, tat, now)
		if res.Allowed == 0 {
			return res, nil
		}
		binary.LittleEndian.PutUint64(newBuf[:], uint64(newTAT))
		if !ok {
			ttl := time.Duration(newTAT-now) + limit.Period
			_, loaded, err := l.kv.LoadOrStore(ctx, key, newBuf[:], shmarena.WithTTL(ttl))
			if err != nil {
				return Result{}, err
			}
			if !loaded {
				return res, nil
			}
			continue
		}
		swapped, err := l.kv.CompareAndSwap(ctx, key, old, newBuf[:])
		if err != nil {
			return Result{}, err
		}
		if swapped {
			return res, l.coverDeadline(ctx, key, limit, newTAT, now)
		}
	}
	return Result{}, ErrContended
}

// coverDeadline keeps key alive until its TAT: a compare-and-swap keeps
// the deadline the key was created with, and a key that lapses while its
// TAT is still ahead would hand out a fresh burst. When the deadline falls
// short it is moved to TAT + Period (so this happens about once a Burst),
// then checked again against the TAT stored now, because another process
// may have stored a later TAT and set its deadline before this one's
// Expire landed; the last process to move a deadline always checks after
// moving it, so the deadline ends up covering the latest TAT.
func (l *Limiter) coverDeadline(ctx context.Context, key string, limit Limit, tat, now int64) error {
	var buf [8]byte
	for range maxAttempts {
		left, ok, err := l.kv.TTL(ctx, key)
		if err != nil || !ok || left == 0 {
			return err // gone (a Reset) or no deadline: nothing to cover
		}
		if now+int64(left) >= tat {
			return nil
		}
		if _, err := l.kv.Expire(ctx, key, time.Duration(tat-now)+limit.Period); err != nil {
			return err
		}
		v, ok, err := l.kv.AppendLoad(ctx, buf[:0], key)
		if err != nil || !ok || len(v) != 8 {
			return err
		}
		tat, now = int64(binary.LittleEndian.Uint64(v)), l.now()
	}
	return ErrContended
}
