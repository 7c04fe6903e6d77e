package shmarena

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Check on a ring while a batch is being written (the publish lock held,
// slots from the head on begun with sequences the head has not reached)
// reports nothing: those slots are a publish in progress, as the head's
// own slot is for a Publish.
func TestCheckDuringPublishBatch(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("checked", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	for i := range 10 { // a lap and a bit: the batch overwrites records
		_, err := r.Publish("t", []byte{byte(i)})
		require.NoError(t, err)
	}
	var during []string
	calls := 0
	publishHook = func(seq uint64) {
		if seq == 14 { // 11, 12 and 13 written, 14 begun, nothing committed
			calls++
			during, _ = findings(t, a)
		}
	}
	t.Cleanup(func() { publishHook = nil })
	first, err := r.PublishBatch("t", batchOf(5, "b"))
	publishHook = nil
	require.NoError(t, err)
	require.Equal(t, uint64(11), first)
	require.Equal(t, 1, calls)
	assert.Empty(t, during, "Check while a batch is being written")
	after, _ := findings(t, a)
	assert.Empty(t, after)
}
