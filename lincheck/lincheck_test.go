package lincheck

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
)

var (
	long      = flag.Bool("long", false, "run for minutes: more, longer rounds with more kills")
	flagRound = flag.Duration("round", 0, "how long a round runs (0: the default, or -long's)")
	flagRuns  = flag.Int("rounds", 0, "how many rounds (0: the default, or -long's)")
	flagKills = flag.Int("kills", -1, "SIGKILLs a round (-1: the default, or -long's)")
)

// config returns how the rounds run with worker binary bin: a short run by
// default (CI), minutes with -long.
func config(t *testing.T, bin string) (roundConfig, int) {
	// Short rounds: porcupine's cost grows faster than a key's history,
	// so many short histories check faster than a few long ones.
	cfg := roundConfig{bin: bin, workers: 6, dur: 2 * time.Second, kills: 3}
	rounds := 4
	if *long {
		cfg.dur, cfg.kills, rounds = 3*time.Second, 6, 40
	}
	if *flagRound > 0 {
		cfg.dur = *flagRound
	}
	if *flagRuns > 0 {
		rounds = *flagRuns
	}
	if *flagKills >= 0 {
		cfg.kills = *flagKills
	}
	ok, why := nsUsable()
	if ok {
		cfg.ns = true
	} else {
		t.Logf("PID namespaces skipped: %s; every worker runs in this namespace", why)
	}
	return cfg, rounds
}

// outDir is where visualizations of failures go: $LINCHECK_OUT, or a new
// directory under the system's temporary directory, kept after the test.
func outDir() string {
	if d := os.Getenv("LINCHECK_OUT"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("lincheck-%s-%d", time.Now().Format("20060102-150405"), os.Getpid()))
}

// A summary is what a run of rounds did.
type summary struct {
	rounds, histories, partitions int
	ops, unknown, droppedReads    int
	busyReads, kills, nsWorkers   int
	incarnations, ackOps          int
	checkTime, loadTime           time.Duration
	failures                      []string
	firstFailure                  time.Duration // from the start of the first round
}

// runRounds runs up to n rounds with cfg, checking each one's history as
// it ends; with stopAtFailure it stops at the first failure.
func runRounds(t *testing.T, cfg roundConfig, n int, stopAtFailure bool, out string) *summary {
	s := &summary{}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d; %d rounds of %v, %d workers (half in PID namespaces: %t), %d kills a round", seed, n, cfg.dur, cfg.workers, cfg.ns, cfg.kills)
	base := t.TempDir()
	begin := time.Now()
	for i := 0; i < n && !(stopAtFailure && len(s.failures) > 0); i++ {
		dir := filepath.Join(base, fmt.Sprintf("round-%02d", i))
		require.NoError(t, os.Mkdir(dir, 0o755))
		rd, err := runRound(cfg, dir, seed+uint64(i))
		require.NoError(t, err, "round %d", i)
		require.Zero(t, rd.lapped, "round %d: the group was lapped, which the ring model does not cover: make the ring larger", i)
		loadStart := time.Now()
		h, err := loadHistory(rd.logs)
		require.NoError(t, err, "round %d", i)
		s.loadTime += time.Since(loadStart)
		s.rounds++
		s.ops += h.ops
		s.unknown += h.unknown
		s.droppedReads += h.droppedReads
		s.busyReads += h.busyReads
		s.kills += rd.kills
		s.nsWorkers += rd.nsWorkers
		s.incarnations += rd.incarnations

		failed := len(s.failures)
		fail := func(format string, args ...any) {
			if len(s.failures) == 0 {
				s.firstFailure = time.Since(begin)
			}
			s.failures = append(s.failures, fmt.Sprintf("round %d: ", i)+fmt.Sprintf(format, args...))
		}
		logs := filepath.Join(out, fmt.Sprintf("round%02d-logs", i)) // where a failed round's logs go
		start := time.Now()
		ackModel := ackParamsFor(rd, h).model()
		s.ackOps += len(h.ackOps)
		for _, c := range []struct {
			name  string
			model porcupine.Model
			ops   []porcupine.Operation
		}{{"map", mapModel, h.mapOps}, {"ring", ringModel, h.ringOps}, {"ack", ackModel, h.ackOps}} {
			v, err := check(c.model, c.ops, out, fmt.Sprintf("round%02d-%s", i, c.name))
			require.NoError(t, err)
			s.histories++
			if c.model.Partition != nil {
				s.partitions += len(c.model.Partition(c.ops))
			} else {
				s.partitions++
			}
			switch {
			case v.timedOut:
				fail("the %s history (%d operations) was not checked within %v", c.name, len(c.ops), checkTimeout)
			case !v.ok:
				fail("the %s history is not linearizable (%s); visualization: %s (logs in %s)", c.name, v.bad, v.vis, logs)
			}
		}
		for _, p := range checkPayloads(h.ringOps) {
			fail("ring: %s", p)
		}
		for _, p := range checkAckPayloads(h.ackOps) {
			fail("acking group: %s", p)
		}
		if dead := deadPublishes(h.ringOps); rd.abandoned > uint64(dead) {
			fail("ring: %d records abandoned, but only %d Publish calls were killed", rd.abandoned, dead)
		}
		s.checkTime += time.Since(start)
		// A round's logs take tens of megabytes: keep only a failed one's.
		if len(s.failures) > failed {
			require.NoError(t, os.MkdirAll(out, 0o755))
			require.NoError(t, os.Rename(dir, logs))
		} else {
			require.NoError(t, os.RemoveAll(dir))
		}
	}
	return s
}

func deadPublishes(ops []porcupine.Operation) int {
	n := 0
	for _, op := range ops {
		if op.Input.(ringIn).publish && op.Output.(ringOut).unknown {
			n++
		}
	}
	return n
}

func (s *summary) report(t *testing.T) {
	t.Logf("%d rounds: %d histories (%d partitions: keys, rings, acking groups) checked, %d operations (%d on the acking group), %d killed mid-operation (%d of them reads, left out), %d busy reads; %d kills, %d worker processes (%d in PID namespaces); checker time %v (reading the logs %v)",
		s.rounds, s.histories, s.partitions, s.ops, s.ackOps, s.unknown, s.droppedReads, s.busyReads, s.kills, s.incarnations, s.nsWorkers, s.checkTime.Round(time.Millisecond), s.loadTime.Round(time.Millisecond))
}

// TestLinearizable records rounds of multi-process histories with kills
// and requires every one to be linearizable.
func TestLinearizable(t *testing.T) {
	cfg, rounds := config(t, os.Args[0])
	s := runRounds(t, cfg, rounds, false, outDir())
	s.report(t)
	for _, f := range s.failures {
		t.Error(f)
	}
	require.Equal(t, rounds, s.rounds)
	require.Equal(t, rounds*cfg.kills, s.kills, "every planned kill was made")
	require.Greater(t, s.ops, 1000*rounds, "the workers got some work done")
}

// TestBrokenBuildIsCaught builds the workers with the shmarena_broken tag,
// whose CompareAndSwap compares outside the stripe lock (see the core's
// lincheck_broken.go), and requires the checker to find a history that is
// not linearizable within the default run's rounds.
func TestBrokenBuildIsCaught(t *testing.T) {
	caughtWithTag(t, "shmarena_broken", "a CompareAndSwap that compares outside the stripe lock")
}

// TestBrokenAckIsCaught builds the workers with the shmarena_broken_ack
// tag, whose Ack finishes a record whoever holds its lease (see the core's
// lincheck_broken_ack.go), and requires the checker to catch it.
func TestBrokenAckIsCaught(t *testing.T) {
	caughtWithTag(t, "shmarena_broken_ack", "an Ack that ignores who holds the lease")
}

func caughtWithTag(t *testing.T, tag, what string) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot build the broken workers")
	}
	bin := filepath.Join(t.TempDir(), "lincheck-broken.test")
	start := time.Now()
	out, err := exec.Command(goBin, "test", "-c", "-tags", tag, "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("built the broken workers (%s) in %v", tag, time.Since(start).Round(time.Millisecond))
	cfg, _ := config(t, bin)
	const rounds = 3
	// The failure is expected: its visualization and logs go where the
	// test cleans up, unless $LINCHECK_OUT asks to keep them.
	dest := filepath.Join(t.TempDir(), "out")
	if os.Getenv("LINCHECK_OUT") != "" {
		dest = outDir()
	}
	s := runRounds(t, cfg, rounds, true, dest)
	s.report(t)
	require.NotEmpty(t, s.failures, "%s went unnoticed for %d rounds", what, s.rounds)
	t.Logf("caught %v after the first round began (round %d of at most %d): %s", s.firstFailure.Round(time.Millisecond), s.rounds, rounds, strings.Join(s.failures, "; "))
}
