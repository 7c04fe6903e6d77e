package shmarena

// Back-pressure: a protected group is never lapped, from the moment it
// is made, even when its creator is killed midway.

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A protected group made while a producer publishes is lapped by every
// record published between the creator reading the head (its position)
// and setting the group's bit in the protected mask: with the mask still
// 0 the producer checks nothing. ring_full.go says only "a record
// published by a producer that had already passed the check counts as
// lapped"; in practice a new FromStart acking group loses several records
// (up to a whole run of publishes when the creator is descheduled).
func TestNewProtectedGroupNotLappedByConcurrentProducer(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	r, err := a.Ring("fs", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	worst := GroupStats{}
	for i := 0; i < 2000 && worst.Lapped <= 1; i++ {
		var stop atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			for !stop.Load() {
				if _, err := r.Publish("t", nil); errors.Is(err, ErrRingFull) {
					return // the new group protects its records from here on
				}
			}
		}()
		g, err := r.Group("g", WithAck(time.Hour), FromStart())
		require.NoError(t, err)
		<-done
		stop.Store(true)
		for k := 0; k < 4; k++ {
			require.NoError(t, g.Ack(g.Claim(0)...))
		}
		if st := g.Stats(); st.Lapped > worst.Lapped {
			worst = st
		}
		require.NoError(t, r.DropGroup("g"))
	}
	assert.LessOrEqual(t, worst.Lapped, uint64(1), "a new protected group lapped by more than the one publish in flight: %+v", worst)
}

// findOrCreateGroup marks a new entry ready before it sets the entry's bit
// in the protected mask, and nothing repairs the mask: a creator killed
// between the two stores (emulated here by clearing the bit) leaves an
// acking group that members join and claim from but that no producer
// respects, so its records are overwritten before they are delivered.
func TestAckingGroupProtectedDespiteKilledCreator(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	bit := uint64(1) << ((g.goff - r.off - rl.OffGroups) / rl.GroupSize)
	mem.Store64(r.b, r.off+rl.OffProtected, mem.Load64(r.b, r.off+rl.OffProtected)&^bit) // the kill point
	g2 := twoMembers(t, path, WithAck(time.Hour))                                        // a member joins: the group is there
	publishN(t, r, "t", 8)
	_, err = r.Publish("t", []byte("ninth"))
	assert.ErrorIs(t, err, ErrRingFull, "record 1 is not finished by the acking group")
	recs := g2.Claim(0)
	assert.Equal(t, uint64(0), g2.Stats().Lapped, "an acking group is never lapped; claimed %v", seqs(recs))
}
