package shmarena

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	assert.Contains(t, err.Error(), "move to a new file to change it")

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

func init() {
	// dropped-worker drops to uid/gid 65534, as a pre-forked worker
	// of a privileged master does, and attaches to the arena it was passed
	// as fd 3, then stores a key.
	childRoles["dropped-worker"] = func() error {
		if err := syscall.Setgid(65534); err != nil {
			return err
		}
		if err := syscall.Setuid(65534); err != nil {
			return err
		}
		a, err := OpenFile(os.NewFile(3, "arena"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := a.Map("m", WithSlots(64))
		if err != nil {
			return err
		}
		return m.Store("worker", []byte("was here"))
	}
}

// A worker passed the arena's descriptor that may not open the file itself
// (a privilege-dropped worker of a master that created the arena with the
// default mode 0600) cannot attach: every handle needs an open file
// description of its own, or its liveness would be shared with its
// sender's. The error says so and names the fix; with the fix (a mode the
// worker may open) it attaches.
func TestOpenFileWorkerWithoutOpenPermission(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop a worker's privileges")
	}
	for _, mode := range []os.FileMode{0o600, 0o666} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.Chmod(dir, 0o755))
			a, err := Open(filepath.Join(dir, "arena"), WithSize(1<<20), WithMode(mode))
			require.NoError(t, err)
			defer a.Close()
			m, err := a.Map("m", WithSlots(64))
			require.NoError(t, err)
			cmd := child(t, "dropped-worker")
			cmd.ExtraFiles = []*os.File{a.File()}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err = cmd.Run()
			if mode == 0o600 {
				require.Error(t, err, "the worker attached without a description of its own")
				require.Contains(t, stderr.String(), "may not open the arena file itself")
				require.Contains(t, stderr.String(), "WithMode")
				return
			}
			require.NoError(t, err, "worker: %s", stderr.String())
			v, ok := m.Load("worker")
			require.True(t, ok)
			require.Equal(t, "was here", string(v))
		})
	}
}
