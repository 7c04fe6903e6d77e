package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAllow is one decision on a shared-memory map, over 1,024
// keys, mostly allowed.
func BenchmarkAllow(b *testing.B) {
	kv, _ := testStore(b)
	l := NewLimiter(kv)
	ctx := context.Background()
	limit := Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := l.Allow(ctx, keys[i&1023], limit); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
