package shmarena

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// Slots start on a cache line: a 64-byte slot is one line, so a counter's
// Add, which reads its header and key and swaps its version and value,
// touches one line, and a larger slot's header and key share its first.
func TestSlotsStartOnCacheLines(t *testing.T) {
	a, _ := tempArena(t, 16<<20)
	for _, c := range []struct {
		slots, slotSize, stripes int
		evict                    bool
	}{
		{100, 64, 1, false}, {1000, 64, 3, true}, {5000, 128, 7, false},
		{333, 48, 2, true}, {64, 80, 1, false},
	} {
		name := fmt.Sprintf("m%d-%d-%d-%v", c.slots, c.slotSize, c.stripes, c.evict)
		opts := []RegionOption{WithSlots(c.slots), WithSlotSize(c.slotSize), WithStripes(c.stripes)}
		if c.evict {
			opts = append(opts, WithEviction())
		}
		m, err := a.Map(name, opts...)
		require.NoError(t, err, name)
		require.Zero(t, m.slotBase%64, "%s: slots start at %d mod 64", name, m.slotBase%64)
		require.LessOrEqual(t, m.useTable, m.base+int(mapLength(int64(c.slots), int64(c.slotSize), int64(c.stripes), c.evict)), name)
		require.GreaterOrEqual(t, m.useTable, m.slotOff(m.slots), "%s: the slots overrun the use counts", name)
	}
}

// A counter's value and version are one 16-aligned pair on every slot of
// a map whose slot size is a multiple of 16, so Add to a live counter
// takes no lock there; its deadline sits in the data, the key after it.
func TestCounterSlotLayout(t *testing.T) {
	if !mem.HasCAS128 {
		t.Skip("no 16-byte compare-and-swap on this CPU")
	}
	a, _ := tempArena(t, 4<<20)
	m, err := a.Map("c", WithSlots(64), WithSlotSize(64), WithStripes(1))
	require.NoError(t, err)
	for i := range 40 {
		key := fmt.Sprintf("counter-%016d", i) // 24 bytes: a full 64-byte slot
		_, err := m.Add(key, 5, WithTTL(time.Hour))
		require.NoError(t, err)
		v, found := m.find(key, m.hashKey(key))
		require.True(t, found)
		require.Zero(t, (v.off+sCount)&15, "%s: value and version not a 16-aligned pair", key)
		require.Equal(t, v.off/64, (v.off+sData+8+len(key)-1)/64, "%s: the slot crosses a cache line", key)
		require.Equal(t, uint64(5), mem.Load64(m.mem, v.off+sCount))
		require.Equal(t, v.deadline, int64(mem.Load64(m.mem, v.off+sData)))
		require.Greater(t, v.deadline, now())

		// The lock-free add, with the stripe held by this test: a locked
		// Add would wait for it.
		s := m.stripeOf(m.hashKey(key))
		require.True(t, m.lock(s))
		n, err, done := m.addInPlace(key, m.hashKey(key), 2)
		m.unlock(s)
		require.NoError(t, err)
		require.True(t, done, "%s: Add took the lock", key)
		require.Equal(t, int64(7), n)
		got, ok := m.Counter(key)
		require.True(t, ok)
		require.Equal(t, int64(7), got)
		ttl, ok := m.TTL(key)
		require.True(t, ok)
		require.Greater(t, ttl, 59*time.Minute, "%s: the add moved the deadline", key)
	}
}

// A file of the previous layout (slots 8 bytes past a cache line, the
// version beside the data) is refused, not misread.
func TestPreviousLayoutRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a")
	a, err := Open(path, WithSize(1<<20))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	_, err = patch64(path, layout.OffVersion, uint64(layout.Version-1)|uint64(layout.OrderProbe)<<32)
	require.NoError(t, err)
	_, err = Open(path)
	require.ErrorIs(t, err, ErrIncompatible)
}
