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
	assert.InDelta(t, 20*time.Second, res.RetryAfter, float64(time.Second))
	assert.InDelta(t, 60*time.Second, res.ResetAfter, float64(time.Second))
	left, err := c.PTTL(ctx, "rl:alice").Result()
	require.NoError(t, err)
	assert.InDelta(t, 60*time.Second, left, float64(time.Second), "the key lapses when the burst is whole again")

	res, err = l.AllowN(ctx, "bob", lim, 4)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Allowed, "a cost above the burst never passes")
	assert.Equal(t, 3, res.Remaining)

	require.NoError(t, l.Reset(ctx, "alice"))
	res, err = l.Allow(ctx, "alice", lim)
	require.NoError(t, err)
	assert.Equal(t, 2, res.Remaining)
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
