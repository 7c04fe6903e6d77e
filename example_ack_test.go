package shmarena_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shmarena/shmarena"
)

// An at-least-once work queue: claim, work, ack. A job whose worker dies
// or whose lease runs out is delivered again; one that fails is Nacked and
// retried, and after 3 deliveries goes to the dead-letter topic. The
// producer waits for room instead of overwriting unfinished jobs.
func ExampleGroup_Ack() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, _ := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	defer a.Close()
	r, _ := a.Ring("work", shmarena.WithSlots(64), shmarena.WithSlotSize(128))
	// Every worker process joins with the same settings.
	workers, err := r.Group("workers", shmarena.WithTopic("jobs"),
		shmarena.WithAck(30*time.Second), // each claim is a 30 s lease
		shmarena.WithMaxDeliveries(3),
		shmarena.WithDeadLetter("jobs.dead"))
	if err != nil {
		panic(err)
	}
	dead, _ := r.Group("janitor", shmarena.WithTopic("jobs.dead"))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, job := range []string{"resize a.png", "resize corrupt.png", "resize b.png"} {
		if _, err := r.PublishWait(ctx, "jobs", []byte(job)); err != nil {
			panic(err)
		}
	}

	work := func(job []byte) error {
		if strings.Contains(string(job), "corrupt") {
			return errors.New("cannot decode")
		}
		return nil
	}
	// The claim-work-ack loop every worker runs.
	done := 0
	for {
		recs := workers.Claim(8) // expired or orphaned leases first, then new jobs
		if len(recs) == 0 {
			if done == 2 && workers.Stats().DeadLettered == 1 {
				break // (a real worker loops until told to stop)
			}
			if err := workers.Wait(ctx); err != nil {
				panic(err)
			}
			continue
		}
		for _, rec := range recs {
			if err := work(rec.Payload); err != nil {
				fmt.Printf("job %d failed (delivery %d): %v\n", rec.Seq, rec.Deliveries, err)
				_ = workers.Nack(rec, 0) // retry now; a delay backs off
				continue
			}
			if err := workers.Ack(rec); errors.Is(err, shmarena.ErrLeaseLost) {
				continue // it took longer than the lease: another worker has it
			}
			fmt.Printf("job %d done: %s\n", rec.Seq, rec.Payload)
			done++
		}
	}
	for _, rec := range dead.Claim(0) {
		dl, _ := shmarena.ParseDeadLetter(rec)
		fmt.Printf("dead letter: job %d %q after %d deliveries\n", dl.Seq, dl.Payload, dl.Deliveries)
	}
	st := workers.Stats()
	fmt.Println("pending", st.Pending, "redelivered", st.Redelivered, "dead-lettered", st.DeadLettered)
	// Output:
	// job 1 done: resize a.png
	// job 2 failed (delivery 1): cannot decode
	// job 3 done: resize b.png
	// job 2 failed (delivery 2): cannot decode
	// job 2 failed (delivery 3): cannot decode
	// dead letter: job 2 "resize corrupt.png" after 3 deliveries
	// pending 0 redelivered 2 dead-lettered 1
}
