package rlock

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// table maps a fresh header-sized file and returns it with a function that
// registers a new handle on a description of its own.
func table(t testing.TB) ([]byte, func() *owner.Handle) {
	path := filepath.Join(t.TempDir(), "arena")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(layout.HeaderSize+4096))
	b, err := unix.Mmap(int(f.Fd()), 0, layout.HeaderSize+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(b); f.Close() })
	return b, func() *owner.Handle {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		h, err := owner.Register(b, fd, os.Getpid(), time.Now().UnixNano())
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		return h
	}
}

// requireTaken requires Acquire to take the lock for h, reporting recovered.
func requireTaken(t *testing.T, b []byte, h *owner.Handle, recovered bool) {
	t.Helper()
	rec, ok := Acquire(b, lockAt, h)
	require.True(t, ok)
	require.Equal(t, recovered, rec)
}

// lockAt is where the tests put their lock word: past the header, so the
// futex word beside it is free.
const lockAt = layout.HeaderSize

func TestAcquireRelease(t *testing.T) {
	b, register := table(t)
	h, other := register(), register()
	requireTaken(t, b, h, false)
	require.Equal(t, h.Token(), Owner(b, lockAt))
	ok, _ := TryAcquire(b, lockAt, other)
	require.False(t, ok, "held by a live handle")
	ok, _ = TryAcquire(b, lockAt, h)
	require.False(t, ok, "not reentrant, and never taken from its own holder")
	require.False(t, Release(b, lockAt, other.Token()), "released by a handle that does not hold it")
	require.True(t, Release(b, lockAt, h.Token()))
	require.Zero(t, Owner(b, lockAt))
	require.False(t, Release(b, lockAt, h.Token()), "released twice")
}

func TestMutualExclusionAcrossHandles(t *testing.T) {
	b, register := table(t)
	var wg sync.WaitGroup
	// Atomics, not a plain counter: the race detector does not see the
	// lock's ordering through the mapping, which is not Go memory.
	var inside, overlaps, lost, done atomic.Int64
	for range 4 {
		h := register()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				Acquire(b, lockAt, h)
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				done.Add(1)
				inside.Add(-1)
				if !Release(b, lockAt, h.Token()) {
					lost.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(8000), done.Load())
	require.Zero(t, overlaps.Load(), "two handles held the lock at once")
	require.Zero(t, lost.Load(), "a lock nobody could take over was lost")
}

func TestTakeOverClosedHandle(t *testing.T) {
	b, register := table(t)
	h := register()
	dead := register()
	mem.Store64(b, lockAt, dead.Token())
	require.NoError(t, dead.Close())
	requireTaken(t, b, h, true)
	require.Equal(t, h.Token(), Owner(b, lockAt))
	require.False(t, Release(b, lockAt, dead.Token()), "the dead owner's late release fails")
	require.Equal(t, h.Token(), Owner(b, lockAt), "and changes nothing")

	mem.Store64(b, lockAt, dead.Token())
	ok, recovered := TryAcquire(b, lockAt, h)
	require.True(t, ok)
	require.True(t, recovered)
}

// hangBound is how long a test waits for something the lock promises
// within a check period (milliseconds) before it calls it a hang: far
// beyond the period, so a busy machine that leaves the waiter unscheduled
// for a while does not fail the test; a waiter that never notices still
// does.
const hangBound = 30 * time.Second

// A live owner is waited for, however long, and never taken over; once its
// handle closes, the waiter takes over (within a check period; the test
// judges only that it does).
func TestWaitsForLiveOwner(t *testing.T) {
	b, register := table(t)
	h, holder := register(), register()
	requireTaken(t, b, holder, false)
	done := make(chan bool)
	go func() { recovered, _ := Acquire(b, lockAt, h); done <- recovered }()
	select {
	case <-done:
		t.Fatal("took a lock from a live handle")
	case <-time.After(3 * CheckEvery):
	}
	require.NoError(t, holder.Close())
	select {
	case recovered := <-done:
		require.True(t, recovered)
	case <-time.After(hangBound):
		t.Fatalf("no takeover within %v of the owner's death", hangBound)
	}
}

// A parked waiter is woken by the release, not by its timeout: with the
// check period set far beyond the test's bound, a waiter that slept through
// the release would fail it.
func TestParkedWaiterIsWoken(t *testing.T) {
	defer func(a, e time.Duration) { CheckAfter, CheckEvery = a, e }(CheckAfter, CheckEvery)
	CheckAfter, CheckEvery = time.Minute, time.Minute
	b, register := table(t)
	h, holder := register(), register()
	requireTaken(t, b, holder, false)
	done := make(chan struct{})
	go func() { Acquire(b, lockAt, h); close(done) }()
	// Wait until the waiter has announced itself asleep.
	for mem.Load32(b, lockAt+FutexOff)&waitersBit == 0 {
		time.Sleep(time.Millisecond)
	}
	require.True(t, Release(b, lockAt, holder.Token()))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the parked waiter was not woken by the release")
	}
	require.Zero(t, mem.Load32(b, lockAt+FutexOff)&waitersBit, "the release cleared the waiters bit")
}

// A waiter whose handle is abandoned (its arena closing) gives up without
// the lock, even when parked (it notices within a check period; the test
// judges only that it does).
func TestAbandonedWaiterGivesUp(t *testing.T) {
	b, register := table(t)
	h, holder := register(), register()
	requireTaken(t, b, holder, false)
	done := make(chan bool)
	go func() { _, ok := Acquire(b, lockAt, h); done <- ok }()
	// Wait until the waiter has announced itself asleep: a fixed sleep
	// could end before a busy machine ran it that far.
	for mem.Load32(b, lockAt+FutexOff)&waitersBit == 0 {
		time.Sleep(time.Millisecond)
	}
	h.Abandon()
	select {
	case ok := <-done:
		require.False(t, ok, "took the lock after its handle was abandoned")
	case <-time.After(hangBound):
		t.Fatalf("an abandoned waiter kept waiting %v", hangBound)
	}
	require.Equal(t, holder.Token(), Owner(b, lockAt))
}

// BenchmarkFairness pits eight goroutines of one handle against one
// goroutine of another, all taking one lock for 5 µs at a time, for two
// seconds. It reports the lone goroutine's worst and mean Acquire and its
// share of the acquisitions.
func BenchmarkFairness(b *testing.B) {
	lock, register := table(b)
	p, q := register(), register()
	for b.Loop() {
		mem.Store64(lock, lockAt, 0)
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
					Acquire(lock, lockAt, p)
					hold()
					Release(lock, lockAt, p.Token())
					pOps.Add(1)
				}
			}()
		}
		var qOps int
		var qMax, qSum time.Duration
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); qOps++ {
			s := time.Now()
			Acquire(lock, lockAt, q)
			d := time.Since(s)
			qMax, qSum = max(qMax, d), qSum+d
			hold()
			Release(lock, lockAt, q.Token())
		}
		stop.Store(true)
		wg.Wait()
		b.ReportMetric(float64(qMax.Microseconds())/1000, "q-worst-ms")
		b.ReportMetric(float64(qSum.Microseconds())/float64(qOps), "q-mean-µs")
		b.ReportMetric(float64(qOps)/float64(int64(qOps)+pOps.Load()), "q-share")
	}
}
