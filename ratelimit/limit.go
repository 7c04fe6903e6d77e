// Package ratelimit limits how often a key (a client, a user, an API token)
// may act, exactly across every process that shares the limiter's store: a
// shmarena Map on one host, or Redis and Redis Cluster across hosts
// (module github.com/shmarena/shmarena/redis), through the
// shmarena.KeyValue interface.
//
// It implements GCRA, the generic cell rate algorithm (a leaky bucket as a
// meter), as go-redis/redis_rate does, and keeps redis_rate's shapes
// (Limit, PerSecond, Allow, AllowN, Reset, Result) so Redis users meet
// nothing new. Each key holds one 64-bit number, its theoretical arrival
// time (TAT): the time at which the key would be back to a full burst. A
// request of cost n is allowed when TAT + n*emission - burst*emission <=
// now, where emission = Period/Rate; the new TAT is then stored with a
// compare-and-swap, so two processes never both spend the same allowance.
// Unlike a fixed window there is no double burst at a window's edge: a key
// spends at most Burst at once and then Rate per Period, smoothly.
//
// On a store that runs the decision itself (Redis: one Lua script run by
// hash, using the server's clock) the limiter calls it instead: see
// Evaluator.
package ratelimit

import (
	"fmt"
	"time"
)

// A Limit is Rate events per Period, with bursts of up to Burst events at
// once (the bucket's depth), as in go-redis/redis_rate.
type Limit struct {
	// Rate is how many events a Period allows, sustained (>= 1).
	Rate int
	// Burst is how many events may happen at once after a quiet spell
	// (>= 1).
	Burst int
	// Period is the time Rate is counted over (> 0).
	Period time.Duration
}

// PerSecond allows rate events a second, in bursts of up to rate.
func PerSecond(rate int) Limit { return Limit{Rate: rate, Burst: rate, Period: time.Second} }

// PerMinute allows rate events a minute, in bursts of up to rate.
func PerMinute(rate int) Limit { return Limit{Rate: rate, Burst: rate, Period: time.Minute} }

// PerHour allows rate events an hour, in bursts of up to rate.
func PerHour(rate int) Limit { return Limit{Rate: rate, Burst: rate, Period: time.Hour} }

// String is like "10 req/1s (burst 10)".
func (l Limit) String() string {
	return fmt.Sprintf("%d req/%s (burst %d)", l.Rate, l.Period, l.Burst)
}

// IsZero reports whether l is the zero Limit.
func (l Limit) IsZero() bool { return l == Limit{} }

// valid reports what is wrong with l, or nil.
func (l Limit) valid() error {
	if l.Rate < 1 || l.Burst < 1 || l.Period <= 0 {
		return fmt.Errorf("ratelimit: %w: limit %v needs Rate >= 1, Burst >= 1 and Period > 0", ErrInvalid, l)
	}
	if l.Period/time.Duration(l.Rate) <= 0 {
		return fmt.Errorf("ratelimit: %w: limit %v is more than one event a nanosecond", ErrInvalid, l)
	}
	return nil
}

// emission is the time one event costs: Period/Rate.
func (l Limit) emission() int64 { return int64(l.Period) / int64(l.Rate) }

// A Result is one decision, as redis_rate's.
type Result struct {
	// Limit is the limit the decision was made under.
	Limit Limit
	// Allowed is how many events were allowed: n for AllowN(n) when
	// allowed, else 0.
	Allowed int
	// Remaining is how many more events the key could have right now.
	Remaining int
	// RetryAfter is how long until the denied request would be allowed;
	// -1 when it was allowed (redis_rate's convention).
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to a full burst.
	ResetAfter time.Duration
}

// decide is GCRA: given the stored TAT (0 when the key has none) and now,
// both in nanoseconds on one clock, it returns the decision and the TAT to
// store (only when res.Allowed > 0). It is redis_rate's Lua script in
// integer nanoseconds.
func decide(l Limit, n int, tat, now int64) (res Result, newTAT int64) {
	emission := l.emission()
	burstOffset := emission * int64(l.Burst)
	if tat < now {
		tat = now
	}
	newTAT = tat + emission*int64(n)
	diff := now - (newTAT - burstOffset) // room left after this request
	res.Limit = l
	if diff < 0 {
		res.RetryAfter = time.Duration(-diff)
		res.ResetAfter = time.Duration(tat - now)
		res.Remaining = remaining(now-(tat-burstOffset), emission)
		return res, 0
	}
	res.Allowed = n
	res.Remaining = remaining(diff, emission)
	res.RetryAfter = -1
	res.ResetAfter = time.Duration(newTAT - now)
	return res, newTAT
}

func remaining(room, emission int64) int {
	if room <= 0 {
		return 0
	}
	return int(room / emission)
}
