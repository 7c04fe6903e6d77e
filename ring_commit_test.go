package shmarena

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/require"
)

// Tests of the window between a slot's end word and the commit of the
// next sequence: a record there is complete but not published.

var commitShape = []RegionOption{WithSlots(16), WithSlotSize(64)}

// endRole publishes, and in the hook stores the slot's end word itself:
// the state Publish is in right after `mem.Put64(b, o+rl.SEnd, s)` and
// before the commit of the next sequence. Then it stops there.
func endRole(path, _ string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	r, err := a.Ring("rv", commitShape...)
	if err != nil {
		return err
	}
	publishHook = func(seq uint64) {
		mem.Put64(r.b, r.slotOff(seq)+rl.SEnd, seq)
		fmt.Println("HOOK", seq)
		for {
			time.Sleep(time.Hour)
		}
	}
	_, err = r.Publish("t", []byte("never committed"))
	return fmt.Errorf("publish returned: %v", err)
}

// stopAfterEnd starts the child and returns once it sits between its end
// store and its commit; kill says whether to SIGKILL it there.
func stopAfterEnd(t *testing.T, test, path string, kill bool) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRole+"=end", envPath+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan())
	require.True(t, strings.HasPrefix(sc.Text(), "HOOK"), sc.Text())
	if kill {
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}
	return cmd
}

// A producer killed after its end store but before its commit: no member
// claims that record (the group's position never passes the ring's head,
// which would make every later Open fail validation), and the file opens.
func TestRingUncommittedRecordIsNotClaimed(t *testing.T) {
	asChild(map[string]func(string, string) error{"end": endRole})
	path := t.TempDir() + "/arena"
	a, err := Open(path, WithSize(1<<20))
	require.NoError(t, err)
	r, err := a.Ring("rv", commitShape...)
	require.NoError(t, err)
	g, err := r.Group("g")
	require.NoError(t, err)
	_, err = r.Publish("t", []byte("one"))
	require.NoError(t, err)
	require.Len(t, g.Claim(1), 1)

	stopAfterEnd(t, "TestRingUncommittedRecordIsNotClaimed", path, true)
	recs := g.Claim(1)
	require.Empty(t, recs, "claimed a record that was never committed")
	require.LessOrEqual(t, g.Position(), r.Head()+1)
	require.NoError(t, a.Close())

	_, err = Open(path)
	t.Logf("re-open: %v", err)
	require.NoError(t, err, "file no longer opens")
}

// The record of a producer killed before its commit is abandoned for every
// reader alike: never delivered to a group while cursors count it abandoned.
func TestRingUncommittedRecordIsAbandonedForAll(t *testing.T) {
	asChild(map[string]func(string, string) error{"end": endRole})
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("rv", commitShape...)
	require.NoError(t, err)
	g, err := r.Group("g")
	require.NoError(t, err)
	c := r.Cursor()
	stopAfterEnd(t, "TestRingUncommittedRecordIsAbandonedForAll", path, true)
	recs := g.Claim(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for end := time.Now().Add(3 * time.Second); c.Stats().Position == 1 && time.Now().Before(end); {
		c.Read(0)
		if c.Stats().Position == 1 {
			_ = c.Wait(ctx)
		}
	}
	t.Logf("group got %v, ring Abandoned %d Published %d, cursor %+v",
		recs, r.Stats().Abandoned, r.Stats().Published, c.Stats())
	require.False(t, len(recs) == 1 && r.Stats().Abandoned == 1, "a delivered record is counted abandoned")
}

// A producer stopped (alive) between its end store and its commit: Wait
// must sleep, not return at once while Read and Claim find nothing (a Wait
// loop would spin).
func TestRingWaitSleepsOnUncommittedRecord(t *testing.T) {
	asChild(map[string]func(string, string) error{"end": endRole})
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("rv", commitShape...)
	require.NoError(t, err)
	g, err := r.Group("g")
	require.NoError(t, err)
	c := r.Cursor()
	stopAfterEnd(t, "TestRingWaitSleepsOnUncommittedRecord", path, false)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	cw, gw, got := 0, 0, 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end) && c.Wait(ctx) == nil; {
		got += len(c.Read(0))
		cw++
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end) && g.Wait(ctx2) == nil; {
		got += len(g.Claim(0))
		gw++
	}
	t.Logf("in 300 ms each: Cursor.Wait returned nil %d times, Group.Wait %d times; records read %d", cw, gw, got)
	require.Less(t, cw+gw, 100, "busy loop")
}

// Cursor.Read of many small records carves payloads from 8 KiB chunks,
// not one allocation per record.
func TestRingReadAllocatesByChunk(t *testing.T) {
	a, _ := openTestArena(t, 8<<20)
	r, err := a.Ring("big", WithSlots(4096), WithSlotSize(256))
	require.NoError(t, err)
	c := r.Cursor()
	p := make([]byte, 100)
	for i := 0; i < 4000; i++ {
		_, err := r.Publish("", p)
		require.NoError(t, err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	recs := c.Read(0)
	runtime.ReadMemStats(&m1)
	require.Len(t, recs, 4000)
	t.Logf("Read(0) of 4000 x 100 B: %d allocations (8 KiB chunks would need ~%d)", m1.Mallocs-m0.Mallocs, 4000*100/8192+1)
	require.Less(t, m1.Mallocs-m0.Mallocs, uint64(200))
}
