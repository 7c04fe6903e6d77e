package shmarena

// DropGroup: what a group made in a dropped group's entry inherits.

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mine is kept per arena handle and group entry, not per group: a group
// made in the entry a dropped group left (any name) starts with the
// dropped group's Mine, though this process claimed nothing from it.
func TestMineStartsAtZeroAfterDropGroup(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	old, err := r.Group("old")
	require.NoError(t, err)
	publishN(t, r, "t", 3)
	require.Len(t, old.Claim(0), 3)
	require.NoError(t, r.DropGroup("old"))
	fresh, err := r.Group("fresh")
	require.NoError(t, err)
	assert.Zero(t, fresh.Stats().Mine, "this process claimed nothing from the new group")
}

// stopParked starts cmd, waits until it is parked at crash point point
// (parkAt) and SIGSTOPs it there. The returned func SIGKILLs and reaps it
// (also run at cleanup).
func stopParked(t *testing.T, cmd *exec.Cmd, point string) (kill func()) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	kill = func() {
		if !killed {
			killed = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
	t.Cleanup(kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "child ended before crash point %s", point)
	require.Equal(t, "AT "+point+"\n", line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	return kill
}

// within runs f in a goroutine and requires it to return within d (a
// bound on a wait that must not happen at all, not a speed test).
func within(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		require.NoError(t, err, what)
	case <-time.After(d):
		t.Fatalf("%s still waits after %v", what, d)
	}
}

// A member of an acking group stopped (SIGSTOP) in the middle of a Claim
// holds the group's lock. DropGroup waited for that lock while holding
// the ring's group-table lock, so it hung, and so did every r.Group join
// on the ring after it. Now the drop takes effect at once (producers go
// on, the name can be made anew), and the entry is freed for reuse once
// the member is gone.
func TestDropGroupDoesNotWaitForStoppedMember(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r, g, err := ackCrashRing(a)
	require.NoError(t, err)
	publishN(t, r, "jobs", 16) // full: the group holds producers back
	_, err = r.Publish("jobs", nil)
	require.ErrorIs(t, err, ErrRingFull)
	kill := stopParked(t, child(t, "ack-crash", "SHMARENA_PATH="+path, "SHMARENA_POINT=claim-entered"), "claim-entered")

	within(t, 10*time.Second*raceSlowdown, "DropGroup", func() error { return r.DropGroup("w") })
	within(t, 10*time.Second*raceSlowdown, "a join after the drop", func() error {
		_, err := r.Group("other", WithTopic("jobs"), WithAck(time.Hour))
		return err
	})
	for i := 0; i < 16; i++ {
		_, err := r.Publish("jobs", nil)
		require.NoError(t, err, "publish %d: the dropped group holds nothing back", i)
	}
	assert.Nil(t, g.Claim(0), "the dropped group's handle claims nothing")
	require.ErrorIs(t, r.DropGroup("w"), ErrNoGroup)
	assert.Equal(t, uint64(rl.GroupCreating), mem.Load64(r.b, g.goff+rl.GState), "not reused while the member holds it")
	w, err := r.Group("w", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(3), WithDeadLetter("dead"))
	require.NoError(t, err, "the name is made anew")
	assert.NotEqual(t, g.goff, w.goff)
	assert.Equal(t, r.Head(), w.Position(), "a new group, at the head")

	kill()
	_, err = r.Group("third")
	require.NoError(t, err)
	assert.Equal(t, uint64(rl.GroupReady), mem.Load64(r.b, g.goff+rl.GState), "the entry was freed, and taken by the next group")
	var names []string
	for _, st := range r.Groups() {
		names = append(names, st.Name)
	}
	assert.ElementsMatch(t, []string{"other", "w", "third"}, names)
}
