package shmarena

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Processes that do not share one view of /proc: a worker in a PID
// namespace of its own (with its own /proc, or seeing the host's, where its
// pid is 1 and means host init), one behind /proc mounted hidepid=2 running
// as another user, and one with no /proc at all. Liveness must not depend
// on any of it: no lock is taken from a live process, and a dead one's is
// taken within a second.

// A view is how a worker is started: the command line before the test
// binary.
type nsView struct {
	name string
	wrap []string // prepended to the test binary's command line
}

const nsSh = `set -e; ` // each view's shell prologue

func nsViews() []nsView {
	return []nsView{
		{name: "pid namespace, own /proc", wrap: []string{"unshare", "--pid", "--fork", "--kill-child", "--mount-proc"}},
		{name: "pid namespace, host /proc", wrap: []string{"unshare", "--pid", "--fork", "--kill-child"}},
		{name: "hidepid=2, another user", wrap: []string{"unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
			"sh", "-c", nsSh + `mount -o remount,hidepid=2 /proc; exec setpriv --reuid=65534 --regid=65534 --clear-groups "$0" "$@"`}},
		{name: "no /proc", wrap: []string{"unshare", "--mount", "--pid", "--fork", "--kill-child",
			"sh", "-c", nsSh + `mount -t tmpfs none /proc; exec "$0" "$@"`}},
	}
}

// nsUsable skips the test, saying why, where this machine cannot make
// namespaces.
func nsUsable(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) is not installed: cannot start a process in another PID namespace")
	}
	if out, err := exec.Command("unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare is not permitted here (%v: %s): run as root or with user namespaces enabled", err, strings.TrimSpace(string(out)))
	}
}

// nsDir returns a directory, and the test binary copied into it, that
// another user can reach: the hidepid view runs as nobody.
func nsDir(t *testing.T) (dir, bin string) {
	dir = t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o777|os.ModeSticky))
	}
	bin = filepath.Join(dir, "shmarena.test")
	b, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	return dir, bin
}

func nsCommand(v nsView, bin, role string, env ...string) *exec.Cmd {
	args := append(slices.Clone(v.wrap[1:]), bin, "-test.run=^$")
	cmd := exec.Command(v.wrap[0], args...)
	cmd.Env = append(os.Environ(), append([]string{"SHMARENA_ROLE=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	// A group of its own, so a kill reaches the worker itself: a worker
	// that changed user has lost unshare's parent-death signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// killGroup SIGKILLs every process of cmd's group, whatever its namespace.
func killGroup(cmd *exec.Cmd) error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

// nsArena is the shape every process of these tests asks for.
func nsArena(path string) (*Arena, *Map, *Ring, error) {
	a, err := Open(path, WithSize(4<<20), WithMode(0o666))
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(128), WithStripes(2))
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := a.Ring("r", WithSlots(1024), WithSlotSize(64))
	if err != nil {
		return nil, nil, nil, err
	}
	return a, m, r, nil
}

// nsWork runs one process's share of the shared workload until deadline:
// compare-and-swap increments of one value, publishes (every 64th holding
// the publish lock for 10 ms), stores of its own keys and, every 50th
// round, an Update that holds the counter's stripe for 10 ms. It returns
// the increments that succeeded and writes every sequence number Publish
// handed it to seqs.
func nsWork(m *Map, r *Ring, me string, deadline time.Time, seqs *os.File) (incs int, keys []string, err error) {
	tm, err := OpenTypedMap[int](m.a, "typed", WithSlots(64), WithStripes(1))
	if err != nil {
		return 0, nil, err
	}
	publishHook = func(seq uint64) {
		if seq%64 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	defer func() { publishHook = nil }()
	w := bufio.NewWriter(seqs)
	defer w.Flush()
	var buf [8]byte
	// At least one round, however late it starts: a process that did
	// nothing would fail the test's "did no work".
	for round := 0; round == 0 || time.Now().Before(deadline); round++ {
		old, _ := m.Load("ctr")
		n := 0
		if len(old) == 8 {
			n = int(binary.LittleEndian.Uint64(old))
		}
		binary.LittleEndian.PutUint64(buf[:], uint64(n+1))
		if len(old) == 0 {
			if _, loaded, err := m.LoadOrStore("ctr", buf[:]); err != nil {
				return 0, nil, err
			} else if !loaded {
				incs++
			}
		} else if ok, err := m.CompareAndSwap("ctr", old, buf[:]); err != nil {
			return 0, nil, err
		} else if ok {
			incs++
		}
		seq, err := r.Publish(me, buf[:])
		if err != nil {
			return 0, nil, err
		}
		binary.LittleEndian.PutUint64(buf[:], seq)
		w.Write(buf[:])
		if len(keys) < 1500 {
			k := me + "-" + strconv.Itoa(len(keys))
			if err := m.Store(k, []byte(k)); err != nil {
				return 0, nil, err
			}
			keys = append(keys, k)
		}
		if round%50 == 0 {
			if _, err := tm.Update("slow", func(v int, _ bool) (int, bool) {
				time.Sleep(10 * time.Millisecond)
				return v + 1, true
			}); err != nil {
				return 0, nil, err
			}
		}
	}
	return incs, keys, nil
}

func init() {
	// ns-worker opens the arena, prints "READY", runs nsWork for
	// SHMARENA_WORK_FOR (ns), checks its own keys and prints
	// "RESULT <incs> <keys>" and what it saw of /proc.
	childRoles["ns-worker"] = func() error {
		_, m, r, err := nsArena(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		seqs, err := os.Create(os.Getenv("SHMARENA_SEQS"))
		if err != nil {
			return err
		}
		defer seqs.Close()
		workFor, _ := strconv.ParseInt(os.Getenv("SHMARENA_WORK_FOR"), 10, 64)
		fmt.Println("READY")
		incs, keys, err := nsWork(m, r, "child", time.Now().Add(time.Duration(workFor)), seqs)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if v, ok := m.Load(k); !ok || string(v) != k {
				return fmt.Errorf("own key %q: %q, %v", k, v, ok)
			}
		}
		_, procErr := os.ReadFile("/proc/self/stat")
		fmt.Printf("VIEW pid=%d proc-readable=%v\n", os.Getpid(), procErr == nil)
		fmt.Printf("RESULT %d %d\n", incs, len(keys))
		return nil
	}
	// ns-holder holds the counter's stripe (inside an Update) and the
	// publish lock (inside a Publish) and says so; it is killed there.
	childRoles["ns-holder"] = func() error {
		_, m, r, err := nsArena(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		publishHook = func(uint64) {
			fmt.Println("HOLDING publish")
			untilKilled()
		}
		go func() { _, _ = r.Publish("held", nil) }()
		return m.update("ctr", writeConfig{}, func([]byte, bool) ([]byte, bool, error) {
			fmt.Println("HOLDING stripe")
			untilKilled()
			return nil, false, nil
		})
	}
}

func TestLivenessAcrossNamespaces(t *testing.T) {
	nsUsable(t)
	for _, v := range nsViews() {
		t.Run(v.name, func(t *testing.T) {
			if strings.Contains(v.name, "another user") {
				if _, err := exec.LookPath("setpriv"); err != nil {
					t.Skip("setpriv (util-linux) is not installed: cannot run the worker as another user")
				}
			}
			dir, bin := nsDir(t)
			path := filepath.Join(dir, "arena")
			a, m, r, err := nsArena(path)
			require.NoError(t, err)
			defer a.Close()
			require.NoError(t, os.Chmod(path, 0o666))
			nsShare(t, v, bin, dir, path, a, m, r)
			nsKill(t, v, bin, path, m, r)
		})
	}
}

// nsShare runs the workload in this process and a worker for a second and
// checks that nothing was taken from anyone alive. Each works for the
// same while from when the worker says it is ready: a deadline set before
// the worker started could pass while a busy machine was still starting
// it (unshare, a shell, the test binary), leaving it no work to do.
func nsShare(t *testing.T, v nsView, bin, dir, path string, a *Arena, m *Map, r *Ring) {
	workFor := 1200 * time.Millisecond * raceSlowdown
	seqFile := filepath.Join(dir, "child.seqs")
	cmd := nsCommand(v, bin, "ns-worker", "SHMARENA_PATH="+path, "SHMARENA_SEQS="+seqFile,
		"SHMARENA_WORK_FOR="+strconv.FormatInt(int64(workFor), 10))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	rd := bufio.NewReader(stdout)
	ready, err := rd.ReadString('\n')
	if err != nil || ready != "READY\n" {
		_ = killGroup(cmd)
		_ = cmd.Wait()
		t.Fatalf("the worker did not say it was ready: %q, %v", ready, err)
	}
	mine, err := os.Create(filepath.Join(dir, "parent.seqs"))
	require.NoError(t, err)
	incs, keys, err := nsWork(m, r, "parent", time.Now().Add(workFor), mine)
	require.NoError(t, err)
	require.NoError(t, mine.Close())
	var out strings.Builder
	_, err = io.Copy(&out, rd)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait(), "worker: %s", out.String())
	t.Logf("worker: %s", strings.ReplaceAll(strings.TrimSpace(out.String()), "\n", "; "))
	if v.name == "no /proc" {
		require.Contains(t, out.String(), "proc-readable=false", "the worker could read /proc")
	}
	var childIncs, childKeys int
	for _, line := range strings.Split(out.String(), "\n") {
		if f, ok := strings.CutPrefix(line, "RESULT "); ok {
			_, err := fmt.Sscan(f, &childIncs, &childKeys)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, childKeys, "the worker did no work: %s", out.String())

	st := m.Stats()
	assert.Zero(t, st.Recoveries, "a lock was taken from a live process")
	got, ok := m.Load("ctr")
	require.True(t, ok)
	assert.Equal(t, uint64(incs+childIncs), binary.LittleEndian.Uint64(got), "increments lost: %d here, %d in the worker", incs, childIncs)
	for _, k := range keys {
		v, ok := m.Load(k)
		require.True(t, ok, k)
		require.Equal(t, k, string(v))
	}
	for i := range childKeys {
		k := "child-" + strconv.Itoa(i)
		v, ok := m.Load(k)
		require.True(t, ok, k)
		require.Equal(t, k, string(v))
	}
	seen := map[uint64]bool{}
	for _, f := range []string{"parent.seqs", "child.seqs"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		for i := 0; i+8 <= len(b); i += 8 {
			s := binary.LittleEndian.Uint64(b[i:])
			require.False(t, seen[s], "sequence %d handed out twice", s)
			seen[s] = true
		}
	}
	rs := r.Stats()
	assert.Zero(t, rs.Abandoned)
	assert.Equal(t, uint64(len(seen)), rs.Published)
	assert.Equal(t, uint64(len(seen))+1, r.Head())
	t.Logf("%d + %d increments, %d + %d keys, %d records, no recovery", incs, childIncs, len(keys), childKeys, len(seen))
}

// nsKill has a worker hold the counter's stripe and the publish lock,
// checks that they stay its own while it lives, kills it, and requires
// this process to take both over within a second.
func nsKill(t *testing.T, v nsView, bin, path string, m *Map, r *Ring) {
	cmd := nsCommand(v, bin, "ns-holder", "SHMARENA_PATH="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = killGroup(cmd); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	for held := 0; held < 2; held++ {
		require.True(t, lines.Scan(), "the holder exited before holding its locks")
		require.True(t, strings.HasPrefix(lines.Text(), "HOLDING"), lines.Text())
	}
	stored, published := make(chan time.Time, 1), make(chan time.Time, 1)
	var storeErr, publishErr error
	go func() {
		storeErr = m.Store("ctr", []byte("after"))
		stored <- time.Now()
	}()
	go func() {
		_, publishErr = r.Publish("after", nil)
		published <- time.Now()
	}()
	// Many liveness checks' worth of waiting: nothing may be taken from a
	// process that is alive, however long it holds on.
	select {
	case <-stored:
		t.Fatal("the stripe was taken from a live holder")
	case <-published:
		t.Fatal("the publish lock was taken from a live holder")
	case <-time.After(300 * time.Millisecond):
	}
	require.Zero(t, m.Stats().Recoveries)
	killed := time.Now()
	require.NoError(t, killGroup(cmd))
	storeAt, publishAt := <-stored, <-published
	require.NoError(t, storeErr)
	require.NoError(t, publishErr)
	t.Logf("taken over %v (stripe) and %v (publish lock) after the kill", storeAt.Sub(killed), publishAt.Sub(killed))
	assert.Less(t, storeAt.Sub(killed), hangBound)
	assert.Less(t, publishAt.Sub(killed), hangBound)
	assert.Equal(t, uint64(1), m.Stats().Recoveries)
	assert.Equal(t, uint64(1), r.Stats().Abandoned, "the killed publisher's record is a hole")
}
