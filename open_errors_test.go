package shmarena

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Errors of Open name the fix.
func TestOpenErrorsNameTheFix(t *testing.T) {
	_, err := Open("")
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "the path is empty")

	a, path := tempArena(t, 1<<20)
	require.NoError(t, a.Close())
	_, err = Open(path, WithSize(2<<20))
	require.ErrorIs(t, err, ErrSizeMismatch)
	assert.Contains(t, err.Error(), "asked for 2097152 bytes, the file holds an arena of 1048576")
	assert.Contains(t, err.Error(), "remove the file to change it")

	old, err := patch64(path, layout.OffVersion, uint64(99)|uint64(layout.OrderProbe)<<32)
	require.NoError(t, err)
	_, err = Open(path)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.Contains(t, err.Error(), fmt.Sprintf("layout version 99, this build reads %d", layout.Version))
	assert.Contains(t, err.Error(), "remove the file to start afresh")
	_, err = patch64(path, layout.OffVersion, old)
	require.NoError(t, err)

	// Permission denied (this test may run as root, which the kernel never
	// refuses, so the message is built from a real file's mode).
	p := filepath.Join(t.TempDir(), "shared")
	require.NoError(t, os.WriteFile(p, nil, 0o640))
	require.NoError(t, os.Chmod(p, 0o640))
	err = openError(p, unix.EACCES)
	require.ErrorIs(t, err, unix.EACCES)
	for _, want := range []string{"permission denied", "mode -rw-r-----", "owned by ", "WithMode(0o660)", "ReadOnly()"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Equal(t, unix.EIO, openError(p, unix.EIO), "other errors pass through")
}
