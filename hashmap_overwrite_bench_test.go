package shmarena

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkOverwriteSpreadVsRWMutex overwrites 64-byte values of 100,000
// keys in random order (the counters benchmarks' 24-byte keys and order,
// see spreadShape), as the harness's "overwrite" does: a Map of 133,334
// slots of 128 bytes (75% full) against a Go map[string][]byte behind a
// sync.RWMutex whose store copies into the value it holds (rwMap.store,
// no allocation). Alternating blocks of 262,144 stores, as
// BenchmarkCounterSpreadVsRWMutex; the ratio is map time over RWMutex time.
//
//	go test -run '^$' -bench 'OverwriteSpreadVsRWMutex' -benchtime 1572864x -count 3 .
func BenchmarkOverwriteSpreadVsRWMutex(b *testing.B) {
	spreadShape()
	const slotSize = 128
	a, err := Open(filepath.Join(b.TempDir(), "ow"), WithSize(mapLength(spreadSlots, slotSize, 64, false)+MinSize+4096))
	require.NoError(b, err)
	b.Cleanup(func() { a.Close() })
	m, err := a.Map("ow", WithSlots(spreadSlots), WithSlotSize(slotSize))
	require.NoError(b, err)
	r := &rwMap{m: make(map[string][]byte, spreadCounters)}
	val := make([]byte, 64)
	for _, k := range spreadKeys {
		require.NoError(b, m.Store(k, val))
		r.store(strings.Clone(k), val) // a private copy, as a key from a request would be
	}
	interleaveBlocks(b, "Store", spreadBlock,
		func(i int) { _ = m.Store(spreadKey(i), val) },
		func(i int) { r.store(spreadKey(i), val) })
}
