package shmarena

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkCounterSlotSize models smaller counter slots before any layout
// has them: the slot's 32-byte header, an 8-byte deadline word and the key
// need 64 bytes for a 24-byte key, but for an 8-byte key today's layout
// already fits 48 (WithSlotSize's minimum), so 100,000 counters of 8-byte
// keys in 48-byte and in 64-byte slots (133,334 of each, 75% full) run
// the same instructions over 6 and 8 MiB. The difference is what a
// 48-byte counter slot would buy. A 48-byte slot straddles two cache
// lines at every second slot, which a 64-byte one never does. It reports
// each table's time per Add and its ratio to a Go map[string]int64
// behind a sync.RWMutex (plus the 24-byte-key shape of CounterSpread),
// in alternating blocks of spreadBlock adds:
//
//	go test -run '^$' -bench CounterSlotSize -benchtime 1572864x .
func BenchmarkCounterSlotSize(b *testing.B) {
	spreadShape()
	short := make([]string, spreadCounters)
	for i := range short {
		short[i] = fmt.Sprintf("c%07d", i) // 8 bytes
	}
	table := func(name string, size int, keys []string) *Map {
		a, err := Open(filepath.Join(b.TempDir(), name),
			WithSize(mapLength(spreadSlots, int64(size), 64, false)+MinSize+4096))
		require.NoError(b, err)
		b.Cleanup(func() { a.Close() })
		m, err := a.Map("ctr", WithSlots(spreadSlots), WithSlotSize(size))
		require.NoError(b, err)
		for _, k := range keys {
			_, err := m.Add(k, 1)
			require.NoError(b, err)
		}
		return m
	}
	rw := spreadRW()
	m24, m48, m64 := table("k24", 64, spreadKeys), table("s48", 48, short), table("s64", 64, short)
	shortKey := func(i int) string { return short[spreadOrder[i%spreadCounters]] }
	sides := []struct {
		name string
		op   func(i int)
		t    time.Duration
	}{
		{name: "rwmutex", op: func(i int) { rw.add(spreadKey(i), 1) }},
		{name: "key24-slot64", op: func(i int) { _, _ = m24.Add(spreadKey(i), 1) }},
		{name: "key8-slot48", op: func(i int) { _, _ = m48.Add(shortKey(i), 1) }},
		{name: "key8-slot64", op: func(i int) { _, _ = m64.Add(shortKey(i), 1) }},
	}
	b.ResetTimer()
	for n := 0; n < b.N; n += spreadBlock {
		k := min(spreadBlock, b.N-n)
		for j := range sides {
			t0 := time.Now()
			for i := n; i < n+k; i++ {
				sides[j].op(i)
			}
			sides[j].t += time.Since(t0)
		}
	}
	for _, s := range sides[1:] {
		b.ReportMetric(float64(s.t.Nanoseconds())/float64(b.N), s.name+"-ns/op")
		b.ReportMetric(float64(s.t)/float64(sides[0].t), s.name+"-ratio")
	}
	b.ReportMetric(float64(sides[0].t.Nanoseconds())/float64(b.N), "rwmutex-ns/op")
}
