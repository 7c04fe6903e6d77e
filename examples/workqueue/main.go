// Command workqueue shows a shmarena ring used as an at-least-once work
// queue by several processes: a producer publishes jobs, worker processes
// share them through one acking consumer Group, and a worker that is
// SIGKILLed mid-run loses nothing: the jobs it held are delivered again.
//
// The supervisor (the process you start) creates an arena in anonymous
// memory (OpenMemfd: nothing to clean up, it vanishes with the last
// process), carves a ring "work" and a map "done", and creates the group
// "workers" bound to the topic "jobs" with
//
//	shmarena.WithAck(lease)             // each claim is a lease
//	shmarena.WithMaxDeliveries(5)       // then the job is dead-lettered
//	shmarena.WithDeadLetter("jobs.dead")
//
// It then starts a producer and the workers by re-executing itself,
// passing the arena as file descriptor 3 (exec.Cmd.ExtraFiles; the child
// calls OpenFile). The producer publishes with PublishWait, so it waits
// whenever the ring is full of unfinished jobs (the ring may be much
// smaller than the batch) and never overwrites one. A job's payload is its
// number, some random bytes and a SHA-256 checksum of the two; a worker
// claims a batch (g.Claim), hashes each payload and checks it, reports
// through the shared map, and only then acks the batch:
//
//	m.Add("job:<n>", 1)          // how many times job n was done
//	m.Add("worker:<i>:done", 1)  // per-worker count
//	m.Add("done", 1)             // the supervisor's progress count
//
// When a third of the jobs have gone by (-kill-at) the supervisor asks
// worker 0 (the "crash" counter) to park inside its next batch, holding
// leases it has not acked, SIGKILLs it there and starts it again. The
// survivors see at once that the dead worker's handle is gone and take
// its jobs again: those are done twice (the price of at least once), and
// the group counts them as redelivered.
//
// The program prints a progress line every half second, then a table of
// jobs per worker, the time, the group's counters, and a verdict line:
// "verdict: PASS - 300000 jobs done, 0 lost, N redelivered after 1 worker
// crash" when every job was done at least once with a good checksum, no
// job was done more often than the redeliveries explain, and nothing was
// lapped or dead-lettered; else "verdict: FAIL ...". It exits 0 on PASS, 1
// on FAIL, 2 on a setup error. Children exit when the supervisor closes
// their stdin (a pipe), including when it dies, and are also started with
// Pdeathsig SIGTERM.
//
// -at-most-once shows the same run with the group as it was before acks:
// no lease, no back-pressure (the producer uses Publish, which overwrites
// the oldest job when the ring is full). Jobs are lapped before any worker
// claims them, the killed worker's jobs are gone, and the verdict fails.
//
// Flags:
//
//	-jobs N        jobs to publish (default 300000)
//	-workers N     worker processes (default 3)
//	-slots N       ring slots (default 1024)
//	-size N        random payload bytes per job (default 64)
//	-rounds N      SHA-256 rounds of work per job (default 1)
//	-lease D       lease of a claim (default 5s)
//	-kill-at F     SIGKILL worker 0 when this fraction of the jobs is done
//	               (default 0.33; 0: no crash)
//	-at-most-once  today's default group: no acks, no back-pressure
//	-timeout D     give up waiting for the jobs after D (default 2m)
//
// Example:
//
//	go run ./examples/workqueue
//	go run ./examples/workqueue -at-most-once -jobs 30000
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/shmarena/shmarena"
)

type config struct {
	jobs, workers, slots, size, rounds int
	lease, timeout                     time.Duration
	killAt                             float64
	atMostOnce                         bool
	role                               string
	id                                 int
}

const (
	ringName   = "work"
	mapName    = "done"
	groupName  = "workers"
	topic      = "jobs"
	deadTopic  = "jobs.dead"
	maxDeliver = 5
	mapSlot    = 64 // keys are short: "job:<n>" and an 8-byte counter
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
	fs.IntVar(&c.jobs, "jobs", 300000, "jobs to publish")
	fs.IntVar(&c.workers, "workers", 3, "worker processes")
	fs.IntVar(&c.slots, "slots", 1024, "ring slots")
	fs.IntVar(&c.size, "size", 64, "random payload bytes per job")
	fs.IntVar(&c.rounds, "rounds", 1, "SHA-256 rounds of work per job")
	fs.DurationVar(&c.lease, "lease", 5*time.Second, "lease of a claim")
	fs.Float64Var(&c.killAt, "kill-at", 0.33, "SIGKILL worker 0 when this fraction of the jobs is done (0: never)")
	fs.BoolVar(&c.atMostOnce, "at-most-once", false, "use a group without acks or back-pressure, as before")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up waiting for the jobs after this long")
	fs.StringVar(&c.role, "role", "", "internal: set by the supervisor for a child process")
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
	case c.lease <= 0:
		return c, errors.New("-lease must be positive")
	case c.killAt < 0 || c.killAt >= 1:
		return c, errors.New("-kill-at must be in [0, 1)")
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
	switch c.role {
	case "worker", "producer":
		if err := runChild(c); err != nil {
			fmt.Fprintf(os.Stderr, "workqueue: %s %d: %v\n", c.role, c.id, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(supervise(c))
}

// childArgs are the flags a child needs to ask for the same shapes.
func childArgs(c config) []string {
	return []string{
		"-jobs=" + strconv.Itoa(c.jobs), "-slots=" + strconv.Itoa(c.slots), "-size=" + strconv.Itoa(c.size),
		"-rounds=" + strconv.Itoa(c.rounds), "-lease=" + c.lease.String(), "-at-most-once=" + strconv.FormatBool(c.atMostOnce),
	}
}

// Shapes and settings every process asks for.
func ringOptions(c config) []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(c.slots), shmarena.WithSlotSize(slotSize(c))}
}

// slotSize holds a job, or a dead letter of one (16 more bytes and the
// job's topic).
func slotSize(c config) int { return payloadLen(c) + 16 + len(topic) + len(deadTopic) + 24 }

func groupOptions(c config) []shmarena.ReaderOption {
	if c.atMostOnce {
		return []shmarena.ReaderOption{shmarena.WithTopic(topic)}
	}
	return []shmarena.ReaderOption{shmarena.WithTopic(topic), shmarena.WithAck(c.lease),
		shmarena.WithMaxDeliveries(maxDeliver), shmarena.WithDeadLetter(deadTopic)}
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
	ring, _ := shmarena.RingBytes(ringOptions(c)...)
	m, _ := shmarena.MapBytes(mapOptions(c)...)
	return shmarena.MinSize + ring + m
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
