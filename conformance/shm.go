package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shmarena/shmarena"
)

// SharedMemory is the Backend of a Map and a Ring in an arena file, each
// test with an arena of its own. Its Run starts each job in a process of
// its own: the test binary again, which must call RunChild first thing in
// its TestMain.
type SharedMemory struct {
	path, mapName, ringName string
	capacity                int
}

// NewSharedMemory returns the shared-memory Backend.
func NewSharedMemory() *SharedMemory { return &SharedMemory{} }

// childEnv carries a child's work: a JSON childSpec.
const childEnv = "SHMARENA_CONFORMANCE_CHILD"

type childSpec struct {
	Path     string `json:"path"`
	Map      string `json:"map,omitempty"`
	Ring     string `json:"ring,omitempty"`
	Capacity int    `json:"capacity,omitempty"`
	Job      Job    `json:"job"`
}

const arenaSize = 32 << 20

func mapOptions() []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(8192), shmarena.WithSlotSize(64)}
}

func ringOptions(capacity int) []shmarena.RegionOption {
	if capacity <= 0 {
		capacity = 4096
	}
	return []shmarena.RegionOption{shmarena.WithSlots(capacity), shmarena.WithSlotSize(128),
		shmarena.WithMaxInFlight(min(capacity, 512))}
}

func (s *SharedMemory) arena(t *testing.T) *shmarena.Arena {
	t.Helper()
	s.path = filepath.Join(t.TempDir(), "arena")
	a, err := shmarena.Open(s.path, shmarena.WithSize(arenaSize))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// KeyValue is a Map in a fresh arena.
func (s *SharedMemory) KeyValue(t *testing.T) shmarena.KeyValue {
	a := s.arena(t)
	s.mapName, s.ringName = "kv", ""
	m, err := a.Map(s.mapName, mapOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	return shmarena.NewKeyValue(m)
}

// Queue is a Ring of capacity slots (default 4096) in a fresh arena.
func (s *SharedMemory) Queue(t *testing.T, capacity int) shmarena.Queue {
	a := s.arena(t)
	s.ringName, s.mapName, s.capacity = "queue", "", capacity
	r, err := a.Ring(s.ringName, ringOptions(capacity)...)
	if err != nil {
		t.Fatal(err)
	}
	return shmarena.NewQueue(r)
}

// Run starts one process per job and waits for all of them.
func (s *SharedMemory) Run(t *testing.T, jobs ...Job) [][]string {
	t.Helper()
	cmds := make([]*exec.Cmd, len(jobs))
	outs := make([]*bytes.Buffer, len(jobs))
	for i, j := range jobs {
		spec, err := json.Marshal(childSpec{Path: s.path, Map: s.mapName, Ring: s.ringName, Capacity: s.capacity, Job: j})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
		outs[i] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[i], os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	lines := make([][]string, len(jobs))
	for i, cmd := range cmds {
		err := cmd.Wait()
		var exit *exec.ExitError
		killed := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if err != nil && !(jobs[i].Kind == JobConsumeDie && killed) {
			t.Errorf("child %d (%s): %v\n%s", i, jobs[i].Kind, err, outs[i])
		}
		sc := bufio.NewScanner(outs[i])
		for sc.Scan() {
			lines[i] = append(lines[i], strings.TrimSpace(sc.Text()))
		}
	}
	return lines
}

// RunChild runs the job of a child process SharedMemory.Run started, and
// exits; otherwise (the environment names no job) it returns at once.
// Call it first thing in the TestMain of a package that runs the suite
// on SharedMemory.
func RunChild() {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	os.Exit(runChild(raw))
}

func runChild(raw string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "conformance child:", err)
		return 2
	}
	a, err := shmarena.Open(spec.Path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance child:", err)
		return 2
	}
	defer a.Close()
	var kv shmarena.KeyValue
	var q shmarena.Queue
	if spec.Map != "" {
		m, err := a.Map(spec.Map, mapOptions()...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance child:", err)
			return 2
		}
		kv = shmarena.NewKeyValue(m)
	}
	if spec.Ring != "" {
		r, err := a.Ring(spec.Ring, ringOptions(spec.Capacity)...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance child:", err)
			return 2
		}
		q = shmarena.NewQueue(r)
	}
	err = RunJob(context.Background(), kv, q, spec.Job, os.Stdout)
	if errors.Is(err, ErrDie) {
		_ = os.Stdout.Sync()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // die holding the leases
		select {}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance child:", err)
		return 1
	}
	return 0
}
