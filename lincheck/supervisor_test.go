package lincheck

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The supervisor: it creates a round's arena, starts the workers, kills
// some of them at random moments and starts them again, and, once the
// round is over, reads what is left in the map and the ring itself,
// logged like a worker's operations.

// A roundConfig says how one round runs.
type roundConfig struct {
	bin     string        // the worker binary: this test binary, or a broken build of it
	workers int           // processes at once
	dur     time.Duration // how long they run
	kills   int           // SIGKILLs during the round, each followed by a restart
	ns      bool          // start every other worker in a PID namespace of its own
}

// A round is what a round did.
type round struct {
	logs         []string // one per client: worker incarnations, then the supervisor's reads
	kills        int
	nsWorkers    int // incarnations started in a PID namespace
	incarnations int
	lapped       uint64
	abandoned    uint64
	ended        map[int]int64 // per worker incarnation (client), when the supervisor saw it end
}

// nsWrap is how a worker is started in a PID namespace of its own, with
// its own /proc: unshare forks the worker as pid 1 of the new namespace.
var nsWrap = []string{"unshare", "--pid", "--fork", "--kill-child", "--mount-proc"}

// nsUsable reports whether this machine lets us make PID namespaces, and
// if not, why.
func nsUsable() (bool, string) {
	if _, err := exec.LookPath("unshare"); err != nil {
		return false, "unshare (util-linux) is not installed"
	}
	out, err := exec.Command(nsWrap[0], append(slices.Clone(nsWrap[1:]), "true")...).CombinedOutput()
	if err != nil {
		return false, fmt.Sprintf("unshare is not permitted here (%v: %s): run as root or with user namespaces enabled", err, strings.TrimSpace(string(out)))
	}
	return true, ""
}

type incarnation struct {
	client int
	cmd    *exec.Cmd
	out    bytes.Buffer
	done   chan error
	killed bool
}

// runRound runs one round in dir and returns its logs.
func runRound(cfg roundConfig, dir string, seed uint64) (*round, error) {
	path := filepath.Join(dir, "arena")
	regs, err := openRegions(path, true)
	if err != nil {
		return nil, err
	}
	defer regs.a.Close()
	rng := rand.New(rand.NewPCG(seed, 0))
	rd := &round{ended: map[int]int64{}}
	deadline := mono() + cfg.dur.Nanoseconds()
	slots := make([]*incarnation, cfg.workers)
	start := func(slot int) error {
		client := len(rd.logs)
		rd.logs = append(rd.logs, filepath.Join(dir, fmt.Sprintf("client-%03d.log", client)))
		args := []string{cfg.bin, "-test.run=^$"}
		if cfg.ns && slot%2 == 1 {
			args = append(slices.Clone(nsWrap), args...)
			rd.nsWorkers++
		}
		inc := &incarnation{client: client, cmd: exec.Command(args[0], args[1:]...), done: make(chan error, 1)}
		inc.cmd.Env = append(os.Environ(),
			envRole+"=worker", envArena+"="+path, envLog+"="+rd.logs[client],
			envClient+"="+strconv.Itoa(client), envDeadline+"="+strconv.FormatInt(deadline, 10),
			envSeed+"="+strconv.FormatUint(seed, 10))
		inc.cmd.Stdout, inc.cmd.Stderr = &inc.out, &inc.out
		// A process group of its own: a kill of the group reaches the
		// worker, where a kill of unshare alone might not.
		inc.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// Wait also waits for the output pipe to close, which a process
		// still holding it (a namespace being torn down) can delay for
		// minutes after the worker is gone; its output is not worth that.
		inc.cmd.WaitDelay = 10 * time.Second
		if err := inc.cmd.Start(); err != nil {
			return err
		}
		go func() { inc.done <- inc.cmd.Wait() }()
		slots[slot] = inc
		rd.incarnations++
		return nil
	}
	var errs []error
	for i := range slots {
		if err := start(i); err != nil {
			errs = append(errs, err)
		}
	}
	// Kills at random moments in the middle 80% of the round.
	at := make([]time.Duration, cfg.kills)
	for i := range at {
		at[i] = cfg.dur/10 + time.Duration(rng.Int64N(int64(cfg.dur*8/10)))
	}
	slices.Sort(at)
	begin := time.Now()
	for _, d := range at {
		if len(errs) > 0 {
			break
		}
		time.Sleep(time.Until(begin.Add(d)))
		slot := rng.IntN(len(slots))
		inc := slots[slot]
		kerr := syscall.Kill(-inc.cmd.Process.Pid, syscall.SIGKILL)
		werr := <-inc.done
		rd.ended[inc.client] = mono()
		if kerr != nil { // it had ended: say how
			errs = append(errs, fmt.Errorf("worker %v ended before the round did (%v): %v\n%s", inc.cmd.Args, kerr, werr, inc.out.String()))
			break
		}
		inc.killed = true
		rd.kills++
		if mono() < deadline-(200*time.Millisecond).Nanoseconds() {
			if err := start(slot); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Wait for the rest, then check each ended well.
	limit := time.After(time.Duration(deadline-mono()) + 30*time.Second)
	for _, inc := range slots {
		if inc.killed {
			continue
		}
		select {
		case err := <-inc.done:
			rd.ended[inc.client] = mono()
			if err != nil {
				errs = append(errs, fmt.Errorf("worker %v: %w\n%s", inc.cmd.Args, err, inc.out.String()))
			}
		case <-limit:
			_ = syscall.Kill(-inc.cmd.Process.Pid, syscall.SIGKILL)
			<-inc.done
			rd.ended[inc.client] = mono()
			errs = append(errs, fmt.Errorf("worker %v still running 30 s after the round's end\n%s", inc.cmd.Args, inc.out.String()))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := finalReads(regs, rd, dir, seed); err != nil {
		return nil, err
	}
	st := regs.group.Stats()
	rd.lapped, rd.abandoned = st.Lapped, st.Abandoned
	if st := regs.ackGroup.Stats(); st.Pending != 0 || st.Lapped != 0 {
		return nil, fmt.Errorf("the acking group after the final claims: %+v", st)
	}
	return rd, nil
}

// finalReads logs, as one more client, a Load of every key and Claims
// until the group has nothing left: the state the round ended in, which a
// lost write or a lost record contradicts.
func finalReads(regs *regions, rd *round, dir string, seed uint64) error {
	client := len(rd.logs)
	rd.logs = append(rd.logs, filepath.Join(dir, fmt.Sprintf("client-%03d.log", client)))
	w, err := newRecorder(regs, client, seed, rd.logs[client])
	if err != nil {
		return err
	}
	defer w.log.Close()
	for i, s := range mapShapes {
		for k := 0; k < keysPerMap; k++ {
			w.id++
			key := "k" + strconv.Itoa(k)
			c := logRec{Ev: "call", ID: w.id, Op: opLoad, Key: s.name + "/" + key}
			if err := w.do(&c, regs.maps[i], key); err != nil {
				return err
			}
		}
	}
	for n := 0; n < ringSlots; n++ {
		w.id++
		c := logRec{Ev: "call", ID: w.id, Op: opClaim}
		if err := w.do(&c, nil, ""); err != nil {
			return err
		}
		if regs.group.Position() >= regs.ring.Head() {
			// One more, empty: the model checks nothing was left.
			w.id++
			c := logRec{Ev: "call", ID: w.id, Op: opClaim}
			if err := w.do(&c, nil, ""); err != nil {
				return err
			}
			return finalAckReads(w, regs)
		}
	}
	return fmt.Errorf("the group still has records after %d claims", ringSlots)
}

// finalAckReads claims and acks, as the same client, every record left in
// the acking group (leases of dead workers, records Nacked with a delay),
// then logs one more claim, empty: the model checks nothing was left.
func finalAckReads(w *recorder, regs *regions) error {
	for start := time.Now(); time.Since(start) < 10*time.Second; {
		w.id++
		c := logRec{Ev: "call", ID: w.id, Op: opAClaim, Max: 6} // all kept (see do)
		if err := w.do(&c, nil, ""); err != nil {
			return err
		}
		if len(w.held) > 0 {
			w.id++
			c := logRec{Ev: "call", ID: w.id, Op: opAAck}
			for _, rec := range w.held {
				c.Recs = append(c.Recs, ackRec{Seq: rec.Seq, Deliv: rec.Deliveries})
			}
			w.picked, w.held = append(w.picked[:0], w.held...), w.held[:0]
			if err := w.do(&c, nil, ""); err != nil {
				return err
			}
			continue
		}
		if st := regs.ackGroup.Stats(); st.Pending == 0 && st.Position == regs.ackRing.Head() {
			w.id++
			c := logRec{Ev: "call", ID: w.id, Op: opAClaim}
			return w.do(&c, nil, "")
		}
		time.Sleep(5 * time.Millisecond) // a Nack's delay, or a dead lease noticed
	}
	return fmt.Errorf("the acking group still has records after 10 s: %+v", regs.ackGroup.Stats())
}
