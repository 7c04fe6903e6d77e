package shmarena

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Measurements of the cross-process locks, made to compare two
// implementations of them in one run each:
//
//   - BenchmarkContendedStore, BenchmarkContendedPublish: processes write
//     64-byte values through ONE map stripe (a map WithStripes(1)) or ONE
//     ring's publish lock for -contend.dur; procs=1 is the same work alone,
//     so contended/uncontended ratios come from the same run.
//   - BenchmarkContendedStoppedWaiter (stopped_waiter_test.go): one
//     process's latency while another is stopped in the middle of waiting
//     for the lock.
//   - BenchmarkRecoveryAfterKill: the time from SIGKILLing a process that
//     holds a stripe (or the publish lock) to another process's write on it
//     going through.
//
// They use only the public API and the crash hooks (crashHook,
// publishHook), so the same files measure any implementation of the locks.
// Each does its work once, whatever b.N:
//
//	go test -run '^$' -bench 'Contended|Recovery' -benchtime 1x -count 1 . [-args -contend.dur=2s -recovery.kills=20]
//
// Latencies are read from the monotonic clock after every operation
// (time.Since: about 30 ns of each figure on the 2-core VM this was
// written on, the same in every variant, so ratios hide it only partly:
// subtract it when comparing operation costs).

var (
	contendDur    = flag.Duration("contend.dur", 2*time.Second, "how long each contended benchmark runs its processes")
	recoveryKills = flag.Int("recovery.kills", 20, "how many lock holders BenchmarkRecoveryAfterKill kills")
)

// The shapes every process of these benchmarks opens: one stripe, so every
// key meets every other at its lock.
var (
	contendMapShape  = []RegionOption{WithSlots(64), WithSlotSize(128), WithStripes(1)}
	contendRingShape = []RegionOption{WithSlots(4096), WithSlotSize(128)}
)

const (
	contendValue     = 64 // bytes per stored value and published payload
	contendArenaSize = 4 << 20
)

func init() {
	childRoles["contend-worker"] = contendWorkerRole
	childRoles["recover-store"] = recoverStoreRole
	childRoles["recover-publish"] = recoverPublishRole
}

// ---- a latency histogram ----

// latHist counts latencies in nanoseconds: exactly below 64 ns, then in 64
// buckets per power of two, so a quantile read from it is at most 1.6%
// below the true value. Recording is a few nanoseconds and never allocates.
type latHist struct {
	counts      [histBuckets]uint64
	n, sum, max uint64
}

const (
	histSub     = 6 // 2^histSub buckets per power of two
	histBuckets = (64 - histSub + 1) << histSub
)

func histBucket(v uint64) int {
	if v < 1<<histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSub - 1 // v>>e is in [64, 128)
	return (e+1)<<histSub + int(v>>e) - 1<<histSub
}

// histLow is the smallest value bucket i counts.
func histLow(i int) uint64 {
	if i < 1<<histSub {
		return uint64(i)
	}
	e := i>>histSub - 1
	return uint64(i&(1<<histSub-1)|1<<histSub) << e
}

func (h *latHist) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[histBucket(v)]++
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

func (h *latHist) merge(o *latHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the latency below which a fraction q of the recorded
// ones lie (q = 1 is the maximum), in nanoseconds.
func (h *latHist) quantile(q float64) float64 {
	if q >= 1 {
		return float64(h.max)
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var c uint64
	for i, k := range h.counts {
		if c += k; c >= rank {
			return float64(histLow(i))
		}
	}
	return float64(h.max)
}

func (h *latHist) mean() float64 { return float64(h.sum) / float64(max(h.n, 1)) }

// encode writes the histogram as one line of numbers: count, sum and
// maximum, then bucket:count for every bucket in use.
func (h *latHist) encode() string {
	b := fmt.Appendf(nil, "%d %d %d", h.n, h.sum, h.max)
	for i, c := range h.counts {
		if c != 0 {
			b = fmt.Appendf(b, " %d:%d", i, c)
		}
	}
	return string(b)
}

func decodeHist(s string) (*latHist, error) {
	f := strings.Fields(s)
	h := new(latHist)
	if len(f) < 3 {
		return nil, fmt.Errorf("histogram %q: too short", s)
	}
	for i, p := range []*uint64{&h.n, &h.sum, &h.max} {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("histogram %q: %w", s, err)
		}
		*p = v
	}
	var total uint64
	for _, bc := range f[3:] {
		bs, cs, _ := strings.Cut(bc, ":")
		i, err1 := strconv.Atoi(bs)
		c, err2 := strconv.ParseUint(cs, 10, 64)
		if err1 != nil || err2 != nil || i < 0 || i >= histBuckets {
			return nil, fmt.Errorf("histogram bucket %q", bc)
		}
		h.counts[i] += c
		total += c
	}
	if total != h.n {
		return nil, fmt.Errorf("histogram %q: buckets hold %d of %d", s, total, h.n)
	}
	return h, nil
}

func TestLatHist(t *testing.T) {
	for _, v := range []uint64{0, 1, 63, 64, 127, 128, 129, 1000, 1 << 20, 123456789, math.MaxUint64} {
		i := histBucket(v)
		require.Less(t, i, histBuckets, "bucket of %d", v)
		require.LessOrEqual(t, histLow(i), v, "bucket of %d starts above it", v)
		require.GreaterOrEqual(t, float64(histLow(i)), float64(v)*(1-1.0/64), "bucket of %d too wide", v)
		if i+1 < histBuckets {
			require.Greater(t, histLow(i+1), v, "bucket of %d ends below it", v)
		}
	}
	h := new(latHist)
	for v := 1; v <= 1000; v++ {
		h.record(time.Duration(v))
	}
	require.Equal(t, 500.0, h.quantile(0.5))
	require.InDelta(t, 990, h.quantile(0.99), 990.0/64)
	require.Equal(t, 1000.0, h.quantile(1))
	require.Equal(t, 500.5, h.mean())
	back, err := decodeHist(h.encode())
	require.NoError(t, err)
	require.Equal(t, h, back)
	_, err = decodeHist("3 6 3 1:1 2:1")
	require.Error(t, err, "buckets that do not add up to the count")
}

// ---- child processes ----

// procKid is a child process of this test binary whose stdin and stdout
// the parent holds.
type procKid struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startKid(tb testing.TB, role string, env ...string) *procKid {
	tb.Helper()
	cmd := child(tb, role, env...)
	in, err := cmd.StdinPipe()
	require.NoError(tb, err)
	out, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	require.NoError(tb, cmd.Start())
	tb.Cleanup(func() {
		if cmd.ProcessState == nil { // not waited for: a check failed
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return &procKid{cmd: cmd, in: in, out: bufio.NewReader(out)}
}

// expect reads the child's next line, requires it to start with prefix and
// returns the rest.
func (k *procKid) expect(tb testing.TB, prefix string) string {
	tb.Helper()
	line, err := k.out.ReadString('\n')
	require.NoError(tb, err, "child ended before its %q line", prefix)
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), prefix)
	require.True(tb, ok, "child said %q, want %q", line, prefix)
	return rest
}

// kill SIGKILLs the child's process (returning the time of the signal),
// leaving it to be reaped by reap.
func (k *procKid) kill(tb testing.TB) time.Time {
	tb.Helper()
	t0 := time.Now()
	require.NoError(tb, k.cmd.Process.Signal(syscall.SIGKILL))
	return t0
}

// reap waits for a child killed by kill and requires that it died of it.
func (k *procKid) reap(tb testing.TB) {
	tb.Helper()
	err := k.cmd.Wait()
	ws, ok := k.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(tb, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child status %v (%v)", k.cmd.ProcessState, err)
}

// contendOp opens the benchmark's region in a and returns the operation
// worker id repeats: Store of its own key, or Publish.
func contendOp(a *Arena, op, id string) (func() error, error) {
	val := make([]byte, contendValue)
	switch op {
	case "store":
		m, err := a.Map("contend-map", contendMapShape...)
		if err != nil {
			return nil, err
		}
		key := "w" + id
		return func() error { return m.Store(key, val) }, nil
	case "publish":
		r, err := a.Ring("contend-ring", contendRingShape...)
		if err != nil {
			return nil, err
		}
		return func() error {
			_, err := r.Publish("t", val)
			return err
		}, nil
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

// warmUp runs op untimed over two laps of the ring and for at least 100
// ms: a cold process's first touches of the mapping fault pages in, at
// microseconds each.
func warmUp(op func() error) error {
	t0 := time.Now()
	for i := 0; i < 8192 || time.Since(t0) < 100*time.Millisecond; i++ {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

// contendWorkerRole warms up, says READY, reads "GO <deadline in Unix ns>"
// from stdin, repeats SHMARENA_OP until the deadline recording the latency
// of each, and prints "RESULT <histogram>".
func contendWorkerRole() error {
	a, err := Open(os.Getenv("SHMARENA_PATH"))
	if err != nil {
		return err
	}
	defer a.Close()
	op, err := contendOp(a, os.Getenv("SHMARENA_OP"), os.Getenv("SHMARENA_ID"))
	if err != nil {
		return err
	}
	if err := warmUp(op); err != nil {
		return err
	}
	fmt.Println("READY")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return err
	}
	var end int64
	if _, err := fmt.Sscanf(line, "GO %d", &end); err != nil {
		return fmt.Errorf("start line %q: %w", line, err)
	}
	h := new(latHist)
	// Each latency runs from the end of the previous operation, so one
	// clock read per operation (the loop and record are counted in it),
	// and that of the monotonic clock only (time.Since of a time.Now).
	base := time.Now()
	limit := time.Unix(0, end).Sub(base)
	var t0 time.Duration
	for {
		if err := op(); err != nil {
			return err
		}
		t1 := time.Since(base)
		h.record(t1 - t0)
		if t1 >= limit {
			break
		}
		t0 = t1
	}
	fmt.Println("RESULT", h.encode())
	return nil
}

// ---- contended Store and Publish ----

// BenchmarkContendedStore: procs processes Store a 64-byte value to a key
// of their own, all in the map's one stripe. See contended.
func BenchmarkContendedStore(b *testing.B) { contended(b, "store") }

// BenchmarkContendedPublish: procs processes Publish a 64-byte payload to
// one ring. See contended.
func BenchmarkContendedPublish(b *testing.B) { contended(b, "publish") }

// contended runs op in 1 and in 2 worker processes for -contend.dur each
// (started together after an untimed warm-up) and reports, over every
// operation of every worker: throughput (ops/s, all workers together), the
// operations of the least and the most productive worker and their ratio
// (fair-ratio, 1 = fair), latency quantiles in ns, and the mean latency as
// ns/op.
func contended(b *testing.B, op string) {
	for _, procs := range []int{1, 2} {
		b.Run("procs="+strconv.Itoa(procs), func(b *testing.B) {
			hists := runContended(b, op, procs, *contendDur)
			total := new(latHist)
			minOps, maxOps := uint64(math.MaxUint64), uint64(0)
			for i, h := range hists {
				b.Logf("worker %d: %d ops, p50 %.0f ns, p99 %.0f ns, p99.9 %.0f ns, max %d ns",
					i, h.n, h.quantile(0.5), h.quantile(0.99), h.quantile(0.999), h.max)
				total.merge(h)
				minOps, maxOps = min(minOps, h.n), max(maxOps, h.n)
			}
			b.ReportMetric(float64(total.n)/contendDur.Seconds(), "ops/s")
			b.ReportMetric(float64(minOps), "min-ops")
			b.ReportMetric(float64(maxOps), "max-ops")
			b.ReportMetric(float64(minOps)/float64(max(maxOps, 1)), "fair-ratio")
			b.ReportMetric(total.quantile(0.5), "p50-ns")
			b.ReportMetric(total.quantile(0.99), "p99-ns")
			b.ReportMetric(total.quantile(0.999), "p999-ns")
			b.ReportMetric(float64(total.max), "max-ns")
			b.ReportMetric(total.mean(), "ns/op")
		})
	}
}

// runContended runs procs contend-worker children doing op for dur and
// returns each one's histogram.
func runContended(b *testing.B, op string, procs int, dur time.Duration) []*latHist {
	a, path := tempArena(b, contendArenaSize)
	m, err := a.Map("contend-map", contendMapShape...)
	require.NoError(b, err)
	_, err = a.Ring("contend-ring", contendRingShape...)
	require.NoError(b, err)
	kids := make([]*procKid, procs)
	for i := range kids {
		// The key exists: workers overwrite and never insert.
		require.NoError(b, m.Store("w"+strconv.Itoa(i), make([]byte, contendValue)))
		kids[i] = startKid(b, "contend-worker", "SHMARENA_PATH="+path, "SHMARENA_OP="+op, "SHMARENA_ID="+strconv.Itoa(i))
	}
	for _, k := range kids {
		k.expect(b, "READY")
	}
	end := time.Now().Add(dur).UnixNano()
	for _, k := range kids {
		_, err := fmt.Fprintf(k.in, "GO %d\n", end)
		require.NoError(b, err)
	}
	hists := make([]*latHist, procs)
	for i, k := range kids {
		h, err := decodeHist(k.expect(b, "RESULT "))
		require.NoError(b, err)
		require.NoError(b, k.cmd.Wait(), "worker %d", i)
		require.Positive(b, h.n, "worker %d did nothing", i)
		hists[i] = h
	}
	return hists
}

// ---- recovery after a kill ----

// parkForKill tells the parent the process is at point and sleeps until
// it is killed.
func parkForKill(point string) {
	fmt.Println("AT " + point)
	for {
		time.Sleep(time.Hour)
	}
}

// recoverStoreRole inserts a key and parks at crash point "insert", holding
// the map's one stripe with the new slot half-written.
func recoverStoreRole() error {
	a, err := Open(os.Getenv("SHMARENA_PATH"))
	if err != nil {
		return err
	}
	m, err := a.Map("contend-map", contendMapShape...)
	if err != nil {
		return err
	}
	crashHook = func(p string) {
		if p == "insert" {
			parkForKill(p)
		}
	}
	err = m.Store("victim", make([]byte, contendValue))
	return fmt.Errorf("Store returned (%v) without reaching crash point insert", err)
}

// recoverPublishRole parks inside Publish, holding the publish lock with
// its record half-written.
func recoverPublishRole() error {
	a, err := Open(os.Getenv("SHMARENA_PATH"))
	if err != nil {
		return err
	}
	r, err := a.Ring("contend-ring", contendRingShape...)
	if err != nil {
		return err
	}
	publishHook = func(uint64) { parkForKill("publish") }
	_, err = r.Publish("t", make([]byte, contendValue))
	return fmt.Errorf("Publish returned (%v) without reaching publishHook", err)
}

// BenchmarkRecoveryAfterKill: -recovery.kills times, a child parks inside
// Store holding the map's one stripe (Store) or inside Publish holding the
// publish lock (Publish) and is SIGKILLed; this process then Stores to the
// same stripe (Publishes to the same ring) at once. Reports the time from
// the kill signal to that write returning: median-ms and worst-ms. It
// requires that every kill was recovered from (Stats().Recoveries,
// Stats().Abandoned).
func BenchmarkRecoveryAfterKill(b *testing.B) {
	b.Run("Store", func(b *testing.B) {
		a, path := tempArena(b, contendArenaSize)
		m, err := a.Map("contend-map", contendMapShape...)
		require.NoError(b, err)
		val := make([]byte, contendValue)
		require.NoError(b, m.Store("after", val)) // warm, and an overwrite from now on
		ds := measureRecovery(b, "recover-store", "insert", path, func() error { return m.Store("after", val) })
		require.GreaterOrEqual(b, m.Stats().Recoveries, uint64(len(ds)), "a kill left nothing to recover")
		reportRecovery(b, ds)
	})
	b.Run("Publish", func(b *testing.B) {
		a, path := tempArena(b, contendArenaSize)
		r, err := a.Ring("contend-ring", contendRingShape...)
		require.NoError(b, err)
		val := make([]byte, contendValue)
		publish := func() error {
			_, err := r.Publish("t", val)
			return err
		}
		require.NoError(b, publish())
		ds := measureRecovery(b, "recover-publish", "publish", path, publish)
		require.Equal(b, uint64(len(ds)), r.Stats().Abandoned, "every killed publisher leaves one hole")
		reportRecovery(b, ds)
	})
}

// measureRecovery kills -recovery.kills children of role, each once it is
// parked at point, and returns how long write took each time after the
// kill signal.
func measureRecovery(b *testing.B, role, point, path string, write func() error) []time.Duration {
	var ds []time.Duration
	for range *recoveryKills {
		k := startKid(b, role, "SHMARENA_PATH="+path)
		k.expect(b, "AT "+point)
		killed := k.kill(b)
		require.NoError(b, write())
		ds = append(ds, time.Since(killed))
		k.reap(b)
	}
	return ds
}

func reportRecovery(b *testing.B, ds []time.Duration) {
	b.Logf("kill to write done, in kill order: %v", ds)
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(ds[len(ds)/2]), "median-ms")
	b.ReportMetric(ms(ds[len(ds)-1]), "worst-ms")
}
