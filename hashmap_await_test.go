package shmarena

import (
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A slot damaged to an odd version, with its stripe free and its move
// version even, is no writer at work, and no repair moves it on. A reader
// whose liveness questions all come due (a machine so busy that each
// round of yields outlasts oddCheckAfter; here oddCheckAfter is 0) must
// still judge its patience and give up: after repairing it looks again,
// and falls through to the patience check when nothing moved, rather than
// going round for good on data read from the file.
func TestAwaitGivesUpOnOddSlotNoRepairMoves(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64), WithStripes(1))
	defer func(p, c time.Duration) { oddPatience, oddCheckAfter = p, c }(oddPatience, oddCheckAfter)
	oddPatience, oddCheckAfter = time.Millisecond, 0
	require.NoError(t, m.Store("damaged-key", []byte("v")))
	v, _, found := m.readKey("damaged-key", m.hashKey("damaged-key"), nil, false)
	require.True(t, found)
	mem.Store64(m.mem, v.off+sVersion, 1) // odd, naming stripe 0, which is free

	done := make(chan bool, 1)
	busy0 := m.Stats().Busy
	go func() { done <- m.Exists("damaged-key") }()
	select {
	case ok := <-done:
		assert.False(t, ok, "a slot being written reads as absent")
	case <-time.After(hangBound):
		t.Fatal("a reader went round for good on a damaged slot's odd version")
	}
	assert.Positive(t, m.Stats().Busy-busy0, "the reader gave up as busy")
}
