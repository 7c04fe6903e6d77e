package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shmarena/shmarena"
	"golang.org/x/sys/unix"
)

// server is one worker's HTTP handler state.
type server struct {
	c     config
	m     *shmarena.Map
	allow string // this worker's counter keys in the shared map
	deny  string

	mu    sync.Mutex // -local only: this worker's private counters
	local map[string]int64
	lwin  int64
}

func runWorker(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The supervisor holds the other end of stdin: end of file means it
	// is gone, whatever happened to it.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	a, err := shmarena.Open(c.path) // attach: the supervisor created it
	if err != nil {
		return err
	}
	defer a.Close()
	m, err := a.Map(mapName, mapOptions()...)
	if err != nil {
		return err
	}
	s := &server{
		c: c, m: m,
		allow: workerKey(c.id, "allowed"),
		deny:  workerKey(c.id, "denied"),
		local: map[string]int64{},
	}

	lc := net.ListenConfig{Control: reusePort}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.limited)
	mux.HandleFunc("GET /stats", s.stats)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Printf("ready %d %s\n", os.Getpid(), ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// reusePort sets SO_REUSEPORT so every worker can bind the same port; the
// kernel then spreads incoming connections over the workers.
func reusePort(network, address string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}

func workerKey(id int, what string) string { return "worker:" + strconv.Itoa(id) + ":" + what }

// windowKey names a worker's per-window total: "win:<window>:w<id>:<what>".
func windowKey(win int64, id int, what string) string {
	return "win:" + strconv.FormatInt(win, 10) + ":w" + strconv.Itoa(id) + ":" + what
}

// keyWindow returns the window number in a per-window key: a client's
// counter "rl:<client>:<window>" or a total "win:<window>:w<id>:<what>".
func keyWindow(k string) (int64, bool) {
	var num string
	switch {
	case strings.HasPrefix(k, "rl:"):
		num = k[strings.LastIndexByte(k, ':')+1:]
	case strings.HasPrefix(k, "win:"):
		num, _, _ = strings.Cut(k[len("win:"):], ":")
	default:
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return n, err == nil
}

// clientID names the client a request counts against: its X-Client-ID
// header, else its remote IP address. Long IDs are hashed so every key
// fits a map slot.
func clientID(r *http.Request) string {
	id := r.Header.Get("X-Client-ID")
	if id == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		id = host
	}
	if len(id) > 48 {
		sum := sha256.Sum256([]byte(id))
		id = "sha256:" + hex.EncodeToString(sum[:16])
	}
	return id
}

// count adds one request by client in window win and returns the count.
func (s *server) count(client string, win int64) (int64, error) {
	key := "rl:" + client + ":" + strconv.FormatInt(win, 10)
	if !s.c.local {
		return s.m.Add(key, 1, shmarena.WithTTL(2*s.c.window))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if win != s.lwin { // forget finished windows
		clear(s.local)
		s.lwin = win
	}
	s.local[key]++
	return s.local[key], nil
}

func (s *server) limited(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	win := windowOf(now, s.c.window)
	client := clientID(r)
	n, err := s.count(client, win)
	if err != nil {
		http.Error(w, "rate limiter: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	limit := int64(s.c.limit)
	// A counter lives at least one window past its own (TTL 2W from its
	// first request). A request that reached Add later than that, after
	// a stall, may have restarted a lapsed counter at 1: its answer cannot
	// be trusted, so it fails closed.
	late := time.Since(windowStart(win+1, s.c.window)) >= s.c.window
	reset := windowStart(win+1, s.c.window).Sub(now)
	resetSec := strconv.FormatInt(int64((reset+time.Second-1)/time.Second), 10) // ceil, at least 1
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.FormatInt(limit, 10))
	h.Set("RateLimit-Remaining", strconv.FormatInt(max(limit-n, 0), 10))
	h.Set("RateLimit-Reset", resetSec)
	h.Set("X-Ratelimit-Window", strconv.FormatInt(win, 10))
	h.Set("X-Worker", strconv.Itoa(s.c.id))
	// Counters this worker alone writes, so workers never wait for each
	// other on them: totals for /stats, per window for the progress lines.
	wttl := shmarena.WithTTL(2 * s.c.window)
	if n > limit || late {
		_, _ = s.m.Add(s.deny, 1)
		_, _ = s.m.Add(s.winDenied(win), 1, wttl)
		if late {
			h.Set("X-Ratelimit-Late", "1")
		}
		h.Set("Retry-After", resetSec)
		http.Error(w, fmt.Sprintf("rate limit exceeded: %d requests per %v; retry in %v", limit, s.c.window, reset.Round(time.Millisecond)),
			http.StatusTooManyRequests)
		return
	}
	_, _ = s.m.Add(s.allow, 1)
	_, _ = s.m.Add(s.winAllowed(win), 1, wttl)
	fmt.Fprintf(w, "ok: client %s, request %d of %d in window %d, worker %d\n", client, n, limit, win, s.c.id)
}

func (s *server) winAllowed(win int64) string { return windowKey(win, s.c.id, "allowed") }
func (s *server) winDenied(win int64) string  { return windowKey(win, s.c.id, "denied") }

// workerCount is one worker's counters, read from the shared map.
type workerCount struct {
	Worker  int   `json:"worker"`
	Served  int64 `json:"served"`
	Allowed int64 `json:"allowed"`
	Denied  int64 `json:"denied"`
}

func readWorkerCounts(m *shmarena.Map, n int) []workerCount {
	out := make([]workerCount, n)
	for i := range out {
		out[i].Worker = i
		out[i].Allowed, _ = m.Counter(workerKey(i, "allowed"))
		out[i].Denied, _ = m.Counter(workerKey(i, "denied"))
		out[i].Served = out[i].Allowed + out[i].Denied
	}
	return out
}

// statsDoc is the JSON /stats returns.
type statsDoc struct {
	Worker  int               `json:"answered_by"`
	Limit   int               `json:"limit"`
	Window  string            `json:"window"`
	Local   bool              `json:"local,omitempty"`
	Map     shmarena.MapStats `json:"map"`
	Workers []workerCount     `json:"workers"`
}

func (s *server) stats(w http.ResponseWriter, r *http.Request) {
	doc := statsDoc{
		Worker: s.c.id, Limit: s.c.limit, Window: s.c.window.String(), Local: s.c.local,
		Map: s.m.Stats(), Workers: readWorkerCounts(s.m, s.c.workers),
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(doc)
}
