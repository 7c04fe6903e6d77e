package redis

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/ratelimit"
	"github.com/shmarena/shmarena/redis/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An operation while the server is down fails with an error that wraps
// the client's (a network error), never a wrong answer such as a miss;
// once the server is back on the same port, the same client, map, queue
// and limiter work again (the server restarts empty: the tests keep no
// data on disk).
func TestServerRestart(t *testing.T) {
	s := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: 1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second})
	defer c.Close()
	m := NewMap(c, "restart:")
	q, err := NewQueue(c, "restart")
	require.NoError(t, err)
	lim := ratelimit.NewLimiter(m)
	ctx := context.Background()
	require.NoError(t, m.Store(ctx, "k", []byte("v")))
	_, err = q.Group(ctx, "g", shmarena.WithTopic("t"))
	require.NoError(t, err)

	s.Stop()
	_, ok, err := m.Load(ctx, "k")
	require.Error(t, err, "a Load while the server is down")
	assert.False(t, ok)
	var netErr net.Error
	assert.True(t, errors.As(err, &netErr), "wraps the client's network error: %v", err)
	_, err = m.Add(ctx, "n", 1)
	assert.Error(t, err)
	_, err = q.Publish(ctx, "t", []byte("x"))
	assert.Error(t, err)
	_, err = lim.Allow(ctx, "k", ratelimit.PerSecond(1))
	assert.Error(t, err)

	require.NoError(t, s.Start())
	require.NoError(t, m.Store(ctx, "k", []byte("again")))
	v, ok, err := m.Load(ctx, "k")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "again", string(v))
	g, err := q.Group(ctx, "g", shmarena.WithTopic("t"))
	require.NoError(t, err)
	_, err = q.Publish(ctx, "t", []byte("x"))
	require.NoError(t, err)
	recs, err := g.Claim(ctx, 1)
	require.NoError(t, err)
	assert.Len(t, recs, 1)
	res, err := lim.Allow(ctx, "k", ratelimit.PerSecond(1))
	require.NoError(t, err)
	assert.Equal(t, 1, res.Allowed)
}
