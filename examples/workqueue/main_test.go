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
// a ring smaller than the batch with back-pressure (PASS, every job once),
// and -burst, where jobs are lapped before any worker starts (must FAIL,
// which shows the check catches lost jobs).
func TestWorkqueue(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "workqueue")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	t.Run("back-pressure", func(t *testing.T) {
		out, code := run(t, bin, "-jobs=3000", "-workers=4", "-slots=256", "-timeout=15s")
		if code != exitPass || !strings.Contains(out, "\nverdict: PASS - all 3000 jobs done exactly once by 4 workers") {
			t.Fatalf("exit %d, want PASS and 0:\n%s", code, out)
		}
		m := regexp.MustCompile(`(?m)^\s+total\s+(\d+)\s*$`).FindStringSubmatch(out)
		if m == nil || m[1] != "3000" {
			t.Errorf("worker table total %v, want 3000:\n%s", m, out)
		}
		if !strings.Contains(out, "delivered 3000, lapped 0, skipped 0, abandoned 0") {
			t.Errorf("group counters:\n%s", out)
		}
		rate := regexp.MustCompile(`throughput: (\d+) records/s`).FindStringSubmatch(out)
		if rate == nil {
			t.Errorf("no throughput line:\n%s", out)
		} else if n, _ := strconv.Atoi(rate[1]); n <= 0 {
			t.Errorf("throughput %s records/s", rate[1])
		}
	})

	t.Run("burst laps", func(t *testing.T) {
		out, code := run(t, bin, "-jobs=1000", "-workers=2", "-slots=256", "-burst", "-timeout=15s")
		if code != exitFail || !strings.Contains(out, "\nverdict: FAIL - 744 jobs were overwritten before any worker claimed them (lapped)") {
			t.Fatalf("exit %d, want FAIL (744 lapped) and 1:\n%s", code, out)
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
