package shmarena

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One test per row of the table in docs/ttl.md.

func ttlMap(t *testing.T) *Map {
	a, _ := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	return m
}

func TestTTLWriteWithoutOptionHasNoDeadline(t *testing.T) {
	m := ttlMap(t)
	require.NoError(t, m.Store("k", []byte("v"), WithTTL(time.Hour)))
	require.NoError(t, m.Store("k", []byte("v2")))
	left, ok := m.TTL("k")
	assert.True(t, ok)
	assert.Zero(t, left, "a plain write replaces the deadline by none, as Redis SET")
}

func TestTTLWithPositiveTTLSetsTheDeadline(t *testing.T) {
	m := ttlMap(t)
	require.NoError(t, m.Store("k", []byte("v"), WithTTL(time.Hour)))
	left, ok := m.TTL("k")
	assert.True(t, ok)
	assert.InDelta(t, time.Hour, left, float64(time.Minute))
}

// WithTTL of zero or less is refused on every write, which changes nothing.
func TestTTLWithZeroOrNegativeTTLIsRefused(t *testing.T) {
	m := ttlMap(t)
	require.NoError(t, m.Store("k", []byte("old")))
	for _, d := range []time.Duration{0, -time.Nanosecond, -time.Second} {
		err := m.Store("k", []byte("new"), WithTTL(d))
		require.ErrorIs(t, err, ErrInvalid, "Store WithTTL(%v)", d)
		assert.Contains(t, err.Error(), "a TTL must be positive")
		_, _, err = m.Swap("k", []byte("new"), WithTTL(d))
		require.ErrorIs(t, err, ErrInvalid)
		_, _, err = m.LoadOrStore("fresh", []byte("new"), WithTTL(d))
		require.ErrorIs(t, err, ErrInvalid)
		_, err = m.Add("n", 1, WithTTL(d))
		require.ErrorIs(t, err, ErrInvalid)
		_, _, err = m.LoadOrCompute(t.Context(), "computed", func(context.Context) ([]byte, error) {
			t.Error("fn ran for a refused write")
			return nil, nil
		}, WithTTL(d))
		require.ErrorIs(t, err, ErrInvalid)
	}
	v, _ := m.Load("k")
	assert.Equal(t, "old", string(v))
	assert.False(t, m.Exists("fresh"))
	assert.False(t, m.Exists("n"))

	a := m.a
	tm, err := OpenTypedMap[int](a, "typed", WithSlots(64))
	require.NoError(t, err)
	require.ErrorIs(t, tm.Store("k", 1, WithTTL(-time.Second)), ErrInvalid)
	_, err = tm.Update("k", func(int, bool) (int, bool) { return 2, true }, WithTTL(0))
	require.ErrorIs(t, err, ErrInvalid)
	assert.False(t, tm.Exists("k"))
}

// A TTL computed from a deadline that has passed is refused rather than
// stored as permanent.
func TestTTLComputedFromAPassedDeadlineNeverMakesAnEntryPermanent(t *testing.T) {
	m := ttlMap(t)
	deadline := time.Now().Add(-time.Minute)
	err := m.Store("k", []byte("v"), WithTTL(time.Until(deadline)))
	require.ErrorIs(t, err, ErrInvalid)
	assert.False(t, m.Exists("k"))
}

func TestTTLWithKeepTTLKeepsTheDeadline(t *testing.T) {
	m := ttlMap(t)
	require.NoError(t, m.Store("k", []byte("v"), WithTTL(time.Hour)))
	require.NoError(t, m.Store("k", []byte("v2"), WithKeepTTL()))
	left, _ := m.TTL("k")
	assert.Greater(t, left, 59*time.Minute)
	// A new key gets no deadline from it.
	require.NoError(t, m.Store("new", []byte("v"), WithKeepTTL()))
	left, ok := m.TTL("new")
	assert.True(t, ok)
	assert.Zero(t, left)
}

func TestTTLWithTTLAndKeepTTLTogetherIsRefused(t *testing.T) {
	m := ttlMap(t)
	err := m.Store("k", []byte("v"), WithTTL(time.Hour), WithKeepTTL())
	require.ErrorIs(t, err, ErrInvalid)
	assert.False(t, m.Exists("k"))
}

func TestTTLExpirePositiveSetsTheDeadline(t *testing.T) {
	m := ttlMap(t)
	require.NoError(t, m.Store("k", []byte("v")))
	assert.True(t, m.Expire("k", time.Hour))
	left, _ := m.TTL("k")
	assert.Greater(t, left, 59*time.Minute)
	assert.False(t, m.Expire("absent", time.Hour))
}

// Expire with zero or less deletes the key, as Redis EXPIRE k 0 does.
func TestTTLExpireZeroOrNegativeDeletes(t *testing.T) {
	m := ttlMap(t)
	for _, d := range []time.Duration{0, -time.Second} {
		require.NoError(t, m.Store("k", []byte("v")))
		assert.True(t, m.Expire("k", d), "Expire(k, %v) of a present key", d)
		assert.False(t, m.Exists("k"), "Expire(k, %v) deletes", d)
		assert.False(t, m.Expire("k", d), "Expire(k, %v) of an absent key", d)
	}
}

func TestTTLPersistRemovesTheDeadline(t *testing.T) {
	m := ttlMap(t)
	require.NoError(t, m.Store("k", []byte("v"), WithTTL(time.Hour)))
	assert.True(t, m.Persist("k"))
	left, ok := m.TTL("k")
	assert.True(t, ok)
	assert.Zero(t, left)
	assert.False(t, m.Persist("k"), "no deadline left to remove, as Redis PERSIST")
	assert.False(t, m.Persist("absent"))
}

func TestTTLReturnValues(t *testing.T) {
	m := ttlMap(t)
	require.NoError(t, m.Store("none", []byte("v")))
	require.NoError(t, m.Store("some", []byte("v"), WithTTL(time.Hour)))
	require.NoError(t, m.Store("lapsing", []byte("v"), WithTTL(time.Millisecond)))
	time.Sleep(3 * time.Millisecond)

	left, ok := m.TTL("none")
	assert.Equal(t, [2]any{time.Duration(0), true}, [2]any{left, ok}, "no deadline: 0, true")
	left, ok = m.TTL("some")
	assert.True(t, ok)
	assert.Positive(t, left, "a deadline: what is left (at least 1ns), true")
	left, ok = m.TTL("absent")
	assert.Equal(t, [2]any{time.Duration(0), false}, [2]any{left, ok}, "absent: 0, false")
	left, ok = m.TTL("lapsing")
	assert.Equal(t, [2]any{time.Duration(0), false}, [2]any{left, ok}, "lapsed: as absent")
}

// A typed map's Update keeps the deadline unless given WithTTL.
func TestTTLUpdateKeepsTheDeadline(t *testing.T) {
	a, _ := tempArena(t, MinSize+1<<20)
	tm, err := OpenTypedMap[int](a, "typed", WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, tm.Store("k", 1, WithTTL(time.Hour)))
	_, err = tm.Update("k", func(n int, _ bool) (int, bool) { return n + 1, true })
	require.NoError(t, err)
	left, _ := tm.Bytes().TTL("k")
	assert.Greater(t, left, 59*time.Minute)
}

// ttlOrNone is WithTTL(d) for d > 0, else no option: a write with no
// deadline, which WithTTL(0) no longer means.
func ttlOrNone(d time.Duration) []WriteOption {
	if d <= 0 {
		return nil
	}
	return []WriteOption{WithTTL(d)}
}
