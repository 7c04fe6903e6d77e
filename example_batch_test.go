package shmarena_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shmarena/shmarena"
)

// A producer that gathers records and publishes them in batches: each
// batch is one lock round trip, one commit and at most one wake-up for
// all its records, which reach readers together, in order, under
// consecutive sequence numbers.
func ExampleRing_PublishBatch() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, _ := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	defer a.Close()
	r, _ := a.Ring("events", shmarena.WithSlots(64), shmarena.WithSlotSize(128))
	g, _ := r.Group("indexers", shmarena.WithBackpressure())

	batch := make([][]byte, 0, 16)
	for i := range 3 {
		batch = append(batch, fmt.Appendf(nil, "event %d", i))
	}
	first, err := r.PublishBatch("click", batch)
	if err != nil {
		panic(err)
	}
	fmt.Println("first sequence:", first)

	// PublishBatchWait waits for room where PublishBatch would refuse
	// with ErrRingFull (a protected group has not finished the records
	// the batch would overwrite).
	batch = append(batch[:0], []byte("event 3"), []byte("event 4"))
	first, err = r.PublishBatchWait(context.Background(), "click", batch)
	if err != nil {
		panic(err)
	}
	fmt.Println("first sequence:", first)

	for _, rec := range g.Claim(0) {
		fmt.Println(rec.Seq, rec.Topic, string(rec.Payload))
	}
	// Output:
	// first sequence: 1
	// first sequence: 4
	// 1 click event 0
	// 2 click event 1
	// 3 click event 2
	// 4 click event 3
	// 5 click event 4
}
