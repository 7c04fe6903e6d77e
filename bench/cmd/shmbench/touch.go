package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The first-touch section: what a freshly started worker pays for its
// first operations on an arena another process built and filled, with
// and without Arena.Prefault, and with the arena on a tmpfs of 2 MiB
// pages when one is given (-hugedir). Each measurement is a new worker
// process: it opens the arena, optionally prefaults it, times its first
// touchOps operations (random keys), then the same operations again.

const touchOps = 10_000

var touchKinds = []string{"read hit", "overwrite"}

type touchVariant struct {
	name     string
	dir      string
	prefault bool
}

type touchCell struct {
	variant, kind    string
	prefault         []time.Duration
	cold, warm       []time.Duration
	coldFaults       []int64
	arenaMB, hugeMiB float64
}

type touchResult struct {
	ops   int
	cells []touchCell
}

// touchWorker runs one measurement: arg is "prefault|cold:kind".
func touchWorker(dir, arg string, nkeys int) error {
	mode, kind, ok := strings.Cut(arg, ":")
	if !ok {
		return fmt.Errorf("bad touch arg %q", arg)
	}
	env := newEnv(dir, "", nkeys, *flagWSlots, 0)
	st, err := openShm(env, 64, false)
	if err != nil {
		return err
	}
	defer st.Close()
	s := st.(*shmStore)
	if err := awaitGo(); err != nil {
		return err
	}
	var pre time.Duration
	if mode == "prefault" {
		if pre, err = s.a.Prefault(); err != nil {
			return err
		}
	}
	keys := shuffled(env.hit, uint64(time.Now().UnixNano()))[:min(touchOps, len(env.hit))]
	val := valueOf(64)
	pass := func() (time.Duration, int64, error) {
		var r0, r1 unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &r0)
		start := time.Now()
		for _, k := range keys {
			if kind == "read hit" {
				var ok bool
				if s.buf, ok = s.m.AppendLoad(s.buf[:0], k); !ok {
					return 0, 0, fmt.Errorf("touch: key %q missing", k)
				}
			} else if err := s.m.Store(k, val); err != nil {
				return 0, 0, err
			}
		}
		el := time.Since(start)
		unix.Getrusage(unix.RUSAGE_SELF, &r1)
		return el, int64(r1.Minflt - r0.Minflt), nil
	}
	cold, faults, err := pass()
	if err != nil {
		return err
	}
	warm, _, err := pass()
	if err != nil {
		return err
	}
	fmt.Printf("%d %d %d %d\n", pre.Nanoseconds(), cold.Nanoseconds(), warm.Nanoseconds(), faults)
	return nil
}

// hugeTmpfs says whether dir is on a tmpfs mounted with huge=always or
// huge=within_size, and if not why.
func hugeTmpfs(dir string) (bool, string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err.Error()
	}
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return false, err.Error()
	}
	defer f.Close()
	best, fstype, opts := "", "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 4 {
			continue
		}
		mp := fl[1]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, fstype, opts = mp, fl[2], fl[3]
		}
	}
	if fstype != "tmpfs" {
		return false, fmt.Sprintf("%s is on %s, not tmpfs", dir, fstype)
	}
	for _, o := range strings.Split(opts, ",") {
		if o == "huge=always" || o == "huge=within_size" {
			return true, ""
		}
	}
	return false, fmt.Sprintf("the tmpfs at %s is mounted without huge=always (%s)", best, opts)
}

func meminfoKB(field string) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

func touchBench(dir, hugeDir string, short bool) (*touchResult, []string, error) {
	nkeys, slots, rounds := 100_000, 1<<18, 3
	if short {
		nkeys, slots = 10_000, 1<<15
	}
	var notes []string
	variants := []touchVariant{{"tmpfs, 4 KiB pages", filepath.Join(dir, "touch"), false}, {"tmpfs, 4 KiB pages", filepath.Join(dir, "touch"), true}}
	if hugeDir != "" {
		if ok, why := hugeTmpfs(hugeDir); !ok {
			notes = append(notes, "First touch: huge pages not measured: "+why+".")
			hugeDir = ""
		} else {
			d, err := os.MkdirTemp(hugeDir, "shmbench-")
			if err != nil {
				return nil, nil, err
			}
			defer os.RemoveAll(d)
			variants = append(variants, touchVariant{"tmpfs huge=always, 2 MiB pages", d, false}, touchVariant{"tmpfs huge=always, 2 MiB pages", d, true})
		}
	} else {
		notes = append(notes, "First touch: huge pages not measured: no -hugedir (run.sh mounts a tmpfs with huge=always when it runs as root and may mount).")
	}
	// Build and fill one arena per directory, as the map section's.
	val := valueOf(64)
	huge := map[string]float64{}
	size := map[string]float64{}
	for _, v := range variants {
		if _, done := size[v.dir]; done {
			continue
		}
		if err := os.MkdirAll(v.dir, 0o755); err != nil {
			return nil, nil, err
		}
		before := meminfoKB("ShmemHugePages")
		env := newEnv(v.dir, "", nkeys, slots, 0)
		st, err := openShm(env, 64, true)
		if err == nil {
			err = st.Fill(env.hit, val, env.ctr)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("first touch: %w", err)
		}
		size[v.dir] = float64(st.(*shmStore).a.Size()) / (1 << 20)
		huge[v.dir] = float64(meminfoKB("ShmemHugePages")-before) / 1024
		st.Close()
	}
	res := &touchResult{ops: min(touchOps, nkeys)}
	cells := map[string]*touchCell{}
	var order []string
	for round := 0; round < rounds; round++ {
		for _, v := range variants {
			for _, kind := range touchKinds {
				mode := "cold"
				name := v.name + ", no Prefault"
				if v.prefault {
					mode, name = "prefault", v.name+", Prefault"
				}
				key := name + "|" + kind
				c, ok := cells[key]
				if !ok {
					c = &touchCell{variant: name, kind: kind, arenaMB: size[v.dir], hugeMiB: huge[v.dir]}
					cells[key] = c
					order = append(order, key)
				}
				w, err := spawn("-worker=touch", "-w.dir="+v.dir, "-w.arg="+mode+":"+kind, fmt.Sprint("-w.keys=", nkeys), fmt.Sprint("-w.slots=", slots))
				if err != nil {
					return nil, nil, err
				}
				if err := w.start(); err != nil {
					return nil, nil, err
				}
				line, err := w.wait()
				if err != nil {
					return nil, nil, fmt.Errorf("first touch %s %s: %w", name, kind, err)
				}
				var pre, cold, warm, faults int64
				if _, err := fmt.Sscan(line, &pre, &cold, &warm, &faults); err != nil {
					return nil, nil, fmt.Errorf("first touch worker said %q", line)
				}
				c.prefault = append(c.prefault, time.Duration(pre))
				c.cold = append(c.cold, time.Duration(cold))
				c.warm = append(c.warm, time.Duration(warm))
				c.coldFaults = append(c.coldFaults, faults)
			}
		}
	}
	for _, k := range order {
		c := cells[k]
		logf("  %-48s %-9s prefault %v first %v again %v", c.variant, c.kind, c.prefault, c.cold, c.warm)
		res.cells = append(res.cells, *c)
	}
	notes = append(notes, fmt.Sprintf("First touch: each figure is a new worker process (%d rounds, alternating the rows): it opens the arena that another process built and filled "+
		"(%s keys, 64-byte values, as in the map section), calls Arena.Prefault or not, then times its first %s operations on random keys (one pass), then the same %s again. "+
		"Page faults are the worker's minor faults during its first pass (a read fault maps up to 16 neighbouring pages at once, so they are fewer than the pages touched).",
		rounds, fmtCount(nkeys), fmtCount(res.ops), fmtCount(res.ops)))
	return res, notes, nil
}

// durs converts for median.
func durs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d)
	}
	return out
}

// fmtDurRange writes the median of ds with its range.
func fmtDurRange(ds []time.Duration) string {
	f := durs(ds)
	med := time.Duration(median(f))
	lo, hi := ds[0], ds[0]
	for _, d := range ds {
		lo, hi = min(lo, d), max(hi, d)
	}
	r := func(d time.Duration) time.Duration {
		switch {
		case d >= 100*time.Millisecond:
			return d.Round(time.Millisecond)
		case d >= time.Millisecond:
			return d.Round(10 * time.Microsecond)
		case d >= 100*time.Microsecond:
			return d.Round(time.Microsecond)
		}
		return d.Round(100 * time.Nanosecond)
	}
	if len(ds) == 1 {
		return r(med).String()
	}
	return fmt.Sprintf("%v (%v-%v)", r(med), r(lo), r(hi))
}
