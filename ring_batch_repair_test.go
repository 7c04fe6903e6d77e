package shmarena

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A batch killed before its commit has already written slots past its
// first: those slots held records the ring still holds once the one hole
// is repaired, and they carry sequences the next publishers are handed.
// What the repair leaves must agree with the head: Check finds nothing, a
// reader from the oldest record finds no record lapped that the head
// says the ring still holds, and a producer killed later, before its
// first write, leaves no hole (repair must not take a slot written by the
// dead batch for that producer's record).

// strayBatchRole opens the ring and parks for the kill: "batch" inside a
// batch of 3 with its third record begun, "lock" holding the publish lock
// before writing anything (a producer killed between taking the lock and
// its first write).
func strayBatchRole(path, arg string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	r, err := a.Ring("stray", WithSlots(4), WithSlotSize(64))
	if err != nil {
		return err
	}
	switch arg {
	case "batch":
		publishHook = func(seq uint64) {
			if seq == 7 {
				parkForKill("batch 7")
			}
		}
		_, err = r.PublishBatch("doomed", batchOf(3, "never committed"))
		return fmt.Errorf("publish returned: %v", err)
	case "lock":
		if _, ok := rlock.Acquire(r.b, r.off+rl.OffLock, r.a.own); !ok {
			return fmt.Errorf("lock not taken")
		}
		parkForKill("lock")
	}
	return fmt.Errorf("unknown arg %q", arg)
}

// killStrayAt runs strayBatchRole(arg) in a child and SIGKILLs it once it
// reports the point it parks at.
func killStrayAt(t *testing.T, test, path, arg, point string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRole+"=stray-batch", envPath+"="+path, envArg+"="+arg)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "child ended before reaching %s", point)
	require.Equal(t, "AT "+point, sc.Text())
	require.NoError(t, cmd.Process.Kill())
	err = cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child status %v (%v)", ws, err)
}

func TestKilledBatchLeavesNoStraySlot(t *testing.T) {
	asChild(map[string]func(string, string) error{"stray-batch": strayBatchRole})
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("stray", WithSlots(4), WithSlotSize(64))
	require.NoError(t, err)
	for i := 1; i <= 4; i++ {
		_, err := r.Publish("ok", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	// The batch gets 5, 6 and 7 (over 1, 2 and 3) and dies with 5 and 6
	// written and 7 begun.
	killStrayAt(t, "TestKilledBatchLeavesNoStraySlot", path, "batch", "batch 7")
	require.Equal(t, uint64(5), r.Head(), "nothing of the batch committed")

	seq, err := r.Publish("ok", []byte("after")) // takes the lock over and repairs
	require.NoError(t, err)
	ab := r.Stats().Abandoned
	require.Positive(t, ab)

	fs, _ := findings(t, a)
	assert.Empty(t, fs, "Check after a killed batch was repaired")

	head := r.Head()
	c := r.Cursor(FromStart())
	require.Equal(t, head-4, c.Stats().Position)
	for rec, ok := c.Next(); ok; rec, ok = c.Next() {
		if rec.Seq == seq {
			assert.Equal(t, "after", string(rec.Payload))
		}
	}
	st := c.Stats()
	assert.Zero(t, st.Lapped, "records the head says the ring holds were lost: %+v", st)
	assert.Equal(t, uint64(4), st.Delivered+st.Abandoned, "%+v", st)

	// A producer killed holding the lock before its first write began no
	// record: the repair that follows makes no hole.
	killStrayAt(t, "TestKilledBatchLeavesNoStraySlot", path, "lock", "lock")
	seq2, err := r.Publish("ok", []byte("later"))
	require.NoError(t, err)
	assert.Equal(t, head, seq2, "the next sequence, no hole before it")
	assert.Equal(t, ab, r.Stats().Abandoned, "no hole for a producer that wrote nothing")
	fs, _ = findings(t, a)
	assert.Empty(t, fs)
}
