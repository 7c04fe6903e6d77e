// Command ratelimit shows several HTTP worker processes enforcing one rate
// limit per client through a counter in a shared shmarena map, with no
// network hop to a Redis or a coordinator.
//
// A supervisor creates the arena file, then starts N worker processes (it
// re-executes itself: Go cannot fork). Every worker serves HTTP on the same
// loopback port with SO_REUSEPORT, so the kernel spreads connections over
// them. Each request to / is counted against its client (the X-Client-ID
// header, else the remote address) in a fixed wall-clock window:
//
//	window = now.UnixNano() / W          (the same number in every process)
//	n, _   = m.Add("rl:<client>:<window>", 1, shmarena.WithTTL(2*W))
//	allow  = n <= L
//
// The window number is part of the key, so every window starts a fresh
// counter and the windows are aligned to wall-clock time in every process;
// the TTL only reclaims the key afterwards (two windows, so a request that
// read the clock just before a boundary still finds its window's counter).
// Answers carry RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
// (IETF httpapi draft), X-Ratelimit-Window (the window number used) and
// X-Worker; a denied request gets 429 Too Many Requests with Retry-After.
// GET /stats returns the map's shared Stats and each worker's served,
// allowed and denied counts, which the workers also keep in the shared map.
//
// A request whose Add completes more than a window after its window ended
// (a stall) is denied with X-Ratelimit-Late: 1, since its window's counter
// may have lapsed and restarted: the limiter fails closed.
//
// Each worker also keeps its own totals in the map, allowed and denied in
// all ("worker:<i>:allowed") and per window ("win:<window>:w<i>:allowed",
// same TTL), from which -serve prints a line per window. Only that worker
// writes them, so workers never wait for each other on a hot key.
//
// Expiry in a shmarena map is lazy and an insert does not reuse another
// key's lapsed slot, so the supervisor sweeps once per window: it notes the
// keys of finished windows and, three windows later, reads each once,
// which turns the lapsed entry into a reusable tombstone.
//
// Run with no flags, the program drives itself: a built-in load generator
// sends real HTTP requests from 20 clients, each at twice the limit, for 3
// whole windows, printing a line per window. It then prints a table per
// client and per worker and a verdict line, "verdict: PASS ..." or
// "verdict: FAIL ...", checking that every client was allowed at most L
// requests (indeed exactly min(L, sent)) in every window across all
// workers, using the window number each answer reports and checking that
// number against the client's own clock. It exits 0 on PASS, 1 on FAIL, 2
// on a setup error, and stops its workers.
//
// With -serve it keeps serving (for curl or a load tool) until SIGINT or
// SIGTERM, printing a line per window that saw traffic. On exit the
// supervisor stops every worker and removes the arena file unless -keep.
// Workers exit on their own if the supervisor dies: they are started with
// Pdeathsig SIGTERM and also watch their stdin, a pipe from the
// supervisor, for end of file.
//
// Flags:
//
//	-workers N     worker processes (default 4)
//	-limit L       requests allowed per client per window (default 100)
//	-window W      window length (default 1s)
//	-clients C     load generator clients (default 20)
//	-windows K     whole windows of load to send (default 3)
//	-conns N       connections per client, so a client meets several
//	               workers (default 4)
//	-load F        each client sends F*L requests per window (default 2)
//	-port P        loopback port to serve on; 0 picks a free one (default 0)
//	-path FILE     arena file (default /dev/shm/shmarena-ratelimit-<pid>,
//	               or in os.TempDir() when /dev/shm is not there)
//	-serve         serve until interrupted instead of driving load
//	-keep          keep the arena file on exit
//	-local         count in each worker's own memory instead of the shared
//	               map: the broken design, to watch the verdict fail
//
// Examples:
//
//	go run ./examples/ratelimit
//	go run ./examples/ratelimit -serve -port 8080 &
//	curl -i -H 'X-Client-ID: alice' localhost:8080/
//	curl -s localhost:8080/stats
package main

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

// config holds the flags; workers get the same values on their command line.
type config struct {
	workers, limit, clients, windows, conns, port int
	window                                        time.Duration
	load                                          float64
	path                                          string
	serve, keep, local                            bool

	role string // "" for the supervisor, "worker" in a worker process
	id   int    // worker number
}

const (
	arenaSize = 16 << 20
	mapName   = "ratelimit"
	mapSlots  = 1 << 16
	mapSlot   = 128
)

// Exit statuses.
const (
	exitPass  = 0
	exitFail  = 1
	exitSetup = 2
)

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("ratelimit", flag.ContinueOnError)
	fs.IntVar(&c.workers, "workers", 4, "worker processes")
	fs.IntVar(&c.limit, "limit", 100, "requests allowed per client per window")
	fs.DurationVar(&c.window, "window", time.Second, "window length")
	fs.IntVar(&c.clients, "clients", 20, "load generator clients")
	fs.IntVar(&c.windows, "windows", 3, "whole windows of load to send")
	fs.IntVar(&c.conns, "conns", 4, "connections per load generator client")
	fs.Float64Var(&c.load, "load", 2, "each client sends load*limit requests per window")
	fs.IntVar(&c.port, "port", 0, "loopback port (0 picks a free one)")
	fs.StringVar(&c.path, "path", "", "arena file (default under /dev/shm, else os.TempDir())")
	fs.BoolVar(&c.serve, "serve", false, "serve until SIGINT/SIGTERM instead of driving load")
	fs.BoolVar(&c.keep, "keep", false, "keep the arena file on exit")
	fs.BoolVar(&c.local, "local", false, "count in each worker's memory, not the shared map (broken on purpose)")
	fs.StringVar(&c.role, "role", "", "internal: set by the supervisor for a worker process")
	fs.IntVar(&c.id, "id", 0, "internal: worker number")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.workers < 1:
		return c, errors.New("-workers must be at least 1")
	case c.limit < 1:
		return c, errors.New("-limit must be at least 1")
	case c.window < time.Millisecond:
		return c, errors.New("-window must be at least 1ms")
	case c.clients < 1 || c.windows < 1 || c.conns < 1:
		return c, errors.New("-clients, -windows and -conns must be at least 1")
	case c.load <= 0:
		return c, errors.New("-load must be positive")
	case c.port < 0 || c.port > 65535:
		return c, errors.New("-port out of range")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		os.Exit(exitSetup)
	}
	if c.role == "worker" {
		if err := runWorker(c); err != nil {
			fmt.Fprintf(os.Stderr, "ratelimit: worker %d: %v\n", c.id, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(supervise(c))
}

// windowOf is the window number of t: the server's key and the checker's
// alignment both use it, so they agree on every boundary.
func windowOf(t time.Time, w time.Duration) int64 { return t.UnixNano() / int64(w) }

// windowStart is the wall-clock start of window n.
func windowStart(n int64, w time.Duration) time.Time { return time.Unix(0, n*int64(w)) }

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

func supervise(c config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if c.path == "" {
		c.path = defaultPath()
	}
	// A fresh arena: the per-worker counters and the checks assume one run.
	if _, err := os.Lstat(c.path); err == nil {
		fmt.Fprintf(os.Stderr, "ratelimit: %s exists; remove it or choose another -path\n", c.path)
		return exitSetup
	}
	a, err := shmarena.Open(c.path, shmarena.WithSize(arenaSize))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		return exitSetup
	}
	m, err := a.Map(mapName, mapOptions()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		cleanup(c, a, nil)
		return exitSetup
	}
	fmt.Printf("arena %s (%d MiB), map %q: %d slots of %d bytes\n", c.path, arenaSize>>20, mapName, mapSlots, mapSlot)
	mode := "shared map"
	if c.local {
		mode = "LOCAL per-worker counters (-local: expected to fail)"
	}
	fmt.Printf("limit %d requests per client per %v window, counted in the %s\n", c.limit, c.window, mode)

	ws, err := startWorkers(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		cleanup(c, a, ws)
		return exitSetup
	}
	addr := ws[0].addr

	status := exitPass
	sweeper := newSweeper(m)
	if c.serve {
		fmt.Printf("serving on http://%s/ (GET / with X-Client-ID, GET /stats); Ctrl-C stops\n", addr)
		serveProgress(ctx, c, m, sweeper)
	} else {
		done := make(chan struct{})
		go func() { // sweep while the load runs, as in -serve
			t := time.NewTicker(c.window)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					sweeper.sweep(time.Now(), c.window)
				}
			}
		}()
		status = drive(ctx, c, addr)
		close(done)
	}
	cleanup(c, a, ws)
	return status
}

func mapOptions() []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(mapSlots), shmarena.WithSlotSize(mapSlot)}
}

// startWorkers starts worker 0 on c.port, learns the port it bound, and
// starts the others on that port. Each worker prints one line, "ready <pid>
// <addr>", on its stdout once it listens.
func startWorkers(ctx context.Context, c config) ([]*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var ws []*worker
	port := c.port
	for i := range c.workers {
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

func startWorker(exe string, c config, id, port int) (*worker, error) {
	cmd := exec.Command(exe,
		"-role=worker", "-id="+strconv.Itoa(id),
		"-path="+c.path, "-port="+strconv.Itoa(port),
		"-workers="+strconv.Itoa(c.workers),
		"-limit="+strconv.Itoa(c.limit), "-window="+c.window.String(),
		"-local="+strconv.FormatBool(c.local))
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
		_, _ = io.Copy(os.Stdout, lines) // workers print nothing more, but never block them
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

// cleanup stops the workers (SIGTERM, then SIGKILL after 5s), closes the
// arena and removes its file unless -keep.
func cleanup(c config, a *shmarena.Arena, ws []*worker) {
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
	_ = a.Close()
	if c.keep {
		fmt.Printf("kept arena file %s\n", c.path)
		return
	}
	if err := os.Remove(c.path); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
	}
}

// serveProgress prints a line for each window that saw traffic, just after
// it ends, from the per-window totals the workers keep in the map, and
// sweeps lapsed counters, until ctx ends.
func serveProgress(ctx context.Context, c config, m *shmarena.Map, s *sweeper) {
	for {
		win := windowOf(time.Now(), c.window)
		select {
		case <-ctx.Done():
			fmt.Println("stopping")
			return
		case <-time.After(time.Until(windowStart(win+1, c.window).Add(c.window / 20))):
		}
		reaped := s.sweep(time.Now(), c.window)
		var allowed, denied int64
		var per []string
		for i := range c.workers {
			a, _ := m.Counter(windowKey(win, i, "allowed"))
			d, _ := m.Counter(windowKey(win, i, "denied"))
			allowed, denied = allowed+a, denied+d
			per = append(per, fmt.Sprintf("w%d %d", i, a+d))
		}
		if allowed+denied == 0 {
			continue
		}
		st := m.Stats()
		fmt.Printf("window %d: served %d (allowed %d, denied %d) [%s]; map used %d, tombstones %d, swept %d\n",
			win, allowed+denied, allowed, denied, strings.Join(per, " "), st.Used, st.Tombstones, reaped)
	}
}

// A sweeper reclaims the counters of finished windows. Expiry is lazy and
// Keys skips lapsed entries, so it notes each finished window's keys while
// they are live and reads them once they have lapsed (TTL 2W, so three
// windows later), which makes them tombstones that inserts reuse.
type sweeper struct {
	m       *shmarena.Map
	pending map[string]int64 // key -> its window
}

func newSweeper(m *shmarena.Map) *sweeper {
	return &sweeper{m: m, pending: map[string]int64{}}
}

func (s *sweeper) sweep(now time.Time, w time.Duration) (reaped int) {
	cur := windowOf(now, w)
	for k, win := range s.pending {
		if win <= cur-3 {
			s.m.Exists(k) // a read of a lapsed entry collects it
			delete(s.pending, k)
			reaped++
		}
	}
	for k := range s.m.Keys() {
		if win, ok := keyWindow(k); ok && win < cur {
			s.pending[k] = win
		}
	}
	return reaped
}
