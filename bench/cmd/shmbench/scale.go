package main

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/shmarena/shmarena"
)

// Scaling of shmarena's map alone: read (hit and miss) and insert cost as
// one table fills, and as the table grows at a fixed load.
const (
	scaleSlotSize = 128 // 32-byte header + 24-byte key + 64-byte value, rounded
	scaleVal      = 64
	growLoad      = 0.75
)

// A plain map refuses keys from about 90-92% (a segment fills, or a probe
// meets its 1,024-slot bound), so the curve stops at 90%.
var fillLoads = []float64{0.25, 0.50, 0.75, 0.85, 0.90}

type scalePoint struct {
	x                float64 // load fraction, or slots
	readHit, readMis float64 // ns/op
	insert           float64 // ns/op
	goMapRead        float64 // ns/op, growth curve only
}

type scaleResult struct {
	loadSlots int
	load      []scalePoint
	grow      []scalePoint
}

func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

type scaleMap struct {
	a    *shmarena.Arena
	m    *shmarena.Map
	path string
}

func newScaleMap(dir string, slots int) (*scaleMap, error) {
	path := filepath.Join(dir, fmt.Sprintf("scale-%d", slots))
	os.Remove(path)
	need, err := shmarena.MapBytes(shmarena.WithSlots(slots), shmarena.WithSlotSize(scaleSlotSize))
	if err != nil {
		return nil, err
	}
	a, err := shmarena.Open(path, shmarena.WithSize(shmarena.MinSize+need))
	if err != nil {
		return nil, err
	}
	m, err := a.Map("scale", shmarena.WithSlots(slots), shmarena.WithSlotSize(scaleSlotSize))
	if err != nil {
		a.Close()
		os.Remove(path)
		return nil, err
	}
	return &scaleMap{a: a, m: m, path: path}, nil
}

func (s *scaleMap) close() { s.a.Close(); os.Remove(s.path) }

// insertRange stores keys[lo:hi] and returns ns per insert.
func (s *scaleMap) insertRange(keys []string, lo, hi int, val []byte) (float64, error) {
	start := time.Now()
	for _, k := range keys[lo:hi] {
		if err := s.m.Store(k, val); err != nil {
			return 0, fmt.Errorf("insert %d of %d slots: %w", hi, s.m.Capacity(), err)
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(max(hi-lo, 1)), nil
}

// bestReads is the fastest of three reads runs (the machine is shared).
func (s *scaleMap) bestReads(keys []string, present, n int, miss bool, seed uint64) (float64, error) {
	best := math.Inf(1)
	for i := uint64(0); i < 3; i++ {
		ns, err := s.reads(keys, present, n, miss, seed+i*1000)
		if err != nil {
			return 0, err
		}
		best = min(best, ns)
	}
	return best, nil
}

// reads looks up n random keys among keys[:present] (or misses) and
// returns ns per read.
func (s *scaleMap) reads(keys []string, present, n int, miss bool, seed uint64) (float64, error) {
	r := rand.New(rand.NewPCG(seed, 1))
	ks := make([]string, 1<<16)
	for i := range ks {
		ks[i] = keys[r.IntN(present)]
		if miss {
			ks[i] = "m" + ks[i][1:]
		}
	}
	buf := make([]byte, 0, 128)
	var ok bool
	bad := 0
	start := time.Now()
	for i := 0; i < n; i++ {
		k := ks[i&(len(ks)-1)]
		if buf, ok = s.m.AppendLoad(buf[:0], k); ok == miss {
			bad++
		}
	}
	ns := float64(time.Since(start).Nanoseconds()) / float64(n)
	if bad > 0 {
		return 0, fmt.Errorf("%d of %d reads wrong (miss=%v)", bad, n, miss)
	}
	return ns, nil
}

func scaleBench(dir string, short bool, maxSlots int) (*scaleResult, []string, error) {
	var notes []string
	val := valueOf(scaleVal)
	nreads := 1_000_000
	loadSlots := 1 << 20
	sizes := []int{1e3, 1e4, 1e5, 1e6, 1e7}
	if short {
		nreads, loadSlots = 50_000, 1<<15
		sizes = []int{1e3, 1e4, 1e5}
	}
	res := &scaleResult{loadSlots: loadSlots}

	// As one table fills: insert cost is the band of the last 1% of slots
	// before each load; reads are random over the keys present.
	keys := genKeys("s:", int(float64(loadSlots)*fillLoads[len(fillLoads)-1])+1)
	sm, err := newScaleMap(dir, loadSlots)
	if err != nil {
		return nil, nil, err
	}
	filled := 0
	for _, L := range fillLoads {
		target := int(L * float64(loadSlots))
		band := max(loadSlots/100, 1)
		if _, err := sm.insertRange(keys, filled, target-band, val); err != nil {
			sm.close()
			return nil, nil, err
		}
		ins, err := sm.insertRange(keys, target-band, target, val)
		if err != nil {
			sm.close()
			return nil, nil, err
		}
		filled = target
		hit, err := sm.bestReads(keys, filled, nreads, false, 1)
		if err != nil {
			sm.close()
			return nil, nil, err
		}
		mis, err := sm.bestReads(keys, filled, nreads/4, true, 2)
		if err != nil {
			sm.close()
			return nil, nil, err
		}
		logf("  load %3.0f%% of %d slots: read hit %.0f ns, read miss %.0f ns, insert %.0f ns", L*100, loadSlots, hit, mis, ins)
		res.load = append(res.load, scalePoint{x: L, readHit: hit, readMis: mis, insert: ins})
	}
	sm.close()
	keys = nil

	// As the table grows at 75% load: inserts are the band from 65% to
	// 75%; reads are random over the keys present; a Go map behind an
	// RWMutex holding the same keys is read the same way for reference.
	avail := memAvailable()
	for _, slots := range sizes {
		if slots > maxSlots {
			notes = append(notes, fmt.Sprintf("growth curve capped at %d slots by -maxslots", maxSlots))
			break
		}
		n := int(growLoad * float64(slots))
		need := int64(slots)*scaleSlotSize + int64(n)*(40+64+keyLen)*3
		if avail > 0 && need > avail*3/4 {
			notes = append(notes, fmt.Sprintf("growth curve stops before %d slots: needs about %d MiB, %d MiB available", slots, need>>20, avail>>20))
			break
		}
		keys := genKeys("s:", n)
		sm, err := newScaleMap(dir, slots)
		if err != nil {
			return nil, nil, err
		}
		lo := int((growLoad - 0.10) * float64(slots))
		if _, err := sm.insertRange(keys, 0, lo, val); err != nil {
			sm.close()
			return nil, nil, err
		}
		ins, err := sm.insertRange(keys, lo, n, val)
		if err != nil {
			sm.close()
			return nil, nil, err
		}
		hit, err := sm.bestReads(keys, n, nreads, false, 3)
		if err == nil {
			var mis float64
			mis, err = sm.bestReads(keys, n, nreads/4, true, 4)
			if err == nil {
				gm := goMapRead(keys, nreads, val)
				logf("  %d slots at %.0f%%: read hit %.0f ns, read miss %.0f ns, insert %.0f ns; RWMutex map read %.0f ns", slots, growLoad*100, hit, mis, ins, gm)
				res.grow = append(res.grow, scalePoint{x: float64(slots), readHit: hit, readMis: mis, insert: ins, goMapRead: gm})
			}
		}
		sm.close()
		if err != nil {
			return nil, nil, err
		}
		runtime.GC()
	}
	return res, notes, nil
}

// goMapRead fills a Go map behind an RWMutex with keys and reads n random
// ones, copying the value out as the shmarena read does; ns per read.
func goMapRead(keys []string, n int, val []byte) float64 {
	st := &rwStore{m: make(map[string][]byte, len(keys)), c: map[string]int64{}}
	st.Fill(keys, val, nil)
	r := rand.New(rand.NewPCG(3, 1))
	idx := make([]int32, 1<<16)
	for i := range idx {
		idx[i] = int32(r.IntN(len(keys)))
	}
	buf := make([]byte, 0, 128)
	best := math.Inf(1)
	for rep := 0; rep < 3; rep++ {
		start := time.Now()
		for i := 0; i < n; i++ {
			buf, _ = st.get(keys[idx[i&(len(idx)-1)]], buf)
		}
		best = min(best, float64(time.Since(start).Nanoseconds())/float64(n))
	}
	return best
}
