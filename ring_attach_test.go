package shmarena

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Attaching validates the ring while its members publish and claim: a
// group's position may move past the head validateRing read before it, and
// that is no corruption. The hook publishes and claims between validateRing's
// reads of the head and of the positions, deterministically.
func TestRingValidateWhilePositionsMove(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("busy", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	g, err := r.Group("g")
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := r.Publish("", []byte("x"))
		require.NoError(t, err)
		require.Len(t, g.Claim(0), 1)
	}
	hooked := 0
	validateRingHook = func() {
		hooked++
		_, err := r.Publish("", []byte("y"))
		require.NoError(t, err)
		require.Len(t, g.Claim(0), 1) // the position passes the head read before
	}
	t.Cleanup(func() { validateRingHook = nil })
	b, err := Open(path)
	require.NoError(t, err, "attaching to a busy ring is no corruption")
	require.NoError(t, b.Close())
	require.Equal(t, 1, hooked, "Open must validate the ring")
}

// The same without the hook: one goroutine publishes and claims as fast as
// it can while another attaches again and again; no attach may fail.
func TestRingAttachWhileBusy(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("busy", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	g, err := r.Group("g")
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if _, err := r.Publish("", []byte("x")); err != nil {
				t.Error(err)
				return
			}
			g.Claim(1)
		}
	}()
	defer wg.Wait()
	defer stop.Store(true)
	start := time.Now()
	opens := 0
	// Attach for a second (at most 1,000 times), and on until the claimer
	// has run: on a busy machine it may not have been scheduled yet.
	claimed := func() bool { return g.Stats().Delivered > 0 }
	for ; (opens < 1000 && time.Since(start) < time.Second) || (!claimed() && time.Since(start) < hangBound); opens++ {
		b, err := Open(path)
		require.NoError(t, err, "attach %d", opens)
		require.NoError(t, b.Close())
	}
	stop.Store(true)
	wg.Wait()
	require.Greater(t, g.Stats().Delivered, uint64(0), "the claimer never ran")
	t.Logf("%d attaches, %d records claimed meanwhile", opens, g.Stats().Delivered)
}
