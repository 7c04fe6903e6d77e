package shmarena

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An overwrite of a value held in the slot writes only the value, its
// length and the deadline (the key and its hash are the slot's already):
// every change of kind and size around it must still read back exactly,
// with the deadline the write asked for, and leave a map Check accepts.
func TestOverwriteInSlotKeepsKeyAndTakesValueAndDeadline(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	m, err := a.Map("ow", WithSlots(256), WithSlotSize(128), WithBytes(1<<20))
	require.NoError(t, err)
	key := strings.Repeat("k", 24)
	neighbour := strings.Repeat("n", 24)
	require.NoError(t, m.Store(neighbour, []byte("next door")))
	long := []byte(strings.Repeat("L", 90)) // past the slot: the value space
	steps := []struct {
		name string
		val  []byte
		opts []WriteOption
		ttl  bool
	}{
		{"insert", []byte("first value of some length"), nil, false},
		{"shorter", []byte("short"), nil, false},
		{"longer", []byte(strings.Repeat("x", 64)), nil, false},
		{"empty", []byte{}, nil, false},
		{"with TTL", []byte("timed"), []WriteOption{WithTTL(time.Hour)}, true},
		{"keep TTL", []byte("still timed"), []WriteOption{WithKeepTTL()}, true},
		{"TTL dropped", []byte("untimed"), nil, false},
		{"to the value space", long, nil, false},
		{"back into the slot", []byte("inline again"), nil, false},
	}
	for _, st := range steps {
		require.NoError(t, m.Store(key, st.val, st.opts...), st.name)
		got, ok := m.Load(key)
		require.True(t, ok, st.name)
		assert.Equal(t, st.val, got, st.name)
		left, ok := m.TTL(key)
		require.True(t, ok, st.name)
		assert.Equal(t, st.ttl, left > 0, "%s: deadline", st.name)
		assert.Equal(t, 2, m.Len(), st.name)
		found, err := a.Check()
		require.NoError(t, err, st.name)
		assert.Empty(t, found, st.name)
	}
	// A counter over the value, and a value over the counter.
	require.True(t, m.Delete(key))
	_, err = m.Add(key, 5)
	require.NoError(t, err)
	require.NoError(t, m.Store(key, []byte("was a counter")))
	got, ok := m.Load(key)
	require.True(t, ok)
	assert.Equal(t, []byte("was a counter"), got)
	_, err = m.Add(key, 1)
	assert.ErrorIs(t, err, ErrNotCounter)
	got, ok = m.Load(neighbour)
	require.True(t, ok)
	assert.Equal(t, []byte("next door"), got)
}
