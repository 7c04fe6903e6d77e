// Command workqueue shows a shmarena ring used as a work queue by several
// processes: one producer publishes jobs, and worker processes share them
// through one consumer Group, each job going to exactly one worker.
//
// The producer (the process you start) creates an arena in anonymous
// memory (OpenMemfd: nothing to clean up, it vanishes with the last
// process), carves a ring "work" and a map "done", creates the group
// "workers" bound to the topic "jobs", and then starts the workers by
// re-executing itself, passing the arena as file descriptor 3
// (exec.Cmd.ExtraFiles; the worker calls OpenFile). Each worker joins the
// group and ranges over g.Records(ctx). A job's payload is its number, some
// random bytes and a SHA-256 checksum of the two; the worker's work is to
// hash the payload and check it. It then reports through the shared map:
//
//	m.Add("job:<n>", 1)          // must end at exactly 1 for every job
//	m.Add("worker:<i>:done", 1)  // per-worker count
//	m.Add("done", 1)             // the producer waits for this to reach -jobs
//
// Lapped jobs are failures, and the producer prevents them with
// back-pressure: it never runs more than half a ring ahead of the group's
// shared position, so the ring may be smaller than the batch. A job that is
// overwritten before any worker claims it is counted by the group as
// Lapped; it is not republished, it makes the verdict FAIL (-burst shows
// this on purpose). Delivery through a Group is at most once: a worker
// that dies between claiming a job and reporting it loses that job, which
// the check also reports.
//
// The program prints a progress line every half second, then a table of
// jobs per worker, the total time and records per second, the group's
// counters, and a verdict line, "verdict: PASS ..." when every job was done
// exactly once with a good checksum, else "verdict: FAIL ...". It exits 0
// on PASS, 1 on FAIL, 2 on a setup error. Workers exit when the producer
// closes their stdin (a pipe), including when it dies, and are also
// started with Pdeathsig SIGTERM.
//
// Flags:
//
//	-jobs N       jobs to publish (default 10000)
//	-workers N    worker processes (default 4)
//	-slots N      ring slots (default 4096)
//	-size N       random payload bytes per job (default 128)
//	-rounds N     SHA-256 rounds of work per job (default 1)
//	-timeout D    give up waiting for the jobs after D (default 60s)
//	-burst        publish every job before starting the workers, with no
//	              back-pressure: with -jobs > -slots the oldest jobs are
//	              overwritten before anyone claims them, and the verdict fails
//
// Example:
//
//	go run ./examples/workqueue
//	go run ./examples/workqueue -jobs 100000 -workers 2 -slots 1024
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/shmarena/shmarena"
)

type config struct {
	jobs, workers, slots, size, rounds int
	timeout                            time.Duration
	burst                              bool
	role                               string
	id                                 int
}

const (
	ringName  = "work"
	mapName   = "done"
	groupName = "workers"
	topic     = "jobs"
	mapSlot   = 64 // keys are short: "job:<n>" and an 8-byte counter
)

// Exit statuses.
const (
	exitPass  = 0
	exitFail  = 1
	exitSetup = 2
)

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("workqueue", flag.ContinueOnError)
	fs.IntVar(&c.jobs, "jobs", 10000, "jobs to publish")
	fs.IntVar(&c.workers, "workers", 4, "worker processes")
	fs.IntVar(&c.slots, "slots", 4096, "ring slots")
	fs.IntVar(&c.size, "size", 128, "random payload bytes per job")
	fs.IntVar(&c.rounds, "rounds", 1, "SHA-256 rounds of work per job")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "give up waiting for the jobs after this long")
	fs.BoolVar(&c.burst, "burst", false, "publish everything before starting the workers, without back-pressure")
	fs.StringVar(&c.role, "role", "", "internal: set by the producer for a worker process")
	fs.IntVar(&c.id, "id", 0, "internal: worker number")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.jobs < 1 || c.workers < 1 || c.rounds < 1:
		return c, errors.New("-jobs, -workers and -rounds must be at least 1")
	case c.slots < 2:
		return c, errors.New("-slots must be at least 2")
	case c.size < 0:
		return c, errors.New("-size must not be negative")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		os.Exit(exitSetup)
	}
	if c.role == "worker" {
		if err := runWorker(c); err != nil {
			fmt.Fprintf(os.Stderr, "workqueue: worker %d: %v\n", c.id, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(produce(c))
}

// Shapes every process asks for.
func ringOptions(c config) []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(c.slots), shmarena.WithSlotSize(payloadLen(c) + 8 + len(topic) + 24)}
}

func mapOptions(c config) []shmarena.RegionOption {
	n := 64
	for n < 2*c.jobs+64 { // room for every job key at under half load
		n *= 2
	}
	return []shmarena.RegionOption{shmarena.WithSlots(n), shmarena.WithSlotSize(mapSlot)}
}

// arenaSize is enough for the ring, the map and the arena's own header.
func arenaSize(c config) int64 {
	ring := int64(c.slots) * int64(payloadLen(c)+8+len(topic)+24)
	mapSlots := int64(2*c.jobs + 64)
	return 2<<20 + ring + 2*mapSlots*mapSlot // generous: both rounded up, plus headers
}

// A payload is the job number (8 bytes), size random bytes, and the
// SHA-256 of those two.
func payloadLen(c config) int { return 8 + c.size + sha256.Size }

func makePayload(n uint64, size int, rng *rand.ChaCha8) []byte {
	p := make([]byte, 8+size, 8+size+sha256.Size)
	binary.LittleEndian.PutUint64(p, n)
	_, _ = rng.Read(p[8:])
	sum := sha256.Sum256(p)
	return append(p, sum[:]...)
}

// checkPayload does the job's work: SHA-256 over the payload, which must
// match its checksum, then rounds-1 more rounds over the digest (work to
// tune with -rounds). It returns the job number and whether the checksum
// matched.
func checkPayload(p []byte, rounds int) (uint64, bool) {
	if len(p) < 8+sha256.Size {
		return 0, false
	}
	body := p[:len(p)-sha256.Size]
	sum := sha256.Sum256(body)
	ok := string(sum[:]) == string(p[len(body):])
	for range rounds - 1 {
		sum = sha256.Sum256(sum[:])
	}
	return binary.LittleEndian.Uint64(body), ok
}

func jobKey(n uint64) string               { return "job:" + strconv.FormatUint(n, 10) }
func workerKey(id int, what string) string { return "worker:" + strconv.Itoa(id) + ":" + what }

// worker is a started worker process.
type worker struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func produce(c config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := shmarena.OpenMemfd("workqueue", shmarena.WithSize(arenaSize(c)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		return exitSetup
	}
	defer a.Close()
	r, err := a.Ring(ringName, ringOptions(c)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		return exitSetup
	}
	m, err := a.Map(mapName, mapOptions(c)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		return exitSetup
	}
	// The group exists before the first publish, so it starts at record 1
	// and no job is published before the workers' position.
	g, err := r.Group(groupName, shmarena.WithTopic(topic))
	if err != nil {
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		return exitSetup
	}
	rs := r.Stats()
	fmt.Printf("arena: memfd, %d KiB; ring %q: %d slots of %d bytes; map %q: %d slots; group %q on topic %q\n",
		a.Size()>>10, ringName, rs.Slots, rs.SlotSize, mapName, m.Capacity(), groupName, topic)

	rng := rand.NewChaCha8([32]byte{1})
	var ws []*worker
	defer func() { stopWorkers(ws) }()
	publish := func() time.Duration {
		t0 := time.Now()
		ahead := uint64(max(c.slots/2, 1))
		for n := uint64(1); n <= uint64(c.jobs); n++ {
			// Back-pressure: stay within half a ring of the group, so no job
			// is overwritten before a worker claims it.
			for !c.burst && r.Head()-g.Position() >= ahead && ctx.Err() == nil {
				time.Sleep(50 * time.Microsecond)
			}
			if _, err := r.Publish(topic, makePayload(n, c.size, rng)); err != nil {
				fmt.Fprintln(os.Stderr, "workqueue: publish:", err)
				return time.Since(t0)
			}
		}
		return time.Since(t0)
	}

	var pubTime time.Duration
	if c.burst {
		pubTime = publish()
		fmt.Printf("-burst: published %d jobs in %v before starting any worker\n", c.jobs, pubTime.Round(time.Microsecond))
	}
	tWorkers := time.Now()
	ws, err = startWorkers(c, a)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		return exitSetup
	}
	if err := waitCounter(ctx, m, "ready", int64(c.workers), 10*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "workqueue: workers not ready:", err)
		return exitSetup
	}
	fmt.Printf("%d workers ready\n", c.workers)

	t0, since := time.Now(), "the first publish"
	if c.burst { // the jobs were waiting: time the workers from their start
		t0, since = tWorkers, "starting the workers (-burst)"
	}
	finished := make(chan struct{})
	if !c.burst {
		go func() {
			pubTime = publish()
			close(finished)
		}()
	} else {
		close(finished)
	}
	timedOut := waitDone(ctx, c, m, g, t0)
	<-finished
	elapsed := time.Since(t0)
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		return exitFail
	}
	stopWorkers(ws)
	ws = nil
	return report(c, m, g, pubTime, elapsed, since, timedOut)
}

// waitDone waits until every job is accounted for (done, or lost to a lap
// or a hole, which can never be done), printing progress, and reports
// whether it gave up at the timeout instead.
func waitDone(ctx context.Context, c config, m *shmarena.Map, g *shmarena.Group, t0 time.Time) (timedOut bool) {
	deadline := t0.Add(c.timeout)
	nextLine := t0.Add(500 * time.Millisecond)
	for ctx.Err() == nil {
		done, _ := m.Counter("done")
		st := g.Stats()
		lost := int64(st.Lapped + st.Abandoned)
		now := time.Now()
		if done+lost >= int64(c.jobs) {
			return false
		}
		if now.After(deadline) {
			return true
		}
		if now.After(nextLine) {
			fmt.Printf("%6.1fs: claimed %d, done %d of %d, lapped %d\n", now.Sub(t0).Seconds(), st.Delivered, done, c.jobs, st.Lapped)
			nextLine = nextLine.Add(500 * time.Millisecond)
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

func waitCounter(ctx context.Context, m *shmarena.Map, key string, want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if n, _ := m.Counter(key); n >= want {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			n, _ := m.Counter(key)
			return fmt.Errorf("%s is %d after %v, want %d", key, n, timeout, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func startWorkers(c config, a *shmarena.Arena) ([]*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var ws []*worker
	for i := range c.workers {
		cmd := exec.Command(exe, "-role=worker", "-id="+strconv.Itoa(i),
			"-jobs="+strconv.Itoa(c.jobs), "-slots="+strconv.Itoa(c.slots),
			"-size="+strconv.Itoa(c.size), "-rounds="+strconv.Itoa(c.rounds))
		cmd.ExtraFiles = []*os.File{a.File()} // fd 3 in the worker
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return ws, err
		}
		if err := cmd.Start(); err != nil {
			return ws, err
		}
		ws = append(ws, &worker{id: i, cmd: cmd, stdin: stdin})
	}
	return ws, nil
}

// stopWorkers closes every worker's stdin, which ends its loop, and waits
// for them (SIGKILL after 5s).
func stopWorkers(ws []*worker) {
	for _, w := range ws {
		_ = w.stdin.Close()
	}
	for _, w := range ws {
		done := make(chan error, 1)
		go func() { done <- w.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintf(os.Stderr, "workqueue: worker %d: %v\n", w.id, err)
			}
		case <-time.After(5 * time.Second):
			fmt.Fprintf(os.Stderr, "workqueue: worker %d did not stop; killing it\n", w.id)
			_ = w.cmd.Process.Kill()
			<-done
		}
	}
}

// report prints the results, checks every job, prints the verdict and
// returns the exit status.
func report(c config, m *shmarena.Map, g *shmarena.Group, pubTime, elapsed time.Duration, since string, timedOut bool) int {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "worker\tjobs\tshare\tbad checksum\t")
	var total int64
	for i := range c.workers {
		n, _ := m.Counter(workerKey(i, "done"))
		badSum, _ := m.Counter(workerKey(i, "bad"))
		fmt.Fprintf(tw, "%d\t%d\t%.1f%%\t%d\t\n", i, n, 100*float64(n)/float64(c.jobs), badSum)
		total += n
		if badSum > 0 {
			bad("worker %d saw %d payloads with a wrong checksum", i, badSum)
		}
	}
	fmt.Fprintf(tw, "total\t%d\t\t\t\n", total)
	tw.Flush()

	// Every job exactly once.
	var missing, dup, missingFirst, dupFirst uint64
	for n := uint64(1); n <= uint64(c.jobs); n++ {
		k, _ := m.Counter(jobKey(n))
		switch {
		case k == 0:
			if missing++; missingFirst == 0 {
				missingFirst = n
			}
		case k > 1:
			if dup++; dupFirst == 0 {
				dupFirst = n
			}
		}
	}
	st := g.Stats()
	fmt.Println()
	fmt.Printf("published %d jobs in %v; all accounted for %v after %s\n", c.jobs, pubTime.Round(time.Microsecond), elapsed.Round(time.Microsecond), since)
	fmt.Printf("throughput: %.0f records/s (published, claimed, checked and reported)\n", float64(total)/elapsed.Seconds())
	fmt.Printf("group %q: delivered %d, lapped %d, skipped %d, abandoned %d\n", st.Name, st.Delivered, st.Lapped, st.Skipped, st.Abandoned)
	fmt.Println()
	if st.Lapped > 0 {
		bad("%d jobs were overwritten before any worker claimed them (lapped)", st.Lapped)
	}
	if missing > 0 {
		bad("%d jobs never done (first: job %d)", missing, missingFirst)
	}
	if dup > 0 {
		bad("%d jobs done more than once (first: job %d)", dup, dupFirst)
	}
	if total != int64(c.jobs) {
		bad("workers report %d jobs, %d were published", total, c.jobs)
	}
	if st.Delivered != uint64(c.jobs) {
		bad("group delivered %d records, %d were published", st.Delivered, c.jobs)
	}
	if timedOut {
		bad("gave up after %v", c.timeout)
	}
	if len(problems) == 0 {
		fmt.Printf("verdict: PASS - all %d jobs done exactly once by %d workers, every checksum good\n", c.jobs, c.workers)
		return exitPass
	}
	for _, p := range problems {
		fmt.Println("  problem:", p)
	}
	fmt.Printf("verdict: FAIL - %s\n", problems[0])
	return exitFail
}
