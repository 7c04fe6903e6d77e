package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestWorkqueue builds the example and runs it end to end as a subprocess:
// the at-least-once pool, with worker 0 SIGKILLed in the middle of a batch
// and restarted (PASS: every job done, duplicates no more than the
// redeliveries), and -at-most-once, where jobs are lapped and the killed
// worker's batch is lost (must FAIL, which shows the check catches lost
// jobs).
func TestWorkqueue(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "workqueue")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	t.Run("at least once", func(t *testing.T) {
		out, code := run(t, bin, "-jobs=30000", "-slots=256", "-timeout=60s")
		m := regexp.MustCompile(`\nverdict: PASS - 30000 jobs done, 0 lost, (\d+) redelivered after 1 worker crash\n`).FindStringSubmatch(out)
		if code != exitPass || m == nil {
			t.Fatalf("exit %d, want PASS and 0:\n%s", code, out)
		}
		if !strings.Contains(out, "SIGKILLed worker 0") || !strings.Contains(out, "worker 0 restarted") {
			t.Errorf("no crash and restart reported:\n%s", out)
		}
		held := regexp.MustCompile(`holding a batch of (\d+) jobs it had not acked`).FindStringSubmatch(out)
		if held == nil || held[1] == "0" || held[1] != m[1] {
			t.Errorf("the killed worker's batch %v must be what was redelivered (%s):\n%s", held, m[1], out)
		}
		total := regexp.MustCompile(`(?m)^\s+total\s+(\d+)\s*$`).FindStringSubmatch(out)
		if total == nil {
			t.Fatalf("no worker table total:\n%s", out)
		}
		if n, _ := strconv.Atoi(total[1]); n < 30000 {
			t.Errorf("workers report %d jobs, want at least 30000:\n%s", n, out)
		}
		if !strings.Contains(out, "dead-lettered 0, lapped 0, pending 0") {
			t.Errorf("group counters:\n%s", out)
		}
	})

	t.Run("at most once loses jobs", func(t *testing.T) {
		out, code := run(t, bin, "-jobs=30000", "-slots=256", "-at-most-once", "-timeout=60s")
		if code != exitFail || !regexp.MustCompile(`\nverdict: FAIL - \d+ jobs were overwritten before any worker claimed them \(lapped\)`).MatchString(out) {
			t.Fatalf("exit %d, want FAIL (lapped) and 1:\n%s", code, out)
		}
		if !regexp.MustCompile(`problem: \d+ jobs lost: never done`).MatchString(out) {
			t.Errorf("no lost jobs reported:\n%s", out)
		}
	})
}

func run(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}
