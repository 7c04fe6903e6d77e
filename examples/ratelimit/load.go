package main

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
)

// tally is what the load generator saw, per client and per (client, window),
// by the window number each answer reports.
type tally struct {
	mu      sync.Mutex
	clients []clientTally
	cells   map[cell]*cellTally
}

type cell struct {
	client int
	window int64
}

type cellTally struct{ allowed, denied, late int }

type clientTally struct {
	sent, allowed, denied, errors int
	misaligned                    int // reported window outside [send, receive] on the client's clock
	workers                       map[int]bool
	firstErr                      string
}

func (t *tally) record(client int, win int64, allowed, late bool, worker int, aligned bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ct := &t.clients[client]
	ct.sent++
	ct.workers[worker] = true
	if !aligned {
		ct.misaligned++
	}
	k := cell{client, win}
	cl := t.cells[k]
	if cl == nil {
		cl = &cellTally{}
		t.cells[k] = cl
	}
	if late {
		cl.late++
	}
	if allowed {
		ct.allowed++
		cl.allowed++
	} else {
		ct.denied++
		cl.denied++
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

// windowSummary sums the cells of one window.
func (t *tally) windowSummary(win int64, limit int) (sent, allowed, denied, atLimit, maxAllowed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, cl := range t.cells {
		if k.window != win {
			continue
		}
		sent += cl.allowed + cl.denied
		allowed += cl.allowed
		denied += cl.denied
		maxAllowed = max(maxAllowed, cl.allowed)
		if cl.allowed == limit {
			atLimit++
		}
	}
	return
}

func clientName(i int) string { return fmt.Sprintf("client-%02d", i) }

// drive sends the load, prints progress, tables and the verdict, and
// returns the exit status.
func drive(ctx context.Context, c config, addr string) int {
	t := &tally{clients: make([]clientTally, c.clients), cells: map[cell]*cellTally{}}
	for i := range t.clients {
		t.clients[i].workers = map[int]bool{}
	}
	first := windowOf(time.Now(), c.window) + 1 // start on a boundary: whole windows only
	last := first + int64(c.windows) - 1
	start, end := windowStart(first, c.window), windowStart(last+1, c.window)
	perConn := c.load * float64(c.limit) / float64(c.conns) // requests per window per connection
	interval := time.Duration(float64(c.window) / perConn)
	fmt.Printf("load: %d clients x %d connections, each client %.0f requests per %v window (limit %d), windows %d..%d\n",
		c.clients, c.conns, c.load*float64(c.limit), c.window, c.limit, first, last)

	lctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	for cl := range c.clients {
		for range c.conns {
			wg.Go(func() { sendLoop(lctx, c, addr, cl, start, interval, t) })
		}
	}
	// A progress line per window, a moment after it ends so its answers are in.
	for win := first; win <= last; win++ {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(windowStart(win+1, c.window).Add(c.window / 10))):
		}
		if ctx.Err() != nil {
			break
		}
		sent, allowed, denied, atLimit, maxAllowed := t.windowSummary(win, c.limit)
		fmt.Printf("window %d/%d (#%d): %6d answered, %6d allowed, %6d denied; max allowed per client %d; clients at the limit %d/%d\n",
			win-first+1, c.windows, win, sent, allowed, denied, maxAllowed, atLimit, c.clients)
	}
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		return exitFail
	}
	stats, err := fetchStats(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit: /stats:", err)
	}
	return report(c, t, stats, err == nil)
}

// sendLoop is one connection of one client: a request every interval from
// start until ctx ends.
func sendLoop(ctx context.Context, c config, addr string, client int, start time.Time, interval time.Duration, t *tally) {
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
		sendOne(c, hc, url, name, client, t)
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		} else if -d > c.window { // fell far behind: do not burst to catch up
			next = time.Now()
		}
	}
}

func sendOne(c config, hc *http.Client, url, name string, client int, t *tally) {
	// No context: a request sent before the end of the last window is
	// answered and counted, as the workers count it.
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-Client-ID", name)
	sentAt := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		t.fail(client, err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	gotAt := time.Now()
	win, err1 := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Window"), 10, 64)
	worker, err2 := strconv.Atoi(resp.Header.Get("X-Worker"))
	switch {
	case err1 != nil || err2 != nil:
		t.fail(client, fmt.Errorf("status %s without window or worker header", resp.Status))
	case resp.StatusCode == http.StatusOK:
		t.record(client, win, true, false, worker, aligned(win, sentAt, gotAt, c.window))
	case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
		late := resp.Header.Get("X-Ratelimit-Late") != ""
		t.record(client, win, false, late, worker, aligned(win, sentAt, gotAt, c.window))
	default:
		t.fail(client, fmt.Errorf("unexpected status %s", resp.Status))
	}
}

// aligned checks the server's window against the client's clock: the
// server decided between send and receive, so its window lies between
// theirs, by the same windowOf.
func aligned(win int64, sent, got time.Time, w time.Duration) bool {
	return windowOf(sent, w) <= win && win <= windowOf(got, w)
}

func fetchStats(addr string) (*statsDoc, error) {
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var doc statsDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, err
	}
	return &doc, nil
}

// report prints the tables and the verdict and returns the exit status.
func report(c config, t *tally, stats *statsDoc, haveStats bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tsent\tallowed\tdenied\terrors\tmax/window\tworkers seen\t")
	var sent, allowed, denied, errs, answered int
	for i, ct := range t.clients {
		maxWin := 0
		for k, cl := range t.cells {
			if k.client == i {
				maxWin = max(maxWin, cl.allowed)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", clientName(i), ct.sent, ct.allowed, ct.denied, ct.errors, maxWin, len(ct.workers))
		sent += ct.sent
		allowed += ct.allowed
		denied += ct.denied
		errs += ct.errors
		answered += ct.allowed + ct.denied
		if ct.errors > 0 {
			bad("%s: %d failed requests (first: %s)", clientName(i), ct.errors, ct.firstErr)
		}
		if ct.misaligned > 0 {
			bad("%s: %d answers reported a window outside the client's send..receive window", clientName(i), ct.misaligned)
		}
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t\t\t\n", sent, allowed, denied, errs)
	tw.Flush()

	// Every (client, window) cell: at most L allowed, and exactly min(L, asked):
	// the first L requests of a window by the shared counter's order pass,
	// unless a request was denied for arriving too late to trust its count.
	cells := slices.SortedFunc(func(yield func(cell) bool) {
		for k := range t.cells {
			if !yield(k) {
				return
			}
		}
	}, func(a, b cell) int {
		if a.client != b.client {
			return a.client - b.client
		}
		return int(a.window - b.window)
	})
	over, late := 0, 0
	for _, k := range cells {
		cl := t.cells[k]
		late += cl.late
		switch {
		case cl.allowed > c.limit:
			over++
			if over <= 5 {
				bad("%s window %d: %d allowed > limit %d", clientName(k.client), k.window, cl.allowed, c.limit)
			}
		case cl.late == 0 && cl.allowed != min(c.limit, cl.allowed+cl.denied):
			bad("%s window %d: only %d of %d allowed, limit %d", clientName(k.client), k.window, cl.allowed, cl.allowed+cl.denied, c.limit)
		}
	}
	if over > 5 {
		bad("... %d client-windows over the limit in all", over)
	}
	if late > 0 {
		fmt.Printf("note: %d requests reached the counter more than a window late (a stall) and were denied (fail closed)\n", late)
	}
	if denied == 0 {
		bad("no request was denied: the load never exceeded the limit, so nothing was tested")
	}

	fmt.Println()
	if haveStats {
		tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "worker\tserved\tallowed\tdenied\t")
		var served int64
		for _, w := range stats.Workers {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\n", w.Worker, w.Served, w.Allowed, w.Denied)
			served += w.Served
		}
		fmt.Fprintf(tw, "total\t%d\t\t\t\n", served)
		tw.Flush()
		ms := stats.Map
		fmt.Printf("map stats (from /stats, worker %d): used %d of %d, tombstones %d, expired %d, busy %d, full %d, recoveries %d\n",
			stats.Worker, ms.Used, ms.Capacity, ms.Tombstones, ms.Expired, ms.Busy, ms.Full, ms.Recoveries)
		if served != int64(answered) {
			bad("workers served %d requests by the shared counters, the load generator got %d answers", served, answered)
		}
	} else {
		bad("could not read /stats")
	}

	fmt.Println()
	if len(problems) == 0 {
		fmt.Printf("verdict: PASS - every client got at most %d requests per %v window across all %d workers (%d client-windows checked, %d allowed, %d denied)\n",
			c.limit, c.window, c.workers, len(cells), allowed, denied)
		return exitPass
	}
	for _, p := range problems {
		fmt.Println("  problem:", p)
	}
	fmt.Printf("verdict: FAIL - %s\n", strings.TrimSpace(problems[0]))
	return exitFail
}
