package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/shmarena/shmarena"
)

func runInfo(e *env, fs *flag.FlagSet, args []string) error {
	a, err := openRead(args[0])
	if err != nil {
		return err
	}
	defer a.Close()
	in, err := a.Info()
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(in)
	}
	now := time.Now()
	w := e.stdout
	fmt.Fprintf(w, "arena %s\n", in.Path)
	t := newTable(w)
	t.row("  layout version", in.LayoutVersion)
	t.row("  size", fmt.Sprintf("%s (%d bytes)", bytesText(in.Size), in.Size))
	t.row("  carved", fmt.Sprintf("%s (%s), %s free", bytesText(in.Used), percent(in.Used, in.Size), bytesText(in.Size-in.Used)))
	t.row("  created", ago(in.Created, now))
	t.row("  boot", in.BootID)
	if in.Removed {
		t.row("  file", removedText)
	}
	t.flush()
	fmt.Fprintf(w, "\nregions (%d of %d)\n", len(in.Regions), shmarena.MaxRegions)
	t = newTable(w)
	t.row("  NAME", "KIND", "SHAPE", "BYTES")
	for _, r := range in.Regions {
		t.row("  "+r.Name, r.Kind, shape(r), bytesText(r.Length))
	}
	t.flush()
	alive := 0
	for _, p := range in.Processes {
		if p.Alive {
			alive++
		}
	}
	fmt.Fprintf(w, "\nprocesses (%d attached, %d entries dead)\n", alive, len(in.Processes)-alive)
	t = newTable(w)
	t.row("  PID", "ALIVE", "SINCE")
	for _, p := range in.Processes {
		t.row(fmt.Sprintf("  %d", p.Pid), yesNo(p.Alive), ago(p.Since, now))
	}
	t.flush()
	return nil
}

// removedText warns that the file watched was removed or replaced.
const removedText = "REMOVED: the file was removed, or its path names another file now; processes still attached " +
	"share no data with those that open the path (see docs/lifecycle.md)"

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// shape renders a region's shape: "1024 slots x 256 B, 64 stripes".
func shape(r shmarena.RegionInfo) string {
	if r.Kind == shmarena.KindSchema {
		return "a typed map's value type"
	}
	s := fmt.Sprintf("%d slots x %s", r.Slots, bytesText(int64(r.SlotSize)))
	switch r.Kind {
	case shmarena.KindMap:
		s += fmt.Sprintf(", %d stripes", r.Stripes)
		if r.ValueBytes > 0 {
			s += fmt.Sprintf(", %s of values", bytesText(r.ValueBytes))
		}
		if r.Typed {
			s += ", typed"
		}
		if r.Evicting {
			s += ", evicting"
		}
	case shmarena.KindRing:
		s += fmt.Sprintf(", %d in flight", r.MaxInFlight)
	}
	return s
}

func statsFlags(fs *flag.FlagSet) {
	fs.Duration("watch", 0, "redraw every `interval` (such as 1s) with rates per second, until interrupted")
	fs.Int("count", 0, "with --watch, stop after `n` screens (0: never)")
}

// sample is one reading of the counters, for rates.
type sample struct {
	at time.Time
	st shmarena.ArenaStats
}

func runStats(e *env, fs *flag.FlagSet, args []string) error {
	watch := fs.Lookup("watch").Value.(flag.Getter).Get().(time.Duration)
	count := fs.Lookup("count").Value.(flag.Getter).Get().(int)
	a, err := openRead(args[0])
	if err != nil {
		return err
	}
	defer a.Close()
	region := ""
	if len(args) > 1 {
		region = args[1]
	}
	read := func() (sample, error) {
		st, err := a.Stats()
		if err != nil {
			return sample{}, err
		}
		if region != "" {
			var names []string
			keep := st.Regions[:0]
			for _, r := range st.Regions {
				names = append(names, r.Name)
				if r.Name == region {
					keep = append(keep, r)
				}
			}
			if len(keep) == 0 {
				return sample{}, fmt.Errorf("shmarena: no region %q in %s (it has: %s)", region, args[0], strings.Join(names, ", "))
			}
			st.Regions = keep
		}
		return sample{time.Now(), st}, nil
	}
	cur, err := read()
	if err != nil {
		return err
	}
	if watch <= 0 {
		if e.json {
			return e.printJSON(cur.st)
		}
		printStats(e, cur, nil)
		return nil
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	defer signal.Stop(stop)
	tick := time.NewTicker(watch)
	defer tick.Stop()
	var prev *sample
	for n := 1; ; n++ {
		if e.json {
			if err := e.printJSON(watchJSON(cur, prev)); err != nil {
				return err
			}
		} else {
			fmt.Fprint(e.stdout, "\x1b[H\x1b[2J") // home, clear: a screen like top's
			fmt.Fprintf(e.stdout, "shmarena stats %s  every %s  %s\n\n", args[0], watch, cur.at.Format("15:04:05"))
			printStats(e, cur, prev)
		}
		if count > 0 && n >= count {
			return nil
		}
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		p := cur
		prev = &p
		if cur, err = read(); err != nil {
			return err
		}
	}
}

// rate is the change per second of a counter between two samples, "" when
// there is no earlier sample.
func rate(now, before int64, cur sample, prev *sample) string {
	if prev == nil {
		return ""
	}
	secs := cur.at.Sub(prev.at).Seconds()
	if secs <= 0 {
		return ""
	}
	return fmt.Sprintf("%.1f/s", float64(now-before)/secs)
}

func findRegion(st shmarena.ArenaStats, name string) *shmarena.RegionStats {
	for i := range st.Regions {
		if st.Regions[i].Name == name {
			return &st.Regions[i]
		}
	}
	return nil
}

func printStats(e *env, cur sample, prev *sample) {
	w := e.stdout
	fmt.Fprintf(w, "arena: %s of %s carved, %d processes attached\n", bytesText(cur.st.Used), bytesText(cur.st.Size), cur.st.Processes)
	if cur.st.Removed {
		fmt.Fprintln(w, removedText)
	}
	for _, r := range cur.st.Regions {
		if r.Map == nil && r.Ring == nil {
			continue // a typed map's value-type record: no counters
		}
		var old *shmarena.RegionStats
		if prev != nil {
			old = findRegion(prev.st, r.Name)
		}
		fmt.Fprintln(w)
		t := newTable(w)
		switch {
		case r.Map != nil:
			fmt.Fprintf(w, "map %q (%s)\n", r.Name, bytesText(r.Bytes))
			names, vals := numericFields(*r.Map)
			var before []int64
			if old != nil && old.Map != nil {
				_, before = numericFields(*old.Map)
			}
			for i, n := range names {
				if n == "MaxProbe" {
					continue // below, with its unit
				}
				if strings.HasPrefix(n, "Bytes") && r.Map.BytesCapacity == 0 {
					continue // no value space (WithBytes)
				}
				v := fmt.Sprint(vals[i])
				switch n {
				case "Used":
					v += fmt.Sprintf(" (%s full)", percent(vals[i], int64(r.Map.Capacity)))
				case "BytesUsed":
					v += fmt.Sprintf(" (%s of the value space)", percent(vals[i], r.Map.BytesCapacity))
				}
				rt := ""
				if before != nil && n != "Capacity" {
					rt = rate(vals[i], before[i], cur, prev)
				}
				t.row("  "+label(n), v, rt)
			}
			t.row("  longest probe", fmt.Sprintf("%d slots", r.Map.MaxProbe), "")
			t.row("  hit ratio", hitRatio(r.Map, old), "")
			t.flush()
		case r.Ring != nil:
			fmt.Fprintf(w, "ring %q (%s, %d slots x %s)\n", r.Name, bytesText(r.Bytes), r.Ring.Slots, bytesText(int64(r.Ring.SlotSize)))
			head := r.Ring.Published + r.Ring.Abandoned + 1
			var oldHead int64
			if old != nil && old.Ring != nil {
				oldHead = int64(old.Ring.Published + old.Ring.Abandoned + 1)
			}
			rt := ""
			if old != nil && old.Ring != nil {
				rt = rate(int64(head), oldHead, cur, prev)
			}
			t.row("  head", head, rt)
			names, vals := numericFields(*r.Ring)
			var before []int64
			if old != nil && old.Ring != nil {
				_, before = numericFields(*old.Ring)
			}
			for i, n := range names {
				if n == "Slots" || n == "SlotSize" {
					continue
				}
				rt := ""
				if before != nil {
					rt = rate(vals[i], before[i], cur, prev)
				}
				t.row("  "+label(n), vals[i], rt)
			}
			t.flush()
			if len(r.Groups) == 0 {
				fmt.Fprintln(w, "  no groups")
				continue
			}
			fmt.Fprintln(w)
			t = newTable(w)
			t.row("  GROUP", "TOPIC", "POSITION", "LAG", "PENDING", "OLDEST LEASE", "DELIVERED", "RATE", "REDELIVERED", "DEAD-LETTERED", "LAPPED", "SKIPPED", "ABANDONED")
			for _, g := range r.Groups {
				rt := ""
				if old != nil {
					for _, og := range old.Groups {
						if og.Name == g.Name {
							rt = rate(int64(g.Delivered), int64(og.Delivered), cur, prev)
						}
					}
				}
				topic := g.Topic
				if topic == "" {
					topic = "*"
				}
				t.row("  "+g.Name, topic, g.Position, g.Lag, g.Pending, durationText(g.OldestPending), g.Delivered, orDash(rt),
					g.Redelivered, g.DeadLettered, g.Lapped, g.Skipped, g.Abandoned)
			}
			t.flush()
		}
	}
}

// hitRatio renders hits over reads (hits and misses): since the map was
// made, and, with an earlier sample, since then.
func hitRatio(m *shmarena.MapStats, old *shmarena.RegionStats) string {
	total := percent(int64(m.Hits), int64(m.Hits+m.Misses))
	if old == nil || old.Map == nil {
		return total
	}
	dh, dm := m.Hits-old.Map.Hits, m.Misses-old.Map.Misses
	return fmt.Sprintf("%s (%s lately)", total, percent(int64(dh), int64(dh+dm)))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// watchJSON is one --watch --json line: the stats, and each counter's
// rate per second since the previous line (absent on the first).
func watchJSON(cur sample, prev *sample) any {
	out := struct {
		Time  time.Time
		Stats shmarena.ArenaStats
		Rates map[string]float64 `json:",omitempty"`
	}{Time: cur.at, Stats: cur.st}
	if prev == nil {
		return out
	}
	secs := cur.at.Sub(prev.at).Seconds()
	out.Rates = map[string]float64{}
	for _, r := range cur.st.Regions {
		old := findRegion(prev.st, r.Name)
		if old == nil {
			continue
		}
		add := func(prefix string, a, b any) {
			names, now := numericFields(a)
			_, before := numericFields(b)
			for i, n := range names {
				out.Rates[prefix+snakeCase(n)] = float64(now[i]-before[i]) / secs
			}
		}
		switch {
		case r.Map != nil && old.Map != nil:
			add(r.Name+".", *r.Map, *old.Map)
		case r.Ring != nil && old.Ring != nil:
			add(r.Name+".", *r.Ring, *old.Ring)
			for _, g := range r.Groups {
				for _, og := range old.Groups {
					if og.Name == g.Name {
						add(r.Name+"."+g.Name+".", g, og)
					}
				}
			}
		}
	}
	return out
}

func runCheck(e *env, fs *flag.FlagSet, args []string) error {
	var found []shmarena.Finding
	regions := 0
	a, err := openRead(args[0])
	switch {
	case err == nil:
		defer a.Close()
		regions = len(a.Regions())
		if found, err = a.Check(); err != nil {
			return err
		}
	case errors.Is(err, shmarena.ErrCorrupt), errors.Is(err, shmarena.ErrNotArena),
		errors.Is(err, shmarena.ErrIncompatible), errors.Is(err, shmarena.ErrSizeMismatch):
		found = []shmarena.Finding{{Problem: err.Error()}} // Open validates the header and region headers
	default:
		return err
	}
	damage := 0
	for _, f := range found {
		if !f.Unjudged {
			damage++
		}
	}
	if e.json {
		if err := e.printJSON(struct {
			OK       bool // no damage found
			Complete bool // every part judged
			Regions  int
			Findings []shmarena.Finding
		}{damage == 0, len(found) == damage, regions, found}); err != nil {
			return err
		}
	} else {
		for _, f := range found {
			fmt.Fprintln(e.stdout, f)
		}
		switch {
		case len(found) == 0:
			fmt.Fprintf(e.stdout, "ok: %d regions checked, nothing wrong\n", regions)
		case damage == 0:
			fmt.Fprintf(e.stdout, "nothing wrong in %d regions checked, but %d part(s) not judged: their writers never paused; run check again when they are quieter\n", regions, len(found))
		default:
			fmt.Fprintf(e.stdout, "%d finding(s)\n", damage)
		}
	}
	return checkStatus(len(found), damage)
}

// checkStatus is check's answer: damage is a "no" (exit 1); parts that
// could not be judged, with no damage elsewhere, are errUnjudged (exit 3),
// so that a script watching a busy arena tells "not sure" from "broken".
func checkStatus(findings, damage int) error {
	switch {
	case damage > 0:
		return errNo
	case findings > 0:
		return errUnjudged
	}
	return nil
}

func locksFlags(fs *flag.FlagSet) {
	fs.Bool("recover", false, "take over the locks of dead owners and repair what they left (writes; asks first)")
	yesFlag(fs)
}

func runLocks(e *env, fs *flag.FlagSet, args []string) error {
	if flagBool(fs, "recover") {
		a, err := openWrite(args[0])
		if err != nil {
			return err
		}
		defer a.Close()
		locks, err := a.Locks()
		if err != nil {
			return err
		}
		dead := 0
		for _, l := range locks {
			if !l.Alive {
				dead++
			}
		}
		if err := e.confirm(flagBool(fs, "yes"), fmt.Sprintf("take over %d lock(s) of dead owners in %s and repair what they left?", dead, args[0])); err != nil {
			return err
		}
		done, err := a.RecoverLocks()
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(struct{ Recovered []shmarena.LockInfo }{done})
		}
		fmt.Fprintf(e.stdout, "took over %d lock(s) of dead owners\n", len(done))
		printLocks(e, done)
		return nil
	}
	a, err := openRead(args[0])
	if err != nil {
		return err
	}
	defer a.Close()
	locks, err := a.Locks()
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(struct{ Locks []shmarena.LockInfo }{locks})
	}
	if len(locks) == 0 {
		fmt.Fprintln(e.stdout, "no lock held")
		return nil
	}
	printLocks(e, locks)
	if slices.ContainsFunc(locks, func(l shmarena.LockInfo) bool { return !l.Alive }) {
		fmt.Fprintln(e.stdout, "\nlocks of dead owners are taken over by the next process that needs them, or now by: shmarena locks --recover "+args[0])
	}
	return nil
}

func printLocks(e *env, locks []shmarena.LockInfo) {
	if len(locks) == 0 {
		return
	}
	t := newTable(e.stdout)
	t.row("REGION", "KIND", "LOCK", "OWNER", "PID", "ALIVE")
	for _, l := range locks {
		pid := "-"
		if l.Pid != 0 {
			pid = fmt.Sprint(l.Pid)
		}
		t.row(l.Region, l.Kind, l.Lock, fmt.Sprintf("%#x", l.Owner), pid, yesNo(l.Alive))
	}
	t.flush()
}
