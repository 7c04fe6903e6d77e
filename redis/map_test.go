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

func TestMapVerbsOnRedis(t *testing.T) {
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

// Capabilities follow the client: one server clears atomically (SCAN's
// guarantee); a cluster replicates and clears master by master; a
// client-side sharded Ring does neither.
func TestCapabilitiesByClient(t *testing.T) {
	single := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer single.Close()
	defer cluster.Close()
	defer ring.Close()
	assert.Equal(t, shmarena.CapMultiHost|shmarena.CapAtomicClear, NewMap(single, "p:").Capabilities())
	assert.Equal(t, shmarena.CapMultiHost|shmarena.CapReplication, NewMap(cluster, "p:").Capabilities())
	assert.Equal(t, shmarena.CapMultiHost, NewMap(ring, "p:").Capabilities())
	q, err := NewQueue(single, "q")
	require.NoError(t, err)
	assert.Equal(t, shmarena.CapMultiHost, q.Capabilities())
	_, err = NewQueue(single, "{q}")
	assert.ErrorIs(t, err, shmarena.ErrInvalid)
}
