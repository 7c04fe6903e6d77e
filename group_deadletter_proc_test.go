package shmarena

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two dead-lettering acking groups on a full ring, across processes, as
// the review that found them wedging ran them: 8 slots, 4 in flight, 2
// deliveries, 35% of deliveries Nacked, two worker processes per group.

func dlProcGroups(r *Ring, name string) (*Group, error) {
	return r.Group(name, WithTopic("jobs"), WithAck(time.Minute), WithMaxDeliveries(2), WithDeadLetter("dead-"+name))
}

func dlProcOpen(path, name string) (*Arena, *Group, *Map, error) {
	a, err := Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := a.Ring("q", WithSlots(8), WithSlotSize(64), WithMaxInFlight(4))
	if err == nil {
		var g *Group
		if g, err = dlProcGroups(r, name); err == nil {
			var m *Map
			if m, err = a.Map("ctl", WithSlots(64), WithSlotSize(64)); err == nil {
				return a, g, m, nil
			}
		}
	}
	_ = a.Close()
	return nil, nil, nil, err
}

// dlProcWorkerRole claims from group arg, Nacks 35% of its deliveries and
// acks the rest, until the parent says stop.
func dlProcWorkerRole(path, name string) error {
	a, g, m, err := dlProcOpen(path, name)
	if err != nil {
		return err
	}
	defer a.Close()
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 7))
	done := 0
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		recs := g.Claim(2)
		if len(recs) == 0 {
			if n, _ := m.Counter("stop"); n > 0 {
				fmt.Println("RESULT", done)
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			_ = g.Wait(ctx)
			cancel()
			continue
		}
		for _, rec := range recs {
			if rng.IntN(100) < 35 {
				if err := g.Nack(rec, 0); err != nil {
					return err
				}
				continue
			}
			if err := g.Ack(rec); err != nil {
				return err
			}
			done++
		}
	}
	return fmt.Errorf("never told to stop")
}

func TestDeadLetterGroupsAcrossProcessesDoNotWedge(t *testing.T) {
	asChild(map[string]func(string, string) error{"dl-worker": dlProcWorkerRole})
	a, path := openTestArena(t, 1<<20)
	_, g1, m, err := dlProcOpen(path, "g1")
	require.NoError(t, err)
	_ = a
	g2, err := dlProcGroups(g1.r, "g2")
	require.NoError(t, err)
	r := g1.r
	var workers []*ringChild
	for _, name := range []string{"g1", "g1", "g2", "g2"} {
		workers = append(workers, startChild(t, "TestDeadLetterGroupsAcrossProcessesDoNotWedge", "dl-worker", path, name))
	}
	jobs := 400 / raceSlowdown
	for i := 0; i < jobs; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := r.PublishWait(ctx, "jobs", []byte(fmt.Sprint(i)))
		cancel()
		require.NoError(t, err, "job %d: the ring wedged: %+v %+v", i, g1.Stats(), g2.Stats())
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		s1, s2 := g1.Stats(), g2.Stats()
		if s1.Lag == 0 && s1.Pending == 0 && s2.Lag == 0 && s2.Pending == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "jobs unfinished: %+v %+v", s1, s2)
	}
	_, err = m.Add("stop", 1)
	require.NoError(t, err)
	for _, w := range workers {
		w.wait(t)
	}
	for _, g := range []*Group{g1, g2} {
		st := g.Stats()
		assert.Zero(t, st.Lapped, "%+v", st)
		assert.Positive(t, st.DeadLettered, "%+v", st)
		assert.Equal(t, uint64(jobs), st.Delivered, "%+v", st)
	}
}
