package shmarena

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The counters benchmarks add to many counters in random order, as the
// harness's "counter add" does (bench/cmd/shmbench): 100,000 counters of
// 24-byte keys in a counters-only map of 133,334 slots of 64 bytes (75%
// full, as the README sizes a plain map; 8 MiB), against a Go
// map[string]int64 behind a sync.RWMutex (131,072 slots at the same load).
// Unlike BenchmarkMap/Add (16 hot counters, in cache), each Add meets its
// slot's cache and TLB misses, which the layout decides.
//
//	go test -run '^$' -bench 'CounterSpread' .
//
// BenchmarkCounterSpreadVsRWMutex runs the two in alternating blocks of
// 262,144 adds and reports their ratio (map time over RWMutex time). The
// blocks are long on purpose: in blocks of 4,096 each side evicts the
// other's lines and page-table entries, which costs the smaller table (the
// Go map's) the locality it has in a program that only adds, and read
// 0.96-0.99x where the harness's runs read 0.63-0.70x.
const (
	spreadCounters = 100_000
	spreadSlots    = (spreadCounters*4 + 2) / 3
	spreadBlock    = 1 << 18
)

var (
	spreadOnce  sync.Once
	spreadKeys  []string
	spreadOrder []int
)

func spreadShape() {
	spreadOnce.Do(func() {
		setBenchShape() // -benchseed
		spreadKeys = make([]string, spreadCounters)
		for i := range spreadKeys {
			spreadKeys[i] = fmt.Sprintf("ctr-%020d", i) // 24 bytes
		}
		spreadOrder = rand.New(rand.NewPCG(9, 9)).Perm(spreadCounters)
	})
}

func spreadMap(b *testing.B) *Map {
	spreadShape()
	a, err := Open(filepath.Join(b.TempDir(), "ctr"), WithSize(mapLength(spreadSlots, 64, 64, false)+MinSize+4096))
	require.NoError(b, err)
	b.Cleanup(func() { a.Close() })
	m, err := a.Map("ctr", WithSlots(spreadSlots), WithSlotSize(64))
	require.NoError(b, err)
	for _, k := range spreadKeys {
		_, err := m.Add(k, 1)
		require.NoError(b, err)
	}
	return m
}

// rwCounters is the RWMutex peer for counters: a Go map of int64, as a
// program counting in one process would keep them, and as the harness's
// RWMutex map does (rwMap's []byte values add a pointer chase, another
// cache miss, to every add).
type rwCounters struct {
	mu sync.RWMutex
	m  map[string]int64
}

// add is one map assignment, as the harness's m[k]++ (the result, which
// Map.Add returns, would cost the Go map a second lookup).
func (r *rwCounters) add(k string, d int64) {
	r.mu.Lock()
	r.m[k] += d
	r.mu.Unlock()
}

func spreadRW() *rwCounters {
	spreadShape()
	r := &rwCounters{m: make(map[string]int64)}
	for _, k := range spreadKeys {
		r.add(strings.Clone(k), 1) // a private copy, as a key from a request would be
	}
	return r
}

func spreadKey(i int) string { return spreadKeys[spreadOrder[i%spreadCounters]] }

func BenchmarkCounterSpread(b *testing.B) {
	// Both tables are built here, once, not in the sub-benchmarks: a
	// b.Loop sub-benchmark may be called more than once, and its setup
	// then shows in bench/irperop.sh's difference of two runs.
	m, r := spreadMap(b), spreadRW()
	b.Run("Map", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_, _ = m.Add(spreadKey(i), 1)
		}
	})
	b.Run("RWMutex", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			r.add(spreadKey(i), 1)
		}
	})
}

func BenchmarkCounterSpreadVsRWMutex(b *testing.B) {
	m, r := spreadMap(b), spreadRW()
	interleaveBlocks(b, "Add", spreadBlock,
		func(i int) { _, _ = m.Add(spreadKey(i), 1) },
		func(i int) { r.add(spreadKey(i), 1) })
}
