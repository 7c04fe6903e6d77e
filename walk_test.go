package shmarena

// Walks (Keys, All) under concurrent writes: every key present for the
// whole walk is yielded exactly once.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Keys and All promise (docs/guarantees.md "Deletes leave no tombstones", All's doc)
// every key present for the whole walk exactly once, even while deletes
// move entries in the walked segment.
func TestKeysYieldStableKeysOnceUnderMoves(t *testing.T) {
	m, stable, churn := denseSegment(t)
	stop := churnUntilStopped(1, func(_, i int) { deleteAndRestore(m, churn, i) })
	defer stop()
	bad := ""
	deadline := time.Now().Add(2 * time.Second)
	walks := 0
	for ; time.Now().Before(deadline) && bad == ""; walks++ {
		seen := map[string]int{}
		if walks%2 == 0 {
			for k := range m.Keys() {
				seen[k]++
			}
		} else {
			for k := range m.All() {
				seen[k]++
			}
		}
		for _, k := range stable {
			if seen[k] != 1 && bad == "" {
				bad = fmt.Sprintf("walk %d: stable key %s yielded %d times", walks, k, seen[k])
			}
		}
	}
	stop()
	t.Logf("%d walks, %d moves", walks, m.Stats().Moved)
	require.Empty(t, bad)
}

// A key deleted and stored again while Keys walks its segment is yielded
// twice. Two keys X and Y share the segment's last slot as home; the
// segment wraps, so whichever comes second sits in slot 0. Deleting both
// (slot 0's first) and storing them in the other order swaps them
// between slot 0 and the last slot, and each delete is the last entry of
// its run, so nothing moves and the move version the walk validates
// against never changes. A walk that reads slot 0 before a swap and the
// last slot after it yields the same key twice. sync.Map.Range, whose
// promise All's doc cites, never visits a key more than once.
func TestKeysNeverYieldAKeyTwice(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64))
	sp := m.span(0)
	var xy []string
	for i := 0; len(xy) < 2; i++ {
		k := "w" + strconv.Itoa(i)
		if m.home(m.hashKey(k)) == sp.hi-1 {
			xy = append(xy, k)
		}
	}
	x, y := xy[0], xy[1]
	require.NoError(t, m.Store(x, []byte(x)))
	require.NoError(t, m.Store(y, []byte(y)))
	mv := mem.Load64(m.mem, m.lockOff(0)+stMoveVer)
	stop := churnUntilStopped(1, func(_, i int) {
		first, second := x, y
		if i%2 == 1 {
			first, second = y, x
		}
		// second sits in slot 0, first in the last slot.
		m.Delete(second)
		m.Delete(first)
		_ = m.Store(second, []byte(second))
		_ = m.Store(first, []byte(first))
	})
	defer stop()
	bad := ""
	deadline := time.Now().Add(time.Second)
	walks := 0
	for ; time.Now().Before(deadline) && bad == ""; walks++ {
		seen := map[string]int{}
		for k := range m.Keys() {
			if seen[k]++; seen[k] > 1 {
				bad = fmt.Sprintf("walk %d: %s yielded twice", walks, k)
			}
		}
	}
	stop()
	require.Equal(t, mv, mem.Load64(m.mem, m.lockOff(0)+stMoveVer), "the swaps moved entries")
	require.Empty(t, bad)
}

// Walks promise sync.Map.Range's rule: every key present for the whole
// walk is yielded exactly once. These tests hold keys present throughout
// (overwritten, never deleted) while writers work beside the walk.

func stableKey(i int) string { return "stable-" + strconv.Itoa(i) }

func stableValue(k string, gen int) []byte { return []byte(k + "#" + strconv.Itoa(gen%3)) }

// requireEachOnce fails unless got holds every key of want exactly once.
func requireEachOnce(t testing.TB, got []string, want []string, what string) {
	t.Helper()
	count := map[string]int{}
	for _, k := range got {
		count[k]++
	}
	for _, k := range want {
		require.Equal(t, 1, count[k], "%s: key %s, present for the whole walk, yielded %d times", what, k, count[k])
	}
}

// A writer stopped between beginning and ending the slot of a present
// key (a preempted writer, here held by a test hook) does not make a walk
// skip that key: the walk waits for it, as Load's writers wait for the
// lock.
func TestWalkWaitsForAWriterInsideItsWrite(t *testing.T) {
	m := testMap(t, WithSlots(4096), WithSlotSize(64))
	var want []string
	for i := range 64 {
		want = append(want, stableKey(i))
		require.NoError(t, m.Store(stableKey(i), stableValue(stableKey(i), 0)))
	}
	for _, walkAll := range []bool{false, true} {
		var armed atomic.Bool
		armed.Store(true)
		held := make(chan struct{})
		crashHook = func(p string) {
			if p == "overwrite" && armed.CompareAndSwap(true, false) {
				close(held)
				time.Sleep(50 * time.Millisecond) // the writer stays inside its write
			}
		}
		done := make(chan error)
		go func() { done <- m.Store(stableKey(7), stableValue(stableKey(7), 1)) }()
		<-held
		var got []string
		if walkAll {
			for k, v := range m.All() {
				got = append(got, k)
				if k == stableKey(7) {
					assert.Contains(t, [][]byte{stableValue(k, 0), stableValue(k, 1)}, v)
				} else {
					assert.Equal(t, stableValue(k, 0), v)
				}
			}
		} else {
			for k := range m.Keys() {
				got = append(got, k)
			}
		}
		require.NoError(t, <-done)
		crashHook = nil
		requireEachOnce(t, got, want, fmt.Sprintf("walk (All %v) beside a writer held in its write", walkAll))
	}
}

// Deletes move entries back over their holes while walks run; goroutines
// also overwrite the present keys. Every walk yields each present key
// once, on a one-segment map and on one of several segments.
func TestWalkYieldsPresentKeysOnceWhileEntriesMove(t *testing.T) {
	for _, stripes := range []int{1, 4} {
		t.Run(strconv.Itoa(stripes), func(t *testing.T) {
			m := testMap(t, WithSlots(8192), WithSlotSize(64), WithStripes(stripes))
			var want []string
			for i := range 2000 {
				want = append(want, stableKey(i))
				require.NoError(t, m.Store(stableKey(i), stableValue(stableKey(i), 0)))
			}
			var stop atomic.Bool
			var wg sync.WaitGroup
			for g := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 11))
					for n := 0; !stop.Load(); n++ {
						k := "churn-" + strconv.Itoa(g) + "-" + strconv.Itoa(r.IntN(4000))
						switch r.IntN(3) {
						case 0:
							assert.NoError(t, m.Store(k, []byte("v")))
						case 1:
							m.Delete(k)
						default:
							s := stableKey(r.IntN(len(want)))
							assert.NoError(t, m.Store(s, stableValue(s, n)))
						}
					}
				}()
			}
			walks := 20 / raceSlowdown
			for w := 0; w < walks; w++ {
				var got []string
				for k := range m.Keys() {
					got = append(got, k)
				}
				requireEachOnce(t, got, want, fmt.Sprintf("walk %d", w))
			}
			stop.Store(true)
			wg.Wait()
		})
	}
}

func init() {
	childRoles["walk-churn"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := a.Map("walk", WithSlots(8192), WithSlotSize(64), WithStripes(1))
		if err != nil {
			return err
		}
		id, stable := envInt("SHMARENA_ID"), envInt("SHMARENA_N")
		r := rand.New(rand.NewPCG(uint64(id), 5))
		deadline := time.Now().Add(time.Duration(envInt("SHMARENA_MS")) * time.Millisecond)
		for n := 0; time.Now().Before(deadline); n++ {
			k := "churn-" + strconv.Itoa(id) + "-" + strconv.Itoa(r.IntN(3000))
			switch r.IntN(3) {
			case 0:
				if err := m.Store(k, []byte("v")); err != nil {
					return err
				}
			case 1:
				m.Delete(k)
			default:
				s := stableKey(r.IntN(stable))
				if err := m.Store(s, stableValue(s, n)); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// The same with the writers in other processes: every walk the parent
// runs while they churn yields each present key once.
func TestWalkYieldsPresentKeysOnceBesideWriterProcesses(t *testing.T) {
	a, path := tempArena(t, 8<<20)
	m, err := a.Map("walk", WithSlots(8192), WithSlotSize(64), WithStripes(1))
	require.NoError(t, err)
	const stable = 1500
	var want []string
	for i := range stable {
		want = append(want, stableKey(i))
		require.NoError(t, m.Store(stableKey(i), stableValue(stableKey(i), 0)))
	}
	cmds := make([]*exec.Cmd, 2)
	for i := range cmds {
		cmds[i] = child(t, "walk-churn", "SHMARENA_PATH="+path, "SHMARENA_ID="+strconv.Itoa(i),
			"SHMARENA_N="+strconv.Itoa(stable), "SHMARENA_MS=1500")
		require.NoError(t, cmds[i].Start())
	}
	exited := make(chan error, len(cmds))
	for _, c := range cmds {
		go func() { exited <- c.Wait() }()
	}
	var errs []error
	walks := 0
	for ; len(errs) < len(cmds) || walks < 10; walks++ {
		for drained := false; !drained; {
			select {
			case err := <-exited:
				errs = append(errs, err)
			default:
				drained = true
			}
		}
		var got []string
		for k, v := range m.All() {
			got = append(got, k)
			if bytes.HasPrefix([]byte(k), []byte("stable-")) {
				require.Contains(t, [][]byte{stableValue(k, 0), stableValue(k, 1), stableValue(k, 2)}, v, k)
			}
		}
		requireEachOnce(t, got, want, fmt.Sprintf("walk %d", walks))
	}
	for _, err := range errs {
		require.NoError(t, err, "a writer process")
	}
	t.Logf("%d walks beside 2 writer processes; %+v", walks, m.Stats())
}
