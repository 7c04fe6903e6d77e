// Command lockhold measures how long one map operation holds its
// segment's lock in the workloads that used to do unbounded work under
// it, on one segment of -slots slots (WithStripes(1)):
//
//   - refuse: a plain map that once held a TTL, full: each Store of a new
//     key is refused (ErrFull) after its sweep for lapsed entries;
//   - evict: an evicting map whose every key was read since it last went
//     round the queues: each Store of a new key evicts;
//   - churn: Store and Delete of random keys in a map half full, while
//     Keys walks it (the walk takes no lock; its time per walk is shown);
//   - baseline: Store of new keys into a map a quarter full, the cheap
//     case, to read the others against in the same run.
//
// Each operation runs alone on its segment, so its time is the time it
// held the lock plus the lock's own cost (tens of nanoseconds). Each is
// timed twice: by the wall clock, whose maxima include the scheduler's
// pauses of a busy machine, and by its thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID, the goroutine locked to its thread), which
// counts only the work it did: the figure the 1 ms target is about. -probe instead reports how often random keys met the probe bound
// in evicting maps held full.
//
//	go run ./cmd/lockhold            # 65,536-slot segment
//	go run ./cmd/lockhold -slots 1048576
//	go run ./cmd/lockhold -probe
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shmarena/shmarena"
	"golang.org/x/sys/unix"
)

func main() {
	slots := flag.Int("slots", 1<<16, "slots in the one segment")
	probe := flag.Bool("probe", false, "report probe-bound inserts of random keys in evicting maps instead")
	reads := flag.Int("reads", 0, "with -probe: reads of earlier keys (Zipf-distributed over the last 100,000) after each insert")
	flag.Parse()
	dir, err := os.MkdirTemp("", "lockhold")
	check(err)
	defer os.RemoveAll(dir)
	if *probe {
		probeBound(dir, *reads)
		return
	}
	fmt.Printf("one segment of %d slots; per operation, wall clock and thread CPU time: median, p99.9, worst\n\n", *slots)
	fmt.Println("| workload | ops | wall median | wall p99.9 | wall worst | CPU median | CPU p99.9 | CPU worst | CPU p99.9 / baseline's |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	base := baseline(dir, *slots)
	report("baseline: Store of a new key, map 1/4 full", base, base)
	report("refused Store, map once with a TTL, full", refuse(dir, *slots), base)
	report("evicting Store, every key read since its last pass", evict(dir, *slots), base)
	ops, walks := churn(dir, *slots)
	report("Store/Delete while Keys walks", ops, base)
	fmt.Println()
	fmt.Printf("Keys walk of the segment under churn (no lock held): wall median %v, worst %v; CPU median %v, worst %v (%d walks)\n",
		pct(walls(walks), 0.5), pct(walls(walks), 1), pct(cpus(walks), 0.5), pct(cpus(walks), 1), len(walks))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockhold:", err)
		os.Exit(1)
	}
}

func newMap(dir, name string, slots int, opts ...shmarena.RegionOption) *shmarena.Map {
	o := append([]shmarena.RegionOption{shmarena.WithSlots(slots), shmarena.WithSlotSize(64), shmarena.WithStripes(1)}, opts...)
	need, err := shmarena.MapBytes(o...)
	check(err)
	a, err := shmarena.Open(filepath.Join(dir, name), shmarena.WithSize(need+shmarena.MinSize))
	check(err)
	m, err := a.Map("m", o...)
	check(err)
	return m
}

// A sample is one operation's wall and CPU time.
type sample struct{ wall, cpu time.Duration }

func threadCPU() time.Duration {
	var ts unix.Timespec
	check(unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts))
	return time.Duration(ts.Nano())
}

// timed runs f and returns its times; the caller has locked its
// goroutine to its thread.
func timed(f func()) sample {
	c, t := threadCPU(), time.Now()
	f()
	return sample{time.Since(t), threadCPU() - c}
}

func walls(s []sample) (d []time.Duration) {
	for _, x := range s {
		d = append(d, x.wall)
	}
	return d
}

func cpus(s []sample) (d []time.Duration) {
	for _, x := range s {
		d = append(d, x.cpu)
	}
	return d
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func report(name string, s, base []sample) {
	w, c := walls(s), cpus(s)
	r := func(d time.Duration) string { return d.Round(100 * time.Nanosecond).String() }
	fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %s | %.1fx |\n", name, len(s),
		r(pct(w, 0.5)), r(pct(w, 0.999)), r(pct(w, 1)), r(pct(c, 0.5)), r(pct(c, 0.999)), r(pct(c, 1)),
		float64(pct(c, 0.999))/float64(pct(cpus(base), 0.999)))
}

func baseline(dir string, slots int) []sample {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := newMap(dir, "base", slots)
	var out []sample
	for i := range slots / 4 {
		k := "b" + strconv.Itoa(i)
		out = append(out, timed(func() { check(m.Store(k, []byte("v"))) }))
	}
	return out
}

func refuse(dir string, slots int) []sample {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := newMap(dir, "refuse", slots)
	check(m.Store("ttl", []byte("v"), shmarena.WithTTL(time.Hour)))
	for i, misses := 0, 0; misses < 256; i++ { // full: 256 refusals in a row
		if err := m.Store("f"+strconv.Itoa(i), []byte("v")); err != nil {
			misses++
		} else {
			misses = 0
		}
	}
	var out []sample
	for i := 0; len(out) < 2000; i++ {
		var err error
		d := timed(func() { err = m.Store("n"+strconv.Itoa(i), []byte("v")) })
		switch {
		case errors.Is(err, shmarena.ErrFull):
			out = append(out, d)
		case err != nil:
			check(err)
		}
	}
	return out
}

func evict(dir string, slots int) []sample {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := newMap(dir, "evict", slots, shmarena.WithEviction())
	var keys []string
	for i := range slots {
		keys = append(keys, "e"+strconv.Itoa(i))
		check(m.Store(keys[i], []byte("v")))
	}
	var out []sample
	for round := range 5 {
		for _, k := range keys {
			for range 3 {
				m.Load(k)
			}
		}
		for i := range 200 {
			k := "r" + strconv.Itoa(round) + "/" + strconv.Itoa(i)
			keys = append(keys, k)
			out = append(out, timed(func() { check(m.Store(k, []byte("v"))) }))
		}
	}
	return out
}

func churn(dir string, slots int) (ops, walks []sample) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := newMap(dir, "churn", slots)
	n := slots / 2
	for i := range n {
		check(m.Store("c"+strconv.Itoa(i), []byte("v")))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		rng := rand.New(rand.NewPCG(1, 2))
		for !stop.Load() {
			k := "c" + strconv.Itoa(rng.IntN(2*n))
			if rng.IntN(2) == 0 {
				ops = append(ops, timed(func() { _ = m.Store(k, []byte("v")) }))
			} else {
				ops = append(ops, timed(func() { m.Delete(k) }))
			}
		}
	}()
	for range 5 {
		walks = append(walks, timed(func() {
			for range m.Keys() {
			}
		}))
	}
	stop.Store(true)
	wg.Wait()
	return ops, walks
}

// probeBound fills evicting maps of four shapes with random keys, then
// inserts 400,000 more and reports the share that found no free slot within the probe
// bound, and the longest probe.
func probeBound(dir string, reads int) {
	fmt.Println("| shape | inserts | ProbeLimited | share | MaxProbe |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for i, shape := range []struct {
		slots, stripes int
	}{{1 << 16, 1}, {1 << 16, 16}, {1 << 20, 1}, {1 << 20, 64}} {
		opts := []shmarena.RegionOption{shmarena.WithSlots(shape.slots), shmarena.WithSlotSize(64),
			shmarena.WithStripes(shape.stripes), shmarena.WithEviction()}
		need, err := shmarena.MapBytes(opts...)
		check(err)
		a, err := shmarena.Open(filepath.Join(dir, "probe"+strconv.Itoa(i)), shmarena.WithSize(need+shmarena.MinSize))
		check(err)
		m, err := a.Map("m", opts...)
		check(err)
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		for range shape.slots { // to the eviction limit and past it
			check(m.Store(strconv.FormatUint(rng.Uint64(), 36), []byte("v")))
		}
		before := m.Stats().ProbeLimited
		const inserts = 400000
		var recent [100000]string
		zipf := rand.NewZipf(rand.New(rand.NewPCG(uint64(i), 4)), 1.01, 1, uint64(len(recent)-1))
		for n := range inserts {
			k := strconv.FormatUint(rng.Uint64(), 36)
			check(m.Store(k, []byte("v")))
			recent[n%len(recent)] = k
			for range reads {
				if r := recent[(n+len(recent)-int(zipf.Uint64()))%len(recent)]; r != "" {
					m.Load(r)
				}
			}
		}
		st := m.Stats()
		limited := st.ProbeLimited - before
		fmt.Printf("| %d slots, %d segments | %d | %d | %.3f%% | %d |\n", shape.slots, shape.stripes, inserts,
			limited, 100*float64(limited)/inserts, st.MaxProbe)
		check(a.Close())
	}
}
