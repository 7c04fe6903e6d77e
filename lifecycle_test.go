package shmarena

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A file removed (or replaced at its path) while processes have it open
// splits them from whoever opens the path next: each side must be told.

func TestRemovedFileReported(t *testing.T) {
	a, path := tempArena(t, 1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	ro, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer ro.Close()
	_, err = a.Check()
	require.NoError(t, err, "a healthy file")

	require.NoError(t, os.Remove(path))
	fresh, err := Open(path, WithSize(1<<20))
	require.NoError(t, err, "a new worker creates a new file at the path")
	defer fresh.Close()
	fm, err := fresh.Map("m", WithSlots(64))
	require.NoError(t, err)

	for name, h := range map[string]*Arena{"writable": a, "read-only": ro} {
		findings, err := h.Check()
		require.ErrorIs(t, err, ErrRemoved, name)
		require.Empty(t, findings, name)
		require.Contains(t, err.Error(), "removed")
		in, err := h.Info()
		require.NoError(t, err, name)
		require.True(t, in.Removed, name)
		st, err := h.Stats()
		require.NoError(t, err, name)
		require.True(t, st.Removed, name)
	}
	in, err := fresh.Info()
	require.NoError(t, err)
	require.False(t, in.Removed, "the new file is the one at the path")
	_, err = fresh.Check()
	require.NoError(t, err)

	// What the split costs: the two do not share data.
	_, err = m.Add("n", 1)
	require.NoError(t, err)
	_, ok := fm.Counter("n")
	require.False(t, ok)
}

func TestReplacedFileReported(t *testing.T) {
	a, path := tempArena(t, 1<<20)
	other := filepath.Join(filepath.Dir(path), "other")
	b, err := Open(other, WithSize(1<<20))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, os.Rename(other, path), "a deploy moves a new file over the old one")

	_, err = a.Check()
	require.ErrorIs(t, err, ErrRemoved)
	require.Contains(t, err.Error(), "names another file")
	in, err := a.Info()
	require.NoError(t, err)
	require.True(t, in.Removed)
	in, err = b.Info()
	require.NoError(t, err)
	require.True(t, in.Removed, "b's own path names nothing now: an Open of it would create another arena")
	c, err := Open(path)
	require.NoError(t, err)
	defer c.Close()
	in, err = c.Info()
	require.NoError(t, err)
	require.False(t, in.Removed, "opened at the path it is at")
}

func TestMemfdNeverReportedRemoved(t *testing.T) {
	a, err := OpenMemfd("x", WithSize(1<<20))
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Check()
	require.NoError(t, err, "a memfd never had a name to lose")
	in, err := a.Info()
	require.NoError(t, err)
	require.False(t, in.Removed)
}

// The errors that tell a user to remove or reshape the file say how many
// handles are attached: removing it under them splits them.
func TestRemoveTheFileErrorsCountHandles(t *testing.T) {
	a, path := tempArena(t, 1<<20)
	_, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()

	_, err = Open(path, WithSize(2<<20))
	require.ErrorIs(t, err, ErrSizeMismatch)
	require.Contains(t, err.Error(), "2 handles are attached now")

	_, err = a.Map("m", WithSlots(128))
	require.ErrorIs(t, err, ErrShape)
	require.Contains(t, err.Error(), "2 handles are attached now, this one among them")

	_ = b.Close() // closed whatever it returns (the 32-bit build cannot swap the mapping yet: see TestClose)
	_, err = Open(path, WithSize(2<<20))
	require.ErrorIs(t, err, ErrSizeMismatch)
	require.Contains(t, err.Error(), "1 handle is attached now")
}
