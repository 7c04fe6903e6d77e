package proc

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSelfAlive(t *testing.T) {
	s := Self()
	require.Equal(t, os.Getpid(), s.Pid())
	require.NotZero(t, s.Start())
	require.True(t, Alive(s))
	// Same pid, another start time: the pid was reused.
	require.False(t, Alive(Make(os.Getppid(), 12345678901)))
	require.False(t, Alive(0))
}

func TestDeadChild(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	require.NoError(t, cmd.Start())
	st, _, err := stat(cmd.Process.Pid)
	require.NoError(t, err)
	tok := Make(cmd.Process.Pid, st)
	require.True(t, Alive(tok))
	require.NoError(t, cmd.Process.Kill())
	// A zombie (not yet waited for) is dead.
	for Alive(tok) {
	}
	_ = cmd.Wait()
	require.False(t, Alive(tok))
}

func TestBootID(t *testing.T) {
	id := BootID()
	require.NotEqual(t, [16]byte{}, id)
	fake := [16]byte{1}
	SetBootIDForTest(&fake)
	require.Equal(t, fake, BootID())
	SetBootIDForTest(nil)
	require.Equal(t, id, BootID())
}
