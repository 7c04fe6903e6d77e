package shmarena

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Single-process tests of back-pressure and acking groups; a second
// member is a second arena handle (its own token), which Close makes dead.

func smallRing(t *testing.T, a *Arena, opts ...RegionOption) *Ring {
	t.Helper()
	r, err := a.Ring("q", append([]RegionOption{WithSlots(8), WithSlotSize(64)}, opts...)...)
	require.NoError(t, err)
	return r
}

func publishN(t *testing.T, r *Ring, topic string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, err := r.Publish(topic, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}
}

func seqs(recs []Record) []uint64 {
	var s []uint64
	for _, r := range recs {
		s = append(s, r.Seq)
	}
	return s
}

func TestPublishFullWithBackpressure(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	free, err := r.Group("free") // unprotected: lapped as before
	require.NoError(t, err)
	g, err := r.Group("bp", WithBackpressure())
	require.NoError(t, err)
	publishN(t, r, "t", 8)
	_, err = r.Publish("t", nil)
	require.ErrorIs(t, err, ErrRingFull)
	assert.Equal(t, uint64(1), r.Stats().Full)
	assert.Equal(t, uint64(8), r.Stats().Published, "nothing published by the refusal")

	require.Len(t, g.Claim(3), 3)
	publishN(t, r, "t", 3)
	_, err = r.Publish("t", nil)
	require.ErrorIs(t, err, ErrRingFull)
	assert.Equal(t, uint64(2), r.Stats().Full)
	got := g.Claim(0)
	assert.Equal(t, []uint64{4, 5, 6, 7, 8, 9, 10, 11}, seqs(got), "nothing lost by lapping")
	assert.Zero(t, g.Stats().Lapped)
	free.Claim(0)
	assert.Equal(t, uint64(3), free.Stats().Lapped, "the unprotected group is lapped and counts it")

	_, err = r.Group("bp")
	require.ErrorIs(t, err, ErrShape, "a member must ask for back-pressure too")
	assert.Contains(t, err.Error(), "backpressure")
}

func TestPublishWaitWaitsForRoom(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 8)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = r.PublishWait(ctx, "t", nil)
	require.ErrorIs(t, err, ErrRingFull)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	recs := g.Claim(2)
	require.Len(t, recs, 2)
	done := make(chan error, 1)
	go func() {
		_, err := r.PublishWait(context.Background(), "t", []byte("late"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("PublishWait returned %v while the oldest record is leased", err)
	case <-time.After(30 * time.Millisecond):
	}
	require.NoError(t, g.Ack(recs[1])) // not the oldest: still no room
	select {
	case err := <-done:
		t.Fatalf("PublishWait returned %v while record 1 is leased", err)
	case <-time.After(30 * time.Millisecond):
	}
	require.NoError(t, g.Ack(recs[0]))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("PublishWait did not wake after the ack freed room")
	}
	st := r.Stats()
	assert.Equal(t, uint64(2), st.Waited)
	assert.Zero(t, st.Full, "PublishWait's refusals are waits, not Full")
}

func TestAckClaimAck(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithTopic("jobs"), WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "jobs", 3)
	publishN(t, r, "other", 1)
	recs := g.Claim(0)
	require.Equal(t, []uint64{1, 2, 3}, seqs(recs))
	for _, rec := range recs {
		assert.Equal(t, 1, rec.Deliveries)
	}
	st := g.Stats()
	assert.Equal(t, 3, st.Pending)
	assert.Equal(t, uint64(1), st.Floor)
	assert.Equal(t, uint64(3), st.Delivered)
	assert.Equal(t, uint64(1), st.Skipped)
	assert.Positive(t, st.OldestPending)
	require.NoError(t, g.Ack(recs...))
	st = g.Stats()
	assert.Zero(t, st.Pending)
	assert.Equal(t, uint64(5), st.Floor)
	assert.Zero(t, st.Lag)
	err = g.Ack(recs[0])
	require.ErrorIs(t, err, ErrLeaseLost, "a finished record cannot be acked again")
	assert.Nil(t, g.Claim(0), "an acked record is not redelivered")

	plain, err := r.Group("plain")
	require.NoError(t, err)
	require.ErrorIs(t, plain.Ack(recs[0]), ErrInvalid)
}

func TestAckSettingsMustMatch(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	_, err := r.Group("w", WithTopic("jobs"), WithAck(time.Second), WithMaxDeliveries(3), WithDeadLetter("dead"))
	require.NoError(t, err)
	for _, c := range []struct {
		field string
		opts  []ReaderOption
	}{
		{"lease", []ReaderOption{WithTopic("jobs")}},
		{"lease", []ReaderOption{WithTopic("jobs"), WithAck(2 * time.Second), WithMaxDeliveries(3), WithDeadLetter("dead")}},
		{"max deliveries", []ReaderOption{WithTopic("jobs"), WithAck(time.Second), WithMaxDeliveries(4), WithDeadLetter("dead")}},
		{"dead-letter topic", []ReaderOption{WithTopic("jobs"), WithAck(time.Second), WithMaxDeliveries(3), WithDeadLetter("dead2")}},
	} {
		_, err := r.Group("w", c.opts...)
		require.ErrorIs(t, err, ErrShape)
		assert.Contains(t, err.Error(), c.field)
	}
	_, err = r.Group("w", WithTopic("jobs"), WithAck(time.Second), WithMaxDeliveries(3), WithDeadLetter("dead"))
	require.NoError(t, err)
	_, err = r.Group("x", WithMaxDeliveries(3))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = r.Group("x", WithAck(time.Second), WithTopic("t"), WithMaxDeliveries(1), WithDeadLetter("t"))
	require.ErrorIs(t, err, ErrInvalid)
	r0, err := a.Ring("noack", WithSlots(8), WithSlotSize(64), WithMaxInFlight(0))
	require.NoError(t, err)
	_, err = r0.Group("x", WithAck(time.Second))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = a.Map("m", WithMaxInFlight(4))
	require.ErrorIs(t, err, ErrInvalid)
}

func TestAckLeaseExpiresToAnotherMember(t *testing.T) {
	withShortLife(t, func(lease time.Duration) bool {
		a, path := openTestArena(t, 1<<20)
		r := smallRing(t, a)
		g, err := r.Group("w", WithAck(lease))
		require.NoError(t, err)
		a2, err := Open(path)
		require.NoError(t, err)
		defer a2.Close()
		r2 := smallRing(t, a2)
		g2, err := r2.Group("w", WithAck(lease))
		require.NoError(t, err)

		publishN(t, r, "t", 2)
		mine := g.Claim(1)
		require.Len(t, mine, 1)
		if got := seqs(g2.Claim(0)); !slices.Equal(got, []uint64{2}) {
			require.Equal(t, []uint64{1, 2}, got, "a live lease is not taken")
			return false // the lease ran out before g2 claimed
		}
		time.Sleep(lease * 4 / 3)
		theirs := g2.Claim(0)
		require.Equal(t, []uint64{1, 2}, seqs(theirs), "expired leases come first, again")
		assert.Equal(t, 2, theirs[0].Deliveries)
		assert.Equal(t, 2, theirs[1].Deliveries)

		before := g.Stats()
		require.ErrorIs(t, g.Ack(mine[0]), ErrLeaseLost, "the late member cannot ack another's lease")
		require.ErrorIs(t, g.Nack(mine[0], 0), ErrLeaseLost)
		require.ErrorIs(t, g.Extend(mine[0], time.Hour), ErrLeaseLost)
		stale := mine[0]
		stale.Deliveries = 2 // right epoch, wrong member
		require.ErrorIs(t, g.Ack(stale), ErrLeaseLost)
		after := g.Stats()
		after.OldestPending, before.OldestPending = 0, 0
		assert.Equal(t, before, after, "a lost ack changes nothing")
		require.NoError(t, g2.Ack(theirs...))
		assert.Equal(t, uint64(2), g2.Stats().Redelivered)
		return true
	})
}

func TestAckOrphanedLeaseReclaimedAtOnce(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 3)
	a2, err := Open(path)
	require.NoError(t, err)
	r2 := smallRing(t, a2)
	g2, err := r2.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	require.Len(t, g2.Claim(2), 2)
	require.Equal(t, []uint64{3}, seqs(g.Claim(0)), "the other member is alive: its leases stay")
	require.NoError(t, a2.Close())          // the member leaves holding two leases
	time.Sleep(aliveFor + time.Millisecond) // g asked about it just now: its answer is kept that long
	got := g.Claim(0)
	require.Equal(t, []uint64{1, 2}, seqs(got), "a dead member's leases are reclaimed before they run out")
	assert.Equal(t, 2, got[0].Deliveries)
}

func TestNackAndExtend(t *testing.T) {
	withShortLife(t, func(lease time.Duration) bool {
		a, path := openTestArena(t, 1<<20)
		r := smallRing(t, a)
		g, err := r.Group("w", WithAck(lease))
		require.NoError(t, err)
		publishN(t, r, "t", 2)
		recs := g.Claim(0)
		require.Len(t, recs, 2)
		delay := lease * 5 / 4
		require.NoError(t, g.Nack(recs[0], delay))
		err = g.Extend(recs[1], time.Hour)
		if errors.Is(err, ErrLeaseLost) {
			return false // the lease ran out before Extend
		}
		require.NoError(t, err)
		require.ErrorIs(t, g.Extend(recs[1], 0), ErrInvalid)
		if got := g.Claim(0); got != nil {
			require.Equal(t, []uint64{1}, seqs(got), "a nacked record waits out its delay")
			return false // the delay ran out before the claim
		}
		time.Sleep(delay * 6 / 5)

		a2, err := Open(path)
		require.NoError(t, err)
		defer a2.Close()
		g2, err := smallRing(t, a2).Group("w", WithAck(lease))
		require.NoError(t, err)
		again := g2.Claim(0)
		require.Equal(t, []uint64{1}, seqs(again), "the extended lease is still held; the nacked record is due")
		assert.Equal(t, 2, again[0].Deliveries)
		require.NoError(t, g.Ack(recs[1]), "Extend kept the lease; it is not a delivery")
		require.NoError(t, g2.Nack(again[0], 0))
		third := g2.Claim(0)
		require.Len(t, third, 1)
		assert.Equal(t, 3, third[0].Deliveries)
		assert.Equal(t, uint64(2), g2.Stats().Redelivered)
		return true
	})
}

func TestMaxInFlightBoundsClaims(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("q", WithSlots(16), WithSlotSize(64), WithMaxInFlight(4))
	require.NoError(t, err)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 10)
	recs := g.Claim(10)
	require.Equal(t, []uint64{1, 2, 3, 4}, seqs(recs), "a claim beyond capacity returns fewer records")
	assert.Nil(t, g.Claim(10))
	require.NoError(t, g.Ack(recs[1:]...))
	assert.Nil(t, g.Claim(10), "the oldest record still holds the window")
	require.NoError(t, g.Ack(recs[0]))
	assert.Equal(t, []uint64{5, 6, 7, 8}, seqs(g.Claim(10)))
	assert.Equal(t, uint64(2), g.Stats().Lag, "10 published, 8 looked at")
}

func TestPoisonRecordDeadLettered(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("q", WithSlots(16), WithSlotSize(96))
	require.NoError(t, err)
	g, err := r.Group("w", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(3), WithDeadLetter("jobs.dead"))
	require.NoError(t, err)
	dead, err := r.Group("dead", WithTopic("jobs.dead"), FromStart())
	require.NoError(t, err)
	poison, err := r.Publish("jobs", []byte("poison"))
	require.NoError(t, err)
	publishN(t, r, "jobs", 5)
	deliveries, done := 0, 0
	for i := 0; i < 20 && g.Stats().DeadLettered == 0; i++ {
		for _, rec := range g.Claim(0) {
			if rec.Seq == poison {
				deliveries++
				assert.Equal(t, deliveries, rec.Deliveries)
				require.NoError(t, g.Nack(rec, 0))
				continue
			}
			require.NoError(t, g.Ack(rec))
			done++
		}
	}
	assert.Equal(t, 5, done, "the rest keep flowing")
	assert.Equal(t, 3, deliveries, "delivered exactly WithMaxDeliveries times")
	st := g.Stats()
	assert.Equal(t, uint64(1), st.DeadLettered)
	assert.Zero(t, st.Pending)
	letters := dead.Claim(0)
	require.Len(t, letters, 1)
	dl, err := ParseDeadLetter(letters[0])
	require.NoError(t, err)
	assert.Equal(t, DeadLetter{Seq: poison, Deliveries: 3, Topic: "jobs", Payload: []byte("poison")}, dl)
	assert.Nil(t, g.Claim(0), "nothing is redelivered after the dead letter")
	_, err = ParseDeadLetter(Record{Payload: []byte{1, 2}})
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestDeadLetterOnFullRing(t *testing.T) {
	// The poison record is the oldest of a full ring: its dead letter
	// overwrites it (it was copied), rather than wait for room forever.
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(1), WithDeadLetter("dead"))
	require.NoError(t, err)
	publishN(t, r, "jobs", 8)
	recs := g.Claim(1)
	require.Len(t, recs, 1)
	require.NoError(t, g.Nack(recs[0], 0))
	got := g.Claim(0)
	assert.Equal(t, []uint64{2, 3, 4, 5, 6, 7, 8}, seqs(got))
	assert.Equal(t, uint64(1), g.Stats().DeadLettered)
	assert.Equal(t, uint64(10), r.Head(), "the dead letter was published, as record 9")
	c := r.Cursor(FromStart())
	var last Record
	for rec, ok := c.Next(); ok; rec, ok = c.Next() {
		last = rec
	}
	assert.Equal(t, "dead", last.Topic)
	dl, err := ParseDeadLetter(last)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), dl.Seq)
}

func TestDropGroupFreesProducers(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("stuck", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 8)
	recs := g.Claim(2)
	require.Len(t, recs, 2)
	st := g.Stats()
	assert.Equal(t, 2, st.Pending)
	assert.Equal(t, uint64(6), st.Lag)

	done := make(chan error, 1)
	go func() {
		_, err := r.PublishWait(context.Background(), "t", nil)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, r.DropGroup("stuck"))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("PublishWait still waiting after the group was dropped")
	}
	require.ErrorIs(t, r.DropGroup("stuck"), ErrNoGroup)
	assert.Nil(t, g.Claim(0), "a dropped group's member claims nothing")
	require.ErrorIs(t, g.Ack(recs[0]), ErrLeaseLost, "its leases are gone, not ghosts")
	assert.Zero(t, g.Stats().Pending)
	require.ErrorIs(t, g.Wait(context.Background()), ErrNoGroup, "Wait returns at once")
	n := 0
	for range g.Records(context.Background()) {
		n++
	}
	assert.Zero(t, n, "Records ends")

	g2, err := r.Group("stuck", WithAck(time.Hour))
	require.NoError(t, err)
	assert.Nil(t, g2.Claim(0), "a new group of the name starts at the head")
	assert.Zero(t, g2.Stats().Pending)
	assert.Nil(t, g.Claim(0), "the old handle does not reach the new group")
	publishN(t, r, "t", 1)
	assert.Len(t, g2.Claim(0), 1)
}

func TestAckRecordsIteratorAcksNothing(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	n := 0
	for rec := range g.Records(ctx) {
		n++
		if rec.Seq == 3 {
			break
		}
	}
	assert.Equal(t, 3, n)
	assert.Equal(t, 3, g.Stats().Pending, "Records acks nothing by itself")
}

func TestAckErrorsWrapSentinels(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	err = g.Ack(Record{Seq: 99, Deliveries: 1})
	require.True(t, errors.Is(err, ErrLeaseLost))
	assert.Contains(t, err.Error(), "shmarena: ring \"q\": group \"w\"")
	require.NoError(t, a.Close())
	require.ErrorIs(t, g.Ack(Record{Seq: 1, Deliveries: 1}), ErrClosed)
	_, err = r.PublishWait(context.Background(), "t", nil)
	require.ErrorIs(t, err, ErrClosed)
}

func TestFromStartProtectedGroupIsNotLapped(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g1, err := r.Group("a", WithBackpressure())
	require.NoError(t, err)
	publishN(t, r, "t", 8)
	require.Len(t, g1.Claim(0), 8)
	publishN(t, r, "t", 8)
	require.Len(t, g1.Claim(0), 8)
	publishN(t, r, "t", 1) // the producers' cached floor is now g1's, 17
	g2, err := r.Group("b", WithBackpressure(), FromStart())
	require.NoError(t, err)
	require.Equal(t, uint64(10), g2.Position())
	_, err = r.Publish("t", nil)
	require.ErrorIs(t, err, ErrRingFull, "the new group's oldest record is protected at once")
	assert.Equal(t, []uint64{10, 11, 12, 13, 14, 15, 16, 17}, seqs(g2.Claim(0)))
	assert.Zero(t, g2.Stats().Lapped)
}

func TestPublishWaitEndsOnClose(t *testing.T) {
	defer func(d time.Duration) { waitBackstop = d }(waitBackstop)
	waitBackstop = time.Hour // only a real wake ends the wait
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	_, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 8)
	done := make(chan error, 1)
	go func() {
		_, err := r.PublishWait(context.Background(), "t", nil)
		done <- err
	}()
	for !r.roomArmed() {
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, a.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrClosed) // woken by Close: the backstop is an hour away
	case <-time.After(time.Minute):
		t.Fatal("PublishWait still waiting after Close")
	}
}

func TestUnboundAckGroupSkipsItsDeadLetters(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour), WithMaxDeliveries(1), WithDeadLetter("dead"))
	require.NoError(t, err)
	publishN(t, r, "any", 1)
	recs := g.Claim(0)
	require.Len(t, recs, 1)
	require.NoError(t, g.Nack(recs[0], 0))
	assert.Nil(t, g.Claim(0), "its own dead letter is not work for it")
	st := g.Stats()
	assert.Equal(t, uint64(1), st.DeadLettered)
	assert.Equal(t, uint64(1), st.Skipped)
	assert.Equal(t, uint64(3), r.Head())
}

// After a reboot every lease's holder is dead (its token's entry is not
// locked), the group lock is free, and a claim's journal left by a
// claimer the reboot cut short is applied.
func TestAckGroupAfterReboot(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	g, err := r.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	publishN(t, r, "t", 3)
	require.Len(t, g.Claim(0), 3)
	// Fake a claimer of the previous boot that moved the position and died
	// before storing the counts, holding the group lock.
	mem.Store64(r.b, g.goff+rl.GJDelivered, 3)
	mem.Store64(r.b, g.goff+rl.GJPos, 4)
	mem.Store64(r.b, g.goff+rl.GDelivered, 0)
	mem.Store64(r.b, g.goff+rl.GLock, a.self)
	require.NoError(t, a.Close())

	boot := [16]byte{4, 5, 6}
	owner.SetBootIDForTest(&boot)
	defer owner.SetBootIDForTest(nil)
	a2, err := Open(path)
	require.NoError(t, err)
	defer a2.Close()
	r2 := smallRing(t, a2)
	g2, err := r2.Group("w", WithAck(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), g2.Stats().Delivered, "the journal was applied")
	got := g2.Claim(0)
	require.Equal(t, []uint64{1, 2, 3}, seqs(got), "leases of the previous boot are orphaned")
	assert.Equal(t, 2, got[0].Deliveries)
	require.NoError(t, g2.Ack(got...))
}
