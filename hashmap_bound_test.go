package shmarena

import (
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One operation does bounded work under its segment's lock, whatever the
// segment's size: these tests count the work an operation did by what it
// changed (time is for the benchmarks: bench/cmd/lockhold).

// An evicting Store when every key was read since its last pass evicts
// after at most maxReinserts reinsertions, not after sending the whole
// main queue round (which set every key's count to 0).
func TestEvictionReinsertsBoundedKeys(t *testing.T) {
	m := testMap(t, WithSlots(8192), WithSlotSize(64), WithStripes(1), WithEviction())
	n := int(capacity(8192))
	for i := range n {
		require.NoError(t, m.Store("k"+strconv.Itoa(i), []byte("v")))
	}
	for i := range n {
		for range 3 {
			_, ok := m.Load("k" + strconv.Itoa(i))
			require.True(t, ok)
		}
	}
	uses := func() (hot int) {
		for i := uint64(0); i < m.slots; i++ {
			if m.use(i)&useCount == useCount {
				hot++
			}
		}
		return hot
	}
	require.Equal(t, n, uses())
	before := m.Stats().Evicted
	require.NoError(t, m.Store("new", []byte("v")))
	assert.Equal(t, before+1, m.Stats().Evicted, "one key evicted for one new one")
	assert.GreaterOrEqual(t, uses(), n-1-maxReinserts, "keys whose count one insert changed (or evicted)")
	_, ok := m.Load("new")
	assert.True(t, ok)
}

// A Store refused in a plain map that holds lapsed entries away from the
// key's probe path sweeps refusalSweep slots for them, not the whole
// segment (which removed every lapsed entry of it at once).
func TestRefusedStoreSweepsBoundedSlots(t *testing.T) {
	m := testMap(t, WithSlots(8192), WithSlotSize(64), WithStripes(1))
	sp := m.span(0)
	const key = "refused"
	home := m.home(m.hashKey(key))
	near := func(k string) bool {
		h := m.home(m.hashKey(k))
		return sp.dist(h, home) < 1100 || sp.dist(home, h) < 1100
	}
	var far []string
	for i := 0; len(far) < 3000; i++ {
		if k := "far" + strconv.Itoa(i); !near(k) {
			require.NoError(t, m.Store(k, []byte("v"), WithTTL(time.Hour)))
			far = append(far, k)
		}
	}
	for i := 0; m.firstFree(m.hashKey(key)).off >= 0; i++ {
		if k := "near" + strconv.Itoa(i); near(k) {
			if err := m.Store(k, []byte("v")); err != nil {
				require.ErrorIs(t, err, ErrFull)
			}
		}
	}
	for _, k := range far {
		require.True(t, m.Expire(k, time.Nanosecond))
	}
	time.Sleep(time.Millisecond)
	// The sweep starts opposite the key's home, among lapsed entries.
	mem.Put64(m.mem, m.lockOff(0)+stSweep, sp.dist(sp.lo, home)+sp.len()/2)
	before := m.Stats().Expired
	_ = m.Store(key, []byte("v")) // refused, unless the sweep opened its path
	removed := m.Stats().Expired - before
	assert.Positive(t, removed, "the refusal swept")
	assert.LessOrEqual(t, removed, uint64(refusalSweep+sweepStep), "lapsed entries one Store removed")
}

// An insert whose probe window is full (keys chosen to collide) replaces
// the entry there that S3-FIFO would evict first: a key unread in the
// small queue before one unread in main, not the first unread from home.
func TestProbeLimitedInsertReplacesInQueueOrder(t *testing.T) {
	m := testMap(t, WithSlots(4096), WithSlotSize(64), WithStripes(1), WithEviction())
	sp := m.span(0)
	homed := func(i int) (string, bool) {
		k := "c" + strconv.Itoa(i)
		d := m.home(m.hashKey(k)) - sp.lo
		return k, d >= 100 && d < 104
	}
	i := 0
	next := func() string {
		for ; ; i++ {
			if k, ok := homed(i); ok {
				i++
				return k
			}
		}
	}
	last := next() // stored when its window is full
	for m.firstFree(m.hashKey(last)).off >= 0 {
		require.NoError(t, m.Store(next(), []byte("v")))
	}
	keyAt := func(slot uint64) string {
		off := m.slotOff(slot)
		meta := mem.Load64(m.mem, off+sMeta)
		require.Equal(t, uint64(stateLive), metaState(meta))
		return string(mem.AppendBytes(nil, m.mem, keyOff(off, meta), metaKeyLen(meta)))
	}
	for s := sp.lo + 100; s < sp.lo+100+probeBound+8; s++ {
		m.setUse(s, 1) // read once, in main
	}
	mainUnread, smallUnread := sp.lo+110, sp.lo+600
	m.setUse(mainUnread, 0)
	m.setUse(smallUnread, useSmall)
	kMain, kSmall := keyAt(mainUnread), keyAt(smallUnread)

	before := m.Stats()
	require.NoError(t, m.Store(last, []byte("v")))
	after := m.Stats()
	require.Equal(t, before.ProbeLimited+1, after.ProbeLimited, "the insert met the probe bound")
	assert.False(t, m.Exists(kSmall), "the key unread in the small queue is the victim")
	assert.True(t, m.Exists(kMain), "the key unread in main stays")
}
