package rlock

import (
	"os"
	"os/exec"
	"sync"
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

func liveOther(t *testing.T) proc.Token {
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
