package shmarena_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shmarena/shmarena"
)

// A worker that handles jobs in batches: each call acks the batch just
// done and claims the next into the same slice, under one acquisition of
// the group's lock, and allocates nothing once the slice has grown.
func ExampleGroup_AckAndClaim() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, _ := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	defer a.Close()
	r, _ := a.Ring("work", shmarena.WithSlots(64), shmarena.WithSlotSize(128))
	q, _ := r.Group("workers", shmarena.WithAck(30*time.Second))
	for i := range 10 {
		_, _ = r.Publish("jobs", fmt.Appendf(nil, "job %d", i))
	}

	var err error
	recs := q.Claim(4)
	for len(recs) > 0 {
		fmt.Printf("%d jobs, first %q\n", len(recs), recs[0].Payload)
		recs, err = q.AckAndClaim(recs, 4)
		if err != nil {
			panic(err)
		}
	}
	fmt.Println("pending:", q.Stats().Pending)
	// Output:
	// 4 jobs, first "job 0"
	// 4 jobs, first "job 4"
	// 2 jobs, first "job 8"
	// pending: 0
}

// A consumer that claims into one reused slice: each payload is copied
// into the memory of the record it lands in, and stays valid until the
// slice is passed again.
func ExampleGroup_AppendClaim() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, _ := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	defer a.Close()
	r, _ := a.Ring("events", shmarena.WithSlots(64), shmarena.WithSlotSize(128))
	g, _ := r.Group("indexers")
	for i := range 5 {
		_, _ = r.Publish("click", fmt.Appendf(nil, "event %d", i))
	}

	var recs []shmarena.Record
	for {
		recs = g.AppendClaim(recs[:0], 2)
		if len(recs) == 0 {
			break // (a real consumer would Wait)
		}
		for _, rec := range recs {
			fmt.Printf("%d %s\n", rec.Seq, rec.Payload)
		}
	}
	// Output:
	// 1 event 0
	// 2 event 1
	// 3 event 2
	// 4 event 3
	// 5 event 4
}
