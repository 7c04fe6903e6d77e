package rlock

import (
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/proc"
	"github.com/stretchr/testify/require"
)

func deadToken(t *testing.T) proc.Token {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	// The pid is gone (waited for), so any start time is dead.
	return proc.Make(cmd.Process.Pid, 1)
}

func TestAcquireRelease(t *testing.T) {
	b := make([]byte, 64)
	self := proc.Self()
	require.False(t, Acquire(b, 8, self))
	require.Equal(t, self, Owner(b, 8))
	ok, _ := TryAcquire(b, 8, self)
	require.False(t, ok, "held by a live process (this one)")
	Release(b, 8)
	require.Zero(t, uint64(Owner(b, 8)))
}

func TestMutualExclusion(t *testing.T) {
	b := make([]byte, 64)
	var wg sync.WaitGroup
	counter := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				Acquire(b, 0, proc.Self())
				counter++
				Release(b, 0)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 4000, counter)
}

func TestTakeOverDeadOwner(t *testing.T) {
	b := make([]byte, 64)
	dead := deadToken(t)
	mem.Store64(b, 0, uint64(dead))
	start := time.Now()
	require.True(t, Acquire(b, 0, proc.Self()), "reports the takeover")
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, proc.Self(), Owner(b, 0))

	mem.Store64(b, 0, uint64(dead))
	ok, recovered := TryAcquire(b, 0, proc.Self())
	require.True(t, ok)
	require.True(t, recovered)
}

// A pid that is alive but started at another time was reused: dead.
func TestTakeOverReusedPid(t *testing.T) {
	b := make([]byte, 64)
	mem.Store64(b, 0, uint64(proc.Make(os.Getppid(), 1)))
	require.True(t, Acquire(b, 0, proc.Self()))
}

// A live owner is waited for, not taken over.
func TestWaitsForLiveOwner(t *testing.T) {
	b := make([]byte, 64)
	cmd := exec.Command("sleep", "5")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	tok, err := proc.Of(cmd.Process.Pid)
	require.NoError(t, err)
	mem.Store64(b, 0, uint64(tok))
	done := make(chan bool)
	go func() { done <- Acquire(b, 0, proc.Self()) }()
	select {
	case <-done:
		t.Fatal("took a lock from a live process")
	case <-time.After(100 * time.Millisecond):
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	select {
	case recovered := <-done:
		require.True(t, recovered)
	case <-time.After(time.Second):
		t.Fatal("no takeover within 1 s of the owner's death")
	}
}

func liveOther(t testing.TB) proc.Token {
	cmd := exec.Command("sleep", "5")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	tok, err := proc.Of(cmd.Process.Pid)
	require.NoError(t, err)
	return tok
}

// A free lock whose heir is another live process is left to it: TryAcquire
// fails, and Acquire takes it only after deferring for HeirPatience.
func TestDefersToLiveHeir(t *testing.T) {
	defer func(p time.Duration) { HeirPatience = p }(HeirPatience)
	HeirPatience = 200 * time.Millisecond
	b := make([]byte, 64)
	heir := liveOther(t)
	mem.Store64(b, HeirOff, uint64(heir))
	ok, _ := TryAcquire(b, 0, proc.Self())
	require.False(t, ok, "TryAcquire took a lock kept for a live heir")
	start := time.Now()
	require.False(t, Acquire(b, 0, proc.Self()))
	require.GreaterOrEqual(t, time.Since(start), HeirPatience)
	require.Equal(t, uint64(heir), mem.Load64(b, HeirOff), "another process's heir word is left alone")
}

// An heir that died waiting is cleared by the next waiter.
func TestClearsDeadHeir(t *testing.T) {
	b := make([]byte, 64)
	mem.Store64(b, HeirOff, uint64(deadToken(t)))
	require.False(t, Acquire(b, 0, proc.Self()))
	require.Zero(t, mem.Load64(b, HeirOff))
	require.Equal(t, proc.Self(), Owner(b, 0))
}

// A waiter that starves behind a live owner claims the heir word, and
// clears it once it has the lock.
func TestStarvingWaiterBecomesHeir(t *testing.T) {
	b := make([]byte, 64)
	owner := liveOther(t)
	mem.Store64(b, 0, uint64(owner))
	done := make(chan struct{})
	go func() { Acquire(b, 0, proc.Self()); close(done) }()
	require.Eventually(t, func() bool { return mem.Load64(b, HeirOff) == uint64(proc.Self()) },
		5*time.Second, time.Millisecond, "a waiter past StarveAfter claims the heir word")
	Release(b, 0) // as the owner would
	<-done
	require.Equal(t, proc.Self(), Owner(b, 0))
	require.Zero(t, mem.Load64(b, HeirOff), "the heir clears its word once it holds the lock")
}

// BenchmarkCrossProcessFairness pits eight goroutines of this process
// against one goroutine acting for another live process (a sleep(1)'s
// token), all taking one lock for 5 µs at a time, for two seconds. It
// reports the other process's worst and mean Acquire and its share of the
// acquisitions: without the heir word a busy process could starve it for
// seconds.
func BenchmarkCrossProcessFairness(b *testing.B) {
	q := liveOther(b)
	p := proc.Self()
	for b.Loop() {
		lock := make([]byte, 64)
		var stop atomic.Bool
		var pOps atomic.Int64
		var wg sync.WaitGroup
		hold := func() {
			for s := time.Now(); time.Since(s) < 5*time.Microsecond; {
			}
		}
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					Acquire(lock, 0, p)
					hold()
					Release(lock, 0)
					pOps.Add(1)
				}
			}()
		}
		var qOps int
		var qMax, qSum time.Duration
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); qOps++ {
			s := time.Now()
			Acquire(lock, 0, q)
			d := time.Since(s)
			qMax, qSum = max(qMax, d), qSum+d
			hold()
			Release(lock, 0)
		}
		stop.Store(true)
		wg.Wait()
		b.ReportMetric(float64(qMax.Microseconds())/1000, "q-worst-ms")
		b.ReportMetric(float64(qSum.Microseconds())/float64(qOps), "q-mean-µs")
		b.ReportMetric(float64(qOps)/float64(int64(qOps)+pOps.Load()), "q-share")
	}
}

// Waiting behind its own process makes no heir: the heir word is for
// fairness between processes, and costs one process's goroutines nothing.
func TestNoHeirBehindOwnProcess(t *testing.T) {
	b := make([]byte, 64)
	self := proc.Self()
	require.False(t, Acquire(b, 0, self))
	done := make(chan struct{})
	go func() { Acquire(b, 0, self); close(done) }()
	time.Sleep(10 * StarveAfter)
	require.Zero(t, mem.Load64(b, HeirOff), "a waiter behind its own process claimed the heir word")
	Release(b, 0)
	<-done
}
