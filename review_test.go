package shmarena

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Regression tests for defects a review of the OFD-liveness change found.
// Each comment says what used to go wrong; the fix is named after it.

func init() {
	// review-carver opens the arena at SHMARENA_PATH, starts a worker that
	// inherits a.File() (as README and OpenMemfd's doc recommend), prints the
	// worker's pid, then carves a region and parks at crash point "carve",
	// holding the carve flock, until the test SIGKILLs it.
	childRoles["review-carver"] = func() error {
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
	// review-memfd-parent follows the README's no-file flow: OpenMemfd,
	// a worker started with a.File() in ExtraFiles (its stdout is ours),
	// then, once the worker is attached, it carves a region and parks at
	// crash point "carve" until the test SIGKILLs it.
	childRoles["review-memfd-parent"] = func() error {
		a, err := OpenMemfd("review", WithSize(1<<20))
		if err != nil {
			return err
		}
		w := exec.Command(os.Args[0], "-test.run=^$")
		w.Env = append(os.Environ(), "SHMARENA_ROLE=review-memfd-worker")
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
	// review-memfd-worker attaches as README says (OpenFile(os.NewFile(3,
	// ""))), and on SIGUSR1 carves a region and says so.
	childRoles["review-memfd-worker"] = func() error {
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
	// review-dropped-worker drops to uid/gid 65534, as a pre-forked worker
	// of a privileged master does, and attaches to the arena it was passed
	// as fd 3, then stores a key.
	childRoles["review-dropped-worker"] = func() error {
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

// A process killed while carving a region holds the arena's flock on a.f's
// open file description. When a worker it started with a.File() in
// ExtraFiles (the documented way to share an arena) still holds that
// description, the flock outlives the killed process: every Open of the path
// and every carve by any other process blocked forever (unix.Flock LOCK_EX
// has no timeout), though the only holder was dead. Fixed: carving takes
// the flock on the handle's own description, which nobody inherits.
func TestCarverKilledWhileWorkerHoldsItsFile(t *testing.T) {
	_, path := tempArena(t, 1<<20)
	cmd := child(t, "review-carver", "SHMARENA_PATH="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "WORKER ")))
	require.NoError(t, err, "line %q", line)
	// The worker is alive and attached to nothing: it only holds fd 3.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "AT carve\n", line)
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
	case <-time.After(3 * time.Second):
		// Kill the worker so the blocked Open can finish before the test ends.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-done
		t.Fatalf("Open of %s blocked 3 s after the carver was killed: its flock lives on in the description worker %d inherited through ExtraFiles", path, pid)
	}
}

// A lock-free Load that meets a slot left odd by a dead writer repairs the
// stripe itself (awaitWriter -> repairDead -> afterTakeover), and the repair
// recounts, which took every stripe with Acquire: so the Load waited for
// every live holder of any other stripe, however long it held it (here a
// live process parked inside an insert, as a SIGSTOPped one would be). The
// README promises reads take no lock and give up after a bounded wait.
// Fixed: the recount never waits; it is left due instead.
func TestLoadOfDeadWritersSlotWaitsForNoOtherStripe(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := crashMap(a)
	require.NoError(t, err)
	victim := keyInStripe(m, "victim", 1)
	held := keyInStripe(m, "held", 2)
	killAt(t, path, "store", "insert", victim, "v") // dead holder of stripe 1, slot odd

	holder := child(t, "crash-op", "SHMARENA_PATH="+path, "SHMARENA_OP=store", "SHMARENA_POINT=insert",
		"SHMARENA_KEY="+held, "SHMARENA_VAL=w")
	out, err := holder.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	stop := func() { _ = holder.Process.Kill(); _ = holder.Wait() }
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "AT insert\n", line) // alive, holding stripe 2

	done := make(chan bool, 1)
	start := time.Now()
	go func() { _, ok := m.Load(victim); done <- ok }()
	select {
	case ok := <-done:
		require.False(t, ok, "the dead writer's insert reads absent")
		t.Logf("Load returned after %v", time.Since(start))
	case <-time.After(3 * time.Second):
		stop()
		<-done
		t.Fatalf("Load(%q) blocked 3 s: it repairs stripe 1 and recounts, waiting for stripe 2, held by a live process", victim)
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
			cmd := child(t, "review-dropped-worker")
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

// A write waiting for a stripe another handle holds (a live, slow or
// stopped holder: here another handle's Update) was counted in flight but
// never looked at closed: Close gave up on it after 100 ms and returned
// nil, and when the holder let go the write went ahead and succeeded,
// after Close returned. Fixed: Close abandons the handle's waits. The docs say every method returns ErrClosed after Close;
// only a write already holding a lock is said to be let finish. (And
// Close's finish, with this handle's process-table entry, waits on another
// process for as long as it holds the stripe.)
func TestWriteWaitingForAStripeGivesUpOnClose(t *testing.T) {
	b, path := tempArena(t, 1<<20)
	tb, err := OpenTypedMap[int](b, "t", WithSlots(64), WithStripes(1))
	require.NoError(t, err)
	a, err := Open(path)
	require.NoError(t, err)
	ta, err := OpenTypedMap[int](a, "t", WithSlots(64), WithStripes(1))
	require.NoError(t, err)

	inFn, release := make(chan struct{}), make(chan struct{})
	updated := make(chan error, 1)
	go func() {
		_, err := tb.Update("k", func(int, bool) (int, bool) {
			close(inFn)
			<-release
			return 1, true
		})
		updated <- err
	}()
	<-inFn
	stored := make(chan error, 1)
	go func() { stored <- ta.Store("k", 2) }()
	time.Sleep(50 * time.Millisecond) // the Store is waiting for the stripe
	require.NoError(t, a.Close())
	close(release)
	require.NoError(t, <-updated)
	err = <-stored
	v, _, _ := tb.Load("k")
	require.ErrorIs(t, err, ErrClosed, "a Store still waiting when Close returned went ahead (value now %d)", v)
}

// Recovering a dead holder's stripe recounted, taking every stripe in
// order and holding those it had while it waited for the next (fixed: the
// recount never waits). With a live
// process holding stripe 3 for long (stopped, or in a slow Update), the
// recoverer of stripe 1 sits on stripes 0-2 meanwhile: writers of keys that
// neither the dead nor the live process touched stall too, for as long as
// the live one holds its stripe. README: the lock "goes to whoever takes it
// first, which is what keeps a stopped process from stalling anyone".
func TestRecountHoldsNoStripeWhileALiveHolderHasOne(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := crashMap(a)
	require.NoError(t, err)
	victim := keyInStripe(m, "victim", 1)
	held := keyInStripe(m, "held", 3)
	bystander := keyInStripe(m, "bystander", 0)
	killAt(t, path, "store", "insert", victim, "v") // dead holder of stripe 1

	holder := child(t, "crash-op", "SHMARENA_PATH="+path, "SHMARENA_OP=store", "SHMARENA_POINT=insert",
		"SHMARENA_KEY="+held, "SHMARENA_VAL=w")
	out, err := holder.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	stop := func() { _ = holder.Process.Kill(); _ = holder.Wait() }
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "AT insert\n", line) // alive, holding stripe 3

	recovered := make(chan error, 1)
	go func() { recovered <- m.Store(victim, []byte("x")) }() // takes stripe 1 over, recounts
	time.Sleep(200 * time.Millisecond)
	stored := make(chan error, 1)
	go func() { stored <- m.Store(bystander, []byte("y")) }()
	select {
	case err := <-stored:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		stop()
		<-stored
		<-recovered
		t.Fatalf("Store(%q) on stripe 0, which no one else uses, blocked 3 s behind a recount waiting for a live holder of stripe 3", bystander)
	}
	stop()
	require.NoError(t, <-recovered)
}

// The README's own no-file flow (OpenMemfd, a.File() in ExtraFiles,
// OpenFile(os.NewFile(3, "")) in the worker): the creator is killed while
// carving a region, holding the carve flock on the memfd's description,
// which the live worker shares through its fd 3. The worker, attached and
// alive, then hung for good in its own Map: it waited for a flock that only
// it kept held. Fixed as the first test here.
func TestMemfdWorkerCarvesAfterItsCreatorDiedCarving(t *testing.T) {
	cmd := child(t, "review-memfd-parent")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "WORKER ")))
	require.NoError(t, err, "line %q", line)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "AT carve\n", line)
	require.NoError(t, cmd.Process.Kill())
	_, _ = cmd.Process.Wait()

	require.NoError(t, syscall.Kill(pid, syscall.SIGUSR1))
	carved := make(chan string, 1)
	go func() { l, _ := r.ReadString('\n'); carved <- l }()
	select {
	case l := <-carved:
		require.Equal(t, "CARVED\n", l)
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the live worker's Map blocked 3 s after its creator was killed carving: the creator's flock lives on in the memfd description the worker inherited")
	}
}
