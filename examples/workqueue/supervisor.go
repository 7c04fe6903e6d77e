package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/shmarena/shmarena"
)

// child is a started producer or worker process.
type child struct {
	role  string
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func supervise(c config) int {
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
	// The group exists before the first publish, so it starts at job 1.
	g, err := r.Group(groupName, groupOptions(c)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		return exitSetup
	}
	mode := fmt.Sprintf("at least once (lease %v, max %d deliveries, dead letters to %q), producer uses PublishWait", c.lease, maxDeliver, deadTopic)
	if c.atMostOnce {
		mode = "at most once (-at-most-once: no acks, no back-pressure), producer uses Publish"
	}
	rs := r.Stats()
	fmt.Printf("arena: memfd, %d KiB; ring %q: %d slots of %d bytes; group %q on topic %q: %s\n",
		a.Size()>>10, ringName, rs.Slots, rs.SlotSize, groupName, topic, mode)

	var kids []*child
	defer func() { stopChildren(kids) }()
	for i := range c.workers {
		w, err := startChild(c, a, "worker", i)
		if err != nil {
			fmt.Fprintln(os.Stderr, "workqueue:", err)
			return exitSetup
		}
		kids = append(kids, w)
	}
	if err := waitCounter(ctx, m, "ready", int64(c.workers), 10*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "workqueue: workers not ready:", err)
		return exitSetup
	}
	t0 := time.Now()
	p, err := startChild(c, a, "producer", 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		return exitSetup
	}
	kids = append(kids, p)
	fmt.Printf("%d workers and a producer started\n", c.workers)

	crashes, timedOut, asked := 0, false, false
	deadline := t0.Add(c.timeout)
	nextLine := t0.Add(500 * time.Millisecond)
	var quietSince time.Time
	var lastDone int64
	for ctx.Err() == nil {
		done, _ := m.Counter("done")
		produced, _ := m.Counter("producer-done")
		st := g.Stats()
		now := time.Now()
		if crashes == 0 && c.killAt > 0 && st.Position > uint64(c.killAt*float64(c.jobs)) && !asked {
			// Ask worker 0 to park inside its next batch (see work).
			asked = true
			if _, err := m.Add("crash", 1); err != nil {
				fmt.Fprintln(os.Stderr, "workqueue:", err)
				return exitSetup
			}
		}
		if parked, _ := m.Counter(workerKey(0, "parked")); crashes == 0 && parked > 0 {
			w := kids[0].cmd.Process
			_ = w.Signal(syscall.SIGKILL)
			_ = kids[0].cmd.Wait()
			crashes++
			holding, _ := m.Counter(workerKey(0, "holding"))
			fmt.Printf("%6.1fs: SIGKILLed worker 0 (pid %d) holding a batch of %d jobs it had not acked, with %d jobs done in all\n",
				now.Sub(t0).Seconds(), w.Pid, holding, done)
			_, _ = m.Add(workerKey(0, "holding"), -holding)
			_, _ = m.Add("crash", -1) // before the restart: the new worker 0 must not park
			if kids[0], err = startChild(c, a, "worker", 0); err != nil {
				fmt.Fprintln(os.Stderr, "workqueue:", err)
				return exitSetup
			}
			fmt.Printf("%6.1fs: worker 0 restarted (pid %d)\n", time.Since(t0).Seconds(), kids[0].cmd.Process.Pid)
		}
		// Finished: the producer is done and the group has looked at every
		// job; an acking group has also finished every one (none pending).
		// At most once, jobs lost with a killed worker are never done: wait
		// for the count to stop moving.
		if produced > 0 && st.Lag == 0 && st.Pending == 0 {
			if c.atMostOnce && done != lastDone {
				quietSince = now
			}
			if !c.atMostOnce || now.Sub(quietSince) > 300*time.Millisecond {
				break
			}
		}
		lastDone = done
		if now.After(deadline) {
			timedOut = true
			break
		}
		if now.After(nextLine) {
			pub, _ := m.Counter("published")
			fmt.Printf("%6.1fs: published %d, done %d of %d, pending %d, redelivered %d, lapped %d; producer waited %d times\n",
				now.Sub(t0).Seconds(), min(pub, int64(c.jobs)), done, c.jobs, st.Pending, st.Redelivered, st.Lapped, r.Stats().Waited)
			nextLine = nextLine.Add(500 * time.Millisecond)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(t0)
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		return exitFail
	}
	stopChildren(kids)
	kids = nil
	return report(c, r, m, g, elapsed, crashes, timedOut)
}

func startChild(c config, a *shmarena.Arena, role string, id int) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, append(childArgs(c), "-role="+role, "-id="+strconv.Itoa(id))...)
	cmd.ExtraFiles = []*os.File{a.File()} // fd 3 in the child
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{role: role, id: id, cmd: cmd, stdin: stdin}, nil
}

// stopChildren closes every child's stdin, which ends its loop, and waits
// for them (SIGKILL after 5s).
func stopChildren(kids []*child) {
	for _, k := range kids {
		_ = k.stdin.Close()
	}
	for _, k := range kids {
		if k.cmd.ProcessState != nil {
			continue
		}
		done := make(chan error, 1)
		go func() { done <- k.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintf(os.Stderr, "workqueue: %s %d: %v\n", k.role, k.id, err)
			}
		case <-time.After(5 * time.Second):
			fmt.Fprintf(os.Stderr, "workqueue: %s %d did not stop; killing it\n", k.role, k.id)
			_ = k.cmd.Process.Kill()
			<-done
		}
	}
}

// report prints the results, checks every job, prints the verdict and
// returns the exit status.
func report(c config, r *shmarena.Ring, m *shmarena.Map, g *shmarena.Group, elapsed time.Duration, crashes int, timedOut bool) int {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "worker\tjobs\tshare\tbad checksum\tlost leases\t")
	var total int64
	for i := range c.workers {
		n, _ := m.Counter(workerKey(i, "done"))
		badSum, _ := m.Counter(workerKey(i, "bad"))
		lostLease, _ := m.Counter(workerKey(i, "lost-lease"))
		fmt.Fprintf(tw, "%d\t%d\t%.1f%%\t%d\t%d\t\n", i, n, 100*float64(n)/float64(c.jobs), badSum, lostLease)
		total += n
		if badSum > 0 {
			bad("worker %d saw %d payloads with a wrong checksum", i, badSum)
		}
	}
	fmt.Fprintf(tw, "total\t%d\t\t\t\t\n", total)
	tw.Flush()

	// Every job at least once; more than once only as redeliveries explain.
	var lost, dups, lostFirst uint64
	for n := uint64(1); n <= uint64(c.jobs); n++ {
		k, _ := m.Counter(jobKey(n))
		switch {
		case k == 0:
			if lost++; lostFirst == 0 {
				lostFirst = n
			}
		case k > 1:
			dups += uint64(k - 1)
		}
	}
	st, rs := g.Stats(), r.Stats()
	fmt.Println()
	fmt.Printf("%d jobs in %v: %.0f jobs/s (published, claimed, checked, reported and acked)\n",
		c.jobs, elapsed.Round(time.Millisecond), float64(c.jobs)/elapsed.Seconds())
	fmt.Printf("group %q: delivered %d, redelivered %d, dead-lettered %d, lapped %d, pending %d\n",
		st.Name, st.Delivered, st.Redelivered, st.DeadLettered, st.Lapped, st.Pending)
	fmt.Printf("ring %q: published %d; producer waited for room %d times, refused %d times\n", r.Name(), rs.Published, rs.Waited, rs.Full)
	fmt.Printf("jobs done twice or more: %d extra runs (redelivered: %d)\n", dups, st.Redelivered)
	fmt.Println()
	if st.Lapped > 0 {
		bad("%d jobs were overwritten before any worker claimed them (lapped)", st.Lapped)
	}
	if lost > 0 {
		bad("%d jobs lost: never done (first: job %d; %d lapped, %d claimed by a worker that died)",
			lost, lostFirst, st.Lapped, lost-min(lost, st.Lapped))
	}
	if dups > st.Redelivered {
		bad("%d extra runs of jobs, more than the %d redeliveries", dups, st.Redelivered)
	}
	if st.DeadLettered > 0 {
		bad("%d jobs dead-lettered", st.DeadLettered)
	}
	if timedOut {
		bad("gave up after %v", c.timeout)
	}
	if len(problems) == 0 {
		crash := "1 worker crash"
		if crashes != 1 {
			crash = fmt.Sprintf("%d worker crashes", crashes)
		}
		fmt.Printf("verdict: PASS - %d jobs done, 0 lost, %d redelivered after %s\n", c.jobs, st.Redelivered, crash)
		return exitPass
	}
	for _, p := range problems {
		fmt.Println("  problem:", p)
	}
	fmt.Printf("verdict: FAIL - %s\n", problems[0])
	return exitFail
}
