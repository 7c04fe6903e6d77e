package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/redis/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSmokeMap(t *testing.T) {
	s := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	m := NewMap(c, "m:")
	ctx := context.Background()
	require.NoError(t, m.Store(ctx, "a", []byte("1"), shmarena.WithTTL(time.Minute)))
	v, ok, err := m.Load(ctx, "a")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "1", string(v))
	n, err := m.Add(ctx, "a", 41)
	require.NoError(t, err)
	assert.Equal(t, int64(42), n)
	d, ok, err := m.TTL(ctx, "a")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Greater(t, d, 50*time.Second)
	sw, err := m.CompareAndSwap(ctx, "a", []byte("42"), []byte("x"))
	require.NoError(t, err)
	assert.True(t, sw)
	_, err = m.Add(ctx, "a", 1)
	assert.ErrorIs(t, err, shmarena.ErrNotCounter)
}

func TestSmokeCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	defer c.Close()
	m := NewMap(c, "m:")
	ctx := context.Background()
	for i := range 100 {
		require.NoError(t, m.Store(ctx, string(rune('a'+i%26))+string(rune('0'+i/26)), []byte("v")))
	}
	require.NoError(t, m.Clear(ctx))
	n := 0
	require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
		k, err := node.DBSize(ctx).Result()
		n += int(k)
		return err
	}))
	assert.Zero(t, n)
}

func TestSmokeQueue(t *testing.T) {
	s := redistest.StartServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	q, err := NewQueue(c, "q", WithCapacity(4))
	require.NoError(t, err)
	ctx := context.Background()
	g, err := q.Group(ctx, "g", shmarena.WithTopic("jobs"), shmarena.WithAck(200*time.Millisecond),
		shmarena.WithMaxDeliveries(2), shmarena.WithDeadLetter("dead"))
	require.NoError(t, err)
	dg, err := q.Group(ctx, "dg", shmarena.WithTopic("dead"))
	require.NoError(t, err)
	seq, err := q.Publish(ctx, "jobs", []byte("poison"))
	require.NoError(t, err)
	for i := 1; i <= 2; i++ {
		recs, err := g.Claim(ctx, 5)
		require.NoError(t, err)
		require.Len(t, recs, 1, "delivery %d", i)
		assert.Equal(t, i, recs[0].Deliveries)
		assert.Equal(t, seq, recs[0].Seq)
		require.NoError(t, g.Nack(ctx, recs[0], 0))
	}
	recs, err := g.Claim(ctx, 5)
	require.NoError(t, err)
	assert.Empty(t, recs)
	st, err := g.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.DeadLettered)
	assert.Equal(t, 0, st.Pending)
	dl, err := dg.Claim(ctx, 5)
	require.NoError(t, err)
	require.Len(t, dl, 1)
	d, err := shmarena.ParseDeadLetter(dl[0])
	require.NoError(t, err)
	assert.Equal(t, shmarena.DeadLetter{Seq: seq, Deliveries: 2, Topic: "jobs", Payload: []byte("poison")}, d)
	for range 4 {
		_, err = q.Publish(ctx, "jobs", []byte("x"))
		require.NoError(t, err)
	}
	_, err = q.Publish(ctx, "jobs", []byte("x"))
	assert.ErrorIs(t, err, shmarena.ErrRingFull)
}
