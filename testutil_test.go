package shmarena

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/rlock"
	"github.com/stretchr/testify/require"
)

// fixedSeed makes every arena the test creates hash with seed 1, so that
// which keys collide is the same in every run (fuzz targets replay their
// inputs); it is undone when the test ends.
func fixedSeed(t testing.TB) {
	s := uint64(1)
	seedForTest = &s
	t.Cleanup(func() { seedForTest = nil })
}

// patch64 replaces the little-endian word at off in the file at path and
// returns the old value.
func patch64(path string, off int, v uint64) (uint64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var w [8]byte
	if _, err := f.ReadAt(w[:], int64(off)); err != nil {
		return 0, err
	}
	old := binary.LittleEndian.Uint64(w[:])
	binary.LittleEndian.PutUint64(w[:], v)
	_, err = f.WriteAt(w[:], int64(off))
	return old, err
}

// lapseNow puts key's deadline in the past, as a write would, so that a
// test can have lapsed entries without waiting for the clock: a TTL short
// enough to lapse during a test can as well lapse before the test is
// ready for it on a busy machine.
func lapseNow(t testing.TB, m *Map, key string) {
	t.Helper()
	h := m.hashKey(key)
	s := m.stripeOf(h)
	require.True(t, m.lock(s), "lock for %q", key)
	defer m.unlock(s)
	v, found := m.find(key, h)
	require.True(t, found, "%q is not in the map", key)
	odd := m.begin(s, v)
	mem.Store64(m.mem, deadlineOff(v.off, v.meta), 1) // 1 ns after the epoch
	m.noteDeadlines()
	require.True(t, m.end(v.off, odd), "slot of %q changed under its lock", key)
	m.clearIntent(s)
}

// shortLives are the lives (TTLs, leases, delays) a test of something
// running out in the middle of its work gives it, shortest first: a short
// life keeps the test fast, and a machine too busy for it (the life ran
// out before the test reached the point that needed it alive) gets the
// next.
var shortLives = []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second, 10 * time.Second}

// withShortLife runs try with each of shortLives until try reports that
// what it gave that life was still alive where the test needed it (try
// returns false, before asserting what depends on it, when it was not),
// so that the test judges what happens when a life runs out, never how
// fast the machine got there. A behaviour that is wrong fails with every
// life.
func withShortLife(t testing.TB, try func(life time.Duration) (reached bool)) {
	t.Helper()
	for _, life := range shortLives {
		if try(life) {
			return
		}
		t.Logf("a life of %v ran out before the test reached the point that needed it: trying a longer one", life)
	}
	t.Fatalf("a life of %v ran out before the test reached the point that needed it", shortLives[len(shortLives)-1])
}

// hangBound is how long a test waits for what must happen (a takeover
// after a kill, a wake-up, a survivor's next operation) before it calls
// it a hang. It detects hangs and judges no speed: a loaded machine can
// stall a process for seconds, and how fast these happen is measured by
// benchmarks (BenchmarkRecoveryAfterKill, BenchmarkContended*).
const hangBound = 30 * time.Second

// loadPatiently is Load for a test that checks a present key is found
// while other goroutines write. A lock-free read that keeps losing to
// writers (64 changed versions in a row, or a writer inside its write for
// oddPatience) gives up and reports the key absent, counted in
// Stats().Busy; on a busy machine a descheduled writer is enough. A miss
// that came with a Busy count is read again; any other miss is returned,
// so a present key reported absent for another reason still fails.
func loadPatiently(m *Map, key string) ([]byte, bool) {
	for try := 0; ; try++ {
		busy := mem.Load64(m.mem, m.base+mhBusy)
		v, ok := m.Load(key)
		if ok || mem.Load64(m.mem, m.base+mhBusy) == busy || try == 1000 {
			return v, ok
		}
	}
}

// raceScaled returns n, or n/raceSlowdown (at least 1) under the race
// detector: a long test does less of the same work there, where every
// operation costs several times more, so that the race run keeps wide
// headroom under its timeout; the plain run, which CI also does, keeps
// the full size.
func raceScaled(n int) int { return max(1, n/raceSlowdown) }

type testRoute struct {
	Upstream string
	Weight   int
}

// churnUntilStopped runs fn in g goroutines until stop is called, which waits
// for them.
func churnUntilStopped(g int, fn func(g, i int)) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				fn(w, i)
			}
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}

// denseSegment returns a one-segment plain map of 1,024 slots with
// stable keys (half of them counters) and churn keys filling it to about
// 85%, so nearly every delete of a churn key moves entries, stable ones
// among them.
func denseSegment(t *testing.T) (m *Map, stable []string, churn []string) {
	m = testMap(t, WithSlots(1024), WithSlotSize(64))
	require.Equal(t, uint64(1), m.stripes)
	for i := range 400 {
		k := "stable" + strconv.Itoa(i)
		if i%2 == 0 {
			_, err := m.Add(k, int64(i))
			require.NoError(t, err)
		} else {
			require.NoError(t, m.Store(k, []byte(k)))
		}
		stable = append(stable, k)
	}
	for i := range 470 {
		k := "churn" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, []byte(k)))
		churn = append(churn, k)
	}
	return m, stable, churn
}

// deleteAndRestore deletes churn key i and stores it again: at 85% load
// the delete nearly always moves entries back.
func deleteAndRestore(m *Map, churn []string, i int) {
	k := churn[i%len(churn)]
	m.Delete(k)
	_ = m.Store(k, []byte(k))
}

// checkMapAtRest checks a map at rest: every slot even, tags agree, no key
// twice, every key loads its value (per valueOf, nil = any), counts agree
// with the slots and with Keys, no moves open, no lock held, eviction
// queues sane.
func checkMapAtRest(t *testing.T, m *Map, valueOf func(k string) []byte) map[string]bool {
	t.Helper()
	used, tomb := tableCounts(t, m)
	st := m.Stats()
	require.Equal(t, used, st.Used, "Stats().Used against the slots")
	require.Equal(t, tomb, st.Tombstones, "Stats().Tombstones against the slots")
	require.Zero(t, tomb, "tombstones at rest")
	seen := map[string]bool{}
	for i := uint64(0); i < m.slots; i++ {
		off := m.slotOff(i)
		meta := mem.Load64(m.mem, off+sMeta)
		if metaState(meta) != stateLive {
			continue
		}
		k := string(mem.AppendBytes(nil, m.mem, keyOff(off, meta), metaKeyLen(meta)))
		require.False(t, seen[k], "key %q in two slots", k)
		seen[k] = true
		h := m.hashKey(k)
		require.Equal(t, h, mem.Load64(m.mem, off+sHash), "slot %d: hash of %q", i, k)
		require.Equal(t, m.stripeOf(h), min(i/m.segLen, m.stripes-1), "slot %d: %q outside its segment", i, k)
		v, ok := m.Load(k)
		require.True(t, ok, "key %q in slot %d does not read", k, i)
		if valueOf != nil {
			if want := valueOf(k); want != nil {
				require.True(t, bytes.Equal(want, v), "key %q reads %q", k, v)
			}
		}
	}
	n := 0
	for k := range m.Keys() {
		require.True(t, seen[k], "Keys yields %q, in no slot", k)
		n++
	}
	require.Equal(t, used, n, "Keys against the slots")
	for s := uint64(0); s < m.stripes; s++ {
		lk := m.lockOff(s)
		require.Zero(t, mem.Load64(m.mem, lk+stMoveVer)&1, "segment %d: moves left open", s)
		require.Zero(t, mem.Load64(m.mem, lk+stMoveFrom), "segment %d: move-from left", s)
		require.Zero(t, rlock.Owner(m.mem, lk), "segment %d held", s)
		if m.q.on {
			ns, ok1 := m.small(s).len(m.mem)
			nm, ok2 := m.main(s).len(m.mem)
			require.True(t, ok1 && ok2, "segment %d: queue counters damaged", s)
			require.LessOrEqual(t, ns+nm, m.q.smallCap+m.q.mainCap)
		}
	}
	return seen
}

// untilKilled blocks a child process until it is killed. A bare select {}
// would not do: where every goroutine is blocked so (the 386 runtime, with
// no background goroutine awake), the runtime ends the process with "all
// goroutines are asleep", and the locks it was to hold are freed early.
func untilKilled() {
	for {
		time.Sleep(time.Hour)
	}
}

// startReporting starts a child process with its standard output piped and
// returns a reader of the lines it reports (such as "AT insert" when it
// parks at a crash point, or "WORKER 1234").
func startReporting(t testing.TB, cmd *exec.Cmd) *bufio.Reader {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	return bufio.NewReader(out)
}

// nextReport reads the next line a child reports, without its newline; it
// fails the test if the child ended first.
func nextReport(t testing.TB, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	require.NoError(t, err, "the child ended before reporting (read %q)", line)
	return strings.TrimSuffix(line, "\n")
}

// reportedInt reads the next line a child reports, requires it to be prefix
// followed by a decimal number, and returns the number.
func reportedInt(t testing.TB, r *bufio.Reader, prefix string) int {
	t.Helper()
	line := nextReport(t, r)
	s, ok := strings.CutPrefix(line, prefix)
	require.True(t, ok, "the child reported %q, want %q and a number", line, prefix)
	n, err := strconv.Atoi(strings.TrimSpace(s))
	require.NoError(t, err, "the child reported %q", line)
	return n
}
