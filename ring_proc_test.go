package shmarena

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Multi-process tests re-execute the test binary running only their own
// test, with envRole naming the part the child plays and envPath the arena.
const (
	envRole = "SHMARENA_RING_ROLE"
	envPath = "SHMARENA_RING_PATH"
	envArg  = "SHMARENA_RING_ARG"
)

// asChild runs the role named in the environment, if any, and exits with
// status 0 on success or 1 (after printing the error) on failure.
func asChild(roles map[string]func(path, arg string) error) {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	fn, ok := roles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		os.Exit(2)
	}
	if err := fn(os.Getenv(envPath), os.Getenv(envArg)); err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

type ringChild struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startChild(t testing.TB, test, role, path, arg string) *ringChild {
	t.Helper()
	c := &ringChild{cmd: exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.bench=^$", "-test.count=1", "-test.timeout=5m")}
	c.cmd.Env = append(os.Environ(), envRole+"="+role, envPath+"="+path, envArg+"="+arg)
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = os.Stderr
	require.NoError(t, c.cmd.Start())
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	return c
}

// wait waits for the child to exit with status 0 and returns the fields
// of its RESULT line.
func (c *ringChild) wait(t testing.TB) []string {
	t.Helper()
	require.NoError(t, c.cmd.Wait(), "child %v", c.cmd.Env[len(c.cmd.Env)-3:])
	for _, line := range strings.Split(c.out.String(), "\n") {
		if f, ok := strings.CutPrefix(line, "RESULT"); ok {
			return strings.Fields(f)
		}
	}
	t.Fatalf("child printed no RESULT line: %q", c.out.String())
	return nil
}

// awaitRecords reads n records from c, waiting as needed.
func awaitRecords(t testing.TB, c *Cursor, n int) []Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []Record
	for len(out) < n {
		out = append(out, c.Read(n-len(out))...)
		if len(out) < n {
			require.NoError(t, c.Wait(ctx))
		}
	}
	return out
}

func uintField(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return v
}

// ---- one producer, four workers in one group ----

var workShape = []RegionOption{WithSlots(1024), WithSlotSize(128)}

func spinWork(n int) uint64 {
	x := uint64(n)
	for i := 0; i < 500000; i++ { // about half a millisecond: long enough that every worker gets a turn
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

var workSink uint64

func workerRole(path, _ string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.Ring("work", workShape...)
	if err != nil {
		return err
	}
	g, err := r.Group("workers")
	if err != nil {
		return err
	}
	ctl, err := a.Ring("ctl", WithSlots(64), WithSlotSize(64))
	if err != nil {
		return err
	}
	if _, err := ctl.Publish("ready", nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []string
	var sink uint64
	for rec := range g.Records(ctx) {
		if rec.Topic == "stop" {
			workSink = sink // keep the work from being optimised away
			fmt.Println("RESULT", 0, strings.Join(got, " "))
			return nil
		}
		sink += spinWork(len(got))
		got = append(got, string(rec.Payload))
	}
	return errors.New("no stop record before the deadline")
}

func TestGroupWorkersExactlyOnce(t *testing.T) {
	asChild(map[string]func(string, string) error{"worker": workerRole})
	a, path := openTestArena(t, 4<<20)
	r, err := a.Ring("work", workShape...)
	require.NoError(t, err)
	g, err := r.Group("workers") // at the head, before anything is published
	require.NoError(t, err)
	ctl, err := a.Ring("ctl", WithSlots(64), WithSlotSize(64))
	require.NoError(t, err)
	ready := ctl.Cursor()

	const workers, jobs = 4, 400
	var kids []*ringChild
	for i := 0; i < workers; i++ {
		kids = append(kids, startChild(t, "TestGroupWorkersExactlyOnce", "worker", path, ""))
	}
	awaitRecords(t, ready, workers)
	for i := 0; i < jobs; i++ {
		_, err := r.Publish("job", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	for i := 0; i < workers; i++ {
		_, err := r.Publish("stop", nil)
		require.NoError(t, err)
	}
	seen := make([]int, jobs)
	for w, k := range kids {
		f := k.wait(t)[1:]
		t.Logf("worker %d took %d records", w, len(f))
		assert.NotEmpty(t, f, "worker %d got no work", w)
		for _, s := range f {
			seen[uintField(t, s)]++
		}
	}
	for i, n := range seen {
		assert.Equal(t, 1, n, "job %d delivered %d times", i, n)
	}
	st := g.Stats()
	assert.Equal(t, uint64(jobs+workers), st.Delivered)
	assert.Zero(t, st.Mine)
	assert.Zero(t, st.Lapped+st.Skipped+st.Abandoned)
}

// ---- broadcast: three cursor processes, two producer processes ----

const (
	bcPerProducer = 50000
	bcProducers   = 2
	bcReaders     = 3
	bcTotal       = bcPerProducer * bcProducers
)

var bcShape = []RegionOption{WithSlots(1 << 17), WithSlotSize(64)}

func checksummed(prod, n uint32) []byte {
	p := make([]byte, 12+n%27)
	binary.LittleEndian.PutUint32(p[0:], prod)
	binary.LittleEndian.PutUint32(p[4:], n)
	for i := 8; i < len(p)-4; i++ {
		p[i] = byte(n*7 + uint32(i))
	}
	binary.LittleEndian.PutUint32(p[len(p)-4:], crc32.ChecksumIEEE(p[:len(p)-4]))
	return p
}

func verifyChecksummed(rec Record) (prod, n uint32, err error) {
	p := rec.Payload
	if len(p) < 12 || binary.LittleEndian.Uint32(p[len(p)-4:]) != crc32.ChecksumIEEE(p[:len(p)-4]) {
		return 0, 0, fmt.Errorf("seq %d: torn payload %x", rec.Seq, p)
	}
	prod, n = binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint32(p[4:])
	if rec.Topic != fmt.Sprintf("p%d", prod) || len(p) != int(12+n%27) {
		return 0, 0, fmt.Errorf("seq %d: topic %q does not match payload of producer %d #%d", rec.Seq, rec.Topic, prod, n)
	}
	return prod, n, nil
}

func bcProducerRole(path, arg string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.Ring("bc", bcShape...)
	if err != nil {
		return err
	}
	id, _ := strconv.Atoi(arg)
	topic := fmt.Sprintf("p%d", id)
	for n := 0; n < bcPerProducer; n++ {
		if _, err := r.Publish(topic, checksummed(uint32(id), uint32(n))); err != nil {
			return err
		}
	}
	fmt.Println("RESULT done")
	return nil
}

func bcReaderRole(path, _ string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.Ring("bc", bcShape...)
	if err != nil {
		return err
	}
	ctl, err := a.Ring("ctl", WithSlots(64), WithSlotSize(64))
	if err != nil {
		return err
	}
	c := r.Cursor()
	if _, err := ctl.Publish("ready", nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last [bcProducers]int64
	for i := range last {
		last[i] = -1
	}
	prevSeq := uint64(0)
	for c.Stats().Position <= bcTotal {
		recs := c.Read(256)
		if len(recs) == 0 {
			if err := c.Wait(ctx); err != nil {
				return fmt.Errorf("at %+v: %w", c.Stats(), err)
			}
			continue
		}
		st := c.Stats()
		for _, rec := range recs {
			prod, n, err := verifyChecksummed(rec)
			if err != nil {
				return err
			}
			if rec.Seq <= prevSeq || (st.Lapped+st.Abandoned == 0 && rec.Seq != prevSeq+1) {
				return fmt.Errorf("seq %d after %d", rec.Seq, prevSeq)
			}
			if prod >= bcProducers || int64(n) <= last[prod] || (st.Lapped == 0 && int64(n) != last[prod]+1) {
				return fmt.Errorf("seq %d: producer %d record %d after %d", rec.Seq, prod, n, last[prod])
			}
			prevSeq, last[prod] = rec.Seq, int64(n)
		}
	}
	st := c.Stats()
	fmt.Println("RESULT", st.Delivered, st.Lapped, st.Abandoned)
	return nil
}

func TestCursorsSeeEveryRecord(t *testing.T) {
	asChild(map[string]func(string, string) error{"producer": bcProducerRole, "reader": bcReaderRole})
	a, path := openTestArena(t, 10<<20)
	r, err := a.Ring("bc", bcShape...)
	require.NoError(t, err)
	ctl, err := a.Ring("ctl", WithSlots(64), WithSlotSize(64))
	require.NoError(t, err)
	ready := ctl.Cursor()
	var readers, producers []*ringChild
	for i := 0; i < bcReaders; i++ {
		readers = append(readers, startChild(t, "TestCursorsSeeEveryRecord", "reader", path, ""))
	}
	awaitRecords(t, ready, bcReaders)
	start := time.Now()
	for i := 0; i < bcProducers; i++ {
		producers = append(producers, startChild(t, "TestCursorsSeeEveryRecord", "producer", path, strconv.Itoa(i)))
	}
	for _, p := range producers {
		p.wait(t)
	}
	for i, rd := range readers {
		f := rd.wait(t)
		require.Len(t, f, 3)
		delivered, lapped, abandoned := uintField(t, f[0]), uintField(t, f[1]), uintField(t, f[2])
		t.Logf("reader %d: delivered %d lapped %d abandoned %d", i, delivered, lapped, abandoned)
		assert.Equal(t, uint64(bcTotal), delivered+lapped, "reader %d", i)
		assert.Zero(t, abandoned)
		assert.Equal(t, uint64(bcTotal), delivered, "the ring holds every record, so nothing may be lapped")
	}
	t.Logf("%d records to %d readers in %v", bcTotal, bcReaders, time.Since(start))
	assert.Equal(t, RingStats{Published: bcTotal, Slots: 1 << 17, SlotSize: 64}, r.Stats())
}

// ---- wake-ups: ping-pong between two processes ----

const pingPongRounds = 10000

func pongRole(path, _ string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	ping, err := a.Ring("ping", WithSlots(64), WithSlotSize(64))
	if err != nil {
		return err
	}
	pong, err := a.Ring("pong", WithSlots(64), WithSlotSize(64))
	if err != nil {
		return err
	}
	g, err := ping.Group("pongers")
	if err != nil {
		return err
	}
	if _, err := pong.Publish("ready", nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var worst time.Duration
	for n := 0; n < pingPongRounds; {
		t0 := time.Now()
		if err := g.Wait(ctx); err != nil {
			return err
		}
		worst = max(worst, time.Since(t0))
		for _, rec := range g.Claim(0) {
			if _, err := pong.Publish("pong", rec.Payload); err != nil {
				return err
			}
			n++
		}
	}
	fmt.Println("RESULT", worst.Nanoseconds())
	return nil
}

func TestWakeupPingPong(t *testing.T) {
	asChild(map[string]func(string, string) error{"pong": pongRole})
	a, path := openTestArena(t, 1<<20)
	ping, err := a.Ring("ping", WithSlots(64), WithSlotSize(64))
	require.NoError(t, err)
	pong, err := a.Ring("pong", WithSlots(64), WithSlotSize(64))
	require.NoError(t, err)
	_, err = ping.Group("pongers")
	require.NoError(t, err)
	pc := pong.Cursor()
	kid := startChild(t, "TestWakeupPingPong", "pong", path, "")
	awaitRecords(t, pc, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waits := make([]time.Duration, 0, pingPongRounds)
	start := time.Now()
	for i := 0; i < pingPongRounds; i++ {
		_, err := ping.Publish("ping", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
		t0 := time.Now()
		for {
			if rec, ok := pc.Next(); ok {
				require.Equal(t, strconv.Itoa(i), string(rec.Payload))
				break
			}
			require.NoError(t, pc.Wait(ctx))
		}
		waits = append(waits, time.Since(t0))
	}
	elapsed := time.Since(start)
	childWorst := time.Duration(uintField(t, kid.wait(t)[0]))
	slices.Sort(waits)
	t.Logf("%d round trips in %v: median %v, p99 %v, max %v; child's longest wait %v",
		pingPongRounds, elapsed, waits[len(waits)/2], waits[len(waits)*99/100], waits[len(waits)-1], childWorst)
	assert.Less(t, waits[len(waits)-1], hangBound)
	assert.Less(t, childWorst, hangBound)
	assert.Equal(t, CursorStats{Position: pingPongRounds + 2, Delivered: pingPongRounds + 1}, pc.Stats())
}

// ---- a producer killed inside Publish ----

func crasherRole(path, _ string) error {
	a, err := Open(path)
	if err != nil {
		return err
	}
	r, err := a.Ring("crash", WithSlots(16), WithSlotSize(64))
	if err != nil {
		return err
	}
	publishHook = func(seq uint64) {
		fmt.Println("HOOK", seq) // the parent kills us now
		for {
			time.Sleep(time.Hour)
		}
	}
	_, err = r.Publish("doomed", []byte("never committed"))
	return fmt.Errorf("publish returned: %v", err)
}

// crashPublisher starts a child that dies inside Publish with the lock held.
func crashPublisher(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidPublish$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRole+"=crasher", envPath+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "child ended before reaching the hook")
	require.True(t, strings.HasPrefix(sc.Text(), "HOOK"), sc.Text())
	require.NoError(t, cmd.Process.Kill())
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	ws := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child status %v", ws)
}

func TestCrashMidPublish(t *testing.T) {
	asChild(map[string]func(string, string) error{"crasher": crasherRole})
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("crash", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	c := r.Cursor()
	g, err := r.Group("g")
	require.NoError(t, err)
	_, err = r.Publish("ok", []byte("1"))
	require.NoError(t, err)

	crashPublisher(t, path) // dies holding the lock with record 2 half-written
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []uint64
	for c.Stats().Abandoned == 0 {
		for _, rec := range c.Read(0) {
			got = append(got, rec.Seq)
		}
		if c.Stats().Abandoned == 0 {
			require.NoError(t, c.Wait(ctx))
		}
	}
	cursorPassed := time.Since(killed)
	var claimed []uint64
	for g.Stats().Abandoned == 0 {
		for _, rec := range g.Claim(0) {
			claimed = append(claimed, rec.Seq)
		}
		if g.Stats().Abandoned == 0 {
			require.NoError(t, g.Wait(ctx))
		}
	}
	groupPassed := time.Since(killed)
	t.Logf("cursor passed the hole %v after the kill, group %v", cursorPassed, groupPassed)
	assert.Less(t, cursorPassed, hangBound)
	assert.Less(t, groupPassed, hangBound)
	assert.Equal(t, []uint64{1}, got)
	assert.Equal(t, []uint64{1}, claimed)
	assert.Equal(t, uint64(1), r.Stats().Abandoned)

	seq, err := r.Publish("ok", []byte("3"))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), seq)
	rec, ok := c.Next()
	require.True(t, ok)
	assert.Equal(t, uint64(3), rec.Seq)
	recs := g.Claim(0)
	require.Len(t, recs, 1)
	assert.Equal(t, uint64(3), recs[0].Seq)

	// Again, but this time the next publisher finds the dead owner first.
	crashPublisher(t, path)
	seq, err = r.Publish("ok", []byte("5"))
	require.NoError(t, err)
	assert.Equal(t, uint64(5), seq)
	assert.Equal(t, uint64(2), r.Stats().Abandoned)
	assert.Equal(t, uint64(3), r.Stats().Published)
	rec, ok = c.Next()
	require.True(t, ok)
	assert.Equal(t, uint64(5), rec.Seq)
	recs = g.Claim(0)
	require.Len(t, recs, 1)
	assert.Equal(t, uint64(5), recs[0].Seq)
	cs, gs := c.Stats(), g.Stats()
	assert.Equal(t, CursorStats{Position: 6, Delivered: 3, Abandoned: 2}, cs)
	assert.Equal(t, uint64(3), gs.Delivered)
	assert.Equal(t, uint64(2), gs.Abandoned)
}
