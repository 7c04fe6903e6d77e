package shmarena

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// At-least-once work queue across processes: 3 producers publish with
// PublishWait, 3 consumers claim, record and ack. Each consumer appends the
// jobs it processed to its own file, one write per batch before the ack,
// so the parent can count every processing, duplicates included.

const (
	aqProducers = 3
	aqConsumers = 3
)

var aqRingShape = []RegionOption{WithSlots(1024), WithSlotSize(64)}

func aqGroup(r *Ring) (*Group, error) {
	return r.Group("workers", WithTopic("jobs"), WithAck(30*time.Second))
}

func aqOpen(path string) (*Arena, *Ring, *Group, *Map, error) {
	a, err := Open(path)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	r, err := a.Ring("work", aqRingShape...)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	g, err := aqGroup(r)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	m, err := a.Map("ctl", WithSlots(64), WithSlotSize(64))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return a, r, g, m, nil
}

// aqProducerRole publishes jobs id<<32|n for n in [0, count).
func aqProducerRole(path, arg string) error {
	id, count, _ := strings.Cut(arg, ":")
	p, _ := strconv.ParseUint(id, 10, 32)
	n, _ := strconv.Atoi(count)
	a, r, _, _, err := aqOpen(path)
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var buf [8]byte
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(buf[:], p<<32|uint64(i))
		if _, err := r.PublishWait(ctx, "jobs", buf[:]); err != nil {
			return err
		}
	}
	return nil
}

// aqConsumerRole claims batches, appends their jobs to file out, acks them,
// and stops when the parent sets "stop" and nothing is left. With hold > 0
// it stops working after hold batches: it claims one more, records it,
// prints "HOLDING n" and sleeps, leases held, until the parent kills it.
func aqConsumerRole(path, arg string) error {
	out, holdS, _ := strings.Cut(arg, ":")
	hold, _ := strconv.Atoi(holdS)
	a, _, g, m, err := aqOpen(path)
	if err != nil {
		return err
	}
	defer a.Close()
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	deadline := time.Now().Add(2 * time.Minute)
	batches := 0
	var buf []byte
	for time.Now().Before(deadline) {
		recs := g.Claim(16)
		if len(recs) == 0 {
			if n, _ := m.Counter("stop"); n > 0 {
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			_ = g.Wait(ctx)
			cancel()
			continue
		}
		buf = buf[:0]
		for _, rec := range recs {
			buf = append(buf, rec.Payload...)
		}
		if _, err := f.Write(buf); err != nil {
			return err
		}
		batches++
		if hold > 0 && batches > hold {
			fmt.Printf("HOLDING %d\n", len(recs))
			for {
				time.Sleep(time.Hour)
			}
		}
		if err := g.Ack(recs...); err != nil {
			return err
		}
	}
	return errors.New("no stop before the deadline")
}

func aqStart(t *testing.T, role, path, arg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), envRole+"="+role, envPath+"="+path, envArg+"="+arg)
	cmd.Stderr = os.Stderr
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// runAckQueue runs the 3 x 3 queue; kills says how many times to kill a
// consumer holding a batch (and start another). It returns how many times
// each job was processed, the leases the killed consumers held, and the
// stats.
func runAckQueue(t *testing.T, jobs, kills int) (counts []uint8, held int, rs RingStats, gs GroupStats) {
	a, path := openTestArena(t, 4<<20)
	r, err := a.Ring("work", aqRingShape...)
	require.NoError(t, err)
	g, err := aqGroup(r) // before any publish: it starts at record 1
	require.NoError(t, err)
	m, err := a.Map("ctl", WithSlots(64), WithSlotSize(64))
	require.NoError(t, err)
	dir := t.TempDir()

	per := jobs / aqProducers
	var prods []*exec.Cmd
	for i := 0; i < aqProducers; i++ {
		c := aqStart(t, "aq-producer", path, fmt.Sprintf("%d:%d", i, per))
		require.NoError(t, c.Start())
		prods = append(prods, c)
	}
	// Let the producers fill the ring before any consumer starts, so the
	// run has to wait for room; Publish refuses meanwhile.
	for deadline := time.Now().Add(30 * time.Second); r.Stats().Waited == 0; {
		require.True(t, time.Now().Before(deadline), "no producer waited for room")
		time.Sleep(time.Millisecond)
	}
	_, err = r.Publish("jobs", nil)
	require.ErrorIs(t, err, ErrRingFull)
	assert.Equal(t, uint64(1), r.Stats().Full)

	var files []string
	start := func(hold int) *exec.Cmd {
		f := filepath.Join(dir, "c"+strconv.Itoa(len(files)))
		files = append(files, f)
		c := aqStart(t, "aq-consumer", path, f+":"+strconv.Itoa(hold))
		return c
	}
	var cons []*exec.Cmd
	for i := 0; i < aqConsumers; i++ {
		hold := 0
		if i == 0 && kills > 0 {
			hold = 200
		}
		c := start(hold)
		if hold > 0 {
			cons = append(cons, nil) // replaced below
			for k := 0; k < kills; k++ {
				n := holdAndKill(t, c)
				held += n
				if k+1 < kills {
					c = start(200)
				}
			}
			c = start(0)
			require.NoError(t, c.Start())
			cons[0] = c
			continue
		}
		require.NoError(t, c.Start())
		cons = append(cons, c)
	}
	for _, c := range prods {
		require.NoError(t, c.Wait(), "producer")
	}
	for deadline := time.Now().Add(time.Minute); ; {
		st := g.Stats()
		if st.Floor == r.Head() && st.Pending == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "jobs still unfinished: %+v, head %d", st, r.Head())
		time.Sleep(time.Millisecond)
	}
	_, err = m.Add("stop", 1)
	require.NoError(t, err)
	for _, c := range cons {
		require.NoError(t, c.Wait(), "consumer")
	}
	counts = make([]uint8, jobs)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Zero(t, len(data)%8)
		for i := 0; i < len(data); i += 8 {
			v := binary.LittleEndian.Uint64(data[i:])
			p, n := int(v>>32), int(uint32(v))
			require.True(t, p < aqProducers && n < per, "job %d/%d", p, n)
			counts[p*per+n]++
		}
	}
	return counts, held, r.Stats(), g.Stats()
}

// holdAndKill starts a consumer that will hold a batch, waits until it
// does, SIGKILLs it and returns the size of the batch it held.
func holdAndKill(t *testing.T, c *exec.Cmd) int {
	t.Helper()
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "consumer ended before holding a batch")
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "HOLDING ")))
	require.NoError(t, err, "line %q", line)
	require.NoError(t, c.Process.Signal(syscall.SIGKILL))
	_ = c.Wait()
	ws, ok := c.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled(), "consumer status %v", c.ProcessState)
	return n
}

func aqJobs() int {
	if testing.Short() || raceSlowdown > 1 {
		return 30_000
	}
	return 300_000
}

func TestAckQueueExactlyOnceWithoutFailures(t *testing.T) {
	asChild(map[string]func(string, string) error{"aq-producer": aqProducerRole, "aq-consumer": aqConsumerRole})
	jobs := aqJobs()
	t0 := time.Now()
	counts, _, rs, gs := runAckQueue(t, jobs, 0)
	t.Logf("%d jobs in %v; ring %+v; group %+v", jobs, time.Since(t0), rs, gs)
	for i, c := range counts {
		if c != 1 {
			t.Fatalf("job %d/%d processed %d times", i/(jobs/aqProducers), i%(jobs/aqProducers), c)
		}
	}
	assert.Zero(t, gs.Lapped, "nothing lapped")
	assert.Zero(t, gs.Redelivered)
	assert.Zero(t, gs.DeadLettered)
	assert.Equal(t, uint64(jobs), gs.Delivered)
	assert.Equal(t, uint64(jobs), rs.Published)
	assert.Positive(t, rs.Waited, "PublishWait waits are counted")
}

func TestAckQueueConsumerKilledTwice(t *testing.T) {
	asChild(map[string]func(string, string) error{"aq-producer": aqProducerRole, "aq-consumer": aqConsumerRole})
	jobs := aqJobs()
	t0 := time.Now()
	counts, held, rs, gs := runAckQueue(t, jobs, 2)
	t.Logf("%d jobs in %v; %d leases held by killed consumers; ring %+v; group %+v", jobs, time.Since(t0), held, rs, gs)
	dups := 0
	for i, c := range counts {
		if c == 0 {
			t.Fatalf("job %d/%d lost", i/(jobs/aqProducers), i%(jobs/aqProducers))
		}
		dups += int(c) - 1
	}
	require.Positive(t, held)
	assert.Equal(t, held, dups, "duplicates are exactly the leases reclaimed from the killed consumer")
	assert.Equal(t, uint64(held), gs.Redelivered, "and the group counted them")
	assert.Zero(t, gs.Lapped, "nothing lapped")
	assert.Zero(t, gs.DeadLettered, "nothing dead-lettered")
	assert.Equal(t, uint64(jobs), gs.Delivered)
}

// lateMemberRole claims one record with a short lease (the duration in
// arg), reports it, waits for a line on stdin (by then the lease went to
// the parent), then tries to settle it and reports what Ack, Nack and
// Extend returned.
func lateMemberRole(path, arg string) error {
	lease, err := time.ParseDuration(arg)
	if err != nil {
		return err
	}
	a, err := Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.Ring("late", WithSlots(8), WithSlotSize(64))
	if err != nil {
		return err
	}
	g, err := r.Group("w", WithAck(lease))
	if err != nil {
		return err
	}
	recs := g.Claim(1)
	if len(recs) != 1 {
		return fmt.Errorf("claimed %d records", len(recs))
	}
	fmt.Printf("CLAIMED %d %d\n", recs[0].Seq, recs[0].Deliveries)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	for _, err := range []error{g.Ack(recs[0]), g.Nack(recs[0], 0), g.Extend(recs[0], time.Hour)} {
		fmt.Println("LATE", errors.Is(err, ErrLeaseLost))
	}
	return nil
}

func TestAckLateMemberProcessLosesLease(t *testing.T) {
	asChild(map[string]func(string, string) error{"late": lateMemberRole})
	withShortLife(t, func(lease time.Duration) bool {
		a, path := openTestArena(t, 1<<20)
		r, err := a.Ring("late", WithSlots(8), WithSlotSize(64))
		require.NoError(t, err)
		g, err := r.Group("w", WithAck(lease))
		require.NoError(t, err)
		seq, err := r.Publish("t", []byte("job"))
		require.NoError(t, err)

		c := aqStart(t, "late", path, lease.String())
		in, err := c.StdinPipe()
		require.NoError(t, err)
		out, err := c.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, c.Start())
		br := bufio.NewReader(out)
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("CLAIMED %d 1\n", seq), line)

		if got := g.Claim(1); got != nil { // the child's lease ran out before this claim
			_, err = in.Write([]byte("go\n"))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, br)
			require.NoError(t, c.Wait())
			return false
		}
		time.Sleep(lease * 3 / 2)
		mine := g.Claim(1)
		require.Len(t, mine, 1, "the expired lease comes to this member")
		assert.Equal(t, 2, mine[0].Deliveries)
		before := g.Stats()

		_, err = in.Write([]byte("go\n"))
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			line, err := br.ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, "LATE true\n", line, "the late member's settle %d returns ErrLeaseLost", i)
		}
		require.NoError(t, c.Wait())
		after := g.Stats()
		after.OldestPending, before.OldestPending = 0, 0
		assert.Equal(t, before, after, "the late member changed nothing")
		require.NoError(t, g.Ack(mine...), "this member's lease is intact")
		assert.Zero(t, g.Stats().Pending)
		return true
	})
}

// poisonWorkerRole works jobs from the "jobs" group: it Nacks every
// "poison" job and acks the rest, until the parent sets "stop"; it prints
// the deliveries of each poison delivery it saw and how many jobs it did.
func poisonWorkerRole(path, _ string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	g, m, err := poisonGroup(a)
	if err != nil {
		return err
	}
	done := 0
	var seen []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		recs := g.Claim(4)
		if len(recs) == 0 {
			if n, _ := m.Counter("stop"); n > 0 {
				fmt.Println("RESULT", done, strings.Join(seen, ","))
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			_ = g.Wait(ctx)
			cancel()
			continue
		}
		for _, rec := range recs {
			if string(rec.Payload) == "poison" {
				seen = append(seen, strconv.Itoa(rec.Deliveries))
				if err := g.Nack(rec, 0); err != nil {
					return err
				}
				continue
			}
			if err := g.Ack(rec); err != nil {
				return err
			}
			done++
		}
	}
	return errors.New("no stop before the deadline")
}

func poisonGroup(a *Arena) (*Group, *Map, error) {
	r, err := a.Ring("poison", WithSlots(64), WithSlotSize(96))
	if err != nil {
		return nil, nil, err
	}
	g, err := r.Group("w", WithTopic("jobs"), WithAck(time.Minute), WithMaxDeliveries(5), WithDeadLetter("jobs.dead"))
	if err != nil {
		return nil, nil, err
	}
	m, err := a.Map("ctl", WithSlots(64), WithSlotSize(64))
	return g, m, err
}

func TestPoisonJobAcrossProcesses(t *testing.T) {
	asChild(map[string]func(string, string) error{"poison": poisonWorkerRole})
	a, path := openTestArena(t, 1<<20)
	g, m, err := poisonGroup(a)
	require.NoError(t, err)
	r := g.r
	dead, err := r.Group("janitor", WithTopic("jobs.dead"))
	require.NoError(t, err)
	var workers []*ringChild
	for i := 0; i < 2; i++ {
		workers = append(workers, startChild(t, "TestPoisonJobAcrossProcesses", "poison", path, ""))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const jobs = 2000
	poison := uint64(0)
	var letters []Record // the janitor keeps up (it is not protected)
	for i := 0; i < jobs; i++ {
		letters = append(letters, dead.Claim(0)...)
		if i == 10 {
			poison, err = r.PublishWait(ctx, "jobs", []byte("poison"))
			require.NoError(t, err)
		}
		_, err := r.PublishWait(ctx, "jobs", []byte("job"))
		require.NoError(t, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		st := g.Stats()
		if st.Lag == 0 && st.Pending == 0 {
			break
		}
		letters = append(letters, dead.Claim(0)...)
		require.True(t, time.Now().Before(deadline), "jobs unfinished: %+v", st)
		time.Sleep(time.Millisecond)
	}
	_, err = m.Add("stop", 1)
	require.NoError(t, err)
	done, deliveries := 0, []string{}
	for _, w := range workers {
		res := w.wait(t)
		done += int(uintField(t, res[0]))
		if len(res) > 1 {
			deliveries = append(deliveries, strings.Split(res[1], ",")...)
		}
	}
	assert.Equal(t, jobs, done, "the rest kept flowing")
	slices.Sort(deliveries)
	assert.Equal(t, []string{"1", "2", "3", "4", "5"}, deliveries, "the poison job was delivered exactly 5 times")
	st := g.Stats()
	assert.Equal(t, uint64(1), st.DeadLettered)
	assert.Equal(t, uint64(4), st.Redelivered)
	letters = append(letters, dead.Claim(0)...)
	require.Len(t, letters, 1)
	assert.Zero(t, dead.Stats().Lapped)
	dl, err := ParseDeadLetter(letters[0])
	require.NoError(t, err)
	assert.Equal(t, DeadLetter{Seq: poison, Deliveries: 5, Topic: "jobs", Payload: []byte("poison")}, dl)
}
