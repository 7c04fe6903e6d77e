package ratelimit

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testStore is a fresh shared-memory map as a KeyValue.
func testStore(t testing.TB) (shmarena.KeyValue, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "arena")
	a, err := shmarena.Open(path, shmarena.WithSize(4<<20))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	m, err := a.Map("rate", shmarena.WithSlots(4096), shmarena.WithSlotSize(64))
	require.NoError(t, err)
	return shmarena.NewKeyValue(m), path
}

// fakeClock makes l read the time from *now.
func fakeClock(l *Limiter, now *int64) { l.now = func() int64 { return *now } }

func TestDecideMatchesRedisRate(t *testing.T) {
	l := Limit{Rate: 10, Burst: 5, Period: time.Second} // emission 100ms
	now := int64(1e12)
	res, tat := decide(l, 1, 0, now)
	assert.Equal(t, Result{Limit: l, Allowed: 1, Remaining: 4, RetryAfter: -1, ResetAfter: 100 * time.Millisecond}, res)
	assert.Equal(t, now+1e8, tat)
	// Four more spend the burst; the sixth waits one emission.
	for i := 3; i >= 0; i-- {
		res, tat = decide(l, 1, tat, now)
		assert.Equal(t, i, res.Remaining)
	}
	res, next := decide(l, 1, tat, now)
	assert.Equal(t, 0, res.Allowed)
	assert.Zero(t, next)
	assert.Equal(t, 100*time.Millisecond, res.RetryAfter)
	assert.Equal(t, 500*time.Millisecond, res.ResetAfter)
	// A cost above the burst never passes.
	res, _ = decide(l, 6, 0, now)
	assert.Equal(t, 0, res.Allowed)
	// n = 0 asks without spending.
	res, tat0 := decide(l, 0, tat, now)
	assert.Equal(t, 0, res.Remaining)
	assert.Equal(t, tat, tat0)
}

// A key spends its burst at once, then Rate per Period, and a window's
// edge grants no second burst (the fixed-window flaw).
func TestLimiterBurstThenSmooth(t *testing.T) {
	kv, _ := testStore(t)
	l := NewLimiter(kv)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	fakeClock(l, &now)
	ctx := context.Background()
	lim := PerSecond(10)
	allowed := 0
	for range 50 {
		res, err := l.Allow(ctx, "k", lim)
		require.NoError(t, err)
		allowed += res.Allowed
	}
	assert.Equal(t, 10, allowed, "a burst of Burst")
	// Over the next 3 seconds, at 1 ms steps with 5 tries each, exactly
	// one event per 100 ms passes: 30, not 10 per second-window edge.
	allowed = 0
	for range 3000 {
		now += int64(time.Millisecond)
		for range 5 {
			res, err := l.Allow(ctx, "k", lim)
			require.NoError(t, err)
			allowed += res.Allowed
		}
	}
	assert.Equal(t, 30, allowed)
}

func TestLimiterResetAndAllowN(t *testing.T) {
	kv, _ := testStore(t)
	l := NewLimiter(kv, WithPrefix("rate:"))
	// A clock that stands still, so the wait is exactly one emission
	// interval however long the calls take.
	now := time.Now().UnixNano()
	fakeClock(l, &now)
	ctx := context.Background()
	lim := PerMinute(5)
	res, err := l.AllowN(ctx, "k", lim, 5)
	require.NoError(t, err)
	assert.Equal(t, 5, res.Allowed)
	assert.Equal(t, 0, res.Remaining)
	res, err = l.Allow(ctx, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Allowed)
	assert.Equal(t, 12*time.Second, res.RetryAfter, "one emission interval")
	_, ok, _ := kv.Load(ctx, "rate:k")
	assert.True(t, ok, "the prefix is part of the stored key")
	require.NoError(t, l.Reset(ctx, "k"))
	res, err = l.Allow(ctx, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Allowed)
	assert.Equal(t, 4, res.Remaining)
}

func TestLimiterRefusesBadInput(t *testing.T) {
	kv, _ := testStore(t)
	l := NewLimiter(kv)
	ctx := context.Background()
	for _, lim := range []Limit{{}, {Rate: 1, Burst: 0, Period: time.Second}, {Rate: 10, Burst: 1, Period: 5}} {
		_, err := l.Allow(ctx, "k", lim)
		assert.ErrorIs(t, err, ErrInvalid, "%v", lim)
	}
	_, err := l.AllowN(ctx, "k", PerSecond(1), -1)
	assert.ErrorIs(t, err, ErrInvalid)
	_, ok, _ := kv.Load(ctx, "k")
	assert.False(t, ok, "a refused call writes nothing")
}

// The stored key outlives its TAT: a compare-and-swap keeps the deadline
// set at creation, so the limiter moves it when the TAT passes it; a key
// that lapsed early would hand out a second burst.
func TestLimiterDeadlineCoversTAT(t *testing.T) {
	t.Run("map", func(t *testing.T) {
		kv, _ := testStore(t)
		deadlineCoversTAT(t, kv, NewLimiter(kv))
	})
	t.Run("KeyValue", func(t *testing.T) {
		kv, _ := testStore(t)
		deadlineCoversTAT(t, kv, NewLimiter(kvOnly{kv}))
	})
}

// kvOnly hides the Map behind a KeyValue, so the limiter takes its
// interface path (as it would on any other store).
type kvOnly struct{ shmarena.KeyValue }

func deadlineCoversTAT(t *testing.T, kv shmarena.KeyValue, l *Limiter) {
	t.Helper()
	ctx := context.Background()
	lim := Limit{Rate: 1, Burst: 100, Period: time.Hour}
	for i := range 100 {
		res, err := l.Allow(ctx, "k", lim)
		require.NoError(t, err)
		require.Equal(t, 1, res.Allowed, "event %d", i)
		left, ok, err := kv.TTL(ctx, "k")
		require.NoError(t, err)
		require.True(t, ok)
		assert.GreaterOrEqual(t, left, res.ResetAfter, "event %d", i)
	}
}
