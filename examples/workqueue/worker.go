package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/shmarena/shmarena"
)

// runWorker joins the group and does jobs until its stdin closes (the
// producer is done, or gone) or it is signalled.
func runWorker(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	f := os.NewFile(3, "arena") // from the producer's ExtraFiles
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
	g, err := r.Group(groupName, shmarena.WithTopic(topic))
	if err != nil {
		return err
	}
	if _, err := m.Add("ready", 1); err != nil {
		return err
	}
	doneKey, badKey := workerKey(c.id, "done"), workerKey(c.id, "bad")
	for rec := range g.Records(ctx) {
		n, ok := checkPayload(rec.Payload, c.rounds)
		if !ok {
			if _, err := m.Add(badKey, 1); err != nil {
				return err
			}
		}
		if k, err := m.Add(jobKey(n), 1); err != nil {
			return err
		} else if k > 1 {
			fmt.Fprintf(os.Stderr, "workqueue: worker %d: job %d (record %d) done %d times\n", c.id, n, rec.Seq, k)
		}
		if _, err := m.Add(doneKey, 1); err != nil {
			return err
		}
		if _, err := m.Add("done", 1); err != nil {
			return err
		}
	}
	return nil
}
