package shmarena

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AckAndClaim acks the batch it is given and claims the next into the
// same slice: every record is delivered once and finished.
func TestAckAndClaimDrainsInBatches(t *testing.T) {
	a, _ := openTestArena(t, 8<<20)
	r, err := a.Ring("q", WithSlots(256), WithSlotSize(128), WithMaxInFlight(64))
	require.NoError(t, err)
	g, err := r.Group("workers", WithAck(time.Minute))
	require.NoError(t, err)
	for i := range 100 {
		_, err := r.Publish("job", fmt.Appendf(nil, "%d", i))
		require.NoError(t, err)
	}
	var got []string
	recs := g.Claim(8)
	for len(recs) > 0 {
		for _, rec := range recs {
			assert.Equal(t, 1, rec.Deliveries)
			got = append(got, string(rec.Payload))
		}
		recs, err = g.AckAndClaim(recs, 8)
		require.NoError(t, err)
	}
	require.Len(t, got, 100)
	for i, s := range got {
		assert.Equal(t, fmt.Sprint(i), s)
	}
	st := g.Stats()
	assert.Equal(t, uint64(100), st.Delivered)
	assert.Zero(t, st.Pending, "every record acked")
}

// A lost lease is reported, and the rest is acked and the claim made all
// the same; a group without acks refuses.
func TestAckAndClaimErrors(t *testing.T) {
	a, _ := openTestArena(t, 8<<20)
	r, err := a.Ring("q", WithSlots(64), WithSlotSize(128), WithMaxInFlight(32))
	require.NoError(t, err)
	g, err := r.Group("workers", WithAck(time.Minute))
	require.NoError(t, err)
	for range 4 {
		_, err := r.Publish("", []byte("x"))
		require.NoError(t, err)
	}
	recs := g.Claim(2)
	require.Len(t, recs, 2)
	require.NoError(t, g.Ack(recs[0]))
	first := recs[0].Seq
	recs, err = g.AckAndClaim(recs, 2)
	require.ErrorIs(t, err, ErrLeaseLost)
	assert.Contains(t, err.Error(), fmt.Sprintf("record %d (1 of 2 records)", first))
	require.Len(t, recs, 2, "the claim goes ahead")
	recs, err = g.AckAndClaim(recs, 2)
	require.NoError(t, err)
	assert.Empty(t, recs)
	assert.Zero(t, g.Stats().Pending)

	plain, err := r.Group("plain")
	require.NoError(t, err)
	_, err = plain.AckAndClaim(nil, 1)
	require.ErrorIs(t, err, ErrInvalid)
}
