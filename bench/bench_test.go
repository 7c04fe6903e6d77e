package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shmarena/shmarena"
)

// TestQuickRun builds the harness and runs it in quick mode, so CI keeps
// it working: every section runs, results.md and the charts are written.
func TestQuickRun(t *testing.T) {
	// Stat the harness sources so go test's cache notices their changes
	// (it cannot see what the go build below reads).
	srcs, err := filepath.Glob("cmd/shmbench/*.go")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("harness sources: %v %v", srcs, err)
	}
	for _, f := range srcs {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "shmbench")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shmbench")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	args := []string{"-short", "-out", dir}
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Println("TestQuickRun: redis-server is not installed; skipping the Redis peers (apt-get install -y redis-server to include them)")
		args = append(args, "-redis=off")
	}
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shmbench -short: %v\n%s", err, stderr.String())
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(md) != string(out) {
		t.Errorf("stdout and results.md differ")
	}
	for _, want := range []string{"# shmarena benchmark results", "CPU:", "## Targets", "## Map: operations per second",
		"| read hit | 1 |", "| delete | 2 |", "## Ring", "| shmarena ring |", "| Unix socket |", "| pipe |", "## Scaling",
		"median of 3 rounds", "## Latency", "| Load | 1 | shmarena |", "| Claim+Ack | 2 | shmarena |", "| Publish | 2 | RWMutex map (2 goroutines) |",
		"## First touch", ", Prefault (", ", no Prefault ("} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	if strings.Contains(string(md), "did not do what they should") {
		t.Errorf("some operations misbehaved:\n%s", md)
	}
	if !strings.Contains(string(md), "| Load | 1 | Redis |") && !strings.Contains(string(md), "Redis rows skipped") {
		t.Errorf("results.md neither has the Redis latency rows nor says why not")
	}
	for _, f := range []string{"map-64B-1proc.svg", "map-64B-2proc.svg", "ring.svg", "scale-load.svg", "scale-size.svg",
		"latency-1proc.svg", "latency-2proc.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("chart %s: %v", f, err)
			continue
		}
		if !strings.Contains(string(b), "<svg") {
			t.Errorf("chart %s is not SVG", f)
		}
	}
}

// The benchmarks below isolate shmarena's map hot paths for profiling:
//
//	go test -run '^$' -bench Map -cpuprofile cpu.out && go tool pprof -top cpu.out
func benchMap(b *testing.B) (*shmarena.Map, []string) { return benchMapN(b, 1<<18, 100_000) }

func benchMapN(b *testing.B, slots, n int) (*shmarena.Map, []string) {
	dir := b.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "shmbench-test-")
		if err == nil {
			dir = d
			b.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	a, err := shmarena.Open(filepath.Join(dir, "a"), shmarena.WithSize(64<<20))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	m, err := a.Map("m", shmarena.WithSlots(slots), shmarena.WithSlotSize(128))
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	val := make([]byte, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%020d", i)
		if err := m.Store(keys[i], val); err != nil {
			b.Fatal(err)
		}
	}
	return m, keys
}

func BenchmarkMapLoad(b *testing.B) {
	m, keys := benchMap(b)
	buf := make([]byte, 0, 64)
	var ok bool
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if buf, ok = m.AppendLoad(buf[:0], keys[i%len(keys)]); !ok {
			b.Fatal("miss")
		}
	}
}

// BenchmarkMapLoadSmall reads a cache-resident map (1,000 keys): what is
// left is the read path's own instructions, not memory stalls.
func BenchmarkMapLoadSmall(b *testing.B) {
	m, keys := benchMapN(b, 2048, 1000)
	buf := make([]byte, 0, 64)
	var ok bool
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if buf, ok = m.AppendLoad(buf[:0], keys[i%len(keys)]); !ok {
			b.Fatal("miss")
		}
	}
}

func BenchmarkGoMapLoadSmall(b *testing.B) {
	keys := make([]string, 1000)
	m := map[string][]byte{}
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%020d", i)
		m[strings.Clone(keys[i])] = make([]byte, 64)
	}
	buf := make([]byte, 0, 64)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		buf = append(buf[:0], m[keys[i%len(keys)]]...)
	}
}

func BenchmarkMapStore(b *testing.B) {
	m, keys := benchMap(b)
	val := make([]byte, 64)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := m.Store(keys[i%len(keys)], val); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMapAdd(b *testing.B) {
	m, keys := benchMap(b)
	ctrs := make([]string, 1000)
	for i := range ctrs {
		ctrs[i] = "c" + keys[i][1:]
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := m.Add(ctrs[i%len(ctrs)], 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGoMapLoad(b *testing.B) {
	keys := make([]string, 100_000)
	m := map[string][]byte{}
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%020d", i)
		m[keys[i]] = make([]byte, 64)
	}
	buf := make([]byte, 0, 64)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		buf = append(buf[:0], m[keys[i%len(keys)]]...)
	}
}
