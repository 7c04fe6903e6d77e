package shmarena

// Dead letters: groups that give up on the same record, a dead letter
// over a slot still being written, a crash between publishing a dead
// letter and finishing its record, and rings too small for one.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkAckConfig refuses every group, even an at-most-once one without a
// dead-letter topic, on a ring whose slots hold fewer than 16 bytes of
// body (WithSlotSize(32), a shape Ring accepts): the dead-letter header
// check does not look at whether a dead-letter topic was asked for.
func TestSmallSlotRingTakesGroupsWithoutDeadLetters(t *testing.T) {
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
func TestDeadLetterCrashOnFullRingCountsDeadLettered(t *testing.T) {
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

// Two acking groups with dead-letter topics give up on the same record
// of a full ring: each dead letter needs the slot of that record, which
// the other group has not finished (its floor is there too, and only the
// dead-lettering group's own floor is excused). Neither can ever
// dead-letter it, so neither finishes it, and the ring is full for good:
// no publish succeeds again until a DropGroup. The same with three groups,
// two of them sharing a dead-letter topic (each must publish its own).
func TestGroupsDeadLetterSameRecordWithoutDeadlock(t *testing.T) {
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
func TestWaitSleepsOnUnclaimableDueLease(t *testing.T) {
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
				ctx, cancel := context.WithTimeout(context.Background(), hangBound)
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
