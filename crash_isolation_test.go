package shmarena

// Recovering one segment after its writer died waits for no other
// segment: a live holder elsewhere stalls neither the reader that meets
// the dead writer's slot nor writers of other segments.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A lock-free Load that meets a slot left odd by a dead writer repairs the
// stripe itself (awaitWriter -> repairDead -> afterTakeover), and the repair
// recounts, which took every stripe with Acquire: so the Load waited for
// every live holder of any other stripe, however long it held it (here a
// live process parked inside an insert, as a SIGSTOPped one would be). The
// The guarantee is that reads take no lock and give up after a bounded
// wait (docs/guarantees.md): so the recount never waits; it is left due
// instead.
func TestLoadOfDeadWritersSlotWaitsForNoOtherStripe(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := crashMap(a)
	require.NoError(t, err)
	victim := keyInStripe(m, "victim", 1)
	held := keyInStripe(m, "held", 2)
	killAt(t, path, "store", "insert", victim, "v") // dead holder of stripe 1, slot odd

	holder := child(t, "crash-op", "SHMARENA_PATH="+path, "SHMARENA_OP=store", "SHMARENA_POINT=insert",
		"SHMARENA_KEY="+held, "SHMARENA_VAL=w")
	r := startReporting(t, holder)
	stop := func() { _ = holder.Process.Kill(); _ = holder.Wait() }
	t.Cleanup(stop)
	require.Equal(t, "AT insert", nextReport(t, r)) // alive, holding stripe 2

	done := make(chan bool, 1)
	start := time.Now()
	go func() { _, ok := m.Load(victim); done <- ok }()
	select {
	case ok := <-done:
		require.False(t, ok, "the dead writer's insert reads absent")
		t.Logf("Load returned after %v", time.Since(start))
	case <-time.After(hangBound):
		stop()
		<-done
		t.Fatalf("Load(%q) blocked %v: it repairs stripe 1 and recounts, waiting for stripe 2, held by a live process", victim, hangBound)
	}
}

// Recovering a dead holder's stripe recounted, taking every stripe in
// order and holding those it had while it waited for the next (so the
// recount never waits). With a live
// process holding stripe 3 for long (stopped, or in a slow Update), the
// recoverer of stripe 1 sits on stripes 0-2 meanwhile: writers of keys that
// neither the dead nor the live process touched stall too, for as long as
// the live one holds its stripe. docs/guarantees.md: the lock "goes to whoever takes it
// first, which is what keeps a stopped process from stalling anyone".
func TestRecountHoldsNoStripeWhileALiveHolderHasOne(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := crashMap(a)
	require.NoError(t, err)
	victim := keyInStripe(m, "victim", 1)
	held := keyInStripe(m, "held", 3)
	bystander := keyInStripe(m, "bystander", 0)
	killAt(t, path, "store", "insert", victim, "v") // dead holder of stripe 1

	holder := child(t, "crash-op", "SHMARENA_PATH="+path, "SHMARENA_OP=store", "SHMARENA_POINT=insert",
		"SHMARENA_KEY="+held, "SHMARENA_VAL=w")
	r := startReporting(t, holder)
	stop := func() { _ = holder.Process.Kill(); _ = holder.Wait() }
	t.Cleanup(stop)
	require.Equal(t, "AT insert", nextReport(t, r)) // alive, holding stripe 3

	recovered := make(chan error, 1)
	go func() { recovered <- m.Store(victim, []byte("x")) }() // takes stripe 1 over, recounts
	time.Sleep(200 * time.Millisecond)
	stored := make(chan error, 1)
	go func() { stored <- m.Store(bystander, []byte("y")) }()
	select {
	case err := <-stored:
		require.NoError(t, err)
	case <-time.After(hangBound):
		stop()
		<-stored
		<-recovered
		t.Fatalf("Store(%q) on stripe 0, which no one else uses, blocked %v behind a recount waiting for a live holder of stripe 3", bystander, hangBound)
	}
	stop()
	require.NoError(t, <-recovered)
}
