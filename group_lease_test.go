package shmarena

// Settling leases (Ack, Nack, Extend): durations at the edge of time,
// and records that are not leases of the group they are settled on.

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// twoMembers opens a second arena handle (its own token, alive) on path
// and joins the same group with the same options.
func twoMembers(t *testing.T, path string, opts ...ReaderOption) *Group {
	t.Helper()
	a2, err := Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a2.Close() })
	r2 := smallRing(t, a2)
	g2, err := r2.Group("w", opts...)
	require.NoError(t, err)
	return g2
}

// A lease of "forever" (math.MaxInt64, accepted by WithAck) overflows the
// deadline now+lease to a negative number: every live lease is due at
// once, and a second live member gets the same record.
func TestHugeLeaseKeepsRecordFromOtherMembers(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	opts := []ReaderOption{WithAck(math.MaxInt64)}
	g, err := r.Group("w", opts...)
	require.NoError(t, err)
	g2 := twoMembers(t, path, opts...)
	publishN(t, r, "t", 1)
	require.Len(t, g.Claim(1), 1)
	assert.Empty(t, seqs(g2.Claim(1)), "record 1 is leased to a live member for ~292 years")
}

// Extend by a huge duration overflows the same way: the record is handed
// to another live member at once.
func TestHugeExtendKeepsRecordFromOtherMembers(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	opts := []ReaderOption{WithAck(time.Hour)}
	g, err := r.Group("w", opts...)
	require.NoError(t, err)
	g2 := twoMembers(t, path, opts...)
	publishN(t, r, "t", 1)
	recs := g.Claim(1)
	require.Len(t, recs, 1)
	require.NoError(t, g.Extend(recs[0], math.MaxInt64))
	assert.Empty(t, seqs(g2.Claim(1)), "record 1's lease was extended, not ended")
}

// Nack with a huge delay overflows: the record is redelivered at once
// instead of "after the delay".
func TestHugeNackDelayIsNotDueNow(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 1)
	recs := g.Claim(1)
	require.Len(t, recs, 1)
	require.NoError(t, g.Nack(recs[0], math.MaxInt64))
	assert.Empty(t, seqs(g.Claim(1)), "a record nacked with a ~292-year delay is not due now")
}

// A Record carries no trace of the ring or group that leased it: Ack on
// group y with a record claimed from ring x acks y's record of the same
// sequence, which this member claimed but never processed. The record is
// lost (finished, never redelivered) and Ack returns nil.
func TestAckWithRecordOfAnotherRingIsRefused(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	rx, err := a.Ring("x", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	ry, err := a.Ring("y", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	gx, err := rx.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	gy, err := ry.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	_, err = rx.Publish("t", []byte("x-job"))
	require.NoError(t, err)
	_, err = ry.Publish("t", []byte("y-job"))
	require.NoError(t, err)
	fromX := gx.Claim(1)
	require.Len(t, fromX, 1)
	require.Len(t, gy.Claim(1), 1) // claimed, then the worker is confused
	err = gy.Ack(fromX[0])
	assert.Error(t, err, "a record of ring x is not a lease of ring y's group")
	assert.Equal(t, 1, gy.Stats().Pending, "y's record 1 was never processed")
}

// The same with a group dropped and made again FromStart: the old
// group's record acks the new group's lease of the same sequence.
func TestAckWithRecordOfDroppedGroupIsRefused(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	old, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 1)
	stale := old.Claim(1)
	require.Len(t, stale, 1)
	require.NoError(t, r.DropGroup("w"))
	fresh, err := r.Group("w", WithAck(time.Hour), FromStart())
	require.NoError(t, err)
	require.Len(t, fresh.Claim(1), 1)
	err = fresh.Ack(stale[0])
	assert.ErrorIs(t, err, ErrLeaseLost, "a record of the dropped group is not a lease of the new one")
	assert.Equal(t, 1, fresh.Stats().Pending, "the new group's lease is not finished by it")
}
