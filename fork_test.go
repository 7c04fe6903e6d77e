package shmarena

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A process that forks without exec after Open shares its handle's file
// description with the child: the handle stays alive while either lives.
// Processes, Info and Locks must then name the pid that holds it, not a
// parent that has died.

func init() {
	// fork-holder opens SHMARENA_PATH, holds stripe 0 of map "m" in an
	// Update, forks (without exec) a child that only sleeps, says
	// "FORKED <child pid>", and waits to be killed.
	childRoles["fork-holder"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := a.Map("m", WithSlots(64), WithStripes(1))
		if err != nil {
			return err
		}
		held := make(chan struct{})
		go func() {
			_ = m.update("k", writeConfig{}, func([]byte, bool) ([]byte, bool, error) {
				close(held)
				select {}
			})
		}()
		<-held
		pid, err := forkSleeper()
		if err != nil {
			return err
		}
		fmt.Printf("FORKED %d\n", pid)
		for {
			time.Sleep(time.Hour) // until killed (select {} would be a deadlock the runtime ends)
		}
	}
}

// forkSleeper forks this process without exec; the child sleeps in ppoll
// until killed, running no Go code.
//
//go:nosplit
func forkSleeper() (int, error) {
	pid, _, e := syscall.RawSyscall(syscall.SYS_FORK, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if pid == 0 {
		for {
			syscall.RawSyscall6(unix.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
		}
	}
	return int(pid), nil
}

func TestForkedChildNamedAsHolder(t *testing.T) {
	a, path := tempArena(t, 1<<20)
	m, err := a.Map("m", WithSlots(64), WithStripes(1))
	require.NoError(t, err)

	cmd := child(t, "fork-holder", "SHMARENA_PATH="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	forked := 0
	for forked == 0 && sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "FORKED "); ok {
			forked, _ = strconv.Atoi(s)
		}
	}
	require.Positive(t, forked, "the holder did not fork")
	t.Cleanup(func() { _ = syscall.Kill(forked, syscall.SIGKILL) })
	parent := cmd.Process.Pid
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	pids, err := a.Processes()
	require.NoError(t, err)
	require.Contains(t, pids, forked, "the forked child holds the handle")
	require.NotContains(t, pids, parent, "the parent that opened it is dead")

	locks, err := a.Locks()
	require.NoError(t, err)
	require.Len(t, locks, 1)
	require.True(t, locks[0].Alive, "the child keeps the handle, and so its lock, alive")
	require.Equal(t, forked, locks[0].Pid)

	in, err := a.Info()
	require.NoError(t, err)
	found := false
	for _, p := range in.Processes {
		if p.Pid == parent && p.Alive {
			require.Equal(t, []int{forked}, p.Holders)
			found = true
		}
	}
	require.True(t, found, "the entry the parent took is alive, held by the child: %+v", in.Processes)

	// Once the child dies too, the lock is taken over.
	require.NoError(t, syscall.Kill(forked, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		locks, err := a.Locks()
		return err == nil && len(locks) == 1 && !locks[0].Alive
	}, 10*time.Second, 5*time.Millisecond)
	_, err = m.Add("n", 1)
	require.NoError(t, err)
	pids, err = a.Processes()
	require.NoError(t, err)
	require.False(t, slices.Contains(pids, forked))
}
