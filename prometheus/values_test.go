package prometheus

import (
	"bytes"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A map's value space (WithBytes) is exported: bytes used, dead and
// capacity as gauges, bytes moved as a counter, equal to Stats.
func TestCollectorValueSpace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "arena")
	a, err := shmarena.Open(path, shmarena.WithSize(8<<20))
	require.NoError(t, err)
	defer a.Close()
	m, err := a.Map("pages", shmarena.WithSlots(256), shmarena.WithSlotSize(64), shmarena.WithBytes(64<<10), shmarena.WithEviction())
	require.NoError(t, err)
	for i := range 300 {
		require.NoError(t, m.Store("p"+strconv.Itoa(i%40), bytes.Repeat([]byte{1}, 100+i*10)))
		m.Load("p" + strconv.Itoa(i%7))
	}
	problems, err := testutil.CollectAndLint(NewCollector(a))
	require.NoError(t, err)
	assert.Empty(t, problems)
	s := scrape(t, NewCollector(a))
	st := m.Stats()
	assert.Positive(t, st.BytesUsed)
	assert.Equal(t, float64(st.BytesUsed), s["shmarena_map_bytes_used{pages}"])
	assert.Equal(t, float64(st.BytesDead), s["shmarena_map_bytes_dead{pages}"])
	assert.Equal(t, float64(64<<10), s["shmarena_map_bytes_capacity{pages}"])
	assert.Equal(t, float64(st.BytesMoved), s["shmarena_map_bytes_moved_total{pages}"])
}
