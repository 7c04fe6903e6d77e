package shmarena

import (
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMapStatsCountHitsAndMisses(t *testing.T) {
	a, _ := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
	for range 3 {
		_, ok := m.Load("k")
		require.True(t, ok)
	}
	_, ok := m.AppendLoad(nil, "absent")
	require.False(t, ok)
	m.Exists("k") // not counted: Exists asks, it does not read a value
	m.TTL("k")
	st := m.Stats()
	assert.Equal(t, uint64(3), st.Hits)
	assert.Equal(t, uint64(1), st.Misses)

	tm, err := OpenTypedMap[int](a, "t", WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, tm.Store("n", 7))
	_, ok, err = tm.Load("n")
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, _ = tm.Load("none")
	require.False(t, ok)
	ts := tm.Bytes().Stats()
	assert.Equal(t, uint64(1), ts.Hits, "each map counts its own")
	assert.Equal(t, uint64(1), ts.Misses)
}

// Goroutines on every CPU count into their own shards; Stats in the same
// process adds them all.
func TestMapStatsHitsFromManyGoroutines(t *testing.T) {
	a, _ := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
	const workers, each = 8, 1000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, 0, 8)
			for i := range each {
				key := "k"
				if i%4 == 3 {
					key = "miss"
				}
				buf, _ = m.AppendLoad(buf[:0], key)
			}
		})
	}
	wg.Wait()
	st := m.Stats()
	assert.Equal(t, uint64(workers*each*3/4), st.Hits)
	assert.Equal(t, uint64(workers*each/4), st.Misses)
	// A second handle of the same map, in the same arena handle, shares
	// the counts.
	m2, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	m2.Load("k")
	assert.Equal(t, st.Hits+1, m.Stats().Hits)
}

func init() {
	// hits-reader opens the arena, reads SHMARENA_HITS hits and
	// SHMARENA_MISSES misses of map "m", then closes it, or, with
	// SHMARENA_HANG set, prints "ready" and waits to be killed.
	childRoles["hits-reader"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := a.Map("m", WithSlots(64))
		if err != nil {
			return err
		}
		for range envInt("SHMARENA_HITS") {
			m.Load("k")
		}
		for range envInt("SHMARENA_MISSES") {
			m.Load("absent")
		}
		if os.Getenv("SHMARENA_HANG") == "" {
			return a.Close()
		}
		m.Stats() // adds this process's counts to the file
		os.Stdout.WriteString("ready\n")
		untilKilled()
		return nil
	}
}

// The totals include processes that closed and processes that were
// killed, and never go back, also when a new handle takes a dead one's
// process-table entry.
func TestMapStatsHitsOfClosedAndKilledProcesses(t *testing.T) {
	a, path := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))

	env := []string{"SHMARENA_PATH=" + path, "SHMARENA_HITS=1000", "SHMARENA_MISSES=10"}
	runChildren(t, "hits-reader", 2, env...)
	st := m.Stats()
	assert.Equal(t, uint64(2000), st.Hits, "closed processes' counts stay in")
	assert.Equal(t, uint64(20), st.Misses)

	c := child(t, "hits-reader", append(env, "SHMARENA_HANG=1")...)
	require.Equal(t, "ready", nextReport(t, startReporting(t, c)))
	before := m.Stats()
	assert.Equal(t, uint64(3000), before.Hits)
	require.NoError(t, c.Process.Signal(syscall.SIGKILL))
	_ = c.Wait()

	// A new handle may take the dead process's entry: it adds to it.
	b, err := Open(path)
	require.NoError(t, err)
	defer b.Close()
	mb, err := b.Map("m", WithSlots(64))
	require.NoError(t, err)
	mb.Load("k")
	after := mb.Stats()
	assert.Equal(t, before.Hits+1, after.Hits, "a killed process's added counts stay in")
	assert.Equal(t, before.Misses, after.Misses)
	assert.Equal(t, after.Hits, m.Stats().Hits, "every process sees the same sums")
}

func TestMapStatsReadOnlyHandleCountsNothing(t *testing.T) {
	a, path := tempArena(t, MinSize+1<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
	r, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer r.Close()
	rm, err := r.Map("m", WithSlots(64))
	require.NoError(t, err)
	_, ok := rm.Load("k")
	require.True(t, ok)
	m.Load("k")
	require.Equal(t, uint64(1), m.Stats().Hits) // which adds the writer's counts to the file
	assert.Equal(t, uint64(1), rm.Stats().Hits, "the read-only handle sees the writer's count, not its own")
}
