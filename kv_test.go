package shmarena

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The adapter's read path allocates nothing: the conversion to the
// interface, Load through AppendLoad into a buffer with room, Counter, TTL.
func TestKeyValueAdapterReadsAllocateNothing(t *testing.T) {
	a, _ := tempArena(t, 4<<20)
	m, err := a.Map("kv", WithSlots(1024))
	require.NoError(t, err)
	var kv KeyValue = NewKeyValue(m)
	ctx := context.Background()
	require.NoError(t, kv.Store(ctx, "k", []byte("value"), WithTTL(time.Hour)))
	_, err = kv.Add(ctx, "n", 7)
	require.NoError(t, err)
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(200, func() {
		var kv2 KeyValue = NewKeyValue(m)
		out, ok, err := kv2.AppendLoad(ctx, buf[:0], "k")
		if !ok || err != nil || string(out) != "value" {
			panic("AppendLoad missed")
		}
		if n, ok, _ := kv2.Counter(ctx, "n"); !ok || n != 7 {
			panic("Counter missed")
		}
		if d, ok, _ := kv2.TTL(ctx, "k"); !ok || d <= 0 {
			panic("TTL missed")
		}
	})
	assert.Zero(t, allocs)
}

// The settings a backend resolves are the ones Map applies.
func TestResolveWriteOptions(t *testing.T) {
	resolve := func(opts ...WriteOption) WriteSettings {
		ws, err := ResolveWriteOptions(opts...)
		require.NoError(t, err)
		return ws
	}
	assert.Equal(t, WriteSettings{}, resolve())
	assert.Equal(t, WriteSettings{TTL: time.Second}, resolve(WithTTL(time.Second)))
	assert.Equal(t, WriteSettings{TTL: 2 * time.Second}, resolve(WithTTL(time.Second), WithTTL(2*time.Second)))
	assert.Equal(t, WriteSettings{KeepTTL: true}, resolve(WithKeepTTL()))
	for _, bad := range [][]WriteOption{{WithTTL(-time.Second)}, {WithTTL(0)}, {WithTTL(time.Second), WithKeepTTL()}} {
		_, err := ResolveWriteOptions(bad...)
		require.ErrorIs(t, err, ErrInvalid, "the writes of Map refuse these too")
	}
}

func TestResolveReaderOptions(t *testing.T) {
	s := ResolveReaderOptions(WithTopic("jobs"), WithAck(time.Second), WithMaxDeliveries(3),
		WithDeadLetter("dead"), FromStart())
	assert.Equal(t, ReaderSettings{FromStart: true, Topic: "jobs", Lease: time.Second,
		MaxDeliveries: 3, DeadLetter: "dead"}, s)
}

func TestCapabilitiesString(t *testing.T) {
	c := CapLockFreeReads | CapAtomicClear
	assert.Equal(t, "lock-free-reads|atomic-clear", c.String())
	assert.True(t, c.Has(CapAtomicClear))
	assert.False(t, c.Has(CapAtomicClear|CapReplication))
}

// The ring's queue adapter makes an acking group even without WithAck.
func TestRingQueueGroupAcks(t *testing.T) {
	a, _ := tempArena(t, 4<<20)
	r, err := a.Ring("q", WithSlots(64))
	require.NoError(t, err)
	q := NewQueue(r)
	ctx := context.Background()
	g, err := q.Group(ctx, "g", WithTopic("t"))
	require.NoError(t, err)
	_, err = q.Publish(ctx, "t", []byte("x"))
	require.NoError(t, err)
	recs, err := g.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, 1, recs[0].Deliveries)
	st, err := g.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Pending)
	require.NoError(t, g.Ack(ctx, recs...))
	st, _ = g.Stats(ctx)
	assert.Equal(t, 0, st.Pending)
}

// BenchmarkKeyValueAdapter compares Map's read verbs called directly with
// the same verbs through the KeyValue interface (the adapter's cost).
func BenchmarkKeyValueAdapter(b *testing.B) {
	a, _ := tempArena(b, 8<<20)
	m, err := a.Map("kv", WithSlots(4096))
	require.NoError(b, err)
	require.NoError(b, m.Store("key", []byte("0123456789abcdef")))
	_, err = m.Add("ctr", 1)
	require.NoError(b, err)
	var kv KeyValue = NewKeyValue(m)
	ctx := context.Background()
	buf := make([]byte, 0, 64)
	b.Run("AppendLoad/direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = m.AppendLoad(buf[:0], "key")
		}
	})
	b.Run("AppendLoad/interface", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _, _ = kv.AppendLoad(ctx, buf[:0], "key")
		}
	})
	b.Run("Add/direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = m.Add("ctr", 1)
		}
	})
	b.Run("Add/interface", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = kv.Add(ctx, "ctr", 1)
		}
	})
}
