package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shmarena/shmarena/examples/ratelimit/demo"
)

// TestRatelimit builds the example and runs it end to end as a subprocess:
// self-driven with the shared map (PASS: no run of allowed requests over
// GCRA's bound, no denial under it), with -local (must FAIL, which
// shows the checker catches a limit that does not hold across workers),
// -serve answered by hand then stopped with SIGINT, and -serve with its
// supervisor killed (the workers must exit on their own).
func TestRatelimit(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ratelimit")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	small := []string{"-workers=3", "-clients=6", "-windows=3", "-window=250ms", "-limit=10"}

	t.Run("drive", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "arena")
		out, code := run(t, bin, append(small, "-path="+path)...)
		if code != demo.ExitPass || !strings.Contains(out, "\nverdict: PASS") {
			t.Fatalf("exit %d, want PASS and 0:\n%s", code, out)
		}
		for i := 1; i <= 3; i++ {
			if !strings.Contains(out, fmt.Sprintf("window %d/3: ", i)) {
				t.Errorf("no progress line for window %d:\n%s", i, out)
			}
		}
		if !regexp.MustCompile(`(?m)^\s+total\s+\d+\s+\d+\s+[1-9]\d*\s+0\s+0\s+0\s*$`).MatchString(out) {
			t.Errorf("client table shows no denials, or errors, or decisions out of GCRA:\n%s", out)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("arena file left behind: %v", err)
		}
	})

	t.Run("no redis in this build", func(t *testing.T) {
		out, code := run(t, bin, "-backend=redis", "-redis=127.0.0.1:1")
		if code != demo.ExitSetup || !strings.Contains(out, "cd redis && go run ./examples/ratelimit -backend redis") {
			t.Fatalf("exit %d, want 2 and the command that has the Redis backend:\n%s", code, out)
		}
	})

	t.Run("local counters fail", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "arena")
		out, code := run(t, bin, append(small, "-local", "-path="+path)...)
		if code != demo.ExitFail || !strings.Contains(out, "\nverdict: FAIL") || !strings.Contains(out, "over the limit") {
			t.Fatalf("exit %d, want FAIL (over the limit) and 1:\n%s", code, out)
		}
	})

	t.Run("serve and SIGINT", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "arena")
		p := start(t, bin, "-serve", "-workers=2", "-limit=2", "-window=10s", "-path="+path)
		addr := p.waitFor(t, regexp.MustCompile(`serving on http://(\S+)/`))
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("arena file while serving: %v", err)
		}
		var denied *http.Response
		for range 10 {
			resp := get(t, "http://"+addr+"/", "test-client")
			for _, h := range []string{"RateLimit-Policy", "RateLimit", "X-Decided", "X-Worker"} {
				if resp.Header.Get(h) == "" {
					t.Errorf("status %s without %s", resp.Status, h)
				}
			}
			if resp.StatusCode == http.StatusTooManyRequests {
				denied = resp
				break
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %s", resp.Status)
			}
		}
		if denied == nil {
			t.Fatal("10 requests with limit 2 were never denied")
		}
		if ra, err := strconv.Atoi(denied.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 10 {
			t.Errorf("Retry-After %q, want 1..10 seconds", denied.Header.Get("Retry-After"))
		}
		if rl := denied.Header.Get("RateLimit"); !strings.Contains(rl, ";r=0;") {
			t.Errorf("429 with RateLimit %q, want r=0", rl)
		}

		resp := get(t, "http://"+addr+"/stats", "")
		var doc demo.StatsDoc
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		var served, deniedN int64
		for _, w := range doc.Workers {
			served += w.Served
			deniedN += w.Denied
		}
		if len(doc.Workers) != 2 || served < 3 || deniedN < 1 || doc.Backend != "shm" {
			t.Errorf("stats: %+v", doc)
		}

		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t); code != 0 {
			t.Errorf("exit %d after SIGINT, want 0:\n%s", code, p.out.String())
		}
		for _, pid := range p.pids {
			waitGone(t, pid)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("arena file left behind: %v", err)
		}
	})

	t.Run("supervisor killed", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "arena")
		p := start(t, bin, "-serve", "-workers=3", "-path="+path)
		p.waitFor(t, regexp.MustCompile(`serving on http://(\S+)/`))
		if len(p.pids) != 3 {
			t.Fatalf("worker pids %v", p.pids)
		}
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		p.wait(t)
		for _, pid := range p.pids {
			waitGone(t, pid) // Pdeathsig or end of file on stdin
		}
	})
}

// hangBound is how long the test waits for the program before it calls it
// a hang: seconds of margin on a quiet machine, and enough for a busy one.
const hangBound = time.Minute

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

// proc is a running supervisor whose stdout lines arrive on lines.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
	out   *bytes.Buffer // everything read so far
	pids  []int
	done  chan struct{}
}

var workerLine = regexp.MustCompile(`^worker \d+: pid (\d+),`)

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, lines: make(chan string, 100), out: &bytes.Buffer{}, done: make(chan struct{})}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			p.wait(t)
		}
	})
	return p
}

// waitFor reads lines until re matches one and returns its first group,
// noting worker pids on the way.
func (p *proc) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.After(hangBound)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("exited before %q:\n%s", re, p.out.String())
			}
			p.out.WriteString(line + "\n")
			if m := workerLine.FindStringSubmatch(line); m != nil {
				pid, _ := strconv.Atoi(m[1])
				p.pids = append(p.pids, pid)
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m[1]
			}
		case <-deadline:
			t.Fatalf("no %q after %v:\n%s", re, hangBound, p.out.String())
		}
	}
}

// wait drains stdout, waits for exit (at most hangBound) and returns the
// status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	timer := time.AfterFunc(hangBound, func() { _ = p.cmd.Process.Kill() })
	defer timer.Stop()
	for line := range p.lines {
		p.out.WriteString(line + "\n")
	}
	_ = p.cmd.Wait()
	close(p.done)
	return p.cmd.ProcessState.ExitCode()
}

func get(t *testing.T, url, client string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if client != "" {
		req.Header.Set("X-Client-ID", client)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// waitGone waits up to hangBound for pid to exit (gone, or a zombie nobody
// reaped).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(hangBound); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
			return
		}
	}
	t.Errorf("worker pid %d still running %v after its supervisor ended", pid, hangBound)
}
