package shmarena

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The counters benchmarks add to many counters in random order, as the
// harness's "counter add" does (bench/cmd/shmbench): 100,000 counters of
// 24-byte keys in a counters-only map of 262,144 slots of 64 bytes (38%
// full, 16 MiB), against a Go map behind a sync.RWMutex. Unlike
// BenchmarkMap/Add (16 hot counters, in cache), each Add meets its slot's
// cache misses, which the layout decides.
//
//	go test -run '^$' -bench 'CounterSpread' .
//
// (BenchmarkCounterSpreadVsRWMutex runs the two in alternating blocks and
// reports their ratio.)
const (
	spreadCounters = 100_000
	spreadSlots    = 1 << 18
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

func spreadRW() *rwMap {
	spreadShape()
	r := &rwMap{m: make(map[string][]byte, spreadCounters)}
	for _, k := range spreadKeys {
		r.add(k, 1)
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
	interleave(b, "Add",
		func(i int) { _, _ = m.Add(spreadKey(i), 1) },
		func(i int) { r.add(spreadKey(i), 1) })
}
