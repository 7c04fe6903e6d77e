package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena/ratelimit"
	"github.com/shmarena/shmarena/redis/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server-side script gives the decisions the compare-and-swap path
// gives: a burst, then a wait of one emission interval; Reset forgets.
func TestLimiterOnRedis(t *testing.T) {
	s := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	m := NewMap(c, "rl:")
	l := ratelimit.NewLimiter(m)
	ctx := context.Background()
	lim := ratelimit.PerMinute(3)
	start := time.Now()
	for i := 2; i >= 0; i-- {
		res, err := l.Allow(ctx, "alice", lim)
		require.NoError(t, err)
		assert.Equal(t, 1, res.Allowed)
		assert.Equal(t, i, res.Remaining)
		assert.Equal(t, time.Duration(-1), res.RetryAfter)
	}
	res, err := l.Allow(ctx, "alice", lim)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Allowed)
	// The waits count down from the first decision on the server's clock:
	// they are what they would be at once, less the time the calls took.
	elapsed := time.Since(start)
	within(t, 20*time.Second, res.RetryAfter, elapsed, "RetryAfter: one emission interval")
	within(t, 60*time.Second, res.ResetAfter, elapsed, "ResetAfter: the whole burst")
	left, err := c.PTTL(ctx, "rl:alice").Result()
	require.NoError(t, err)
	within(t, 60*time.Second, left, time.Since(start), "the key lapses when the burst is whole again")

	res, err = l.AllowN(ctx, "bob", lim, 4)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Allowed, "a cost above the burst never passes")
	assert.Equal(t, 3, res.Remaining)

	require.NoError(t, l.Reset(ctx, "alice"))
	res, err = l.Allow(ctx, "alice", lim)
	require.NoError(t, err)
	assert.Equal(t, 2, res.Remaining)
}

// within asserts that got is want less at most elapsed (the time since
// the countdown could have started), give or take the millisecond the
// server rounds to: a bound that holds however slowly a busy machine ran
// the calls, and still tight when it ran them fast.
func within(t *testing.T, want, got, elapsed time.Duration, msg string) {
	t.Helper()
	assert.GreaterOrEqual(t, got, want-elapsed-time.Millisecond, msg)
	assert.LessOrEqual(t, got, want+time.Millisecond, msg)
}

// A map's keys are not pinned to one slot: they spread over every master
// of the cluster, and Clear visits them all.
func TestClusterMapSpreads(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	defer c.Close()
	m := NewMap(c, "spread:")
	ctx := context.Background()
	for i := range 300 {
		require.NoError(t, m.Store(ctx, "key"+string(rune('a'+i%26))+string(rune('a'+i/26)), []byte("v")))
	}
	sizes := func() []int64 {
		var out []int64
		for _, s := range cl.Servers {
			node := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
			n, err := node.DBSize(ctx).Result()
			_ = node.Close()
			require.NoError(t, err)
			out = append(out, n)
		}
		return out
	}
	for i, n := range sizes() {
		assert.Greater(t, n, int64(50), "master %d holds a share of the map", i)
	}
	require.NoError(t, m.Clear(ctx))
	for i, n := range sizes() {
		assert.Zero(t, n, "master %d after Clear", i)
	}
}
