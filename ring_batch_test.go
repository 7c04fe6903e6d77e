package shmarena

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func batchOf(n int, prefix string) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(fmt.Sprintf("%s-%d", prefix, i))
	}
	return ps
}

// A batch's records get consecutive sequences, in order, each with its
// own payload and the batch's topic, between single publishes.
func TestPublishBatch(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("batch", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	c := r.Cursor()

	s, err := r.Publish("one", []byte("single"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), s)
	first, err := r.PublishBatch("many", append(batchOf(3, "b"), nil))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), first)
	assert.Equal(t, uint64(6), r.Head())
	s, err = r.Publish("", []byte("after"))
	require.NoError(t, err)
	assert.Equal(t, uint64(6), s)

	first, err = r.PublishBatch("none", nil)
	require.NoError(t, err, "an empty batch publishes nothing")
	assert.Zero(t, first)
	assert.Equal(t, uint64(7), r.Head())

	recs := c.Read(0)
	require.Len(t, recs, 6)
	want := []string{"single", "b-0", "b-1", "b-2", "", "after"}
	topics := []string{"one", "many", "many", "many", "many", ""}
	for i, rec := range recs {
		assert.Equal(t, uint64(i+1), rec.Seq)
		assert.Equal(t, want[i], string(rec.Payload))
		assert.Equal(t, topics[i], rec.Topic)
	}
	assert.Equal(t, uint64(6), r.Stats().Published)
}

// Bad input is refused whole: nothing of the batch is published.
func TestPublishBatchRefusesWhole(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("batch", WithSlots(8), WithSlotSize(64)) // 40 bytes of topic + payload
	require.NoError(t, err)

	ps := batchOf(3, "ok")
	ps[2] = make([]byte, 41-len("t"))
	_, err = r.PublishBatch("t", ps)
	require.ErrorIs(t, err, ErrTooLarge)
	assert.Contains(t, err.Error(), "record 2")

	_, err = r.PublishBatch("t", batchOf(9, "x"))
	require.ErrorIs(t, err, ErrTooLarge, "more records than the ring has slots")
	assert.Contains(t, err.Error(), "ring holds 8")

	_, err = r.PublishBatch(strings.Repeat("t", 41), batchOf(1, "x"))
	require.ErrorIs(t, err, ErrTooLarge)

	assert.Equal(t, uint64(1), r.Head(), "nothing published")
	assert.Equal(t, uint64(3), r.Stats().Oversize, "each refused call counted once")

	_, err = r.PublishBatch("t", batchOf(8, "x"))
	require.NoError(t, err, "a batch as large as the ring fits")
}

// A batch publishes only when every record it would overwrite is
// finished by every protected group: a back-pressured group's position
// and an acking group's acks, out of order included.
func TestPublishBatchRoom(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("batch", WithSlots(8), WithSlotSize(64), WithMaxInFlight(8))
	require.NoError(t, err)
	bp, err := r.Group("bp", WithBackpressure())
	require.NoError(t, err)
	acked, err := r.Group("acked", WithAck(time.Minute))
	require.NoError(t, err)

	_, err = r.PublishBatch("t", batchOf(8, "first"))
	require.NoError(t, err)
	require.Len(t, bp.Claim(3), 3) // the back-pressured group finished 1-3
	recs := acked.Claim(0)
	require.Len(t, recs, 8)
	require.NoError(t, acked.Ack(recs[1], recs[2])) // 2 and 3, not 1: the acking group's floor stays at 1

	full := r.Stats().Full
	_, err = r.PublishBatch("t", batchOf(1, "x"))
	require.ErrorIs(t, err, ErrRingFull, "record 1 is unacked")
	require.NoError(t, acked.Ack(recs[0]))
	_, err = r.PublishBatch("t", batchOf(4, "x"))
	require.ErrorIs(t, err, ErrRingFull, "record 4 is unclaimed by the back-pressured group")
	assert.Equal(t, full+2, r.Stats().Full)
	assert.Equal(t, uint64(9), r.Head(), "nothing published")

	require.Len(t, bp.Claim(1), 1)                  // 4 finished by bp
	require.NoError(t, acked.Ack(recs[4], recs[5])) // 5 and 6 acked, 4 not
	_, err = r.PublishBatch("t", batchOf(4, "x"))
	require.ErrorIs(t, err, ErrRingFull, "record 4 is unacked")
	require.NoError(t, acked.Ack(recs[3])) // the acking group's floor moves to 7
	_, err = r.PublishBatch("t", batchOf(5, "x"))
	require.ErrorIs(t, err, ErrRingFull, "record 5 is unclaimed by the back-pressured group")
	require.Len(t, bp.Claim(2), 2)
	first, err := r.PublishBatch("t", batchOf(5, "x"))
	require.NoError(t, err, "1-5 are finished by both groups")
	assert.Equal(t, uint64(9), first)
	_, err = r.PublishBatch("t", batchOf(2, "x"))
	require.ErrorIs(t, err, ErrRingFull, "record 7 is finished by neither group")
	assert.Equal(t, full+5, r.Stats().Full)
	assert.Equal(t, uint64(14), r.Head())
}

// PublishBatchWait waits until the whole batch has room, and gives up
// with ErrRingFull and the context's error when ctx ends first.
func TestPublishBatchWait(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("batch", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	g, err := r.Group("bp", WithBackpressure())
	require.NoError(t, err)
	_, err = r.PublishBatch("t", batchOf(8, "first"))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = r.PublishBatchWait(ctx, "t", batchOf(2, "late"))
	require.ErrorIs(t, err, ErrRingFull)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, uint64(9), r.Head())

	done := make(chan error, 1)
	var first uint64
	go func() {
		var err error
		first, err = r.PublishBatchWait(context.Background(), "t", batchOf(3, "late"))
		done <- err
	}()
	require.Len(t, g.Claim(2), 2) // room for 2 of the 3: the batch keeps waiting
	select {
	case err := <-done:
		t.Fatalf("published with room for 2 of 3 records (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	require.Len(t, g.Claim(1), 1)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(hangBound):
		t.Fatal("PublishBatchWait did not publish once the batch had room")
	}
	assert.Equal(t, uint64(9), first)
	assert.Equal(t, uint64(2), r.Stats().Waited)
}

// Batches from several goroutines, with single publishes between them,
// are never interleaved: each batch's records are consecutive.
func TestPublishBatchConcurrent(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	r, err := a.Ring("batch", WithSlots(4096), WithSlotSize(64))
	require.NoError(t, err)
	c := r.Cursor()
	const writers, batches, size = 4, 50, 5
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range batches {
				ps := make([][]byte, size)
				for k := range ps {
					ps[k] = []byte(fmt.Sprintf("%d/%d/%d", w, i, k))
				}
				if _, err := r.PublishBatch("t", ps); err != nil {
					t.Error(err)
					return
				}
				if _, err := r.Publish("single", []byte("s")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	recs := c.Read(0)
	require.Len(t, recs, writers*batches*(size+1))
	for i := 0; i < len(recs); i++ {
		if recs[i].Topic == "single" {
			continue
		}
		var w, b, k int
		_, err := fmt.Sscanf(string(recs[i].Payload), "%d/%d/%d", &w, &b, &k)
		require.NoError(t, err)
		require.Zero(t, k, "record %d starts a batch", recs[i].Seq)
		for k := 1; k < size; k++ {
			assert.Equal(t, fmt.Sprintf("%d/%d/%d", w, b, k), string(recs[i+k].Payload), "batch interleaved at %d", recs[i+k].Seq)
		}
		i += size - 1
	}
}

// A read-only handle publishes no batch.
func TestPublishBatchReadOnly(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	_, err := a.Ring("batch", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	ro, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer ro.Close()
	r, err := ro.Ring("batch", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	_, err = r.PublishBatch("t", batchOf(2, "x"))
	require.ErrorIs(t, err, ErrReadOnly)
	_, err = r.PublishBatchWait(context.Background(), "t", batchOf(2, "x"))
	require.ErrorIs(t, err, ErrReadOnly)
}

// ---- a producer killed inside PublishBatch ----

// batchCrasherRole publishes a batch of 3 and parks inside it, after its
// second record is written and before the commit, for the parent to kill.
func batchCrasherRole(path, _ string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	r, err := a.Ring("crash", WithSlots(16), WithSlotSize(64))
	if err != nil {
		return err
	}
	publishHook = func(seq uint64) {
		if seq < 3 {
			return
		}
		fmt.Println("HOOK", seq)
		for {
			time.Sleep(time.Hour)
		}
	}
	_, err = r.PublishBatch("doomed", batchOf(3, "never committed"))
	return fmt.Errorf("publish returned: %v", err)
}

// A producer killed in the middle of writing a batch leaves a hole for
// each record it had begun (here 2, written, and 3, begun) and no record
// of the batch visible; the next publish gets the sequence after the
// holes, and every reader passes them.
func TestCrashMidPublishBatch(t *testing.T) {
	asChild(map[string]func(string, string) error{"batch-crasher": batchCrasherRole})
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("crash", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	c := r.Cursor()
	g, err := r.Group("g", WithBackpressure())
	require.NoError(t, err)
	_, err = r.Publish("ok", []byte("1"))
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidPublishBatch$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRole+"=batch-crasher", envPath+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "child ended before reaching the hook")
	require.Equal(t, "HOOK 3", sc.Text(), "killed with records 2 and 3 of the batch written")
	require.NoError(t, cmd.Process.Kill())
	err = cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child status %v (%v)", ws, err)

	assert.Equal(t, uint64(2), r.Head(), "nothing of the batch committed")
	seq, err := r.Publish("ok", []byte("after")) // takes the lock over and repairs
	require.NoError(t, err)
	assert.Equal(t, uint64(4), seq, "a hole for each record the batch began")
	st := r.Stats()
	assert.Equal(t, uint64(2), st.Abandoned)
	assert.Equal(t, uint64(2), st.Published)

	var got []string
	for _, rec := range c.Read(0) {
		got = append(got, strconv.FormatUint(rec.Seq, 10)+":"+string(rec.Payload))
	}
	assert.Equal(t, []string{"1:1", "4:after"}, got)
	assert.Equal(t, uint64(2), c.Stats().Abandoned)
	recs := g.Claim(0)
	require.Len(t, recs, 2)
	assert.Equal(t, "after", string(recs[1].Payload))
	assert.Equal(t, uint64(2), g.Stats().Abandoned)

	first, err := r.PublishBatch("ok", batchOf(2, "again"))
	require.NoError(t, err, "the ring takes batches again")
	assert.Equal(t, uint64(5), first)
}
