package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/shmarena/shmarena"
)

// decision is one answer as the load generator saw it: the worker's
// stamps around the decision (Unix ns) and whether it was allowed.
type decision struct {
	before, after int64
	allowed       bool
}

// tally is what the load generator saw, per client.
type tally struct {
	mu      sync.Mutex
	clients []clientTally
}

type clientTally struct {
	sent, allowed, denied, errors int
	decisions                     []decision
	workers                       map[int]bool
	firstErr                      string
}

func (t *tally) record(client int, d decision, worker int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ct := &t.clients[client]
	ct.sent++
	ct.workers[worker] = true
	ct.decisions = append(ct.decisions, d)
	if d.allowed {
		ct.allowed++
	} else {
		ct.denied++
	}
}

func (t *tally) fail(client int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ct := &t.clients[client]
	ct.sent++
	ct.errors++
	if ct.firstErr == "" {
		ct.firstErr = err.Error()
	}
}

// since sums the answers decided at or after from.
func (t *tally) since(from int64) (answered, allowed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ct := range t.clients {
		for _, d := range ct.decisions {
			if d.before >= from {
				answered++
				if d.allowed {
					allowed++
				}
			}
		}
	}
	return
}

func clientName(i int) string { return fmt.Sprintf("client-%02d", i) }

// drive sends the load, prints progress, tables and the verdict, and
// returns the exit status.
func drive(ctx context.Context, c *Config, addr string, kv shmarena.KeyValue) int {
	t := &tally{clients: make([]clientTally, c.Clients)}
	for i := range t.clients {
		t.clients[i].workers = map[int]bool{}
	}
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(time.Duration(c.Windows) * c.Window)
	perConn := c.Load * float64(c.Limit) / float64(c.Conns) // requests per window per connection
	interval := time.Duration(float64(c.Window) / perConn)
	fmt.Printf("load: %d clients x %d connections, each client %.0f requests per %v (limit %d), for %d windows\n",
		c.Clients, c.Conns, c.Load*float64(c.Limit), c.Window, c.Limit, c.Windows)

	lctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	for cl := range c.Clients {
		for range c.Conns {
			wg.Go(func() { sendLoop(lctx, c, addr, cl, start, interval, t) })
		}
	}
	for w := 1; w <= c.Windows; w++ {
		from := start.Add(time.Duration(w-1) * c.Window)
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(from.Add(c.Window))):
		}
		if ctx.Err() != nil {
			break
		}
		answered, allowed := t.since(from.UnixNano())
		fmt.Printf("window %d/%d: %6d answered, %6d allowed (the limit refills %d per client per window)\n",
			w, c.Windows, answered, allowed, c.Limit)
	}
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		return ExitFail
	}
	counts, err := readWorkerCounts(ctx, kv, c.Workers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit: worker counts:", err)
	}
	return report(c, t, counts)
}

// sendLoop is one connection of one client: a request every interval from
// start until ctx ends.
func sendLoop(ctx context.Context, c *Config, addr string, client int, start time.Time, interval time.Duration, t *tally) {
	hc := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true},
		Timeout:   5 * time.Second,
	}
	defer hc.CloseIdleConnections()
	url := "http://" + addr + "/"
	name := clientName(client)
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(start)):
	}
	next := time.Now()
	for ctx.Err() == nil {
		sendOne(hc, url, name, client, t)
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		} else if -d > c.Window { // fell far behind: do not burst to catch up
			next = time.Now()
		}
	}
}

func sendOne(hc *http.Client, url, name string, client int, t *tally) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-Client-ID", name)
	resp, err := hc.Do(req)
	if err != nil {
		t.fail(client, err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	before, after, ok := parseStamps(resp.Header.Get("X-Decided"))
	worker, err := strconv.Atoi(resp.Header.Get("X-Worker"))
	switch {
	case !ok || err != nil:
		t.fail(client, fmt.Errorf("status %s without X-Decided or X-Worker", resp.Status))
	case resp.StatusCode == http.StatusOK:
		t.record(client, decision{before, after, true}, worker)
	case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
		t.record(client, decision{before, after, false}, worker)
	default:
		t.fail(client, fmt.Errorf("unexpected status %s", resp.Status))
	}
}

func parseStamps(h string) (before, after int64, ok bool) {
	b, a, found := strings.Cut(h, " ")
	before, err1 := strconv.ParseInt(b, 10, 64)
	after, err2 := strconv.ParseInt(a, 10, 64)
	return before, after, found && err1 == nil && err2 == nil && before <= after
}

// checkClient holds one client's decisions to GCRA's promises (see the
// package doc) and returns the allowed decisions too many and the
// denials too strict.
func checkClient(ds []decision, burst int, emission int64) (over, strict int) {
	var allowed []decision
	for _, d := range ds {
		if d.allowed {
			allowed = append(allowed, d)
		}
	}
	slices.SortFunc(allowed, func(a, b decision) int { return int(a.before - b.before) })
	// Never too many: allowed[i..j] all lie within [before_i, max after].
	for i := range allowed {
		latest := int64(0)
		for j := i; j < len(allowed); j++ {
			latest = max(latest, allowed[j].after)
			if int64(j-i+1) > int64(burst)+(latest-allowed[i].before)/emission {
				over++
				break
			}
		}
	}
	// Never too strict: a denial at d needs a run of allowed decisions
	// from some d_i up to d of more than burst-1 + (d - d_i)/emission,
	// read as generously as the stamps allow (every allowed decision that
	// may precede the denial, the shortest gap).
	for _, d := range ds {
		if d.allowed {
			continue
		}
		justified := false
		for i := range allowed {
			if allowed[i].before > d.after {
				break
			}
			n := 0
			for j := i; j < len(allowed) && allowed[j].before <= d.after; j++ {
				n++
			}
			gap := max(d.before-allowed[i].after, 0)
			if int64(n)*emission > int64(burst-1)*emission+gap {
				justified = true
				break
			}
		}
		if !justified {
			strict++
		}
	}
	return over, strict
}

// report prints the tables and the verdict and returns the exit status.
func report(c *Config, t *tally, counts []workerCount) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	rate, burst, period := c.limit()
	emission := int64(period) / int64(rate)

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tsent\tallowed\tdenied\terrors\ttoo many\ttoo strict\tworkers seen\t")
	var sent, allowed, denied, errs, answered, overs, stricts int
	for i, ct := range t.clients {
		over, strict := checkClient(ct.decisions, burst, emission)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", clientName(i), ct.sent, ct.allowed, ct.denied, ct.errors, over, strict, len(ct.workers))
		sent += ct.sent
		allowed += ct.allowed
		denied += ct.denied
		errs += ct.errors
		overs += over
		stricts += strict
		answered += ct.allowed + ct.denied
		if ct.errors > 0 {
			bad("%s: %d failed requests (first: %s)", clientName(i), ct.errors, ct.firstErr)
		}
		if over > 0 {
			bad("%s: %d runs of allowed requests over the limit (more than %d + elapsed/%v)", clientName(i), over, burst, time.Duration(emission))
		}
		if strict > 0 {
			bad("%s: %d requests denied while under the limit", clientName(i), strict)
		}
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t\t\n", sent, allowed, denied, errs, overs, stricts)
	tw.Flush()
	if denied == 0 {
		bad("no request was denied: the load never exceeded the limit, so nothing was tested")
	}

	fmt.Println()
	if counts != nil {
		tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "worker\tserved\tallowed\tdenied\t")
		var served int64
		for _, w := range counts {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\n", w.Worker, w.Served, w.Allowed, w.Denied)
			served += w.Served
		}
		fmt.Fprintf(tw, "total\t%d\t\t\t\n", served)
		tw.Flush()
		if served != int64(answered) {
			bad("workers counted %d requests in the store, the load generator got %d answers", served, answered)
		}
	} else {
		bad("could not read the workers' counts")
	}

	fmt.Println()
	if len(problems) == 0 {
		fmt.Printf("verdict: PASS - on %s, every client got at most %d + elapsed/%v requests across all %d workers, and no request was denied under the limit (%d allowed, %d denied)\n",
			c.Backend, burst, time.Duration(emission), c.Workers, allowed, denied)
		return ExitPass
	}
	for _, p := range problems {
		fmt.Println("  problem:", p)
	}
	fmt.Printf("verdict: FAIL - %s\n", strings.TrimSpace(problems[0]))
	return ExitFail
}

// FetchStats reads a worker's /stats.
func FetchStats(addr string) (*StatsDoc, error) {
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var doc StatsDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, err
	}
	return &doc, nil
}
