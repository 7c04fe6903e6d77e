package shmarena

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type userV1 struct {
	Name  string
	Age   int
	Email string `msgpack:"mail"`
}

// userV2 renames Name to FullName and changes Age's kind.
type userV2 struct {
	FullName string
	Age      int64
	Email    string `msgpack:"mail"`
}

func TestTypedMapFingerprint(t *testing.T) {
	a, path := tempArena(t, 8<<20)
	v1, err := OpenTypedMap[userV1](a, "users", WithSlots(16))
	require.NoError(t, err)
	require.NoError(t, v1.Store("ada", userV1{Name: "Ada", Age: 36, Email: "ada@x"}))

	// Before the fingerprint, this open worked and Load returned a zero
	// FullName with ok true.
	_, err = OpenTypedMap[userV2](a, "users", WithSlots(16))
	require.ErrorIs(t, err, ErrShape)
	msg := err.Error()
	assert.Contains(t, msg, `type userV2, recorded userV1`)
	assert.Contains(t, msg, `field "FullName" string is new`)
	assert.Contains(t, msg, `field "Name" string is gone`)
	assert.Contains(t, msg, `field "Age" is int64, recorded int`)
	assert.NotContains(t, msg, `"mail"`, "an unchanged field is not named")
	assert.Contains(t, msg, "WithSchemaChange()")

	// The same type, from another handle (another process would do the
	// same), passes; so does a read-only one.
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()
	_, err = OpenTypedMap[userV1](b, "users", WithSlots(16))
	require.NoError(t, err)
	ro, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer ro.Close()
	_, err = OpenTypedMap[userV1](ro, "users", WithSlots(16))
	require.NoError(t, err)
	_, err = OpenTypedMap[userV2](ro, "users", WithSlots(16))
	require.ErrorIs(t, err, ErrShape)
	_, err = OpenTypedMap[userV2](ro, "users", WithSlots(16), WithSchemaChange())
	require.ErrorIs(t, err, ErrReadOnly, "a read-only handle cannot record the new type")

	// A deliberate change records the new type: the old one is refused
	// from then on, and old values read by msgpack's rules.
	v2, err := OpenTypedMap[userV2](b, "users", WithSlots(16), WithSchemaChange())
	require.NoError(t, err)
	u, ok, err := v2.Load("ada")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, userV2{FullName: "", Age: 36, Email: "ada@x"}, u)
	_, err = OpenTypedMap[userV1](a, "users", WithSlots(16))
	require.ErrorIs(t, err, ErrShape)
	assert.Contains(t, err.Error(), `type userV1, recorded userV2`)

	var kinds []RegionKind
	for _, r := range a.Regions() {
		kinds = append(kinds, r.Kind)
	}
	assert.Equal(t, []RegionKind{KindSchema, KindMap}, kinds, "the record is carved first")
	found, err := a.Check()
	require.NoError(t, err)
	assert.Empty(t, found)
}

func TestTypedMapTypeMismatchNamesTheType(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	m, err := OpenTypedMap[userV1](a, "users", WithSlots(16))
	require.NoError(t, err)
	require.NoError(t, m.Bytes().Store("k", []byte{0xa3, 'a', 'b', 'c'})) // a string
	_, ok, err := m.Load("k")
	assert.False(t, ok)
	require.ErrorIs(t, err, ErrTypeMismatch)
	assert.NotErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "does not decode as shmarena.userV1")
	assert.NotContains(t, err.Error(), "corrupt")
}
