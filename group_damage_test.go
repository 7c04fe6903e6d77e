package shmarena

// Damaged pending tables and floors: the damage is reported or
// survived, never a silent stall.

import (
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A damaged pending entry keeps its damaged delivery count (the low 32
// bits of the state word): one of 2^32-1 wraps to Deliveries 0 on the
// redelivery, a lease that Ack then refuses as lost (Ack wants
// Deliveries > 0), so the member that holds it cannot finish it.
func TestDamagedDeliveryCountStaysAckable(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 1)
	require.Len(t, g.Claim(1), 1)
	mem.Store64(r.b, g.entry(1)+rl.PState, 0xdead<<32|0xffffffff) // a damaged state word
	again := g.Claim(1)
	require.Len(t, again, 1, "the damaged entry's record is delivered again")
	assert.Positive(t, again[0].Deliveries, "a delivery count is 1 or more")
	assert.NoError(t, g.Ack(again[0]), "the member holding the lease can ack it")
}

// A damaged floor word (here past the position) stops an acking group for
// good with no error anywhere: Claim returns nothing while records wait,
// Ack of a held lease says ErrLeaseLost rather than ErrCorrupt, and once
// the ring is full producers are held back by the stalled position. The
// house rule asks for "a clear ErrCorrupt or a skipped entry".
func TestDamagedFloorIsReported(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 4)
	held := g.Claim(1)
	require.Len(t, held, 1)
	mem.Store64(r.b, g.goff+rl.GFloor, 1000) // damaged: past the position
	err = g.Ack(held...)
	assert.ErrorIs(t, err, ErrCorrupt, "the damage is reported, not a lost lease")
	assert.NotEmpty(t, g.Claim(0), "records 2-4 wait; the group claims nothing and says nothing")
}
