package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shmarena/shmarena"
)

// runChild attaches to the supervisor's arena and plays c.role until its
// stdin closes (the supervisor is done, or gone) or it is signalled.
func runChild(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	f := os.NewFile(3, "arena") // from the supervisor's ExtraFiles
	if f == nil {
		return errors.New("no arena on file descriptor 3")
	}
	a, err := shmarena.OpenFile(f)
	f.Close()
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.Ring(ringName, ringOptions(c)...)
	if err != nil {
		return err
	}
	m, err := a.Map(mapName, mapOptions(c)...)
	if err != nil {
		return err
	}
	if c.role == "producer" {
		return produce(ctx, c, r, m)
	}
	g, err := r.Group(groupName, groupOptions(c)...)
	if err != nil {
		return err
	}
	if _, err := m.Add("ready", 1); err != nil {
		return err
	}
	return work(ctx, c, g, m)
}

// produce publishes the jobs. PublishWait waits while the ring is full of
// jobs the group has not finished; with -at-most-once, Publish overwrites
// the oldest job instead.
func produce(ctx context.Context, c config, r *shmarena.Ring, m *shmarena.Map) error {
	rng := rand.NewChaCha8([32]byte{1})
	for n := uint64(1); n <= uint64(c.jobs); n++ {
		p := makePayload(n, c.size, rng)
		var err error
		if c.atMostOnce {
			_, err = r.Publish(topic, p)
		} else {
			_, err = r.PublishWait(ctx, topic, p)
		}
		if err != nil {
			return fmt.Errorf("publish job %d: %w", n, err)
		}
		if n%1024 == 0 || n == uint64(c.jobs) {
			if _, err := m.Add("published", 1024); err != nil {
				return err
			}
		}
	}
	_, err := m.Add("producer-done", 1)
	return err
}

// work is the at-least-once loop: claim a batch, do every job, then ack
// the batch. A worker killed before the ack leaves the batch leased to a
// dead handle: the next Claim of a survivor takes it again. At most once
// (-at-most-once) there is nothing to ack, and a batch held by a worker
// that dies is lost.
func work(ctx context.Context, c config, g *shmarena.Group, m *shmarena.Map) error {
	for ctx.Err() == nil {
		recs := g.Claim(16)
		if len(recs) == 0 {
			if err := g.Wait(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			continue
		}
		// "holding" lets the supervisor pick its moment to kill: while it
		// is up, this worker holds leases it has not acked.
		if _, err := m.Add(workerKey(c.id, "holding"), int64(len(recs))); err != nil {
			return err
		}
		// The supervisor asks worker 0 to crash mid-batch: it says it is
		// parked here, holding leases it has not acked, and waits to be
		// SIGKILLed (a signal alone could land between two batches).
		if n, _ := m.Counter("crash"); c.id == 0 && n > 0 {
			if _, err := m.Add(workerKey(0, "parked"), 1); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}
		for _, rec := range recs {
			if err := doJob(c, m, rec); err != nil {
				return err
			}
		}
		if _, err := m.Add(workerKey(c.id, "holding"), -int64(len(recs))); err != nil {
			return err
		}
		if c.atMostOnce {
			continue
		}
		if err := g.Ack(recs...); errors.Is(err, shmarena.ErrLeaseLost) {
			// The batch outlived its lease and went to another worker,
			// which does it again: count it, carry on.
			if _, err := m.Add(workerKey(c.id, "lost-lease"), 1); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
	}
	return nil
}

// doJob checks one job and reports it in the map.
func doJob(c config, m *shmarena.Map, rec shmarena.Record) error {
	n, ok := checkPayload(rec.Payload, c.rounds)
	if !ok {
		if _, err := m.Add(workerKey(c.id, "bad"), 1); err != nil {
			return err
		}
	}
	if _, err := m.Add(jobKey(n), 1); err != nil {
		return err
	}
	if _, err := m.Add(workerKey(c.id, "done"), 1); err != nil {
		return err
	}
	_, err := m.Add("done", 1)
	return err
}

// waitCounter waits until the map's counter key reaches want.
func waitCounter(ctx context.Context, m *shmarena.Map, key string, want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if n, _ := m.Counter(key); n >= want {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			n, _ := m.Counter(key)
			return fmt.Errorf("%s is %d after %v, want %d", key, n, timeout, want)
		}
		time.Sleep(time.Millisecond)
	}
}
