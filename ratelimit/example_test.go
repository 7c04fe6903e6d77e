package ratelimit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/ratelimit"
)

// A limiter over a map in shared memory: every process that opens the
// arena shares the limit. On Redis, only the store changes (see the
// module github.com/shmarena/shmarena/redis).
func Example() {
	dir, _ := os.MkdirTemp("", "ratelimit")
	defer os.RemoveAll(dir)
	a, err := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	m, err := a.Map("rate", shmarena.WithSlots(1024), shmarena.WithSlotSize(64))
	if err != nil {
		panic(err)
	}
	limiter := ratelimit.NewLimiter(shmarena.NewKeyValue(m))
	ctx := context.Background()
	for range 4 {
		res, err := limiter.Allow(ctx, "alice", ratelimit.PerMinute(3))
		if err != nil {
			panic(err)
		}
		fmt.Println("allowed", res.Allowed, "remaining", res.Remaining, "retry after", res.RetryAfter.Round(time.Second))
	}
	// Output:
	// allowed 1 remaining 2 retry after 0s
	// allowed 1 remaining 1 retry after 0s
	// allowed 1 remaining 0 retry after 0s
	// allowed 0 remaining 0 retry after 20s
}
