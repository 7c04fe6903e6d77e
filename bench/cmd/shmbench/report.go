package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type report struct {
	machine []string
	short   bool
	dur     time.Duration
	reps    int
	nkeys   int
	slots   int
	elapsed time.Duration

	peers []string
	cells []cell
	ring  []ringResult
	lat   []latResult

	redisWS *redisRatioResult
	values  *valuesResult
	touch   *touchResult
	scale   *scaleResult
	notes   []string
}

func machineInfo() []string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	kernel := "?"
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		kernel = strings.TrimSpace(string(out))
	}
	return []string{
		fmt.Sprintf("CPU: %s, %d cores (GOMAXPROCS %d)", cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0)),
		fmt.Sprintf("Go: %s %s/%s; Linux %s", runtime.Version(), runtime.GOOS, runtime.GOARCH, kernel),
		fmt.Sprintf("memory available: %d MiB", memAvailable()>>20),
	}
}

func (r *report) get(vsize, procs int, op Op, peer string) (cell, bool) {
	for _, c := range r.cells {
		if c.vsize == vsize && c.procs == procs && c.op == op && c.peer == peer {
			return c, c.opsPerSec > 0
		}
	}
	return cell{}, false
}

func (r *report) vsizes() []int {
	var out []int
	for _, c := range r.cells {
		if len(out) == 0 || out[len(out)-1] != c.vsize {
			out = append(out, c.vsize)
		}
	}
	return out
}

func fmtOps(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtRatio(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fx", v)
	case v >= 10:
		return fmt.Sprintf("%.1fx", v)
	}
	return fmt.Sprintf("%.2fx", v)
}

// ratioRange is ours over peer's for one cell, 0 when either is missing:
// the median of the rounds' ratios (each round measured both), with the
// lowest and highest of them.
func (r *report) ratioRange(vsize, procs int, op Op, peer string) (med, lo, hi float64) {
	us, ok1 := r.get(vsize, procs, op, "shmarena")
	them, ok2 := r.get(vsize, procs, op, peer)
	if !ok1 || !ok2 {
		return 0, 0, 0
	}
	var rs []float64
	for k := 0; k < min(len(us.runs), len(them.runs)); k++ {
		if them.runs[k] > 0 {
			rs = append(rs, us.runs[k]/them.runs[k])
		}
	}
	if len(rs) == 0 {
		return us.opsPerSec / them.opsPerSec, 0, 0
	}
	return median(rs), slices.Min(rs), slices.Max(rs)
}

// fmtRatioRange writes a ratio as its median and range; a range that
// spans 1.0x says so instead of naming a winner.
func fmtRatioRange(med, lo, hi float64) string {
	if lo == 0 || lo == hi {
		return fmtRatio(med)
	}
	s := fmt.Sprintf("%s (%s-%s)", fmtRatio(med), strings.TrimSuffix(fmtRatio(lo), "x"), fmtRatio(hi))
	if lo < 1 && hi > 1 {
		s += " no clear winner"
	}
	return s
}

type target struct {
	what   string
	got    float64
	lo, hi float64 // the rounds' range, 0 when there is one figure
	want   float64
	ok     bool
	known  bool
}

func (r *report) targets() []target {
	var ts []target
	mkr := func(what string, want float64, vsize, procs int, op Op, peer string) {
		med, lo, hi := r.ratioRange(vsize, procs, op, peer)
		ts = append(ts, target{what: what, got: med, lo: lo, hi: hi, want: want, ok: med >= want, known: med > 0})
	}
	for _, v := range r.vsizes() {
		mkr(fmt.Sprintf("read hit vs Redis GET, 1 per round trip (%dB, 1 proc)", v), 500, v, 1, OpReadHit, "Redis")
		mkr(fmt.Sprintf("read hit vs Redis GET, pipelined 16 (%dB, 1 proc)", v), 30, v, 1, OpReadHit, "Redis pipe16")
		mkr(fmt.Sprintf("read hit vs bbolt (%dB, 1 proc)", v), 10, v, 1, OpReadHit, "bbolt")
		mkr(fmt.Sprintf("read hit vs RWMutex map: within 1.5x (%dB, 1 proc)", v), 1/1.5, v, 1, OpReadHit, "RWMutex map")
		mkr(fmt.Sprintf("read hit vs RWMutex map: within 1.5x (%dB, 2 procs / 2 goroutines)", v), 1/1.5, v, 2, OpReadHit, "RWMutex map")
	}
	if len(r.vsizes()) > 0 {
		mkr("counter add vs Redis INCR, 1 per round trip (1 proc)", 500, r.vsizes()[0], 1, OpAdd, "Redis")
		mkr("counter add vs Redis INCR, 1 per round trip (2 procs)", 500, r.vsizes()[0], 2, OpAdd, "Redis")
	}
	ringRatio := func(what, us, them string, want float64) {
		med, lo, hi := r.ringRatio(us, them)
		if med > 0 {
			ts = append(ts, target{what: what, got: med, lo: lo, hi: hi, want: want, ok: med >= want, known: true})
		}
	}
	ringRatio("ring throughput vs Unix socket (Group.AppendClaim/Wait as shipped)", "shmarena ring", "Unix socket", 30)
	ringRatio(fmt.Sprintf("ring throughput vs Unix socket (consumer polls %v before Wait)", spinFor), "shmarena ring+spin", "Unix socket", 30)
	// The 30x target is for one record per call; batched, the ring need only win.
	ringRatio(fmt.Sprintf("ring throughput vs Unix socket, both %d records per call (PublishBatchWait vs one write(2) per %d frames): faster", ringBatch, ringBatch), "shmarena ring batched", "Unix socket batched", 1)
	ringRatio("at-least-once group (WithAck, PublishWait, AckAndClaim(64)) vs at-most-once group", "shmarena ring acked", "shmarena ring", 0.8)
	ringRatio("at-least-once group vs Redis Streams XREADGROUP + XACK", "shmarena ring acked", "Redis Streams", 10)
	return ts
}

// ringRatio is ratioRange for two ring peers: the median of the rounds'
// ratios of us to them, and their range.
func (r *report) ringRatio(us, them string) (med, lo, hi float64) {
	var a, b *ringResult
	for i := range r.ring {
		if r.ring[i].peer == us {
			a = &r.ring[i]
		}
		if r.ring[i].peer == them {
			b = &r.ring[i]
		}
	}
	if a == nil || b == nil {
		return 0, 0, 0
	}
	var rs []float64
	for k := 0; k < min(len(a.rounds), len(b.rounds)); k++ {
		if b.rounds[k] > 0 {
			rs = append(rs, a.rounds[k]/b.rounds[k])
		}
	}
	if len(rs) == 0 {
		return 0, 0, 0
	}
	return median(rs), slices.Min(rs), slices.Max(rs)
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# shmarena benchmark results\n\n")
	for _, m := range r.machine {
		w("- %s\n", m)
	}
	mode := "full"
	if r.short {
		mode = "short (-short: smoke test, numbers are not meaningful)"
	}
	w("- mode: %s; %d keys of %d bytes per value size; each map figure is the median of %d rounds of %v that alternate the peers; shmarena maps of %d slots, 64 stripes; scratch files on tmpfs\n",
		mode, r.nkeys, keyLen, r.reps, r.dur, r.slots)
	w("- generated %s by bench/run.sh (`go run ./cmd/shmbench`), total %v. One run on a shared, noisy machine: compare ratios within this file, not across runs.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), r.elapsed.Round(time.Second))

	if ts := r.targets(); len(ts) > 0 {
		w("## Targets\n\nRatio = shmarena ops/s divided by the peer's, same round; the median of the rounds, with their range in brackets. A target is met when the median reaches it, and \"not settled\" when the rounds fall on both sides of it.\n\n| target | wanted | measured | |\n|---|---:|---:|---|\n")
		for _, t := range ts {
			if !t.known {
				w("| %s | >= %s | n/a | not measured |\n", t.what, fmtRatio(t.want))
				continue
			}
			verdict := "met"
			switch {
			case t.lo > 0 && t.lo < t.want && t.hi >= t.want:
				verdict = "not settled: the rounds' range spans the target"
			case !t.ok:
				verdict = fmt.Sprintf("**missed by %.1fx**", t.want/t.got)
			}
			got := fmtRatio(t.got)
			if t.lo > 0 && t.lo != t.hi {
				got = fmt.Sprintf("%s (%s-%s)", fmtRatio(t.got), strings.TrimSuffix(fmtRatio(t.lo), "x"), fmtRatio(t.hi))
			}
			w("| %s | >= %s | %s | %s |\n", t.what, fmtRatio(t.want), got, verdict)
		}
		w("\n")
	}

	if len(r.cells) > 0 {
		w("## Map: operations per second\n\n")
		w("Each peer does the same operations on the same 24-byte keys. Reads copy the value out. Writes of the in-process maps store a private copy of the value. ")
		w("bbolt: one transaction per operation, NoSync. Redis: GET/SET/INCR/DEL, one command per round trip, or 16 per pipeline (\"pipe16\"). ")
		w("\"2\" = two processes at once (the bench re-executes itself as a second worker), aggregate ops/s over the longer of the two runs. ")
		w("Every run is warmed: before it is timed, each process of a store that maps a file (shmarena, LMDB) reads every key it will use once, untimed (and before inserts shmarena's calls Arena.Prefault, since a miss stops at the slot's tag byte and leaves the slot an insert writes untouched), so that a freshly started worker does not pay its first touch of each page (a page fault and, on this VM, a hypervisor exit of 5-7 µs per 4 KiB page) inside a short run; \"First touch\" below measures that cost on purpose. ")
		w("insert and delete use each key once (%d new keys per process per run for insert, %d present ones for delete), so their runs are short. ", r.nkeys/10, r.nkeys/2)
		w("shmarena keeps values in a map of %d slots (%.0f%% full before the inserts, about %.0f%% after them all) and its %d counters in a second map of %d slots of %d bytes (75%% full, as the README sizes a plain map). ",
			r.slots, 100*float64(r.nkeys)/float64(r.slots), 100*float64(r.nkeys+3*r.reps*r.nkeys/10)/float64(r.slots), r.nkeys, ctrSlots(r.nkeys), ctrSlotSize)
		w("The RWMutex map keeps counters as a map[string]int64 and stores a private copy of each value (make and copy), as code that keeps the caller's bytes must.\n\n")
		for _, v := range r.vsizes() {
			w("### %d-byte values\n\n| op | procs |", v)
			for _, p := range r.peers {
				w(" %s |", p)
			}
			w("\n|---|---:|")
			for range r.peers {
				w("---:|")
			}
			w("\n")
			for op := Op(0); op < numOps; op++ {
				for procs := 1; procs <= 2; procs++ {
					w("| %v | %d |", op, procs)
					for _, p := range r.peers {
						c, ok := r.get(v, procs, op, p)
						switch {
						case ok && c.note != "":
							w(" %s (%s) |", fmtOps(c.opsPerSec), c.note)
						case ok:
							w(" %s |", fmtOps(c.opsPerSec))
						default:
							w(" n/a |")
						}
					}
					w("\n")
				}
			}
			w("\n**shmarena's ratio to each peer** (ours / theirs within a round; median of %d rounds, range in brackets; above 1x we are faster; \"no clear winner\" where the rounds fall on both sides of 1x):", r.reps)
			w("\n\n| op | procs |")
			for _, p := range r.peers[1:] {
				w(" vs %s |", p)
			}
			w("\n|---|---:|")
			for range r.peers[1:] {
				w("---:|")
			}
			w("\n")
			for op := Op(0); op < numOps; op++ {
				for procs := 1; procs <= 2; procs++ {
					w("| %v | %d |", op, procs)
					for _, p := range r.peers[1:] {
						if x, lo, hi := r.ratioRange(v, procs, op, p); x > 0 {
							w(" %s |", fmtRatioRange(x, lo, hi))
						} else {
							w(" n/a |")
						}
					}
					w("\n")
				}
			}
			w("\n")
		}
	}

	if len(r.ring) > 0 {
		w("## Ring: producer process to a consumer group\n\nRecords/s: median of %d rounds (peers alternating), with the range; the ratio is shmarena ring's over the transport's, median of the rounds' ratios with their range.\n\n", len(r.ring[0].rounds))
		w("| transport | records/s | range | shmarena ring ratio | wake p50 | wake p99 |\n|---|---:|---:|---:|---:|---:|\n")
		for _, x := range r.ring {
			med, lo, hi := r.ringRatio("shmarena ring", x.peer)
			w("| %s | %s | %s-%s | %s | %v | %v |\n", x.peer, fmtOps(x.throughput), fmtOps(slices.Min(x.rounds)), fmtOps(slices.Max(x.rounds)),
				fmtRatioRange(med, lo, hi), x.p50.Round(100*time.Nanosecond), x.p99.Round(100*time.Nanosecond))
		}
		w("\n")
	}

	if r.values != nil {
		w("%s", r.values.markdown(r.reps))
	}
	if r.redisWS != nil {
		w("%s", r.redisWS.markdown())
	}

	if len(r.lat) > 0 {
		w("## Latency: one operation at a time\n\n")
		w("Each operation timed on its own (see the note below for the method); 64-byte values, one key (so one stripe and one slot) or one ring. ")
		w("\"2\": a second process does the same operation on the same key or ring meanwhile (for Load it stores to the key being read); for the RWMutex map, a second goroutine. ")
		w("Chart: [latency-1proc.svg](latency-1proc.svg), [latency-2proc.svg](latency-2proc.svg).\n\n")
		w("| operation | procs | peer | p50 | p99 | p99.9 | max | operations timed |\n|---|---:|---|---:|---:|---:|---:|---:|\n")
		for _, op := range latOps {
			for procs := 1; procs <= 2; procs++ {
				for _, x := range r.lat {
					if x.op != op || x.procs != procs {
						continue
					}
					peer := x.peer
					if x.note != "" {
						peer += " (" + x.note + ")"
					}
					if x.busy > 0 {
						peer += fmt.Sprintf(" (%d returned busy, as not found)", x.busy)
					}
					w("| %s | %d | %s | %v | %v | %v | %v | %d |\n", op, procs, peer, fmtLat(x.p50), fmtLat(x.p99), fmtLat(x.p999), fmtLat(x.max), x.n)
				}
			}
		}
		w("\n")
	}

	if t := r.touch; t != nil {
		w("## First touch: a new worker's first %s operations\n\n", fmtCount(t.ops))
		w("This is the cold row the warmed tables above leave out on purpose: a worker process starts, opens an arena another process built and filled, and times its first %s operations on random keys, then the same ones again. ", fmtCount(t.ops))
		w("Medians of the rounds, range in brackets; \"cold / again\" is how many times slower the first pass ran.\n\n")
		w("| arena | kind | Prefault took | first %s ops | page faults in them | the same again | cold / again |\n|---|---|---:|---:|---:|---:|---:|\n", fmtCount(t.ops))
		for _, c := range t.cells {
			pre := "-"
			if c.prefault[0] > 0 {
				pre = fmtDurRange(c.prefault)
			}
			var fl []float64
			for _, f := range c.coldFaults {
				fl = append(fl, float64(f))
			}
			var ratios []float64
			for i := range c.cold {
				ratios = append(ratios, float64(c.cold[i])/float64(c.warm[i]))
			}
			w("| %s (%.0f MiB%s) | %s | %s | %s | %.0f | %s | %s |\n", c.variant, c.arenaMB, hugeNote(c.hugeMiB), c.kind, pre, fmtDurRange(c.cold), median(fl),
				fmtDurRange(c.warm), fmtRatioRange(median(ratios), slices.Min(ratios), slices.Max(ratios)))
		}
		w("\n")
	}

	if s := r.scale; s != nil {
		w("## Scaling (shmarena map, %d-byte slots, %d-byte values)\n\n", scaleSlotSize, scaleVal)
		w("As one table of %d slots fills (insert = the last 1%% of slots before that load; reads random over the keys present):\n\n", s.loadSlots)
		w("| load | read hit ns | read miss ns | insert ns |\n|---:|---:|---:|---:|\n")
		for _, p := range s.load {
			w("| %.0f%% | %.0f | %.0f | %.0f |\n", p.x*100, p.readHit, p.readMis, p.insert)
		}
		w("\nAs the table grows, at %.0f%% load (insert = the band from 65%% to 75%%; reads random; a Go map behind an RWMutex with the same keys for reference):\n\n", growLoad*100)
		w("| slots | arena MB | read hit ns | read miss ns | insert ns | RWMutex map read ns |\n|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range s.grow {
			w("| %.0e | %.1f | %.0f | %.0f | %.0f | %.0f |\n", p.x, p.x*scaleSlotSize/1e6, p.readHit, p.readMis, p.insert, p.goMapRead)
		}
		w("\n")
	}

	if len(r.notes) > 0 {
		w("## Notes\n\n")
		for _, n := range r.notes {
			w("- %s\n", n)
		}
		w("\n")
	}
	w("Charts: ")
	for _, f := range r.chartFiles() {
		w("[%s](%s) ", f, f)
	}
	w("\n")
	return b.String()
}

func (r *report) chartFiles() []string {
	var out []string
	for _, v := range r.vsizes() {
		for procs := 1; procs <= 2; procs++ {
			out = append(out, fmt.Sprintf("map-%dB-%dproc.svg", v, procs))
		}
	}
	if len(r.ring) > 0 {
		out = append(out, "ring.svg")
	}
	if len(r.lat) > 0 {
		out = append(out, "latency-1proc.svg", "latency-2proc.svg")
	}
	if r.scale != nil {
		out = append(out, "scale-load.svg", "scale-size.svg")
	}
	return out
}

// fmtCount writes n with thousands separators.
func fmtCount(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func hugeNote(mib float64) string {
	if mib <= 0 {
		return ""
	}
	return fmt.Sprintf(", %.0f MiB of it in huge pages", mib)
}

func fmtLat(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.1f s", float64(d)/1e9)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d >= 10*time.Microsecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d >= time.Microsecond:
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	}
	return fmt.Sprintf("%d ns", d.Nanoseconds())
}

// durTicks labels a log10(ns) axis in time units.
type durTicks struct{}

func (durTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for k := math.Floor(min); k <= math.Ceil(max); k++ {
		ts = append(ts, plot.Tick{Value: k, Label: fmtLat(time.Duration(math.Pow(10, k)))})
	}
	return ts
}

// latencyCharts draws, per process count, p50/p99/p99.9 bars per peer
// for each operation, on a log scale.
func (r *report) latencyCharts(dir string) error {
	shades := map[string][3]color.RGBA{
		"shmarena":    {{0x1f, 0x4e, 0x9c, 255}, {0x4a, 0x7f, 0xd0, 255}, {0x9c, 0xbd, 0xee, 255}},
		"RWMutex map": {{0x2e, 0x7d, 0x32, 255}, {0x5c, 0xb0, 0x60, 255}, {0xa5, 0xd6, 0xa7, 255}},
		"Redis":       {{0xb7, 0x1c, 0x1c, 255}, {0xe5, 0x52, 0x52, 255}, {0xf4, 0xa3, 0xa3, 255}},
	}
	for procs := 1; procs <= 2; procs++ {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("Latency of one operation, %d process(es) (log scale; bars: p50, p99, p99.9)", procs)
		p.Y.Label.Text = "time per operation"
		p.Y.Tick.Marker = durTicks{}
		var peersShown []string
		for _, peer := range latPeers {
			for _, x := range r.lat {
				if x.peer == peer && !slices.Contains(peersShown, peer) {
					peersShown = append(peersShown, peer)
				}
			}
		}
		w := vg.Points(7)
		nb := 3 * len(peersShown)
		top, bottom := 0.0, math.Inf(1)
		for i, peer := range peersShown {
			for q := 0; q < 3; q++ {
				vals := make(plotter.Values, len(latOps))
				for j, op := range latOps {
					for _, x := range r.lat {
						if x.peer == peer && x.op == op && x.procs == procs {
							d := [3]time.Duration{x.p50, x.p99, x.p999}[q]
							vals[j] = math.Log10(float64(max(d, 1)))
							top, bottom = max(top, vals[j]), min(bottom, vals[j])
						}
					}
				}
				bc, err := plotter.NewBarChart(vals, w)
				if err != nil {
					return err
				}
				bc.LineStyle.Width = 0
				bc.Color = shades[peer][q]
				k := 3*i + q
				bc.Offset = w * vg.Length(float64(k)-float64(nb-1)/2)
				p.Add(bc)
				p.Legend.Add(fmt.Sprintf("%s %s", peer, [3]string{"p50", "p99", "p99.9"}[q]), bc)
			}
		}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.XOffs = vg.Points(10)
		p.NominalX(latOps...)
		p.X.Min, p.X.Max = -0.7, float64(len(latOps))-0.3
		p.Y.Min = math.Max(0, math.Floor(bottom)-0.5)
		p.Y.Max = math.Ceil(top) + 2.5 // room for the legend
		if err := p.Save(26*vg.Centimeter, 13*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("latency-%dproc.svg", procs))); err != nil {
			return err
		}
	}
	return nil
}

// log10 ticks labelled as powers of ten, for bar charts of log10 values.
type powTicks struct{}

func (powTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for k := math.Floor(min); k <= math.Ceil(max); k++ {
		ts = append(ts, plot.Tick{Value: k, Label: fmt.Sprintf("1e%.0f", k)})
	}
	return ts
}

func (r *report) charts(dir string) error {
	if len(r.lat) > 0 {
		if err := r.latencyCharts(dir); err != nil {
			return err
		}
	}
	for _, v := range r.vsizes() {
		for procs := 1; procs <= 2; procs++ {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("Map ops/s, %d-byte values, %d process(es) (log scale)", v, procs)
			p.Y.Label.Text = "ops/s"
			p.Y.Tick.Marker = powTicks{}
			var names []string
			for op := Op(0); op < numOps; op++ {
				names = append(names, op.String())
			}
			var shown []string
			for _, peer := range r.peers {
				if _, ok := r.get(v, procs, OpReadHit, peer); ok {
					shown = append(shown, peer)
				}
			}
			w := vg.Points(11)
			top := 0.0
			for i, peer := range shown {
				vals := make(plotter.Values, numOps)
				for op := Op(0); op < numOps; op++ {
					if c, ok := r.get(v, procs, op, peer); ok {
						vals[op] = math.Log10(c.opsPerSec)
						top = max(top, vals[op])
					}
				}
				bc, err := plotter.NewBarChart(vals, w)
				if err != nil {
					return err
				}
				bc.LineStyle.Width = 0
				bc.Color = plotutil.Color(i)
				bc.Offset = w * vg.Length(float64(i)-float64(len(shown)-1)/2)
				p.Add(bc)
				p.Legend.Add(peer, bc)
			}
			p.Legend.Top = true
			p.Legend.Left = true
			p.Legend.XOffs = vg.Points(10)
			p.NominalX(names...)
			p.X.Min, p.X.Max = -0.7, float64(numOps)-0.3
			p.Y.Min = 0
			p.Y.Max = math.Ceil(top) + 3 // room for the legend above the bars
			if err := p.Save(26*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("map-%dB-%dproc.svg", v, procs))); err != nil {
				return err
			}
		}
	}
	if len(r.ring) > 0 {
		p := plot.New()
		p.Title.Text = "Ring: records/s, producer process to consumer (log scale)"
		p.Y.Tick.Marker = powTicks{}
		p.Y.Label.Text = "records/s"
		var names []string
		vals := make(plotter.Values, len(r.ring))
		for i, x := range r.ring {
			names = append(names, fmt.Sprintf("%s\nwake p50 %v", x.peer, x.p50.Round(time.Microsecond)))
			vals[i] = math.Log10(x.throughput)
		}
		bc, err := plotter.NewBarChart(vals, vg.Points(30))
		if err != nil {
			return err
		}
		bc.Color = plotutil.Color(0)
		p.Add(bc)
		p.NominalX(names...)
		p.X.Min, p.X.Max = -0.7, float64(len(r.ring))-0.3
		p.Y.Min = 0
		if err := p.Save(22*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, "ring.svg")); err != nil {
			return err
		}
	}
	if s := r.scale; s != nil {
		line := func(file, title, xl string, pts []scalePoint, xf func(float64) float64, logx bool, gomap bool) error {
			p := plot.New()
			p.Title.Text = title
			p.X.Label.Text = xl
			p.Y.Label.Text = "ns per operation (log scale)"
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
			if logx {
				p.X.Scale = plot.LogScale{}
				p.X.Tick.Marker = plot.LogTicks{Prec: -1}
			}
			mk := func(f func(scalePoint) float64) plotter.XYs {
				xy := make(plotter.XYs, len(pts))
				for i, q := range pts {
					xy[i] = plotter.XY{X: xf(q.x), Y: f(q)}
				}
				return xy
			}
			args := []any{
				"read hit", mk(func(q scalePoint) float64 { return q.readHit }),
				"read miss", mk(func(q scalePoint) float64 { return q.readMis }),
				"insert", mk(func(q scalePoint) float64 { return q.insert }),
			}
			if gomap {
				args = append(args, "RWMutex map read", mk(func(q scalePoint) float64 { return q.goMapRead }))
			}
			if err := plotutil.AddLinePoints(p, args...); err != nil {
				return err
			}
			// Room above the curves for the legend, and beside the last
			// point for its tick label.
			lo, hi := math.Inf(1), 0.0
			for _, a := range args {
				if xy, ok := a.(plotter.XYs); ok {
					for _, q := range xy {
						lo, hi = min(lo, q.Y), max(hi, q.Y)
					}
				}
			}
			p.Y.Min, p.Y.Max = lo/2, hi*8
			if logx {
				p.X.Min, p.X.Max = xf(pts[0].x)/1.5, xf(pts[len(pts)-1].x)*1.5
			} else {
				p.X.Min, p.X.Max = xf(pts[0].x)-5, xf(pts[len(pts)-1].x)+3
			}
			p.Legend.Top = true
			p.Legend.Left = true
			p.Legend.XOffs = vg.Points(10)
			return p.Save(18*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, file))
		}
		if len(s.load) > 0 {
			if err := line("scale-load.svg", fmt.Sprintf("shmarena map as it fills (%d slots)", s.loadSlots), "load %",
				s.load, func(x float64) float64 { return x * 100 }, false, false); err != nil {
				return err
			}
		}
		if len(s.grow) > 0 {
			if err := line("scale-size.svg", fmt.Sprintf("shmarena map as it grows (%.0f%% load)", growLoad*100), "slots",
				s.grow, func(x float64) float64 { return x }, true, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// median of xs (not modified); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
