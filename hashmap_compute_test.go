package shmarena

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadOrComputeRunsOnceForManyGoroutines(t *testing.T) {
	a, _ := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	var runs atomic.Int32
	release := make(chan struct{})
	fn := func(context.Context) ([]byte, error) {
		runs.Add(1)
		<-release
		return []byte("computed"), nil
	}
	const callers = 32
	var wg sync.WaitGroup
	var ran atomic.Int32
	for range callers {
		wg.Go(func() {
			v, loaded, err := m.LoadOrCompute(t.Context(), "k", fn)
			assert.NoError(t, err)
			assert.Equal(t, "computed", string(v))
			if !loaded {
				ran.Add(1)
			}
		})
	}
	time.Sleep(20 * time.Millisecond) // let callers pile up behind the first
	close(release)
	wg.Wait()
	assert.Equal(t, int32(1), runs.Load())
	assert.Equal(t, int32(1), ran.Load(), "only the caller that ran fn reports loaded false")
	st := m.Stats()
	assert.Equal(t, uint64(1), st.Loads)
	assert.Equal(t, uint64(callers), st.Hits+st.Misses)

	v, loaded, err := m.LoadOrCompute(t.Context(), "k", fn)
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.Equal(t, "computed", string(v))
	assert.Equal(t, int32(1), runs.Load(), "a present key is not computed")
}

func TestLoadOrComputeErrorsAreNotCached(t *testing.T) {
	a, _ := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	boom := errors.New("backend down")
	_, _, err = m.LoadOrCompute(t.Context(), "k", func(context.Context) ([]byte, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	assert.False(t, m.Exists("k"))
	v, loaded, err := m.LoadOrCompute(t.Context(), "k", func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	require.NoError(t, err)
	assert.False(t, loaded)
	assert.Equal(t, "ok", string(v))
	st := m.Stats()
	assert.Equal(t, uint64(1), st.LoadFailures)
	assert.Equal(t, uint64(1), st.Loads)

	// A value the map cannot hold is returned with the map's error.
	big := make([]byte, 1000)
	v, _, err = m.LoadOrCompute(t.Context(), "big", func(context.Context) ([]byte, error) { return big, nil })
	require.ErrorIs(t, err, ErrTooLarge)
	assert.Len(t, v, 1000)
	assert.Equal(t, uint64(2), m.Stats().LoadFailures)
}

// A waiter gives up when its context ends; the computation goes on.
func TestLoadOrComputeWaiterGivesUpWithContext(t *testing.T) {
	a, _ := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, _, err := m.LoadOrCompute(t.Context(), "k", func(context.Context) ([]byte, error) {
			close(inside)
			<-release
			return []byte("v"), nil
		})
		done <- err
	}()
	<-inside
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	_, _, err = m.LoadOrCompute(ctx, "k", func(context.Context) ([]byte, error) {
		t.Error("a second computation of a key being computed")
		return nil, nil
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	require.NoError(t, <-done)
}

// A panic in fn frees the computation for the next caller.
func TestLoadOrComputePanicFreesTheKey(t *testing.T) {
	a, _ := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	require.Panics(t, func() {
		_, _, _ = m.LoadOrCompute(t.Context(), "k", func(context.Context) ([]byte, error) { panic("bug") })
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	v, loaded, err := m.LoadOrCompute(ctx, "k", func(context.Context) ([]byte, error) { return []byte("v"), nil })
	require.NoError(t, err)
	assert.False(t, loaded)
	assert.Equal(t, "v", string(v))
}

func TestTypedLoadOrCompute(t *testing.T) {
	a, _ := tempArena(t, MinSize+1<<20)
	type user struct{ Name string }
	tm, err := OpenTypedMap[user](a, "users", WithSlots(64))
	require.NoError(t, err)
	u, loaded, err := tm.LoadOrCompute(t.Context(), "ada", func(context.Context) (user, error) { return user{"Ada"}, nil })
	require.NoError(t, err)
	assert.False(t, loaded)
	assert.Equal(t, "Ada", u.Name)
	u, loaded, err = tm.LoadOrCompute(t.Context(), "ada", func(context.Context) (user, error) { return user{"other"}, nil })
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.Equal(t, "Ada", u.Name)

	fm, err := OpenTypedMap[func()](a, "funcs", WithSlots(64))
	require.NoError(t, err)
	_, _, err = fm.LoadOrCompute(t.Context(), "f", func(context.Context) (func(), error) { return func() {}, nil })
	require.ErrorIs(t, err, ErrEncode)
	assert.False(t, fm.Exists("f"))
}

// The stampede: processes of goroutines ask for lapsing keys; each
// computation checks, in the arena itself, that it is the only one of its
// key running and that its key is absent, so fn runs once per key per
// lapse.
const stampedeKeys = 1000

func stampedeDuration() time.Duration {
	switch {
	case testing.Short():
		return time.Second
	case raceSlowdown > 1:
		return 3 * time.Second
	}
	return 10 * time.Second
}

func openStampede() (*Arena, *Map, *Map, error) {
	a, err := Open(os.Getenv("SHMARENA_PATH"))
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := a.Map("cache", WithSlots(4096), WithSlotSize(64))
	if err != nil {
		return nil, nil, nil, err
	}
	audit, err := a.Map("audit", WithSlots(4096), WithSlotSize(64))
	return a, m, audit, err
}

func init() {
	childRoles["stampede"] = func() error {
		a, m, audit, err := openStampede()
		if err != nil {
			return err
		}
		defer a.Close()
		until := time.Now().Add(time.Duration(envInt("SHMARENA_MS")) * time.Millisecond)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Go(func() {
				for i := g; time.Now().Before(until); i += 7 {
					key := "k" + strconv.Itoa(i%stampedeKeys)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					v, _, err := m.LoadOrCompute(ctx, key, func(context.Context) ([]byte, error) {
						if n, _ := audit.Add("running/"+key, 1); n != 1 {
							return nil, fmt.Errorf("%d computations of %s at once", n, key)
						}
						defer audit.Add("running/"+key, -1)
						if m.Exists(key) {
							return nil, fmt.Errorf("computing %s, which is present", key)
						}
						audit.Add("runs", 1)
						time.Sleep(time.Millisecond) // the backend
						return []byte(key), nil
					}, WithTTL(time.Duration(20+i%30)*time.Millisecond))
					cancel()
					if err == nil && string(v) != key {
						err = fmt.Errorf("%s read %q", key, v)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
}

func TestLoadOrComputeStampedeAcrossProcesses(t *testing.T) {
	a, path := tempArena(t, MinSize+8<<20)
	_, _, _, err := func() (*Arena, *Map, *Map, error) {
		t.Setenv("SHMARENA_PATH", path)
		return openStampede()
	}()
	require.NoError(t, err)
	d := stampedeDuration()
	start := time.Now()
	runChildren(t, "stampede", 4, "SHMARENA_PATH="+path, "SHMARENA_MS="+strconv.Itoa(int(d.Milliseconds())))
	elapsed := time.Since(start)
	audit, err := a.Map("audit", WithSlots(4096), WithSlotSize(64))
	require.NoError(t, err)
	cache, err := a.Map("cache", WithSlots(4096), WithSlotSize(64))
	require.NoError(t, err)
	runs, _ := audit.Add("runs", 0)
	// Each key lapses at most once per 20 ms, so it cannot be computed
	// more often than that.
	maxRuns := stampedeKeys * (int64(elapsed/(20*time.Millisecond)) + 1)
	st := cache.Stats()
	t.Logf("%d computations in %v; %d hits, %d misses, %d loads", runs, elapsed.Round(time.Millisecond), st.Hits, st.Misses, st.Loads)
	assert.Positive(t, runs)
	assert.LessOrEqual(t, runs, maxRuns)
	assert.Equal(t, uint64(runs), st.Loads, "every computation counted once")
	assert.LessOrEqual(t, st.Loads, st.Misses, "a computation follows a miss")
}

func init() {
	// compute-and-hang claims key "k" and hangs inside fn, to be killed.
	childRoles["compute-and-hang"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := a.Map("m", WithSlots(64))
		if err != nil {
			return err
		}
		_, _, err = m.LoadOrCompute(context.Background(), "k", func(context.Context) ([]byte, error) {
			os.Stdout.WriteString("inside\n")
			untilKilled()
			return nil, nil
		})
		return err
	}
}

// A process killed inside fn costs one more computation, not a hang: a
// waiter takes the work over.
func TestLoadOrComputeKilledComputerHandsOver(t *testing.T) {
	a, path := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	c := child(t, "compute-and-hang", "SHMARENA_PATH="+path)
	require.Equal(t, "inside", nextReport(t, startReporting(t, c)))

	var runs atomic.Int32
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range 8 {
		wg.Go(func() {
			v, _, err := m.LoadOrCompute(ctx, "k", func(context.Context) ([]byte, error) {
				runs.Add(1)
				return []byte("v"), nil
			})
			assert.NoError(t, err)
			assert.Equal(t, "v", string(v))
		})
	}
	time.Sleep(50 * time.Millisecond) // the waiters wait for the child
	assert.Equal(t, int32(0), runs.Load(), "nobody computes while the first computer lives")
	require.NoError(t, c.Process.Signal(syscall.SIGKILL))
	_ = c.Wait()
	wg.Wait()
	assert.Equal(t, int32(1), runs.Load(), "one more computation after the kill")
}
