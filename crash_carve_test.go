package shmarena

// A process killed while carving a region, whose arena description a
// live worker inherited (OpenMemfd, a.File() in ExtraFiles): the carve
// lock dies with the carver, so nobody else blocks on it.

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func init() {
	// carver-with-worker opens the arena at SHMARENA_PATH, starts a worker that
	// inherits a.File() (as the README and OpenMemfd's doc recommend), prints the
	// worker's pid, then carves a region and parks at crash point "carve",
	// holding the carve flock, until the test SIGKILLs it.
	childRoles["carver-with-worker"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		w := exec.Command("sleep", "60")
		w.ExtraFiles = []*os.File{a.File()}
		if err := w.Start(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stdout, "WORKER %d\n", w.Process.Pid)
		parkAt("carve")
		_, err = a.Map("carved-by-the-dead", WithSlots(64))
		return fmt.Errorf("Map returned (%v) without reaching the crash point", err)
	}
	// memfd-carver follows the README's no-file flow: OpenMemfd,
	// a worker started with a.File() in ExtraFiles (its stdout is ours),
	// then, once the worker is attached, it carves a region and parks at
	// crash point "carve" until the test SIGKILLs it.
	childRoles["memfd-carver"] = func() error {
		a, err := OpenMemfd("carver", WithSize(1<<20))
		if err != nil {
			return err
		}
		w := exec.Command(os.Args[0], "-test.run=^$")
		w.Env = append(os.Environ(), "SHMARENA_ROLE=memfd-worker")
		w.ExtraFiles = []*os.File{a.File()}
		w.Stdout, w.Stderr = os.Stdout, os.Stderr
		if err := w.Start(); err != nil {
			return err
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			if pids, _ := a.Processes(); len(pids) == 2 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("worker never attached")
			}
		}
		fmt.Fprintf(os.Stdout, "WORKER %d\n", w.Process.Pid)
		parkAt("carve")
		_, err = a.Map("carved-by-the-dead", WithSlots(64))
		return fmt.Errorf("Map returned (%v) without reaching the crash point", err)
	}
	// memfd-worker attaches as README says (OpenFile(os.NewFile(3,
	// ""))), and on SIGUSR1 carves a region and says so.
	childRoles["memfd-worker"] = func() error {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		a, err := OpenFile(os.NewFile(3, ""))
		if err != nil {
			return err
		}
		<-usr1
		if _, err := a.Map("worker's", WithSlots(64)); err != nil {
			return err
		}
		fmt.Fprintln(os.Stdout, "CARVED")
		return a.Close()
	}
}

// A process killed while carving a region holds the arena's flock on a.f's
// open file description. When a worker it started with a.File() in
// ExtraFiles (the documented way to share an arena) still holds that
// description, the flock outlives the killed process: every Open of the path
// and every carve by any other process blocked forever (unix.Flock LOCK_EX
// has no timeout), though the only holder was dead. So carving takes
// the flock on the handle's own description, which nobody inherits.
func TestCarverKilledWhileWorkerHoldsItsFile(t *testing.T) {
	_, path := tempArena(t, 1<<20)
	cmd := child(t, "carver-with-worker", "SHMARENA_PATH="+path)
	r := startReporting(t, cmd)
	pid := reportedInt(t, r, "WORKER ")
	// The worker is alive and attached to nothing: it only holds fd 3.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.Equal(t, "AT carve", nextReport(t, r))
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	done := make(chan error, 1)
	go func() {
		b, err := Open(path)
		if err == nil {
			_, err = b.Map("after", WithSlots(64))
			_ = b.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(hangBound):
		// Kill the worker so the blocked Open can finish before the test ends.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-done
		t.Fatalf("Open of %s blocked %v after the carver was killed: its flock lives on in the description worker %d inherited through ExtraFiles", path, hangBound, pid)
	}
}

// The README's own no-file flow (OpenMemfd, a.File() in ExtraFiles,
// OpenFile(os.NewFile(3, "")) in the worker): the creator is killed while
// carving a region, holding the carve flock on the memfd's description,
// which the live worker shares through its fd 3. The worker, attached and
// alive, then hung for good in its own Map: it waited for a flock that only
// it kept held. Carving on the handle's own description (see the test
// above) keeps the flock from outliving the carver.
func TestMemfdWorkerCarvesAfterItsCreatorDiedCarving(t *testing.T) {
	cmd := child(t, "memfd-carver")
	r := startReporting(t, cmd)
	pid := reportedInt(t, r, "WORKER ")
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.Equal(t, "AT carve", nextReport(t, r))
	require.NoError(t, cmd.Process.Kill())
	_, _ = cmd.Process.Wait()

	require.NoError(t, syscall.Kill(pid, syscall.SIGUSR1))
	carved := make(chan string, 1)
	go func() { l, _ := r.ReadString('\n'); carved <- l }()
	select {
	case l := <-carved:
		require.Equal(t, "CARVED\n", l)
	case <-time.After(hangBound):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the live worker's Map blocked %v after its creator was killed carving: the creator's flock lives on in the memfd description the worker inherited", hangBound)
	}
}
