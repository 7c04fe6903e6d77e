package shmarena

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A process stopped while it waits for a lock (SIGSTOP, a debugger, a
// frozen cgroup) must not slow down the processes that go on writing. This
// process (A) measures its own Stores to a map's one stripe, and Publishes
// to a ring, in alternating phases:
//
//   - alone: the contender (B, a child) is idle;
//   - stopped: B writes in a loop; A parks one of its own writes inside
//     the critical section (crashHook, publishHook), so B's next write
//     waits for the lock; once B has made no progress for swBlocked, A
//     SIGSTOPs it, lets its own write finish, and measures while B stays
//     stopped in the middle of its wait. Then B is continued.
//
// The medians of the two phases' latencies are compared. A lock that
// keeps a free lock for a waiter (a waiter marked as the next owner, or a
// hand-off to a woken waiter) makes every write of A wait while B is
// stopped.

const (
	swRounds   = 20                    // phases of each kind, alone and stopped, per kind of write
	swPerPhase = 2000                  // writes measured in one phase, at most
	swBudget   = 20 * time.Millisecond // and for at most this long
	swBlocked  = 10 * time.Millisecond // how long B has waited when it is stopped
	swTimeout  = hangBound             // for each handshake with B
)

const (
	swStore = iota
	swPublish
)

var swKinds = [...]string{swStore: "store", swPublish: "publish"}

func init() { childRoles["stopped-contender"] = stoppedContenderRole }

// openSW opens the regions of the scenario: the map and ring written, and
// a control map through which A steers B (its own stripes, so never the
// lock being measured).
func openSW(a *Arena) (m *Map, r *Ring, ctl *Map, err error) {
	if m, err = a.Map("sw-map", contendMapShape...); err != nil {
		return
	}
	if r, err = a.Ring("sw-ring", contendRingShape...); err != nil {
		return
	}
	ctl, err = a.Map("sw-ctl", WithSlots(64), WithSlotSize(64))
	return
}

// stoppedContenderRole is B. It follows ctl's "mode": 'i' idle, 'r'
// Store, Publish and add 1 to ctl's "beats" in a loop, 'q' exit; it
// acknowledges each mode by storing it in ctl's "state".
func stoppedContenderRole() error {
	a, err := Open(os.Getenv("SHMARENA_PATH"))
	if err != nil {
		return err
	}
	defer a.Close()
	m, r, ctl, err := openSW(a)
	if err != nil {
		return err
	}
	val := make([]byte, contendValue)
	var mode []byte
	acked := byte(0)
	for {
		var ok bool
		if mode, ok = ctl.AppendLoad(mode[:0], "mode"); !ok || len(mode) != 1 {
			continue // the read lost to A's write: read again
		}
		if mode[0] != acked {
			if err := ctl.Store("state", mode); err != nil {
				return err
			}
			acked = mode[0]
		}
		switch mode[0] {
		case 'q':
			return nil
		case 'i':
			time.Sleep(100 * time.Microsecond)
		case 'r':
			if err := m.Store("b", val); err != nil {
				return err
			}
			if _, err := r.Publish("b", val); err != nil {
				return err
			}
			if _, err := ctl.Add("beats", 1); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
	}
}

// swFixture is A's side of the scenario.
type swFixture struct {
	tb     testing.TB
	m      *Map
	r      *Ring
	ctl    *Map
	b      *procKid
	val    []byte
	writes [2]func() error // A's measured writes, by kind
}

func newSWFixture(tb testing.TB) *swFixture {
	a, path := tempArena(tb, contendArenaSize)
	m, r, ctl, err := openSW(a)
	require.NoError(tb, err)
	f := &swFixture{tb: tb, m: m, r: r, ctl: ctl, val: make([]byte, contendValue)}
	for _, k := range []string{"a", "b", "hold"} { // every write an overwrite
		require.NoError(tb, m.Store(k, f.val))
	}
	require.NoError(tb, ctl.Store("mode", []byte("i")))
	_, err = ctl.Add("beats", 0)
	require.NoError(tb, err)
	f.writes[swStore] = func() error { return m.Store("a", f.val) }
	f.writes[swPublish] = func() error {
		_, err := r.Publish("a", f.val)
		return err
	}
	f.b = startKid(tb, "stopped-contender", "SHMARENA_PATH="+path)
	f.setMode('i')
	return f
}

// setMode tells B to switch to mode c and waits until it has.
func (f *swFixture) setMode(c byte) {
	require.NoError(f.tb, f.ctl.Store("mode", []byte{c}))
	deadline := time.Now().Add(swTimeout)
	for {
		if v, ok := f.ctl.Load("state"); ok && string(v) == string(c) {
			return
		}
		require.True(f.tb, time.Now().Before(deadline), "the contender never switched to mode %q", c)
		time.Sleep(50 * time.Microsecond)
	}
}

func (f *swFixture) beats() int64 {
	n, _ := f.ctl.Counter("beats")
	return n
}

// running waits until B has done n more rounds of writes.
func (f *swFixture) running(n int64) {
	deadline := time.Now().Add(swTimeout)
	for n0 := f.beats(); f.beats() < n0+n; {
		require.True(f.tb, time.Now().Before(deadline), "the contender is not writing")
		time.Sleep(100 * time.Microsecond)
	}
}

// blocked waits until B has made no progress for swBlocked.
func (f *swFixture) blocked() {
	deadline := time.Now().Add(swTimeout)
	last, since := f.beats(), time.Now()
	for time.Since(since) < swBlocked {
		require.True(f.tb, time.Now().Before(deadline), "the contender never blocked on the held lock")
		time.Sleep(time.Millisecond)
		if n := f.beats(); n != last {
			last, since = n, time.Now()
		}
	}
}

// hold starts a write of kind in another goroutine that parks inside its
// critical section, holding the lock, and returns once it is there. The
// function it returns lets the write finish and waits for it.
func (f *swFixture) hold(kind int) (release func()) {
	held, rel, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	park := func() {
		first := false
		once.Do(func() { first = true; close(held) })
		if first {
			<-rel
		}
	}
	var err error
	if kind == swStore {
		crashHook = func(p string) {
			if p == "overwrite" {
				park()
			}
		}
		go func() { defer close(finished); err = f.m.Store("hold", f.val) }()
	} else {
		publishHook = func(uint64) { park() }
		go func() { defer close(finished); _, err = f.r.Publish("hold", f.val) }()
	}
	var released sync.Once
	release = func() {
		released.Do(func() {
			close(rel)
			select {
			case <-finished:
				assert.NoError(f.tb, err, "the holding write")
			case <-time.After(swTimeout):
				f.tb.Error("the holding write never finished")
			}
			crashHook, publishHook = nil, nil
		})
	}
	f.tb.Cleanup(release) // also when a check fails while it is held
	select {
	case <-held:
	case <-finished:
		f.tb.Fatalf("the %s returned (%v) without reaching its hook", swKinds[kind], err)
	case <-time.After(swTimeout):
		f.tb.Fatalf("the %s never reached its hook", swKinds[kind])
	}
	return release
}

// signal sends sig to B; for SIGSTOP it also waits until B has stopped.
func (f *swFixture) signal(sig syscall.Signal) {
	p := f.b.cmd.Process
	require.NoError(f.tb, p.Signal(sig))
	if sig != syscall.SIGSTOP {
		return
	}
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(p.Pid, &ws, syscall.WUNTRACED, nil)
	for err == syscall.EINTR {
		_, err = syscall.Wait4(p.Pid, &ws, syscall.WUNTRACED, nil)
	}
	require.NoError(f.tb, err)
	require.True(f.tb, ws.Stopped(), "contender status %v", ws)
}

// measure runs A's write of kind up to swPerPhase times (for at most
// swBudget) and appends each one's latency to dst.
func (f *swFixture) measure(kind int, dst []time.Duration) []time.Duration {
	write := f.writes[kind]
	start := time.Now()
	var t0 time.Duration
	for range swPerPhase {
		if err := write(); err != nil {
			f.tb.Fatal(err)
		}
		t1 := time.Since(start) // the monotonic clock alone: see contention_bench_test.go
		dst = append(dst, t1-t0)
		if t1 > swBudget {
			break
		}
		t0 = t1
	}
	return dst
}

// alonePhase measures with B stopped while idle, so that the only
// difference from stoppedPhase is where B was stopped.
func (f *swFixture) alonePhase(kind int, dst []time.Duration) []time.Duration {
	f.setMode('i')
	f.signal(syscall.SIGSTOP)
	dst = f.measure(kind, dst)
	f.signal(syscall.SIGCONT)
	return dst
}

func (f *swFixture) stoppedPhase(kind int, dst []time.Duration) []time.Duration {
	f.setMode('r')
	f.running(1000)
	release := f.hold(kind)
	f.blocked()
	f.signal(syscall.SIGSTOP)
	release()
	dst = f.measure(kind, dst)
	f.signal(syscall.SIGCONT)
	return dst
}

// measureStoppedWaiter runs the scenario and returns A's write latencies,
// by kind, alone and with B stopped mid-wait.
func measureStoppedWaiter(tb testing.TB) (alone, stopped [2][]time.Duration) {
	f := newSWFixture(tb)
	for kind := range swKinds {
		require.NoError(tb, warmUp(f.writes[kind]))
		alone[kind] = make([]time.Duration, 0, swRounds*swPerPhase)
		stopped[kind] = make([]time.Duration, 0, swRounds*swPerPhase)
	}
	for round := range swRounds {
		for j := range swKinds { // alternate the order of everything
			kind := (round + j) % len(swKinds)
			if round%2 == 0 {
				alone[kind] = f.alonePhase(kind, alone[kind])
				stopped[kind] = f.stoppedPhase(kind, stopped[kind])
			} else {
				stopped[kind] = f.stoppedPhase(kind, stopped[kind])
				alone[kind] = f.alonePhase(kind, alone[kind])
			}
		}
	}
	f.setMode('q')
	require.NoError(tb, f.b.cmd.Wait())
	return alone, stopped
}

// quantileOf returns the latency below which a fraction q of ds lie.
func quantileOf(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(max(int(math.Ceil(q*float64(len(s))))-1, 0), len(s)-1)]
}

// A's median Store and median Publish while B is stopped in the middle of
// waiting for the same lock stay within twice A's median alone, measured
// in the same test (see the top of this file). 20 phases of each kind,
// each of up to 2000 writes or 20 ms.
func TestStoppedWaiterDoesNotSlowOthers(t *testing.T) {
	alone, stopped := measureStoppedWaiter(t)
	for kind, name := range swKinds {
		a, s := quantileOf(alone[kind], 0.5), quantileOf(stopped[kind], 0.5)
		t.Logf("%s: alone median %v p99 %v (%d writes); beside a stopped waiter median %v p99 %v max %v (%d writes)",
			name, a, quantileOf(alone[kind], 0.99), len(alone[kind]),
			s, quantileOf(stopped[kind], 0.99), quantileOf(stopped[kind], 1), len(stopped[kind]))
		assert.LessOrEqual(t, s, 2*a, "%s: median %v beside a stopped waiter, more than twice the median alone (%v)", name, s, a)
	}
}

// BenchmarkContendedStoppedWaiter runs the scenario of
// TestStoppedWaiterDoesNotSlowOthers once and reports, for Store and for
// Publish, A's median and p99 alone and beside the stopped waiter in ns,
// and the stopped median and p99 over the median alone (-ratio).
func BenchmarkContendedStoppedWaiter(b *testing.B) {
	alone, stopped := measureStoppedWaiter(b)
	for kind, name := range swKinds {
		a := quantileOf(alone[kind], 0.5)
		p50, p99 := quantileOf(stopped[kind], 0.5), quantileOf(stopped[kind], 0.99)
		b.Logf("%s: %d writes alone, %d beside the stopped waiter", name, len(alone[kind]), len(stopped[kind]))
		b.ReportMetric(float64(a), name+"-alone-p50-ns")
		b.ReportMetric(float64(quantileOf(alone[kind], 0.99)), name+"-alone-p99-ns")
		b.ReportMetric(float64(p50), name+"-stopped-p50-ns")
		b.ReportMetric(float64(p99), name+"-stopped-p99-ns")
		b.ReportMetric(float64(p50)/float64(a), name+"-p50-ratio")
		b.ReportMetric(float64(p99)/float64(a), name+"-p99-ratio")
	}
}
