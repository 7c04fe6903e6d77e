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
	m      *shmarena.Map // kv's Map, when kv is one: called directly
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
	if mk, ok := store.(shmarena.MapKeyValue); ok {
		l.m = mk.Map()
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
// range: nothing recorded), ErrContended, and the store's errors as it
// returns them (wrapping the client's, on Redis); with an error the
// Result is the zero Result and the request must not be counted as
// allowed, though on a network store the write may have landed.
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
	switch {
	case l.eval != nil:
		return l.eval.AllowGCRA(ctx, key, limit, n)
	case l.m != nil:
		return l.allowMap(key, limit, n)
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

// The stored key must outlive its TAT: a key that lapsed while its TAT
// was still ahead would hand out a fresh burst. A compare-and-swap keeps
// the deadline the key had, so the deadline is a step function of the
// TAT, deadline(tat) = the end of the Period after the one holding tat +
// Period: a swap that leaves deadline(tat) unchanged needs no Expire (the
// key's deadline already covers the new TAT by at least a Period), and
// one that moves it (about once a Period of TAT) sets the new deadline
// and then checks the TAT stored since, because another process may have
// stored a later TAT and set its later deadline before this Expire
// landed. The last process to set a deadline always checks after setting
// it, so the key's deadline ends up covering the latest TAT.
func deadline(tat int64, limit Limit) int64 {
	p := int64(limit.Period)
	return (tat/p + 2) * p
}

// allowCAS is GCRA over a KeyValue: load the TAT, decide, store the new
// TAT with a compare-and-swap (a create with LoadOrStore), and try again
// from the load when another process got there first. The stored value is
// the TAT, 8 bytes little-endian. allowMap is the same on a Map in
// shared memory, called directly so its buffers stay on the stack.
func (l *Limiter) allowCAS(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	var oldBuf, newBuf [8]byte
	for range maxAttempts {
		old, ok, err := l.kv.AppendLoad(ctx, oldBuf[:0], key)
		if err != nil {
			return Result{}, err
		}
		tat := decodeTAT(old, ok)
		now := l.now()
		res, newTAT := decide(limit, n, tat, now)
		if res.Allowed == 0 {
			return res, nil
		}
		binary.LittleEndian.PutUint64(newBuf[:], uint64(newTAT))
		if !ok {
			ttl := time.Duration(deadline(newTAT, limit) - now)
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
			if deadline(newTAT, limit) == deadline(tat, limit) {
				return res, nil
			}
			if err := l.moveDeadline(ctx, key, limit, newTAT); err != nil {
				return Result{}, err
			}
			return res, nil
		}
	}
	return Result{}, ErrContended
}

func (l *Limiter) allowMap(key string, limit Limit, n int) (Result, error) {
	var oldBuf, newBuf [8]byte
	for range maxAttempts {
		old, ok := l.m.AppendLoad(oldBuf[:0], key)
		tat := decodeTAT(old, ok)
		now := l.now()
		res, newTAT := decide(limit, n, tat, now)
		if res.Allowed == 0 {
			return res, nil
		}
		binary.LittleEndian.PutUint64(newBuf[:], uint64(newTAT))
		if !ok {
			ttl := time.Duration(deadline(newTAT, limit) - now)
			_, loaded, err := l.m.LoadOrStore(key, newBuf[:], shmarena.WithTTL(ttl))
			if err != nil {
				return Result{}, err
			}
			if !loaded {
				return res, nil
			}
			continue
		}
		swapped, err := l.m.CompareAndSwap(key, old, newBuf[:])
		if err != nil {
			return Result{}, err
		}
		if swapped {
			if deadline(newTAT, limit) == deadline(tat, limit) {
				return res, nil
			}
			if err := l.moveDeadline(context.Background(), key, limit, newTAT); err != nil {
				return Result{}, err
			}
			return res, nil
		}
	}
	return Result{}, ErrContended
}

// decodeTAT reads a stored TAT; anything else (absent, damaged) is 0,
// which decide reads as "no history".
func decodeTAT(v []byte, ok bool) int64 {
	if !ok || len(v) != 8 {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(v))
}

// moveDeadline sets key's deadline to deadline(tat), then rereads the
// TAT and repeats while a later TAT asks for a later deadline (see
// deadline).
func (l *Limiter) moveDeadline(ctx context.Context, key string, limit Limit, tat int64) error {
	set := int64(0)
	for range maxAttempts {
		d := deadline(tat, limit)
		if d == set {
			return nil
		}
		// A TAT in the past is no history: lapse soon, but never persist.
		ttl := max(time.Duration(d-l.now()), time.Millisecond)
		ok, err := l.kv.Expire(ctx, key, ttl)
		if err != nil || !ok {
			return err // gone (a Reset): nothing to cover
		}
		set = d
		v, ok, err := l.kv.Load(ctx, key)
		if err != nil || !ok {
			return err
		}
		tat = decodeTAT(v, ok)
	}
	return ErrContended
}
