package shmarena

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hot paths allocate nothing: a stray allocation (an error message
// built before it is needed, a slice grown per call) costs more than the
// operation itself and does not show in a unit test's timings, so these
// tests count allocations, which are the same on a busy machine and a
// quiet one, with and without -race (the race detector's bookkeeping is
// not on the Go heap).

// allocRuns is how many calls each count averages over.
const allocRuns = 200

// zeroAllocs requires f to allocate nothing per call.
func zeroAllocs(t *testing.T, what string, f func()) {
	t.Helper()
	f() // warm up: a first call may size per-handle state once
	assert.Zero(t, testing.AllocsPerRun(allocRuns, f), "%s allocates", what)
}

// allocKeys returns n distinct 24-byte keys, built before any count.
func allocKeys(prefix string, n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("%s-%0*d", prefix, 23-len(prefix), i)
	}
	return k
}

func TestMapHotPathsAllocateNothing(t *testing.T) {
	a, _ := openTestArena(t, 8<<20)
	m, err := a.Map("alloc", WithSlots(4096), WithSlotSize(128))
	require.NoError(t, err)
	val := make([]byte, 64)
	require.NoError(t, m.Store("present", val))
	_, err = m.Add("counter", 1)
	require.NoError(t, err)
	buf := make([]byte, 0, 128)
	fresh := allocKeys("fresh", 4*(allocRuns+1))
	next := 0
	newKey := func() string { next++; return fresh[next-1] }

	zeroAllocs(t, "AppendLoad (hit)", func() {
		if _, ok := m.AppendLoad(buf[:0], "present"); !ok {
			t.Fatal("miss")
		}
	})
	zeroAllocs(t, "AppendLoad (miss)", func() { m.AppendLoad(buf[:0], "absent") })
	zeroAllocs(t, "Load (miss)", func() { m.Load("absent") })
	zeroAllocs(t, "Exists", func() { m.Exists("present") })
	zeroAllocs(t, "Store (overwrite)", func() {
		if err := m.Store("present", val); err != nil {
			t.Fatal(err)
		}
	})
	zeroAllocs(t, "Store (new key)", func() {
		if err := m.Store(newKey(), val); err != nil {
			t.Fatal(err)
		}
	})
	zeroAllocs(t, "Add (live counter)", func() {
		if _, err := m.Add("counter", 1); err != nil {
			t.Fatal(err)
		}
	})
	zeroAllocs(t, "Add (new key)", func() {
		if _, err := m.Add(newKey(), 1); err != nil {
			t.Fatal(err)
		}
	})
	zeroAllocs(t, "Counter", func() { m.Counter("counter") })
	zeroAllocs(t, "Delete", func() {
		if !m.Delete(fresh[next-1]) {
			t.Fatal("nothing deleted")
		}
		next--
	})
	zeroAllocs(t, "Delete (absent)", func() { m.Delete("absent") })
}

// CompareAndSwap's old and new may live on the caller's stack: the call
// keeps no reference to them, so passing them allocates nothing, whether
// the swap happens or not, on a value and on a counter.
func TestCompareAndSwapAllocatesNothing(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	m, err := a.Map("cas", WithSlots(256), WithSlotSize(128))
	require.NoError(t, err)
	require.NoError(t, m.Store("value", make([]byte, 64)))
	_, err = m.Add("counter", 0)
	require.NoError(t, err)
	flip := byte(0)
	zeroAllocs(t, "CompareAndSwap (swapped)", func() {
		var old, new [64]byte
		old[0], new[0] = flip, flip^1
		if ok, err := m.CompareAndSwap("value", old[:], new[:]); !ok || err != nil {
			t.Fatal("not swapped", err)
		}
		flip ^= 1
	})
	zeroAllocs(t, "CompareAndSwap (value differs)", func() {
		var old, new [64]byte
		old[0], new[0] = 9, 10
		if ok, err := m.CompareAndSwap("value", old[:], new[:]); ok || err != nil {
			t.Fatal("swapped", err)
		}
	})
	zeroAllocs(t, "CompareAndSwap (counter)", func() {
		var old, new [8]byte
		old[0], new[0] = flip, flip^1
		if ok, err := m.CompareAndSwap("counter", old[:], new[:]); !ok || err != nil {
			t.Fatal("not swapped", err)
		}
		flip ^= 1
	})
	zeroAllocs(t, "CompareAndSwap (absent)", func() {
		var old, new [8]byte
		if ok, _ := m.CompareAndSwap("absent", old[:], new[:]); ok {
			t.Fatal("swapped")
		}
	})
}

// A Load hit returns a copy: that one allocation is its contract
// (AppendLoad is the form that allocates nothing).
func TestMapLoadHitAllocatesOnlyTheCopy(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	m, err := a.Map("alloc", WithSlots(256), WithSlotSize(128))
	require.NoError(t, err)
	require.NoError(t, m.Store("present", make([]byte, 64)))
	assert.Equal(t, 1.0, testing.AllocsPerRun(allocRuns, func() { m.Load("present") }))
}

func TestMapWithDeadlinesAllocatesNothing(t *testing.T) {
	a, _ := openTestArena(t, 8<<20)
	m, err := a.Map("ttl", WithSlots(4096), WithSlotSize(128))
	require.NoError(t, err)
	val := make([]byte, 64)
	ttl := WithTTL(3600e9)
	require.NoError(t, m.Store("present", val, ttl))
	buf := make([]byte, 0, 128)
	zeroAllocs(t, "AppendLoad (hit, deadline)", func() { m.AppendLoad(buf[:0], "present") })
	zeroAllocs(t, "Store (overwrite, WithTTL)", func() {
		if err := m.Store("present", val, ttl); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPublishAllocatesNothing(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	r, err := a.Ring("alloc", WithSlots(1024), WithSlotSize(128))
	require.NoError(t, err)
	p := make([]byte, 64)
	zeroAllocs(t, "Publish", func() {
		if _, err := r.Publish("topic", p); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPublishBatchAllocatesNothing(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	r, err := a.Ring("alloc", WithSlots(1024), WithSlotSize(128))
	require.NoError(t, err)
	g, err := r.Group("g", WithBackpressure())
	require.NoError(t, err)
	batch := make([][]byte, 16)
	for i := range batch {
		batch[i] = make([]byte, 64)
	}
	ctx := context.Background()
	var recs []Record
	zeroAllocs(t, "PublishBatch", func() {
		if _, err := r.PublishBatch("topic", batch); err != nil {
			t.Fatal(err)
		}
		recs = g.AppendClaim(recs[:0], len(batch))
	})
	zeroAllocs(t, "PublishBatchWait", func() {
		if _, err := r.PublishBatchWait(ctx, "topic", batch); err != nil {
			t.Fatal(err)
		}
		recs = g.AppendClaim(recs[:0], len(batch))
	})
}

// PublishWait with room (a WithBackpressure group that keeps up) is a
// Publish: it copies the handle to mark its publishes quiet, and that
// copy must stay on the stack.
func TestPublishWaitAllocatesNothing(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	r, err := a.Ring("alloc", WithSlots(1024), WithSlotSize(128))
	require.NoError(t, err)
	g, err := r.Group("g", WithBackpressure())
	require.NoError(t, err)
	p := make([]byte, 64)
	ctx := context.Background()
	var recs []Record
	zeroAllocs(t, "PublishWait, then AppendClaim", func() {
		if _, err := r.PublishWait(ctx, "topic", p); err != nil {
			t.Fatal(err)
		}
		recs = g.AppendClaim(recs[:0], 1)
	})
}

// A loop that passes back the slice it got claims and reads into its own
// memory: once the slice and its payloads have grown, nothing allocates.
func TestAppendClaimAllocatesNothing(t *testing.T) {
	a, _ := openTestArena(t, 8<<20)
	r, err := a.Ring("alloc", WithSlots(1024), WithSlotSize(128), WithMaxInFlight(256))
	require.NoError(t, err)
	once, err := r.Group("once")
	require.NoError(t, err)
	acked, err := r.Group("acked", WithAck(time.Minute))
	require.NoError(t, err)
	c := r.Cursor()
	p := make([]byte, 64)
	publish := func(n int) {
		for range n {
			if _, err := r.Publish("topic", p); err != nil {
				t.Fatal(err)
			}
		}
	}
	var recs []Record
	for _, batch := range []int{1, 16} {
		zeroAllocs(t, fmt.Sprintf("Group.AppendClaim(%d)", batch), func() {
			publish(batch)
			recs = once.AppendClaim(recs[:0], batch)
			if len(recs) != batch {
				t.Fatalf("claimed %d of %d", len(recs), batch)
			}
			recs = c.AppendRead(recs[:0], batch)
			if len(recs) != batch {
				t.Fatalf("read %d of %d", len(recs), batch)
			}
			recs = acked.AppendClaim(recs[:0], batch)
			if len(recs) != batch {
				t.Fatalf("claimed %d of %d", len(recs), batch)
			}
			if err := acked.Ack(recs...); err != nil {
				t.Fatal(err)
			}
		})
	}
	recs = recs[:0]
	zeroAllocs(t, "Group.AckAndClaim(16)", func() {
		publish(16)
		var err error
		if recs, err = acked.AckAndClaim(recs, 16); err != nil || len(recs) != 16 {
			t.Fatalf("claimed %d of 16: %v", len(recs), err)
		}
	})
	assert.Equal(t, p, recs[0].Payload)
	assert.Equal(t, "topic", recs[0].Topic)
}
