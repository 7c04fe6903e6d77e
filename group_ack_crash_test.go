package shmarena

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Crash tests of acking groups: a child parks at a crash point inside
// claim, ack, nack, a dead-lettering, a drop or a PublishWait on a full
// ring, and is SIGKILLed there; the parent's handles must then get every
// record (none lost, none delivered to two live members at once: the
// lease is an hour, so only the dead member's leases move) within
// crashBound.

func ackCrashRing(a *Arena) (*Ring, *Group, error) {
	r, err := a.Ring("q", WithSlots(16), WithSlotSize(64))
	if err != nil {
		return nil, nil, err
	}
	g, err := r.Group("w", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(3), WithDeadLetter("dead"))
	return r, g, err
}

func init() {
	childRoles["ack-crash"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		r, g, err := ackCrashRing(a)
		if err != nil {
			return err
		}
		point := os.Getenv("SHMARENA_POINT")
		parkAt(point)
		switch point {
		case "claim-entered", "claim-moved", "reclaim", "reclaimed":
			g.Claim(4)
		case "ack":
			err = g.Ack(g.Claim(4)...)
		case "nack":
			err = g.Nack(g.Claim(4)[0], 0)
		case "dead-lettered", "dead-finished":
			for i := 0; i < 4; i++ {
				for _, rec := range g.Claim(1) {
					if err := g.Nack(rec, 0); err != nil {
						return err
					}
				}
			}
		case "publish-full":
			_, err = r.PublishWait(context.Background(), "jobs", []byte("late"))
		case "drop":
			err = r.DropGroup("w")
		default:
			return fmt.Errorf("unknown point %q", point)
		}
		return fmt.Errorf("%s returned (%v) without reaching its crash point", point, err)
	}
}

func TestAckCrashPoints(t *testing.T) {
	for _, point := range []string{"claim-entered", "claim-moved", "reclaim", "reclaimed", "ack", "nack", "dead-lettered", "dead-finished", "publish-full", "drop"} {
		t.Run(point, func(t *testing.T) {
			a, path := openTestArena(t, 1<<20)
			r, g, err := ackCrashRing(a)
			require.NoError(t, err)
			n := 8
			if point == "publish-full" {
				n = 16
			}
			for i := 0; i < n; i++ {
				_, err := r.Publish("jobs", []byte(fmt.Sprint(i)))
				require.NoError(t, err)
			}
			if point == "reclaim" || point == "reclaimed" { // leases of a member that left, for the child to take
				a2, err := Open(path)
				require.NoError(t, err)
				_, g2, err := ackCrashRing(a2)
				require.NoError(t, err)
				require.Len(t, g2.Claim(2), 2)
				require.NoError(t, a2.Close())
			}
			killed := killParked(t, child(t, "ack-crash", "SHMARENA_PATH="+path, "SHMARENA_POINT="+point), point)

			if point == "drop" {
				// The group was dropped or not: either way a member can join
				// and producers are not held back by a ghost.
				_, err = r.Group("w", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(3), WithDeadLetter("dead"))
				require.NoError(t, err)
				noteTakeover(t, "group table after a killed drop", time.Since(killed))
				for i := 0; i < 16; i++ {
					_, err := r.Publish("jobs", nil)
					require.NoError(t, err, "publish %d after the drop", i)
				}
				return
			}
			if point == "publish-full" {
				first := g.Claim(1)
				require.Len(t, first, 1)
				require.NoError(t, g.Ack(first...))
				s, err := r.Publish("jobs", []byte("after"))
				require.NoError(t, err)
				noteTakeover(t, "publish lock after a killed PublishWait", time.Since(killed))
				assert.Equal(t, uint64(17), s, "the killed producer published nothing")
				n = 17
			}

			// Two live members share the rest; nothing may reach both.
			a3, err := Open(path)
			require.NoError(t, err)
			defer a3.Close()
			_, g3, err := ackCrashRing(a3)
			require.NoError(t, err)
			var got []uint64
			held := map[uint64]bool{}
			var firstBack time.Duration
			for deadline := time.Now().Add(crashBound); ; {
				recs := append(g.Claim(1), g3.Claim(1)...)
				for _, rec := range recs {
					require.False(t, held[rec.Seq], "record %d delivered to two live members", rec.Seq)
					held[rec.Seq] = true
					got = append(got, rec.Seq)
				}
				if firstBack == 0 && len(recs) > 0 {
					firstBack = time.Since(killed)
				}
				if st := g.Stats(); len(recs) == 0 && st.Lag == 0 && st.Pending == len(held) {
					break // every pending lease is one of ours
				}
				require.True(t, time.Now().Before(deadline), "records still unclaimed %v after %v: %+v", got, crashBound, g.Stats())
			}
			noteTakeover(t, "leases after a killed "+point, firstBack)
			slices.Sort(got)
			want := []uint64{}
			for s := uint64(1); s <= uint64(n); s++ {
				want = append(want, s)
			}
			if point == "ack" || point == "publish-full" {
				want = want[1:] // acked before the kill or just after: never again
			}
			letters := 0
			if point == "dead-lettered" || point == "dead-finished" {
				want = want[1:] // dead-lettered (perhaps twice), never redelivered
				c := r.Cursor(FromStart())
				for rec, ok := c.Next(); ok; rec, ok = c.Next() {
					if rec.Topic == "dead" {
						dl, err := ParseDeadLetter(rec)
						require.NoError(t, err)
						assert.Equal(t, uint64(1), dl.Seq)
						assert.Equal(t, 3, dl.Deliveries)
						letters++
					}
				}
				assert.Contains(t, []int{1, 2}, letters, "the dead letter, at least once")
				assert.Equal(t, uint64(1), g.Stats().DeadLettered)
			}
			assert.Equal(t, want, got, "every record not finished before the kill, once")
			st := g.Stats()
			assert.Equal(t, uint64(n+letters), st.Delivered+st.Skipped, "first deliveries (and skipped dead letters) counted once each, whatever the kill")
			switch point {
			case "claim-entered":
				assert.Zero(t, st.Redelivered, "the killed claim delivered nothing")
			case "claim-moved", "nack":
				assert.Equal(t, uint64(4), st.Redelivered, "the killed member's leases, again")
			case "ack":
				assert.Equal(t, uint64(3), st.Redelivered, "the killed member's leases but the one acked")
			case "reclaim":
				assert.Equal(t, uint64(2), st.Redelivered, "the killed reclaim had not re-leased record 1")
			case "reclaimed":
				assert.Equal(t, uint64(3), st.Redelivered, "record 1 re-leased to the killed member, then to this one, and record 2")
			case "dead-lettered", "dead-finished":
				assert.Equal(t, uint64(2), st.Redelivered, "deliveries 2 and 3 of record 1")
			}
		})
	}
}
