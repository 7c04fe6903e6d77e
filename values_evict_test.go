package shmarena

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValuesEvictionKeepsReadRecords checks that eviction by bytes keeps
// a value read since its record last came round to the log's head even
// when the record is larger than the free space the writer has made so
// far: the writer leaves room to move it (moveSlack), as a CLOCK over the
// bytes would. Without the slack, a writer of 1 KiB values that found a
// read 1.5 KiB record at the head with under 1.5 KiB free evicted it.
func TestValuesEvictionKeepsReadRecords(t *testing.T) {
	m := valueMap(t, WithSlots(4096), WithSlotSize(64), WithBytes(64<<10), WithEviction())
	hot := make([]byte, 1536)
	cold := make([]byte, 1024)
	for i := range 200 { // three laps of the log: evicting at steady state
		require.NoError(t, m.Store("w"+strconv.Itoa(i), cold))
	}
	require.NoError(t, m.Store("hot", hot))
	for i := range 2000 { // about 30 laps more
		if i%8 == 0 {
			_, ok := m.Load("hot")
			require.True(t, ok, "the read value was evicted before store %d", i)
		}
		require.NoError(t, m.Store("k"+strconv.Itoa(i), cold))
	}
	_, ok := m.Load("hot")
	require.True(t, ok)
	require.Positive(t, m.Stats().Evicted)
}
