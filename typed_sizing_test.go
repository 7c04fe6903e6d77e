package shmarena

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type sizingV1 struct{ Name string }
type sizingV2 struct{ Email string }

// An arena sized with TypedMapBytes holds the map and its type record, so
// the type is checked.
func TestTypedMapBytesCountsTheTypeRecord(t *testing.T) {
	opts := []RegionOption{WithSlots(64), WithSlotSize(64)}
	n, err := TypedMapBytes(opts...)
	require.NoError(t, err)
	mb, err := MapBytes(opts...)
	require.NoError(t, err)
	assert.Greater(t, n, mb)

	a, path := tempArena(t, MinSize+n)
	_, err = OpenTypedMap[sizingV1](a, "users", opts...)
	require.NoError(t, err)
	st, err := a.Stats()
	require.NoError(t, err)
	assert.Equal(t, st.Size, st.Used, "TypedMapBytes is exact")

	_, err = OpenTypedMap[sizingV2](a, "users", opts...)
	require.ErrorIs(t, err, ErrShape, "another value type is refused")
	r, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer r.Close()
	_, err = OpenTypedMap[sizingV2](r, "users", opts...)
	require.ErrorIs(t, err, ErrShape, "also by a read-only handle")
	_, err = OpenTypedMap[sizingV1](r, "users", opts...)
	require.NoError(t, err)
}

// Sized for the map alone, an arena refuses the typed map, rather than
// making one whose type is never checked.
func TestTypedMapWithoutRoomForTheTypeRecordIsRefused(t *testing.T) {
	for _, opts := range [][]RegionOption{
		{WithSlots(64), WithSlotSize(64)},
		{WithSlots(1024), WithSlotSize(128), WithBytes(1 << 20)}, // the value space counts too
	} {
		mb, err := MapBytes(opts...)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "arena")
		a, err := Open(path, WithSize(MinSize+mb))
		require.NoError(t, err)
		_, err = OpenTypedMap[sizingV1](a, "users", opts...)
		require.ErrorIs(t, err, ErrArenaFull)
		assert.Contains(t, err.Error(), "TypedMapBytes")
		assert.Empty(t, a.Regions(), "nothing carved")
		_, err = a.Map("plain", opts...)
		require.NoError(t, err, "the room is still there for a byte map")
		require.NoError(t, a.Close())
	}
}

// A read-only handle refuses a typed map whose record is missing.
func TestTypedMapWithoutRecordIsRefusedReadOnly(t *testing.T) {
	a, path := tempArena(t, MinSize+1<<20)
	_, err := OpenTypedMap[sizingV1](a, "users", WithSlots(64))
	require.NoError(t, err)
	r, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, r.checkSchema("users", describeType(reflect.TypeFor[sizingV1]()), false))
	err = r.checkSchema("other", describeType(reflect.TypeFor[sizingV1]()), false)
	require.ErrorIs(t, err, ErrCorrupt)
}
