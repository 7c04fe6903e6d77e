package demo

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
	"syscall"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/ratelimit"
	"golang.org/x/sys/unix"
)

// server is one worker's HTTP state.
type server struct {
	c           *Config
	kv          shmarena.KeyValue // the shared store: the limiter's and the counts'
	allow, deny string            // this worker's count keys
}

func runWorker(c *Config, b *Backend) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The supervisor holds the other end of stdin: end of file means it
	// is gone, whatever happened to it.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	kv, release, err := b.Open(c, false)
	if err != nil {
		return err
	}
	defer release()
	limStore := kv
	if c.Local { // the broken design: a limiter no other worker sees
		a, err := shmarena.OpenMemfd("ratelimit-local", shmarena.WithSize(arenaSize))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := a.Map(mapName, mapOptions()...)
		if err != nil {
			return err
		}
		limStore = shmarena.NewKeyValue(m)
	}
	s := &server{c: c, kv: kv, allow: workerKey(c.id, "allowed"), deny: workerKey(c.id, "denied")}
	rate, burst, period := c.limit()
	limited := ratelimit.Middleware(
		ratelimit.NewLimiter(limStore, ratelimit.WithPrefix("rl:")),
		ratelimit.Limit{Rate: rate, Burst: burst, Period: period},
		clientID,
		ratelimit.WithDraftHeaders("per-client"),
		ratelimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "rate limiter: "+err.Error(), http.StatusServiceUnavailable)
		}),
	)(http.HandlerFunc(s.ok))

	lc := net.ListenConfig{Control: reusePort}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", s.stamped(limited))
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

// clientID names the client a request counts against: its X-Client-ID
// header, else its remote IP address. Long IDs are hashed so every key
// fits a map slot.
func clientID(r *http.Request) string {
	id := r.Header.Get("X-Client-ID")
	if id == "" {
		id = ratelimit.KeyByRemoteIP(r)
	}
	if len(id) > 32 {
		sum := sha256.Sum256([]byte(id))
		id = "sha256:" + hex.EncodeToString(sum[:12])
	}
	return id
}

// stamped adds X-Worker and X-Decided ("<before> <after>", Unix
// nanoseconds: the decision happened between them) to what next answers,
// and counts the answer as this worker's allowed or denied.
func (s *server) stamped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &stampWriter{ResponseWriter: w, before: time.Now().UnixNano(), worker: s.c.id}
		next.ServeHTTP(sw, r)
		if sw.status == http.StatusTooManyRequests {
			_, _ = s.kv.Add(r.Context(), s.deny, 1)
		}
	})
}

type stampWriter struct {
	http.ResponseWriter
	before int64
	worker int
	status int
}

func (w *stampWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		h := w.Header()
		h.Set("X-Decided", strconv.FormatInt(w.before, 10)+" "+strconv.FormatInt(time.Now().UnixNano(), 10))
		h.Set("X-Worker", strconv.Itoa(w.worker))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *stampWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// ok answers an allowed request.
func (s *server) ok(w http.ResponseWriter, r *http.Request) {
	_, _ = s.kv.Add(r.Context(), s.allow, 1)
	fmt.Fprintf(w, "ok: client %s, worker %d\n", clientID(r), s.c.id)
}

// workerCount is one worker's counts, read from the shared store.
type workerCount struct {
	Worker  int   `json:"worker"`
	Served  int64 `json:"served"`
	Allowed int64 `json:"allowed"`
	Denied  int64 `json:"denied"`
}

func readWorkerCounts(ctx context.Context, kv shmarena.KeyValue, n int) ([]workerCount, error) {
	out := make([]workerCount, n)
	for i := range out {
		var err1, err2 error
		out[i].Worker = i
		out[i].Allowed, _, err1 = kv.Counter(ctx, workerKey(i, "allowed"))
		out[i].Denied, _, err2 = kv.Counter(ctx, workerKey(i, "denied"))
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		out[i].Served = out[i].Allowed + out[i].Denied
	}
	return out, nil
}

// StatsDoc is the JSON /stats returns.
type StatsDoc struct {
	Worker  int           `json:"answered_by"`
	Backend string        `json:"backend"`
	Limit   int           `json:"limit"`
	Window  string        `json:"window"`
	Local   bool          `json:"local,omitempty"`
	Workers []workerCount `json:"workers"`
}

func (s *server) stats(w http.ResponseWriter, r *http.Request) {
	counts, err := readWorkerCounts(r.Context(), s.kv, s.c.Workers)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	doc := StatsDoc{Worker: s.c.id, Backend: s.c.Backend, Limit: s.c.Limit, Window: s.c.Window.String(),
		Local: s.c.Local, Workers: counts}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(doc)
}
