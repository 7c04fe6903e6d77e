package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"
)

// The Redis ratio by working set. A read hit on a table larger than the
// CPU's caches needs at least one DRAM miss whatever the code does, so a
// ratio against Redis GET means little without the table's size and the
// DRAM floor beside it: this section measures shmarena's read hit and
// Redis GET (one per round trip, 64-byte values) for a table that fits
// the caches and one that does not, in alternating rounds, and the
// latency of a dependent random load (a pointer chase, one cache line
// per step, 4 KiB pages as the mapping has) over a block of each size
// and over 256 MiB, in the same run.

type redisWS struct {
	keys, slots int
	tableBytes  int
	shmNs       []float64 // ns per hit, per round
	redisNs     []float64 // ns per GET, per round
	chaseNs     float64   // a dependent load over a block of the table's size
}

type redisRatioResult struct {
	sets    []redisWS
	dramNs  float64 // a dependent load over 256 MiB
	dramMiB int
}

func redisRatioBench(dir, addr string, short bool, dur time.Duration, reps int) (*redisRatioResult, []string, error) {
	if addr == "" {
		return nil, []string{"Redis ratio by working set skipped: no Redis."}, nil
	}
	res := &redisRatioResult{dramMiB: 256}
	if short {
		res.dramMiB = 64
	}
	res.dramNs = chaseNs(res.dramMiB << 20)
	for _, keys := range []int{8192, 100_000} {
		slots := 1
		for slots*3/4 < keys {
			slots *= 2
		}
		ws := redisWS{keys: keys, slots: slots, tableBytes: slots * shmSlotSize(ringPayload)}
		sub := filepath.Join(dir, fmt.Sprintf("ws-%d", keys))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return nil, nil, err
		}
		env := newEnv(sub, addr, keys, slots, dur)
		val := valueOf(ringPayload)
		shm, err := openShm(env, ringPayload, true)
		if err != nil {
			return nil, nil, err
		}
		red, err := redisOpener(false)(env, ringPayload, true)
		if err != nil {
			shm.Close()
			return nil, nil, err
		}
		ks := env.keysFor(OpReadHit, 0, 0)
		for _, st := range []Store{shm, red} {
			if err := st.Fill(env.hit, val, nil); err != nil {
				shm.Close()
				red.Close()
				return nil, nil, err
			}
			warm(st, OpReadHit, ks)
		}
		for range reps {
			for i, st := range []Store{shm, red} {
				r := runLoop(st, OpReadHit, ks, env.masks, val, dur)
				ns := float64(r.el.Nanoseconds()) / float64(r.ops)
				if i == 0 {
					ws.shmNs = append(ws.shmNs, ns)
				} else {
					ws.redisNs = append(ws.redisNs, ns)
				}
			}
		}
		shm.Close()
		red.Close()
		os.RemoveAll(sub)
		ws.chaseNs = chaseNs(ws.tableBytes)
		logf("  %d keys (%d MiB table): hit %.0f ns, Redis GET %.0f ns, chase %.0f ns",
			keys, ws.tableBytes>>20, median(ws.shmNs), median(ws.redisNs), ws.chaseNs)
		res.sets = append(res.sets, ws)
	}
	logf("  DRAM floor (%d MiB chase): %.0f ns", res.dramMiB, res.dramNs)
	return res, nil, nil
}

// chaseNs returns the time of one load that depends on the one before,
// each to a random cache line of a block of size bytes (a single cycle
// through all of them, Sattolo's shuffle): the fastest of 40 passes.
func chaseNs(size int) float64 {
	lines := max(size/64, 2)
	next := make([]uint64, lines*8)
	order := make([]int, lines)
	for i := range order {
		order[i] = i
	}
	r := rand.New(rand.NewPCG(3, 3))
	for i := lines - 1; i > 0; i-- { // Sattolo: one cycle through every line
		j := r.IntN(i)
		order[i], order[j] = order[j], order[i]
	}
	for i := range lines {
		next[order[i]*8] = uint64(order[(i+1)%lines] * 8)
	}
	var p uint64
	for range lines { // warm: touch every line once (and its TLB entry)
		p = next[p]
	}
	// Many short passes, the fastest kept: on a shared machine a pass
	// the scheduler interrupts is slower, never faster, than the loads.
	const steps = 1 << 14
	best := math.Inf(1)
	for range 40 {
		t := time.Now()
		for range steps {
			p = next[p]
		}
		best = min(best, float64(time.Since(t).Nanoseconds())/steps)
	}
	chaseEnd.Store(p) // keeps the loads live
	return best
}

var chaseEnd atomic.Uint64

func (r *redisRatioResult) markdown() string {
	s := "## Read hit against Redis GET by working set, with the DRAM floor\n\n" +
		"shmarena `AppendLoad` hits and Redis `GET` (one per round trip, go-redis), 64-byte values, random keys, " +
		"the peers alternating; ns per operation, median of the rounds with their range. \"Chase\" is a dependent random load " +
		"over a block the table's size, measured in the same run (the fastest of 40 short passes): what one cache or DRAM miss costs there. " +
		fmt.Sprintf("DRAM floor (a dependent random load over %d MiB): %.0f ns.\n\n", r.dramMiB, r.dramNs) +
		"| working set | table | shmarena hit | Redis GET | ratio | chase |\n|---|---:|---:|---:|---:|---:|\n"
	for _, ws := range r.sets {
		var ratios []float64
		for i := range min(len(ws.shmNs), len(ws.redisNs)) {
			ratios = append(ratios, ws.redisNs[i]/ws.shmNs[i])
		}
		s += fmt.Sprintf("| %d keys | %.1f MiB | %.0f ns (%.0f-%.0f) | %.0f ns (%.0f-%.0f) | %s | %.0f ns |\n",
			ws.keys, float64(ws.tableBytes)/(1<<20),
			median(ws.shmNs), slices.Min(ws.shmNs), slices.Max(ws.shmNs),
			median(ws.redisNs), slices.Min(ws.redisNs), slices.Max(ws.redisNs),
			fmtRatioRange(median(ratios), slices.Min(ratios), slices.Max(ratios)), ws.chaseNs)
	}
	return s + "\n"
}
