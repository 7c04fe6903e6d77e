package conformance

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RunQueue checks shmarena.Queue: delivery and acking, redelivery,
// leases, dead letters, dropping a group, bounded publishing, and
// at-least-once delivery with a consumer killed mid-run.
func RunQueue(t *testing.T, b Backend) {
	for _, c := range []struct {
		name string
		f    func(*testing.T, Backend)
	}{
		{"ClaimAck", qClaimAck},
		{"NackRedelivers", qNackRedelivers},
		{"LeaseRunsOut", qLeaseRunsOut},
		{"Extend", qExtend},
		{"PoisonDeadLettered", qPoison},
		{"DropGroup", qDropGroup},
		{"Backpressure", qBackpressure},
		{"AtLeastOnceWithKilledConsumer", qAtLeastOnce},
		{"DeadMemberNoticed", qDeadMemberNoticed},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, b) })
	}
}

func publishN(t *testing.T, q shmarena.Queue, topic string, n int) []uint64 {
	t.Helper()
	seqs := make([]uint64, n)
	for i := range seqs {
		seq, err := q.Publish(t.Context(), topic, []byte("job "+strconv.Itoa(i)))
		require.NoError(t, err)
		seqs[i] = seq
	}
	return seqs
}

func claimAll(t *testing.T, g shmarena.QueueGroup, max int) []shmarena.Record {
	t.Helper()
	recs, err := g.Claim(t.Context(), max)
	require.NoError(t, err)
	return recs
}

func qClaimAck(t *testing.T, b Backend) {
	q, ctx := b.Queue(t, 0), ctxFor(t)
	g, err := q.Group(ctx, "workers", shmarena.WithTopic("jobs"), shmarena.WithAck(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, "workers", g.Name())
	seqs := publishN(t, q, "jobs", 3)
	assert.True(t, slices.IsSorted(seqs) && seqs[0] < seqs[2], "sequence numbers grow: %v", seqs)
	st, err := g.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), st.Lag, "Lag counts the records not yet delivered")
	_, err = q.Publish(ctx, "other", []byte("not for this group"))
	require.NoError(t, err)

	recs := claimAll(t, g, 2)
	require.Len(t, recs, 2)
	for i, r := range recs {
		assert.Equal(t, seqs[i], r.Seq)
		assert.Equal(t, "jobs", r.Topic)
		assert.Equal(t, "job "+strconv.Itoa(i), string(r.Payload))
		assert.Equal(t, 1, r.Deliveries)
	}
	more := claimAll(t, g, 10)
	require.Len(t, more, 1, "only this topic's records")
	st, err = g.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Pending)
	require.NoError(t, g.Ack(ctx, append(recs, more...)...))
	st, err = g.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, st.Pending)
	assert.Empty(t, claimAll(t, g, 10), "acked records are not delivered again")
	assert.ErrorIs(t, g.Ack(ctx, recs[0]), shmarena.ErrLeaseLost, "acking twice")
}

func qNackRedelivers(t *testing.T, b Backend) {
	q, ctx := b.Queue(t, 0), ctxFor(t)
	g, err := q.Group(ctx, "g", shmarena.WithTopic("jobs"), shmarena.WithAck(time.Minute))
	require.NoError(t, err)
	publishN(t, q, "jobs", 1)
	r := claimAll(t, g, 1)
	require.Len(t, r, 1)
	require.NoError(t, g.Nack(ctx, r[0], 0))
	again := claimAll(t, g, 1)
	require.Len(t, again, 1, "a Nack with no delay is due at once")
	assert.Equal(t, r[0].Seq, again[0].Seq)
	assert.Equal(t, 2, again[0].Deliveries)
	assert.ErrorIs(t, g.Ack(ctx, r[0]), shmarena.ErrLeaseLost, "the first delivery's lease is gone")
	require.NoError(t, g.Ack(ctx, again[0]))
	st, err := g.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.Redelivered)

	publishN(t, q, "jobs", 1)
	r = claimAll(t, g, 1)
	require.Len(t, r, 1)
	require.NoError(t, g.Nack(ctx, r[0], time.Hour))
	assert.Empty(t, claimAll(t, g, 1), "a delayed Nack waits")
}

func qLeaseRunsOut(t *testing.T, b Backend) {
	q, ctx := b.Queue(t, 0), ctxFor(t)
	const lease = 100 * time.Millisecond
	g, err := q.Group(ctx, "g", shmarena.WithTopic("jobs"), shmarena.WithAck(lease))
	require.NoError(t, err)
	publishN(t, q, "jobs", 1)
	first := claimAll(t, g, 1)
	require.Len(t, first, 1)
	var again []shmarena.Record
	require.Eventually(t, func() bool {
		again = claimAll(t, g, 1)
		return len(again) == 1
	}, 10*time.Second, 10*time.Millisecond, "a lease that runs out is delivered again")
	assert.Equal(t, 2, again[0].Deliveries)
	assert.ErrorIs(t, g.Ack(ctx, first[0]), shmarena.ErrLeaseLost)
	require.NoError(t, g.Ack(ctx, again[0]))
}

func qExtend(t *testing.T, b Backend) {
	q, ctx := b.Queue(t, 0), ctxFor(t)
	const lease = 200 * time.Millisecond
	g, err := q.Group(ctx, "g", shmarena.WithTopic("jobs"), shmarena.WithAck(lease))
	require.NoError(t, err)
	publishN(t, q, "jobs", 1)
	r := claimAll(t, g, 1)
	require.Len(t, r, 1)
	require.NoError(t, g.Extend(ctx, r[0], lease))
	assert.Error(t, g.Extend(ctx, r[0], 0), "a duration of 0 is refused")
	require.NoError(t, g.Ack(ctx, r[0]))
	assert.ErrorIs(t, g.Extend(ctx, r[0], lease), shmarena.ErrLeaseLost, "after Ack")
	t.Run("BeyondTheLease", func(t *testing.T) {
		skipUnless(t, q.Capabilities(), shmarena.CapLongLeases)
		publishN(t, q, "jobs", 1)
		r := claimAll(t, g, 1)
		require.Len(t, r, 1)
		require.NoError(t, g.Extend(ctx, r[0], time.Hour))
		time.Sleep(2 * lease)
		assert.Empty(t, claimAll(t, g, 1), "an extended lease outlives the group's lease")
	})
}

// With process liveness, a killed member's leases go to the next Claim at
// once, long before they would run out.
func qDeadMemberNoticed(t *testing.T, b Backend) {
	q, ctx := b.Queue(t, 0), ctxFor(t)
	skipUnless(t, q.Capabilities(), shmarena.CapProcessLiveness)
	job := Job{Kind: JobConsumeDie, N: 5, Group: "g", Topic: "jobs", Lease: time.Hour}
	g, err := q.Group(ctx, job.Group, job.GroupOptions()...)
	require.NoError(t, err)
	publishN(t, q, "jobs", 5)
	held := parseLines(b.Run(t, job)[0], "held ")
	require.Len(t, held, 5)
	var got []uint64
	require.Eventually(t, func() bool {
		for _, r := range claimAll(t, g, 5) {
			got = append(got, r.Seq)
			assert.Equal(t, 2, r.Deliveries)
		}
		return len(got) == 5
	}, 10*time.Second, 10*time.Millisecond, "the dead member's records, an hour before its leases end")
	assert.ElementsMatch(t, held, got)
}

// A job that fails every time is delivered exactly WithMaxDeliveries
// times, then dead-lettered: published under the dead-letter topic in
// the format ParseDeadLetter reads, and finished.
func qPoison(t *testing.T, b Backend) {
	q, ctx := b.Queue(t, 0), ctxFor(t)
	const maxDeliveries = 3
	g, err := q.Group(ctx, "g", shmarena.WithTopic("jobs"), shmarena.WithAck(time.Minute),
		shmarena.WithMaxDeliveries(maxDeliveries), shmarena.WithDeadLetter("jobs.dead"))
	require.NoError(t, err)
	dead, err := q.Group(ctx, "dead", shmarena.WithTopic("jobs.dead"), shmarena.WithAck(time.Minute))
	require.NoError(t, err)
	seq, err := q.Publish(ctx, "jobs", []byte("poison"))
	require.NoError(t, err)
	deliveries := 0
	for range 10 {
		recs := claimAll(t, g, 1)
		if len(recs) == 0 {
			break
		}
		deliveries++
		assert.Equal(t, deliveries, recs[0].Deliveries)
		require.NoError(t, g.Nack(ctx, recs[0], 0))
	}
	assert.Equal(t, maxDeliveries, deliveries)
	st, err := g.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.DeadLettered)
	assert.Equal(t, uint64(maxDeliveries-1), st.Redelivered)
	assert.Equal(t, 0, st.Pending, "a dead letter is finished")
	dl := claimAll(t, dead, 10)
	require.Len(t, dl, 1)
	d, err := shmarena.ParseDeadLetter(dl[0])
	require.NoError(t, err)
	assert.Equal(t, seq, d.Seq)
	assert.Equal(t, maxDeliveries, d.Deliveries)
	assert.Equal(t, "jobs", d.Topic)
	assert.Equal(t, "poison", string(d.Payload))
}

func qDropGroup(t *testing.T, b Backend) {
	q, ctx := b.Queue(t, 0), ctxFor(t)
	g, err := q.Group(ctx, "g", shmarena.WithTopic("jobs"), shmarena.WithAck(time.Minute))
	require.NoError(t, err)
	publishN(t, q, "jobs", 2)
	recs := claimAll(t, g, 1)
	require.Len(t, recs, 1)
	require.NoError(t, q.DropGroup(ctx, "g"))
	assert.ErrorIs(t, q.DropGroup(ctx, "g"), shmarena.ErrNoGroup)
	assert.ErrorIs(t, q.DropGroup(ctx, "never"), shmarena.ErrNoGroup)
	assert.ErrorIs(t, g.Ack(ctx, recs...), shmarena.ErrLeaseLost, "a dropped group's lease")
	fresh, err := q.Group(ctx, "g", shmarena.WithTopic("jobs"), shmarena.WithAck(time.Minute))
	require.NoError(t, err)
	st, err := fresh.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, st.Pending, "no ghost pending entries")
	assert.Zero(t, st.Redelivered)
	assert.Empty(t, claimAll(t, fresh, 10), "a new group starts at the head")
}

// A bounded queue refuses a publish past its capacity of unfinished
// records (ErrRingFull) and PublishWait waits for room.
func qBackpressure(t *testing.T, b Backend) {
	const capacity = 4
	q, ctx := b.Queue(t, capacity), ctxFor(t)
	g, err := q.Group(ctx, "g", shmarena.WithTopic("jobs"), shmarena.WithAck(time.Minute))
	require.NoError(t, err)
	publishN(t, q, "jobs", capacity)
	_, err = q.Publish(ctx, "jobs", []byte("one too many"))
	assert.ErrorIs(t, err, shmarena.ErrRingFull)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = q.PublishWait(short, "jobs", []byte("waits"))
	cancel()
	assert.ErrorIs(t, err, shmarena.ErrRingFull)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	done := make(chan error, 1)
	go func() {
		_, err := q.PublishWait(ctx, "jobs", []byte("after room"))
		done <- err
	}()
	recs := claimAll(t, g, 1)
	require.Len(t, recs, 1)
	require.NoError(t, g.Ack(ctx, recs...))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("PublishWait did not publish after an ack made room")
	}
	var payloads []string
	for _, r := range claimAll(t, g, 10) {
		payloads = append(payloads, string(r.Payload))
	}
	assert.Contains(t, payloads, "after room")
}

// Records published to a group, of which one member claims some and is
// killed: the other members, running at once, ack every record at least
// once, the killed member's records included, redelivered.
func qAtLeastOnce(t *testing.T, b Backend) {
	q, ctx := b.Queue(t, 0), ctxFor(t)
	job := Job{Group: "workers", Topic: "jobs", Lease: 300 * time.Millisecond}
	g, err := q.Group(ctx, job.Group, job.GroupOptions()...)
	require.NoError(t, err)
	seqs := publishN(t, q, "jobs", 100)

	die := job
	die.Kind, die.N = JobConsumeDie, 10
	held := parseLines(b.Run(t, die)[0], "held ")
	require.Len(t, held, 10, "the killed member held 10 leases")
	seqs = append(seqs, publishN(t, q, "jobs", 100)...)

	work := job
	work.Kind = JobConsume
	outs := b.Run(t, work, work, work)
	acked := map[uint64]int{}
	for _, o := range outs {
		for _, s := range parseLines(o, "acked ") {
			acked[s]++
		}
	}
	for _, s := range seqs {
		assert.GreaterOrEqual(t, acked[s], 1, "record %d was never acked", s)
	}
	for _, s := range held {
		assert.GreaterOrEqual(t, acked[s], 1, "held record %d was not redelivered", s)
	}
	st, err := g.Stats(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, st.Redelivered, uint64(len(held)), "redeliveries are counted")
	assert.Equal(t, 0, st.Pending)
}
