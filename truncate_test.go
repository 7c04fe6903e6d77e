package shmarena

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Another process shrinking a live arena's file takes the pages past its
// new end away from every mapping: an access to them raises SIGBUS. A
// worker must get ErrTruncated from the operation, not die.
func TestTruncatedFileIsAnErrorNotSIGBUS(t *testing.T) {
	// Under -race about one run in 20 faulted inside an atomic operation,
	// a fatal error; the plain and 386 runs check this.
	skipFaultsUnderRace(t)
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(128), WithStripes(4))
	require.NoError(t, err)
	r, err := a.Ring("r", WithSlots(64), WithSlotSize(128))
	require.NoError(t, err)
	g, err := r.Group("g", WithAck(time.Minute))
	require.NoError(t, err)
	cur := r.Cursor(FromStart())
	require.NoError(t, m.Store("k", []byte("v")))
	_, err = r.Publish("t", []byte("p"))
	require.NoError(t, err)

	// A worker goroutine keeps writing and reading through the truncation.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	var workerErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if _, err := m.Add("ctr", 1); err != nil {
				workerErr = err
				return
			}
			m.Load("k")
		}
	}()
	time.Sleep(20 * time.Millisecond)
	out, err := exec.Command("truncate", "-s", "16384", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	wg.Wait()
	require.ErrorIs(t, workerErr, ErrTruncated, "the worker's Add")

	assert.ErrorIs(t, m.Store("k", []byte("w")), ErrTruncated)
	_, err = m.Add("ctr", 1)
	assert.ErrorIs(t, err, ErrTruncated)
	_, _, err = m.Swap("k", []byte("x"))
	assert.ErrorIs(t, err, ErrTruncated)
	_, ok := m.Load("k")
	assert.False(t, ok, "a miss")
	assert.False(t, m.Exists("k"))
	assert.False(t, m.Delete("k"))
	assert.Zero(t, m.Len())
	for range m.All() {
		t.Fatal("a walk of a truncated map yields nothing")
	}
	_, err = r.Publish("t", []byte("p"))
	assert.ErrorIs(t, err, ErrTruncated)
	assert.Empty(t, g.Claim(4))
	assert.Empty(t, cur.Read(4))
	assert.ErrorIs(t, g.Ack(Record{Seq: 1}), ErrTruncated)

	_, err = a.Check()
	assert.ErrorIs(t, err, ErrTruncated)
	in, err := a.Info()
	assert.ErrorIs(t, err, ErrTruncated)
	assert.True(t, in.Truncated)
	assert.Contains(t, err.Error(), "16384 bytes")
	st, err := a.Stats()
	assert.ErrorIs(t, err, ErrTruncated)
	assert.True(t, st.Truncated)

	// Extending the file again brings zeros, not the regions back.
	require.NoError(t, exec.Command("truncate", "-s", "4M", path).Run())
	_, err = a.Check()
	assert.ErrorIs(t, err, ErrTruncated, "a fault was met: the arena stays truncated")

	done := make(chan error, 1)
	go func() { done <- a.Close() }()
	select {
	case err := <-done:
		// Close's error is not judged here: it swaps the mapping for zero
		// pages, which the 32-bit build cannot do yet (TestClose fails
		// there too).
		t.Logf("Close: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs after a fault")
	}
}

// An arena in anonymous memory cannot be shrunk or grown at all.
func TestMemfdSealedAgainstResize(t *testing.T) {
	a, err := OpenMemfd("sealed", WithSize(1<<20))
	require.NoError(t, err)
	defer a.Close()
	fd := int(a.File().Fd())
	for _, size := range []int64{16384, 0, 2 << 20} {
		err := unix.Ftruncate(fd, size)
		require.True(t, errors.Is(err, unix.EPERM), "ftruncate to %d: %v", size, err)
	}
	require.Error(t, unix.Fallocate(fd, 0, 0, 2<<20), "growing by fallocate")
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	require.NoError(t, err)
	require.Equal(t, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL, seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL))
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
}

func init() {
	// truncated-uses opens the arena at SHMARENA_PATH, cuts its file just
	// below map m's use table (the slots stay in the file), and loads a
	// key whose slot is still there 4 x useFlushEvery times: every 64th
	// hit adds the handle's counts to the use table, past the new end.
	childRoles["truncated-uses"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := a.Map("m", WithSlots(4096), WithSlotSize(64), WithStripes(1))
		if err != nil {
			return err
		}
		cut := m.useTable &^ 4095
		key := ""
		for i := 0; key == ""; i++ {
			if k := "k" + strconv.Itoa(i); m.slotOff(m.home(m.hashKey(k)))+m.slotSize <= cut {
				key = k
			}
		}
		if err := m.Store(key, []byte("v")); err != nil {
			return err
		}
		if err := os.Truncate(os.Getenv("SHMARENA_PATH"), int64(cut)); err != nil {
			return err
		}
		for range 4 * useFlushEvery {
			m.Load(key)
		}
		if _, err := a.Check(); !errors.Is(err, ErrTruncated) {
			return fmt.Errorf("Check after the loads: %v, want ErrTruncated", err)
		}
		return nil
	}
}

// A file cut below a map's use table, with the map's slots still in it:
// a Load finds its key, and the handle's use counts, added to the table
// every useFlushEvery hits, fault. The fault must end as ErrTruncated
// (a miss), as a fault anywhere else in the mapping does. It once came
// while the goroutine was pinned to its P (the flush ran inside
// percpu.Pin), where the runtime cannot turn a fault into a panic, and
// the process died with "fatal error: unexpected signal during runtime
// execution".
func TestTruncatedUseTableIsAnErrorNotAFatalFault(t *testing.T) {
	skipFaultsUnderRace(t)
	a, path := tempArena(t, 4<<20)
	_, err := a.Map("m", WithSlots(4096), WithSlotSize(64), WithStripes(1))
	require.NoError(t, err)
	require.NoError(t, child(t, "truncated-uses", "SHMARENA_PATH="+path).Run(), "the child died loading from a truncated arena")
}

// Close of a handle whose file was cut under it still closes it: the use
// counts it flushes to the file fault, and the rest of Close (the mapping
// replaced, the file closed, the process table left) must run all the
// same, or the descriptor and the mapping stay for the life of the
// process.
func TestCloseOfATruncatedArenaStillCloses(t *testing.T) {
	skipFaultsUnderRace(t)
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(64))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
	_, ok := m.Load("k") // a hit counted in this process, not yet in the file
	require.True(t, ok)
	require.NoError(t, os.Truncate(path, 4096))
	err = a.Close()
	if err != nil {
		require.ErrorIs(t, err, ErrTruncated)
	}
	require.NotNil(t, a.retired, "the mapping was not replaced")
	require.ErrorIs(t, a.f.Close(), os.ErrClosed, "the file was left open")
	require.ErrorIs(t, a.Close(), ErrClosed)
}

// A fault in the use counts' flush that a Load makes every useFlushEvery
// hits (the file cut below the map's use table, its slots still in it)
// must not leave the counts' mutex held: Stats and Close take it to flush
// every shard, and would wait for ever.
func TestTruncatedUseFlushLeavesNoLockHeld(t *testing.T) {
	skipFaultsUnderRace(t)
	path := filepath.Join(t.TempDir(), "arena")
	a, err := Open(path, WithSize(4<<20)) // no Close in a cleanup: one that hangs would hang the test binary
	require.NoError(t, err)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(64), WithStripes(1))
	require.NoError(t, err)
	cut := m.useTable &^ 4095
	key := ""
	for i := 0; key == ""; i++ {
		if k := "k" + strconv.Itoa(i); m.slotOff(m.home(m.hashKey(k)))+m.slotSize <= cut {
			key = k
		}
	}
	require.NoError(t, m.Store(key, []byte("v")))
	require.NoError(t, os.Truncate(path, int64(cut)))
	// Some P's shard reaches useFlushEvery within this many loads, and
	// its flush faults.
	for range (useFlushEvery-1)*m.uses.nshards + 1 {
		m.Load(key)
	}
	require.NotNil(t, a.faulted.Load(), "no flush faulted")

	returnsTruncated(t, "Stats, then Close, after a faulted flush of the use counts", func() error {
		m.Stats()
		return a.Close()
	})
}

func init() {
	// truncated-wait opens the arena at SHMARENA_PATH, puts a waiter to
	// sleep on ring r's futex word (SHMARENA_WAIT: "cursor", a Cursor.Wait
	// for a record, or "room", a PublishWait for room behind an acking
	// group), cuts the file below the ring and cancels the waiter's
	// context. The waiter must return ErrTruncated (or the context's
	// error), and the process live.
	childRoles["truncated-wait"] = func() error {
		path := os.Getenv("SHMARENA_PATH")
		a, err := Open(path)
		if err != nil {
			return err
		}
		r, err := a.Ring("r", WithSlots(8), WithSlotSize(64))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		asleep := func() bool { return r.sleepers() > 0 }
		switch os.Getenv("SHMARENA_WAIT") {
		case "cursor":
			c := r.Cursor()
			go func() { done <- c.Wait(ctx) }()
		case "room":
			if _, err := r.Group("g", WithAck(time.Hour)); err != nil {
				return err
			}
			for range 8 {
				if _, err := r.Publish("t", nil); err != nil {
					return err
				}
			}
			go func() { _, err := r.PublishWait(ctx, "t", nil); done <- err }()
			asleep = r.roomArmed
		default:
			return fmt.Errorf("SHMARENA_WAIT %q", os.Getenv("SHMARENA_WAIT"))
		}
		for !asleep() {
			time.Sleep(time.Millisecond) // polling for a state
		}
		time.Sleep(time.Millisecond) // into the futex wait, whose backstop is 100 ms away
		if err := os.Truncate(path, 4096); err != nil {
			return err
		}
		cancel() // the wake on cancel writes the futex word, past the file's end now
		select {
		case err := <-done:
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("the wait returned %v, want ErrTruncated", err)
			}
		case <-time.After(10 * time.Second):
			return errors.New("the wait still waits")
		}
		time.Sleep(10 * time.Millisecond) // a wake still running in its own goroutine
		return nil
	}
}

// A wait on a ring's futex word (Cursor.Wait, Group.Wait, PublishWait)
// arranges a wake on its context's end (context.AfterFunc), which writes
// the word from a goroutine of its own: no caller's fault guard covers
// it. A context ended after the file was cut under the mapping must not
// kill the process.
func TestTruncatedWaitCancelIsNotAFatalFault(t *testing.T) {
	skipFaultsUnderRace(t)
	for _, wait := range []string{"cursor", "room"} {
		t.Run(wait, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "arena")
			a, err := Open(path, WithSize(1<<20))
			require.NoError(t, err)
			require.NoError(t, a.Close())
			require.NoError(t, child(t, "truncated-wait", "SHMARENA_PATH="+path, "SHMARENA_WAIT="+wait).Run(),
				"the child died when its wait's context ended")
		})
	}
}

func init() {
	// truncated-typed opens the arena at SHMARENA_PATH, opens typed map t,
	// cuts the file to nothing and opens t again.
	childRoles["truncated-typed"] = func() error {
		path := os.Getenv("SHMARENA_PATH")
		a, err := Open(path)
		if err != nil {
			return err
		}
		if _, err := OpenTypedMap[int](a, "t"); err != nil {
			return err
		}
		if err := os.Truncate(path, 0); err != nil {
			return err
		}
		if _, err := OpenTypedMap[int](a, "t"); !errors.Is(err, ErrTruncated) {
			return fmt.Errorf("OpenTypedMap of a truncated arena: %v, want ErrTruncated", err)
		}
		return nil
	}
}

// OpenTypedMap reads the arena's directory and its value type's record,
// as Arena.Map does, and must meet a file cut under the mapping with
// ErrTruncated, not SIGBUS.
func TestTruncatedOpenTypedMapIsAnErrorNotSIGBUS(t *testing.T) {
	skipFaultsUnderRace(t)
	path := filepath.Join(t.TempDir(), "arena")
	a, err := Open(path, WithSize(1<<20))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, child(t, "truncated-typed", "SHMARENA_PATH="+path).Run(), "the child died opening a typed map")
}

// A write that faults holding a lock in the file (the file cut below the
// slot it writes, above the lock word) leaves the lock held by this live
// handle. The handle's next write of that lock, to a part of the region
// still in the file, must not wait for it for ever: the fault abandoned
// the handle, and the write gives up with ErrTruncated. (Other processes
// wait until the handle is closed; see docs/lifecycle.md.)
func TestTruncatedWriteDoesNotWedgeItsHandle(t *testing.T) {
	skipFaultsUnderRace(t)
	t.Run("map", func(t *testing.T) {
		a, path := tempArena(t, 4<<20) // its Close ends a waiter (ErrClosed)
		m, err := a.Map("m", WithSlots(4096), WithSlotSize(64), WithStripes(1))
		require.NoError(t, err)
		cut := m.slotOff(m.slots/2) &^ 4095
		far, near := "", ""
		for i := 0; far == "" || near == ""; i++ {
			k := "k" + strconv.Itoa(i)
			switch home := m.home(m.hashKey(k)); {
			case far == "" && m.slotOff(home) >= cut:
				far = k
			case near == "" && m.slotOff(home+8) <= cut:
				near = k
			}
		}
		require.NoError(t, os.Truncate(path, int64(cut)))
		require.ErrorIs(t, m.Store(far, []byte("v")), ErrTruncated)
		returnsTruncated(t, "a Store of a key whose slot is in the file", func() error { return m.Store(near, []byte("v")) })
	})
	// The file is cut while LoadOrCompute's function runs: the store of
	// its value faults holding the stripe, and the deferred hand-over of
	// the computation (for a function that panicked) takes the stripe
	// again, held by this live handle: the call itself never returns.
	t.Run("compute", func(t *testing.T) {
		a, path := tempArena(t, 4<<20)
		m, err := a.Map("m", WithSlots(4096), WithSlotSize(64), WithStripes(1))
		require.NoError(t, err)
		cut := m.slotOff(m.slots/2) &^ 4095
		far := ""
		for i := 0; far == ""; i++ {
			if k := "k" + strconv.Itoa(i); m.slotOff(m.home(m.hashKey(k))) >= cut {
				far = k
			}
		}
		returnsTruncated(t, "LoadOrCompute whose store faults", func() error {
			_, _, err := m.LoadOrCompute(context.Background(), far, func(context.Context) ([]byte, error) {
				return []byte("v"), os.Truncate(path, int64(cut))
			})
			return err
		})
	})
	t.Run("ring", func(t *testing.T) {
		a, path := tempArena(t, 4<<20)
		r, err := a.Ring("r", WithSlots(64), WithSlotSize(1024))
		require.NoError(t, err)
		require.NoError(t, os.Truncate(path, int64(r.slotOff(32)&^4095)))
		for {
			_, err := r.Publish("t", []byte("p"))
			if err != nil {
				require.ErrorIs(t, err, ErrTruncated)
				break
			}
		}
		returnsTruncated(t, "the next Publish", func() error { _, err := r.Publish("t", []byte("p")); return err })
	})
}

// A consumer of a handle that a fault abandoned stops: the handle's
// waits return the fault's error, also while records wait, which its
// claims may not get (a group lock left held by a write the fault cut
// short), so Records, or a loop of Claim then Wait, ends rather than
// spinning until its context does.
func TestFaultedHandleEndsConsumers(t *testing.T) {
	skipFaultsUnderRace(t)
	a, path := tempArena(t, 4<<20)
	r, err := a.Ring("r", WithSlots(64), WithSlotSize(256))
	require.NoError(t, err)
	g, err := r.Group("g", WithAck(time.Minute))
	require.NoError(t, err)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(64))
	require.NoError(t, err)
	_, err = r.Publish("t", []byte("p"))
	require.NoError(t, err)
	cut := m.slotOff(0) &^ 4095
	require.LessOrEqual(t, r.slotOff(r.slots-1)+r.slotSize, cut, "the ring must stay in the file")
	require.NoError(t, os.Truncate(path, int64(cut)))
	require.ErrorIs(t, m.Store("k", []byte("v")), ErrTruncated) // the fault
	mem.Store64(r.b, g.goff+rl.GLock, a.own.Token())            // as a write it cut short would leave it

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range g.Records(ctx) {
		require.Fail(t, "a record claimed under a lock this handle holds")
	}
	require.NoError(t, ctx.Err(), "Records ended only when its context did")
	require.ErrorIs(t, g.Wait(ctx), ErrTruncated)
	require.ErrorIs(t, g.Ack(Record{Seq: 1}), ErrTruncated)
}

// faultOnMap cuts the file at the start of map m's slots (every region
// carved before m stays in the file) and makes a Store of m fault, so the
// handle is abandoned (faultError) and a.faulted is set.
func faultOnMap(t *testing.T, a *Arena, path string, m *Map) {
	t.Helper()
	cut := m.slotOff(0) &^ 4095
	require.NoError(t, os.Truncate(path, int64(cut)))
	require.ErrorIs(t, m.Store("k", []byte("v")), ErrTruncated) // the fault
	require.NotNil(t, a.faulted.Load())
}

// A wait for room of a handle a fault abandoned returns the fault's error
// at once: the room behind an acking group comes only from acks, which
// need the group lock the fault may have left this very handle holding
// (its own Acks give up, other processes wait until it closes), so the
// producer waited until its context ended.
func TestFaultedHandleEndsWaitsForRoom(t *testing.T) {
	skipFaultsUnderRace(t)
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "PublishWait", true: "PublishBatchWait"}[batch], func(t *testing.T) {
			a, path := tempArena(t, 4<<20)
			r, err := a.Ring("r", WithSlots(8), WithSlotSize(64))
			require.NoError(t, err)
			g, err := r.Group("g", WithAck(time.Hour))
			require.NoError(t, err)
			m, err := a.Map("m", WithSlots(4096), WithSlotSize(64))
			require.NoError(t, err)
			require.LessOrEqual(t, r.slotOff(r.slots-1)+r.slotSize, m.slotOff(0)&^4095, "the ring must stay in the file")
			for range 8 {
				_, err := r.Publish("t", nil)
				require.NoError(t, err)
			}
			require.False(t, r.hasRoom(1), "the ring must be full behind the acking group")
			faultOnMap(t, a, path, m)
			mem.Store64(r.b, g.goff+rl.GLock, a.own.Token()) // as a write the fault cut short would leave it (as TestFaultedHandleEndsConsumers)
			require.ErrorIs(t, g.Ack(Record{Seq: 1}), ErrTruncated, "no room can come from this handle")

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			if batch {
				_, err = r.PublishBatchWait(ctx, "t", [][]byte{nil, nil})
			} else {
				_, err = r.PublishWait(ctx, "t", nil)
			}
			require.ErrorIs(t, err, ErrTruncated, "a faulted handle's wait for room waited %v, until its context ended", time.Since(start).Round(time.Millisecond))
		})
	}
}

// A LoadOrCompute waiting for a computation of its own handle returns the
// fault's error once a fault abandoned the handle: the computing call,
// finding its stripe held by a write the fault cut short, gives up
// without freeing the computation entry, whose owner (this live handle)
// never dies, and the waiter waited until its context ended.
func TestFaultedHandleEndsComputeWaiters(t *testing.T) {
	skipFaultsUnderRace(t)
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(1024), WithSlotSize(64), WithStripes(1))
	require.NoError(t, err)
	m2, err := a.Map("m2", WithSlots(4096), WithSlotSize(64))
	require.NoError(t, err)
	require.LessOrEqual(t, m.computeTable+computeEntries*computeEntrySize, m2.slotOff(0)&^4095, "m must stay in the file")

	release, started := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, _, err := m.LoadOrCompute(context.Background(), "key", func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("v"), nil
		})
		first <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	waiter := make(chan error, 1)
	go func() {
		_, _, err := m.LoadOrCompute(ctx, "key", func(context.Context) ([]byte, error) { return []byte("w"), nil })
		waiter <- err
	}()
	time.Sleep(50 * time.Millisecond) // the waiter into awaitCompute

	faultOnMap(t, a, path, m2)
	mem.Store64(m.mem, m.lockOff(0), a.own.Token()) // a write of m's stripe the fault cut short
	close(release)
	require.ErrorIs(t, <-first, ErrTruncated)

	var werr error
	returnsTruncated(t, "a waiter of the computation", func() error { werr = <-waiter; return werr })
	require.ErrorIs(t, werr, ErrTruncated)
}

// An Ack of a group another handle dropped says so (ErrLeaseLost) also on
// a handle a fault abandoned: only a lock wait given up says the fault.
func TestFaultedHandleAckOfDroppedGroupSaysDropped(t *testing.T) {
	skipFaultsUnderRace(t)
	a, path := tempArena(t, 4<<20)
	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	g, err := r.Group("g", WithAck(time.Hour))
	require.NoError(t, err)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(64))
	require.NoError(t, err)
	_, err = r.Publish("t", nil)
	require.NoError(t, err)
	recs := g.Claim(1)
	require.Len(t, recs, 1)
	b, err := Open(path) // another handle (a second mapping; the ring stays in the file)
	require.NoError(t, err)
	defer b.Close()
	rb, err := b.Ring("r", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	faultOnMap(t, a, path, m)
	require.NoError(t, rb.DropGroup("g"))

	err = g.Ack(recs[0])
	require.ErrorIs(t, err, ErrLeaseLost, "Ack on a dropped group: %v", err)
}

// skipFaultsUnderRace skips a test that recovers a memory fault in this
// process: under the race detector sync/atomic runs outside Go code,
// where a fault is fatal (see fault.go).
func skipFaultsUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("a memory fault cannot be recovered under the race detector")
	}
}

// returnsTruncated runs f and requires it to return nil or ErrTruncated
// within 10 s, a bound for a hang (a lock or a wait a fault left behind),
// not a speed: f runs in a goroutine that a failing test leaves behind.
func returnsTruncated(t *testing.T, what string, f func() error) {
	t.Helper()
	const bound = 10 * time.Second
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			require.ErrorIs(t, err, ErrTruncated, what)
		}
	case <-time.After(bound):
		t.Fatalf("%s still waits after %v", what, bound)
	}
}
