package shmarena

// Finding a stuck group: what its stats and the ring's show while it
// holds producers back.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A protected group nobody reads cannot show a growing Lag: it holds
// producers back, so the head stops one lap past its floor and Lag stays
// at the ring's slots; what grows is RingStats.Full or Waited. Nobody
// having read it, OldestPending is 0; with members that claimed and
// stopped, Pending stays put and OldestPending grows past the lease
// (docs/queues.md, "Finding a stuck group"; Ring.DropGroup and
// GroupStats.Lag say the same).
func TestStuckGroupShowsInRingStatsNotLag(t *testing.T) {
	t.Run("never read", func(t *testing.T) {
		a, _ := openTestArena(t, 1<<20)
		r := smallRing(t, a)
		g, err := r.Group("w", WithAck(time.Millisecond))
		require.NoError(t, err)
		other, err := r.Group("other", WithAck(time.Hour)) // keeps up
		require.NoError(t, err)
		publishN(t, r, "t", 8)
		require.NoError(t, other.Ack(other.Claim(0)...))
		before, rbefore := g.Stats(), r.Stats()
		for i := 0; i < 100; i++ {
			_, err := r.Publish("t", nil) // producers keep publishing; nobody reads
			require.ErrorIs(t, err, ErrRingFull)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond) // past the lease
		defer cancel()
		_, err = r.PublishWait(ctx, "t", nil)
		require.ErrorIs(t, err, ErrRingFull)
		after, rafter := g.Stats(), r.Stats()
		assert.Equal(t, rbefore.Full+100, rafter.Full, "what grows: Full")
		assert.Equal(t, rbefore.Waited+1, rafter.Waited, "what grows: Waited")
		assert.Equal(t, rbefore.Published, rafter.Published, "Published stops")
		assert.Equal(t, before.Position, after.Position, "Position does not move")
		assert.Equal(t, before.Floor, after.Floor, "Floor does not move")
		assert.Equal(t, uint64(rafter.Slots), after.Lag, "Lag stops at the ring's slots")
		assert.Equal(t, uint64(rafter.Slots), after.Lag+after.Position-after.Floor, "the sign of the group holding producers back")
		ost := other.Stats()
		assert.NotEqual(t, uint64(rafter.Slots), ost.Lag+ost.Position-ost.Floor, "a group that keeps up does not show it: %+v", ost)
		assert.Zero(t, after.Pending, "nobody claimed")
		assert.Zero(t, after.OldestPending, "nobody claimed")
	})
	t.Run("claimed and stopped", func(t *testing.T) {
		a, _ := openTestArena(t, 1<<20)
		r := smallRing(t, a)
		const lease = time.Millisecond
		g, err := r.Group("w", WithAck(lease))
		require.NoError(t, err)
		publishN(t, r, "t", 8)
		require.Len(t, g.Claim(3), 3) // a member takes three and is never heard of again
		before := g.Stats()
		_, err = r.Publish("t", nil)
		require.ErrorIs(t, err, ErrRingFull)
		time.Sleep(3 * lease)
		mid := g.Stats()
		time.Sleep(3 * lease)
		after := g.Stats()
		assert.Equal(t, 3, after.Pending, "Pending stays put")
		assert.Equal(t, before.Floor, after.Floor, "Floor does not move")
		assert.Equal(t, before.Position, after.Position, "Position does not move")
		assert.Equal(t, uint64(r.Stats().Slots), after.Lag+after.Position-after.Floor, "the sign of the group holding producers back")
		assert.Greater(t, mid.OldestPending, lease, "OldestPending past the lease")
		assert.Greater(t, after.OldestPending, mid.OldestPending, "OldestPending grows")
		assert.Zero(t, after.Redelivered, "nobody took the leases again")

		// A live member takes them again: Redelivered grows, OldestPending
		// still counts from the first delivery.
		again := g.Claim(3)
		require.Equal(t, []uint64{1, 2, 3}, seqs(again))
		st := g.Stats()
		assert.Equal(t, uint64(3), st.Redelivered)
		assert.GreaterOrEqual(t, st.OldestPending, after.OldestPending, "first delivery, not the last")
	})
}
