package shmarena

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/owner"
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
	defer func(p, k time.Duration) { oddPatience, kvBusyPatience = p, k }(oddPatience, kvBusyPatience)
	oddPatience, kvBusyPatience = time.Millisecond, hangBound // only a read that stops reading again fails, however slow the machine
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
	oddPatience, kvBusyPatience = time.Millisecond, hangBound // ctx, not patience, must end the first read
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

// A read that confirms a miss (the segment's moves were open) and then
// gives up on the key's slot, changed under it after it copied the value
// (here: begun by a writer that stays inside its write), returns dst
// unchanged and false: AppendLoad's contract, and what it did before
// confirmMiss passed searchKey's slice through.
func TestAppendLoadGiveUpInConfirmMissReturnsDst(t *testing.T) {
	defer func(p, c time.Duration, f func(*owner.Handle, uint64) bool) {
		oddPatience, oddCheckAfter, aliveFn, valueReadHook = p, c, f, nil
	}(oddPatience, oddCheckAfter, aliveFn)
	oddPatience, oddCheckAfter = hangBound, 0 // the wait on the moves must not give up
	m := testMap(t, WithSlots(1024), WithSlotSize(64), WithStripes(1), WithBytes(1<<16))
	const key = "k"
	big := bytes.Repeat([]byte("x"), 200) // in the value space: read through valueReadHook
	s := m.stripeOf(m.hashKey(key))
	require.True(t, m.lock(s))
	m.beginMoves(s) // the key is absent and the segment's moves are open: confirmMiss
	stored := false
	aliveFn = func(*owner.Handle, uint64) bool {
		if !stored { // the moves end and the key arrives
			stored = true
			m.endMoves(s)
			m.unlock(s)
			require.NoError(t, m.Store(key, big))
		}
		return true
	}
	var end func()
	valueReadHook = func() { // a writer begins the key's slot mid-copy and stays
		valueReadHook, oddPatience = nil, time.Millisecond
		end = holdSlot(t, m, key)
	}
	out, ok := m.AppendLoad([]byte("dst"), key)
	require.True(t, stored)
	require.NotNil(t, end, "the read copied the value")
	assert.False(t, ok, "the read gave up on the held slot")
	assert.Equal(t, "dst", string(out), "a give-up returned dst with a torn copy appended")
	end()
}

// A KeyValue read waiting out a writer on a file another process cuts
// returns ErrTruncated, not a crash and not a wait for its patience.
func TestKeyValueReadPatientlyOfTruncatedFileIsAnError(t *testing.T) {
	skipFaultsUnderRace(t)
	defer func(p, k time.Duration) { oddPatience, kvBusyPatience = p, k }(oddPatience, kvBusyPatience)
	oddPatience, kvBusyPatience = time.Millisecond, hangBound
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(64), WithStripes(1))
	require.NoError(t, err)
	require.NoError(t, m.Store("v", []byte("value")))
	holdSlot(t, m, "v") // never ended: the file is cut under it
	kv := NewKeyValue(m)
	busy0 := m.Stats().Busy
	// In this order: the first read waits until the file is cut under it,
	// the second starts on the cut file.
	for i, c := range []struct {
		name string
		read func() error
	}{
		{"Load", func() error { _, _, err := kv.Load(context.Background(), "v"); return err }},
		{"Counter", func() error { _, _, err := kv.Counter(context.Background(), "v"); return err }},
	} {
		name, read := c.name, c.read
		done := make(chan error, 1)
		go func() { done <- read() }()
		if i == 0 {
			afterBusy(t, m, busy0, func() { require.NoError(t, os.Truncate(path, int64(m.slotOff(0)&^4095))) })
		}
		var err error
		returnsTruncated(t, name, func() error { err = <-done; return err })
		require.ErrorIs(t, err, ErrTruncated, name)
	}
}
