package shmarena

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review of the at-least-once groups (issue 14): each test shows a defect.

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
func TestQueueReviewHugeLeaseDeliversToTwoLiveMembers(t *testing.T) {
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
func TestQueueReviewHugeExtendDeliversToTwoLiveMembers(t *testing.T) {
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
func TestQueueReviewHugeNackDelayRedeliversAtOnce(t *testing.T) {
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

// checkAckConfig refuses every group, even an at-most-once one without a
// dead-letter topic, on a ring whose slots hold fewer than 16 bytes of
// body (WithSlotSize(32), a shape Ring accepts): the dead-letter header
// check does not look at whether a dead-letter topic was asked for.
func TestQueueReviewSmallSlotRingRefusesEveryGroup(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("small", WithSlots(8), WithSlotSize(32))
	require.NoError(t, err)
	_, err = r.Group("plain")
	assert.NoError(t, err, "an at-most-once group needs no dead-letter header")
	_, err = r.Group("acking", WithAck(time.Second))
	assert.NoError(t, err, "an acking group without WithDeadLetter needs no dead-letter header")
}

// A member killed after publishing a dead letter that overwrote the
// record's own slot (a full ring: the dead letter may take the slot of the
// record it replaces) and before finishing the record: the next holder
// finds the record overwritten and counts it as lapped, not dead-lettered,
// so a protected group reports a lapped record and DeadLettered 0 although
// the dead letter was published (the docs promise exact counts whatever
// instruction a member is killed at, and a protected group is never lapped).
func TestQueueReviewDeadLetterCrashOnFullRingCountsLapped(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r, g, err := ackCrashRing(a)
	require.NoError(t, err)
	for i := 0; i < 16; i++ { // the ring is full: the dead letter takes slot 1
		_, err := r.Publish("jobs", []byte{byte(i)})
		require.NoError(t, err)
	}
	killParked(t, child(t, "ack-crash", "SHMARENA_PATH="+path, "SHMARENA_POINT=dead-lettered"), "dead-lettered")
	var got []uint64
	for i := 0; i < 20; i++ {
		recs := g.Claim(0)
		got = append(got, seqs(recs)...)
		require.NoError(t, g.Ack(recs...))
	}
	want := []uint64{}
	for s := uint64(2); s <= 16; s++ {
		want = append(want, s)
	}
	assert.Equal(t, want, got, "record 1 is dead-lettered, never delivered again; the rest once each")
	var letters []DeadLetter
	c := r.Cursor(FromStart())
	for rec, ok := c.Next(); ok; rec, ok = c.Next() {
		if rec.Topic == "dead" {
			require.Equal(t, uint64(17), rec.Seq, "the dead letter took record 1's slot")
			dl, err := ParseDeadLetter(rec)
			require.NoError(t, err)
			letters = append(letters, dl)
		}
	}
	require.Len(t, letters, 1, "the dead letter was published, and not again")
	assert.Equal(t, DeadLetter{Seq: 1, Deliveries: 3, Topic: "jobs", Payload: []byte{0}}, letters[0])
	st := g.Stats()
	assert.Equal(t, uint64(1), st.DeadLettered, "stats %+v", st)
	assert.Zero(t, st.Lapped, "a protected group is never lapped: %+v", st)
	assert.Equal(t, uint64(2), st.Redelivered, "deliveries 2 and 3 of record 1: %+v", st)
	assert.Zero(t, st.Pending, "stats %+v", st)
}

// A Record carries no trace of the ring or group that leased it: Ack on
// group y with a record claimed from ring x acks y's record of the same
// sequence, which this member claimed but never processed. The record is
// lost (finished, never redelivered) and Ack returns nil.
func TestQueueReviewAckWithRecordOfAnotherRing(t *testing.T) {
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
func TestQueueReviewAckWithRecordOfDroppedGroup(t *testing.T) {
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

// A protected group made while a producer publishes is lapped by every
// record published between the creator reading the head (its position)
// and setting the group's bit in the protected mask: with the mask still
// 0 the producer checks nothing. ring_full.go says only "a record
// published by a producer that had already passed the check counts as
// lapped"; in practice a new FromStart acking group loses several records
// (up to a whole run of publishes when the creator is descheduled).
func TestQueueReviewNewProtectedGroupLappedByConcurrentProducer(t *testing.T) {
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

// A damaged pending entry keeps its damaged delivery count (the low 32
// bits of the state word): one of 2^32-1 wraps to Deliveries 0 on the
// redelivery, a lease that Ack then refuses as lost (Ack wants
// Deliveries > 0), so the member that holds it cannot finish it.
func TestQueueReviewDamagedEntryRedeliveredUnackable(t *testing.T) {
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

// README "Finding a stuck group", Ring.DropGroup and GroupStats.Lag said
// a protected group nobody reads shows "Lag growing". It cannot grow: the
// group holds producers back, so the head stops one lap past its floor
// and Lag stays at the ring's slots (what grows is RingStats.Full or
// Waited). README also said OldestPending grows past the lease, while
// DropGroup's doc said it does not move; with nobody reading it is 0. The
// docs now say what this checks: for a group nobody ever read, and for
// one whose members claimed and stopped.
func TestQueueReviewStuckGroupLagDoesNotGrow(t *testing.T) {
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

// findOrCreateGroup marks a new entry ready before it sets the entry's bit
// in the protected mask, and nothing repairs the mask: a creator killed
// between the two stores (emulated here by clearing the bit) leaves an
// acking group that members join and claim from but that no producer
// respects, so its records are overwritten before they are delivered.
func TestQueueReviewKilledCreatorLeavesAckingGroupUnprotected(t *testing.T) {
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

// Two acking groups with dead-letter topics give up on the same record
// of a full ring: each dead letter needs the slot of that record, which
// the other group has not finished (its floor is there too, and only the
// dead-lettering group's own floor is excused). Neither can ever
// dead-letter it, so neither finishes it, and the ring is full for good:
// no publish succeeds again until a DropGroup. The same with three groups,
// two of them sharing a dead-letter topic (each must publish its own).
func TestQueueReviewTwoGroupsDeadLetterSameRecordDeadlock(t *testing.T) {
	for _, deads := range [][]string{{"dead1", "dead2"}, {"dead1", "dead2", "dead1"}} {
		t.Run(fmt.Sprint(len(deads)), func(t *testing.T) {
			a, _ := openTestArena(t, 1<<20)
			r := smallRing(t, a)
			var gs []*Group
			for i, dead := range deads {
				g, err := r.Group(fmt.Sprint("g", i+1), WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(1), WithDeadLetter(dead))
				require.NoError(t, err)
				gs = append(gs, g)
			}
			publishN(t, r, "jobs", 8) // full
			for _, g := range gs {
				recs := g.Claim(0)
				require.Len(t, recs, 8)
				require.NoError(t, g.Nack(recs[0], 0)) // record 1 is poison for all
				require.NoError(t, g.Ack(recs[1:]...))
			}
			for i := 0; i < 10; i++ {
				for _, g := range gs {
					require.Empty(t, g.Claim(0), "record 1 is never delivered again")
				}
			}
			for _, g := range gs {
				st := g.Stats()
				assert.Equal(t, uint64(1), st.DeadLettered, "%s gave up on record 1: %+v", st.Name, st)
				assert.Zero(t, st.Lapped, "%+v", st)
				assert.Zero(t, st.Pending, "%+v", st)
			}
			letters := map[string]int{}
			c := r.Cursor(FromStart())
			for rec, ok := c.Next(); ok; rec, ok = c.Next() {
				if rec.Topic == "jobs" {
					continue
				}
				dl, err := ParseDeadLetter(rec)
				require.NoError(t, err)
				// The first letter copied record 1; the others copied it from there.
				assert.Equal(t, DeadLetter{Seq: 1, Deliveries: 1, Topic: "jobs", Payload: []byte("0")}, dl, "dead letter %d on %s", rec.Seq, rec.Topic)
				letters[rec.Topic]++
			}
			want := map[string]int{}
			for _, dead := range deads {
				want[dead]++
			}
			assert.Equal(t, want, letters, "one dead letter per group")
			_, err := r.Publish("jobs", []byte("next"))
			assert.NoError(t, err, "every group is done with every record")
		})
	}
}

// A group that gave up on a record finds it overwritten by another
// group's dead letter still being written (the publish has begun over the
// slot and not committed): it must wait for that dead letter and copy it,
// not count the record lapped and publish nothing.
func TestDeadLetterOverSlotBeingWritten(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g1, err := r.Group("g1", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(1), WithDeadLetter("dead1"))
	require.NoError(t, err)
	g2, err := r.Group("g2", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(1), WithDeadLetter("dead2"))
	require.NoError(t, err)
	publishN(t, r, "jobs", 8) // full
	for _, g := range []*Group{g1, g2} {
		recs := g.Claim(0)
		require.Len(t, recs, 8)
		require.NoError(t, g.Nack(recs[0], 0))
		require.NoError(t, g.Ack(recs[1:]...))
	}
	var during GroupStats
	publishHook = func(seq uint64) {
		if seq == 9 { // g1's dead letter, mid-copy over record 1's slot
			require.Empty(t, g2.Claim(0))
			during = g2.Stats()
		}
	}
	t.Cleanup(func() { publishHook = nil })
	require.Empty(t, g1.Claim(0))
	publishHook = nil
	assert.Zero(t, during.Lapped, "record 1 is not lost: %+v", during)
	assert.Equal(t, 1, during.Pending, "record 1 waits for the dead letter being written: %+v", during)
	require.Empty(t, g2.Claim(0))
	st := g2.Stats()
	assert.Equal(t, uint64(1), st.DeadLettered, "%+v", st)
	assert.Zero(t, st.Lapped, "%+v", st)
	c := r.Cursor(FromStart())
	letters := map[string]DeadLetter{}
	for rec, ok := c.Next(); ok; rec, ok = c.Next() {
		if rec.Topic != "jobs" {
			dl, err := ParseDeadLetter(rec)
			require.NoError(t, err)
			letters[rec.Topic] = dl
		}
	}
	want := DeadLetter{Seq: 1, Deliveries: 1, Topic: "jobs", Payload: []byte("0")}
	assert.Equal(t, map[string]DeadLetter{"dead1": want, "dead2": want}, letters)
}

// Group.Wait counts a due lease as claimable even when Claim cannot take
// it (its dead letter finds no room), so Wait returns at once, Claim
// returns nothing, and a Records loop spins on the CPU instead of
// sleeping. Here a group waits 50 ms while its only due lease cannot be
// dead-lettered because another group holds the ring full; then that
// group acks, and the waiter must wake and dead-letter the record. In the
// second case the record was already overwritten by another group's dead
// letter, which this group copies into its own (see Group.giveUp).
func TestQueueReviewWaitSpinsOnUnclaimableDueLease(t *testing.T) {
	for _, overwritten := range []bool{false, true} {
		t.Run(fmt.Sprint("overwritten=", overwritten), func(t *testing.T) {
			a, _ := openTestArena(t, 1<<20)
			r := smallRing(t, a)
			g1, err := r.Group("g1", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(1), WithDeadLetter("dead1"))
			require.NoError(t, err)
			slow, err := r.Group("slow", WithTopic("jobs"), WithAck(time.Hour))
			require.NoError(t, err)
			publishN(t, r, "jobs", 8)
			recs := g1.Claim(0)
			require.Len(t, recs, 8)
			require.NoError(t, g1.Nack(recs[0], 0))
			require.NoError(t, g1.Ack(recs[1:]...))
			var held []Record // slow's leases that keep the ring full
			if overwritten {
				// slow finishes record 1 only, and g0 dead-letters it over its
				// slot: g1's own dead letter then needs record 2's slot.
				held = slow.Claim(0)
				require.Len(t, held, 8)
				require.NoError(t, slow.Ack(held[0]))
				held = held[1:]
				g0, err := r.Group("g0", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(1), WithDeadLetter("dead0"), FromStart())
				require.NoError(t, err)
				recs := g0.Claim(0)
				require.Len(t, recs, 8)
				require.NoError(t, g0.Nack(recs[0], 0))
				require.NoError(t, g0.Ack(recs[1:]...))
				require.Empty(t, g0.Claim(0))
				require.Equal(t, uint64(1), g0.Stats().DeadLettered, "record 1 overwritten by g0's dead letter")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			wakes := 0
			for ctx.Err() == nil && wakes < 1000 && g1.Wait(ctx) == nil {
				require.Empty(t, g1.Claim(0), "nothing is claimable")
				wakes++
			}
			assert.Less(t, wakes, 10, "Wait returned %d times (stopped at 1000) with nothing to claim, never sleeping", wakes)
			require.Zero(t, g1.Stats().DeadLettered)

			// slow catches up: room for the dead letter, and the waiter wakes.
			woke := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				woke <- g1.Wait(ctx)
			}()
			if !overwritten {
				held = slow.Claim(0)
				require.Len(t, held, 8)
			}
			require.NoError(t, slow.Ack(held...))
			require.NoError(t, <-woke, "Wait returns once the dead letter finds room")
			require.Empty(t, g1.Claim(0), "record 1 is dead-lettered, not delivered")
			st := g1.Stats()
			assert.Equal(t, uint64(1), st.DeadLettered, "%+v", st)
			assert.Zero(t, st.Pending, "%+v", st)
			assert.Zero(t, st.Lapped, "%+v", st)
			var letters []DeadLetter
			c := r.Cursor(FromStart())
			for rec, ok := c.Next(); ok; rec, ok = c.Next() {
				if rec.Topic == "dead1" {
					dl, err := ParseDeadLetter(rec)
					require.NoError(t, err)
					letters = append(letters, dl)
				}
			}
			assert.Equal(t, []DeadLetter{{Seq: 1, Deliveries: 1, Topic: "jobs", Payload: []byte("0")}}, letters, "g1's dead letter, once")
		})
	}
}

// Mine is kept per arena handle and group entry, not per group: a group
// made in the entry a dropped group left (any name) starts with the
// dropped group's Mine, though this process claimed nothing from it.
func TestQueueReviewMineSurvivesDropGroup(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	old, err := r.Group("old")
	require.NoError(t, err)
	publishN(t, r, "t", 3)
	require.Len(t, old.Claim(0), 3)
	require.NoError(t, r.DropGroup("old"))
	fresh, err := r.Group("fresh")
	require.NoError(t, err)
	assert.Zero(t, fresh.Stats().Mine, "this process claimed nothing from the new group")
}

// A damaged floor word (here past the position) stops an acking group for
// good with no error anywhere: Claim returns nothing while records wait,
// Ack of a held lease says ErrLeaseLost rather than ErrCorrupt, and once
// the ring is full producers are held back by the stalled position. The
// house rule asks for "a clear ErrCorrupt or a skipped entry".
func TestQueueReviewDamagedFloorStallsGroupSilently(t *testing.T) {
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
