// Package demo is the program behind examples/ratelimit: several HTTP
// worker processes enforcing one rate limit per client with
// ratelimit.Limiter over a shared store, a load generator, and a checker
// that prints a verdict. It is a package so that two commands share it:
// examples/ratelimit in the core module (shared memory only) and
// redis/examples/ratelimit in the redis module, which adds the Redis and
// Redis Cluster backends; the core module does not depend on go-redis.
//
// A supervisor starts N worker processes (it re-executes itself). Every
// worker serves HTTP on the same loopback port with SO_REUSEPORT, so the
// kernel spreads connections over them. Each request to / is limited per
// client (the X-Client-ID header, else the remote address) by
// ratelimit.Middleware to L requests per window W, in bursts of up to L
// (GCRA: one event every W/L, smoothly, with no double burst at a window
// edge). Answers carry the IETF draft's RateLimit-Policy and RateLimit
// fields (ratelimit.DraftRevision), X-Worker, and X-Decided: the worker's
// clock just before and just after the decision, in Unix nanoseconds. A
// denied request gets 429 with Retry-After. GET /stats returns each
// worker's allowed and denied counts, kept in the same store.
//
// Run with no flags, it drives itself: 20 clients each send twice the
// limit for 3 windows; then it prints a table per client and per worker
// and a verdict line, "verdict: PASS ..." or "verdict: FAIL ...". The
// checker holds the limiter to GCRA's two promises, for every client,
// from the decision times the workers report:
//
//   - never too many: any k allowed decisions that lie within a span of
//     Δ were at most L + Δ/(W/L) (Burst plus what the span refills);
//   - never too strict: every denial had, before it, some run of allowed
//     decisions that filled the bucket (more than L-1 + gap/(W/L)).
//
// Both use the widest reading of the [before, after] stamps, so the
// verdict holds on a busy machine; it exits 0 on PASS, 1 on FAIL, 2 on a
// setup error. -local gives each worker a limiter of its own, the broken
// design, to watch the verdict fail.
//
// Flags:
//
//	-backend B       store: shm (default) or, in the redis module's build, redis
//	-redis ADDR      Redis server (with -backend redis)
//	-redis-cluster A comma-separated Redis Cluster nodes (implies -backend redis)
//	-workers N       worker processes (default 4)
//	-limit L         requests allowed per client per window, and the burst (default 100)
//	-window W        window length (default 1s)
//	-clients C       load generator clients (default 20)
//	-windows K       windows of load to send (default 3)
//	-conns N         connections per client (default 4)
//	-load F          each client sends F*L requests per window (default 2)
//	-port P          loopback port; 0 picks a free one (default 0)
//	-path FILE       arena file for -backend shm (default under /dev/shm)
//	-serve           serve until SIGINT/SIGTERM instead of driving load
//	-keep            keep the arena file (shm) or the keys (redis) on exit
//	-local           limit in each worker's private memory (broken on purpose)
package demo

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shmarena/shmarena"
)

// Config holds the flags; workers get the same command line plus their
// role.
type Config struct {
	Workers, Limit, Clients, Windows, Conns, Port int
	Window                                        time.Duration
	Load                                          float64
	Path                                          string
	Serve, Keep, Local                            bool
	Backend, Redis, RedisCluster                  string
	// Prefix is the run's key prefix in a network store (set by the
	// supervisor for its workers).
	Prefix string

	role string // "" for the supervisor, "worker" in a worker process
	id   int
	args []string // the command line, for the workers
}

// A Backend opens the store of a run. Open is called once by the
// supervisor (Config.Worker false: create) and once in each worker
// (attach); the function it returns releases the store, and the
// supervisor's also removes the run's data unless -keep.
type Backend struct {
	Name string
	Open func(c *Config, supervisor bool) (shmarena.KeyValue, func() error, error)
}

// Exit statuses.
const (
	ExitPass  = 0
	ExitFail  = 1
	ExitSetup = 2
)

func parseFlags(args []string) (*Config, error) {
	c := &Config{args: args}
	fs := flag.NewFlagSet("ratelimit", flag.ContinueOnError)
	fs.StringVar(&c.Backend, "backend", "", "store: shm (default) or redis")
	fs.StringVar(&c.Redis, "redis", "127.0.0.1:6379", "Redis server address (-backend redis)")
	fs.StringVar(&c.RedisCluster, "redis-cluster", "", "comma-separated Redis Cluster nodes (implies -backend redis)")
	fs.IntVar(&c.Workers, "workers", 4, "worker processes")
	fs.IntVar(&c.Limit, "limit", 100, "requests allowed per client per window, and the burst")
	fs.DurationVar(&c.Window, "window", time.Second, "window length")
	fs.IntVar(&c.Clients, "clients", 20, "load generator clients")
	fs.IntVar(&c.Windows, "windows", 3, "windows of load to send")
	fs.IntVar(&c.Conns, "conns", 4, "connections per load generator client")
	fs.Float64Var(&c.Load, "load", 2, "each client sends load*limit requests per window")
	fs.IntVar(&c.Port, "port", 0, "loopback port (0 picks a free one)")
	fs.StringVar(&c.Path, "path", "", "arena file (default under /dev/shm, else os.TempDir())")
	fs.BoolVar(&c.Serve, "serve", false, "serve until SIGINT/SIGTERM instead of driving load")
	fs.BoolVar(&c.Keep, "keep", false, "keep the arena file or the Redis keys on exit")
	fs.BoolVar(&c.Local, "local", false, "limit in each worker's private memory (broken on purpose)")
	fs.StringVar(&c.Prefix, "prefix", "", "internal: the run's key prefix in Redis")
	fs.StringVar(&c.role, "role", "", "internal: set by the supervisor for a worker process")
	fs.IntVar(&c.id, "id", 0, "internal: worker number")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.Backend == "" {
		c.Backend = "shm"
		if c.RedisCluster != "" {
			c.Backend = "redis"
		}
	}
	switch {
	case c.Workers < 1:
		return c, errors.New("-workers must be at least 1")
	case c.Limit < 1:
		return c, errors.New("-limit must be at least 1")
	case c.Window < time.Millisecond || c.Window/time.Duration(c.Limit) <= 0:
		return c, errors.New("-window must be at least 1ms and -limit at most one a nanosecond")
	case c.Clients < 1 || c.Windows < 1 || c.Conns < 1:
		return c, errors.New("-clients, -windows and -conns must be at least 1")
	case c.Load <= 0:
		return c, errors.New("-load must be positive")
	case c.Port < 0 || c.Port > 65535:
		return c, errors.New("-port out of range")
	}
	return c, nil
}

// Main runs the program with args (without the program name) and returns
// its exit status. Shared memory is always available; backends adds
// others (the redis module's command adds "redis").
func Main(args []string, backends ...Backend) int {
	c, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		return ExitSetup
	}
	var b *Backend
	for _, cand := range append([]Backend{SharedMemory}, backends...) {
		if cand.Name == c.Backend {
			b = &cand
		}
	}
	if b == nil {
		fmt.Fprintf(os.Stderr, "ratelimit: this build has no %q backend; the Redis one lives in the redis module (the core module does not depend on go-redis):\n"+
			"  cd redis && go run ./examples/ratelimit -backend redis -redis 127.0.0.1:6379\n", c.Backend)
		return ExitSetup
	}
	if c.role == "worker" {
		if err := runWorker(c, b); err != nil {
			fmt.Fprintf(os.Stderr, "ratelimit: worker %d: %v\n", c.id, err)
			return 1
		}
		return 0
	}
	return supervise(c, b)
}

// limit is the ratelimit.Limit the flags ask for.
func (c *Config) limit() (rate, burst int, period time.Duration) { return c.Limit, c.Limit, c.Window }

// SharedMemory is the Backend of a map in an arena file at -path.
var SharedMemory = Backend{Name: "shm", Open: openArena}

const (
	arenaSize = 16 << 20
	mapName   = "ratelimit"
	mapSlots  = 1 << 14
	mapSlot   = 64
)

func mapOptions() []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(mapSlots), shmarena.WithSlotSize(mapSlot)}
}

func openArena(c *Config, supervisor bool) (shmarena.KeyValue, func() error, error) {
	opts := []shmarena.OpenOption{}
	if supervisor {
		// A fresh arena: the per-worker counts and the checks assume one run.
		if _, err := os.Lstat(c.Path); err == nil {
			return nil, nil, fmt.Errorf("%s exists; remove it or choose another -path", c.Path)
		}
		opts = append(opts, shmarena.WithSize(arenaSize))
	}
	a, err := shmarena.Open(c.Path, opts...)
	if err != nil {
		return nil, nil, err
	}
	m, err := a.Map(mapName, mapOptions()...)
	if err != nil {
		_ = a.Close()
		return nil, nil, err
	}
	release := func() error {
		err := a.Close()
		if supervisor {
			if c.Keep {
				fmt.Printf("kept arena file %s\n", c.Path)
			} else if rerr := os.Remove(c.Path); rerr != nil && err == nil {
				err = rerr
			}
		}
		return err
	}
	if supervisor {
		fmt.Printf("arena %s (%d MiB), map %q: %d slots of %d bytes\n", c.Path, arenaSize>>20, mapName, mapSlots, mapSlot)
	}
	return shmarena.NewKeyValue(m), release, nil
}

// defaultPath is the arena file used without -path.
func defaultPath() string {
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() || syscall.Access(dir, 2 /* W_OK */) != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, fmt.Sprintf("shmarena-ratelimit-%d", os.Getpid()))
}

// worker is a running worker process as the supervisor sees it.
type worker struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser // closing it tells the worker to exit
	addr  string
}

func supervise(c *Config, b *Backend) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.Path == "" {
		c.Path = defaultPath()
	}
	c.Prefix = fmt.Sprintf("ratelimit-demo:%d:%d:", os.Getpid(), time.Now().UnixNano())
	kv, release, err := b.Open(c, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		return ExitSetup
	}
	mode := "the shared " + c.Backend + " store"
	if c.Local {
		mode = "LOCAL per-worker limiters (-local: expected to fail)"
	}
	rate, burst, period := c.limit()
	fmt.Printf("limit %d requests per client per %v (GCRA, burst %d), decided in %s\n", rate, period, burst, mode)

	ws, err := startWorkers(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		cleanup(ws, release)
		return ExitSetup
	}
	status := ExitPass
	if c.Serve {
		fmt.Printf("serving on http://%s/ (GET / with X-Client-ID, GET /stats); Ctrl-C stops\n", ws[0].addr)
		<-ctx.Done()
		fmt.Println("stopping")
	} else {
		status = drive(ctx, c, ws[0].addr, kv)
	}
	cleanup(ws, release)
	return status
}

// startWorkers starts worker 0 on c.Port, learns the port it bound, and
// starts the others on that port. Each worker prints one line, "ready
// <pid> <addr>", once it listens.
func startWorkers(ctx context.Context, c *Config) ([]*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var ws []*worker
	port := c.Port
	for i := range c.Workers {
		w, err := startWorker(exe, c, i, port)
		if err != nil {
			return ws, err
		}
		ws = append(ws, w)
		if i == 0 {
			_, p, _ := strings.Cut(w.addr, ":")
			port, _ = strconv.Atoi(p)
		}
		if ctx.Err() != nil {
			return ws, ctx.Err()
		}
	}
	return ws, nil
}

func startWorker(exe string, c *Config, id, port int) (*worker, error) {
	args := append(append([]string{}, c.args...),
		"-role=worker", "-id="+strconv.Itoa(id), "-port="+strconv.Itoa(port),
		"-path="+c.Path, "-prefix="+c.Prefix, "-backend="+c.Backend)
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	// SIGTERM the worker if the supervisor dies. (Pdeathsig follows the
	// thread that started the child; the stdin pipe below covers the rest.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &worker{id: id, cmd: cmd, stdin: stdin}
	lines := bufio.NewReader(stdout)
	ready := make(chan error, 1)
	go func() {
		line, err := lines.ReadString('\n')
		if err != nil {
			ready <- fmt.Errorf("worker %d exited before it was ready", id)
			return
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "ready" {
			ready <- fmt.Errorf("worker %d: unexpected line %q", id, line)
			return
		}
		w.addr = f[2]
		fmt.Printf("worker %d: pid %s, listening on %s\n", id, f[1], f[2])
		ready <- nil
		_, _ = io.Copy(os.Stdout, lines)
	}()
	select {
	case err = <-ready:
	case <-time.After(10 * time.Second):
		err = fmt.Errorf("worker %d not ready after 10s", id)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return w, nil
}

// cleanup stops the workers (SIGTERM, then SIGKILL after 5s) and releases
// the store.
func cleanup(ws []*worker, release func() error) {
	for _, w := range ws {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		_ = w.stdin.Close()
	}
	for _, w := range ws {
		done := make(chan error, 1)
		go func() { done <- w.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintf(os.Stderr, "ratelimit: worker %d: %v\n", w.id, err)
			}
		case <-time.After(5 * time.Second):
			fmt.Fprintf(os.Stderr, "ratelimit: worker %d did not stop; killing it\n", w.id)
			_ = w.cmd.Process.Kill()
			<-done
		}
	}
	if err := release(); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
	}
}
