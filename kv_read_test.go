package shmarena

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdSlot begins key's slot holding its stripe, as a writer descheduled
// inside its write leaves it, and returns the function that ends the
// write and lets the stripe go.
func holdSlot(t *testing.T, m *Map, key string) (end func()) {
	t.Helper()
	h := m.hashKey(key)
	s := m.stripeOf(h)
	require.True(t, m.lock(s))
	v, found := m.find(key, h)
	require.True(t, found, "%q is stored", key)
	odd := m.begin(s, v)
	return func() {
		require.True(t, m.end(v.off, odd))
		m.clearIntent(s)
		m.unlock(s)
	}
}

// afterBusy runs f once m has counted a read that gave up as busy since
// busy0, or fails the test after hangBound.
func afterBusy(t *testing.T, m *Map, busy0 uint64, f func()) {
	deadline := time.Now().Add(hangBound)
	for m.Stats().Busy == busy0 {
		if time.Now().After(deadline) {
			t.Error("no read gave up as busy")
			break
		}
		time.Sleep(time.Millisecond)
	}
	f()
}

// Map's lock-free read gives up on a key whose writer stays inside its
// write past oddPatience and reports it absent (counted in Busy); the
// KeyValue reads, whose callers cannot tell that from a miss, read again
// and return the value once the writer is done.
func TestKeyValueReadsWaitOutAWriter(t *testing.T) {
	defer func(p time.Duration) { oddPatience = p }(oddPatience)
	oddPatience = time.Millisecond
	m := testMap(t, WithSlots(1024), WithSlotSize(64), WithStripes(1))
	kv, ctx := NewKeyValue(m), context.Background()
	require.NoError(t, m.Store("v", []byte("value"), WithTTL(time.Hour)))
	_, err := m.Add("n", 7)
	require.NoError(t, err)

	for _, key := range []string{"v", "n"} {
		end := holdSlot(t, m, key)
		_, ok := m.Load(key)
		assert.False(t, ok, "Map's read gives up on %q being written", key)
		end()
	}
	reads := map[string]func() (any, bool, error){
		"Load": func() (any, bool, error) { v, ok, err := kv.Load(ctx, "v"); return string(v), ok, err },
		"AppendLoad": func() (any, bool, error) {
			v, ok, err := kv.AppendLoad(ctx, []byte("x"), "v")
			return string(v), ok, err
		},
		"Counter": func() (any, bool, error) { return kv.Counter(ctx, "n") },
		"TTL": func() (any, bool, error) {
			d, ok, err := kv.TTL(ctx, "v")
			return d > 0 && d <= time.Hour, ok, err
		},
	}
	want := map[string]any{"Load": "value", "AppendLoad": "xvalue", "Counter": int64(7), "TTL": true}
	for name, read := range reads {
		key := map[string]string{"Counter": "n"}[name]
		if key == "" {
			key = "v"
		}
		end := holdSlot(t, m, key)
		go afterBusy(t, m, m.Stats().Busy, end)
		got, ok, err := read()
		require.NoError(t, err, name)
		assert.True(t, ok, "%s through KeyValue read a key being written as absent", name)
		assert.Equal(t, want[name], got, name)
	}
}

// A KeyValue read waiting out a writer returns ctx's error when ctx ends
// first, and reports the miss Map reports after kvBusyPatience: a slot
// damaged to look written for good holds it no longer than that.
func TestKeyValueReadWaitEnds(t *testing.T) {
	defer func(p, k time.Duration) { oddPatience, kvBusyPatience = p, k }(oddPatience, kvBusyPatience)
	oddPatience = time.Millisecond
	m := testMap(t, WithSlots(1024), WithSlotSize(64), WithStripes(1))
	kv := NewKeyValue(m)
	require.NoError(t, m.Store("v", []byte("value")))
	end := holdSlot(t, m, "v")
	defer end()

	ctx, cancel := context.WithCancel(context.Background())
	go afterBusy(t, m, m.Stats().Busy, cancel)
	_, ok, err := kv.Load(ctx, "v")
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, ok)

	kvBusyPatience = 10 * time.Millisecond
	done := make(chan error, 1)
	go func() { _, ok, err := kv.Load(context.Background(), "v"); assert.False(t, ok); done <- err }()
	select {
	case err := <-done:
		assert.NoError(t, err, "past its patience the read reports the miss Map reports")
	case <-time.After(hangBound):
		t.Fatal("a KeyValue read waited for good on a slot that stays written")
	}
}
