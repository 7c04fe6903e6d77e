package shmarena

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkMapHitCounting measures what counting hits and misses costs a
// read: the same reads of the same table through two handles, one that
// counts and one that does not (the build before counting), interleaved
// in blocks of 256 reads of different keys, which of the two goes first
// alternating. On a
// busy machine a block that was preempted takes many times its share, so
// "ratio" is the median, over pairs of blocks, of counting time over
// plain time: a preemption moves one pair, not the figure. The target is
// at most 1.03.
//
//	go test -run '^$' -bench 'MapHitCounting' -count 5 . -args -mapslots 4096
func BenchmarkMapHitCounting(b *testing.B) {
	m, keys := benchMap(b)
	plain := *m
	plain.uses = noUses
	hit := func(i int) string { return keys[benchOrder[i%benchFill]] }
	const block = 256
	// pairs reads block reads through each handle, from i, and returns
	// the ratio of their times.
	pair := func(i int, buf []byte, counting bool) ([]byte, float64) {
		first, second := m, &plain
		if !counting {
			first, second = second, first
		}
		t0 := time.Now()
		for j := i; j < i+block; j++ {
			buf, _ = first.AppendLoad(buf[:0], hit(j))
		}
		t1 := time.Now()
		for j := i + block; j < i+2*block; j++ { // other keys, as cold
			buf, _ = second.AppendLoad(buf[:0], hit(j))
		}
		d0, d1 := t1.Sub(t0), time.Since(t1)
		if !counting {
			d0, d1 = d1, d0
		}
		return buf, float64(d0) / float64(d1)
	}
	report := func(b *testing.B, ratios []float64) {
		slices.Sort(ratios)
		if len(ratios) > 0 {
			b.ReportMetric(ratios[len(ratios)/2], "ratio")
		}
	}
	b.Run("AppendLoadHit", func(b *testing.B) {
		buf := make([]byte, 0, 128)
		var ratios []float64
		for n := 0; n < b.N; n += 2 * block {
			var r float64
			buf, r = pair(n, buf, n/(2*block)%2 == 0)
			ratios = append(ratios, r)
		}
		report(b, ratios)
	})
	b.Run("ParallelAppendLoadHit", func(b *testing.B) {
		var mu sync.Mutex
		var ratios []float64
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 128)
			var mine []float64
			for i := 0; pb.Next(); i += 2 * block {
				var r float64
				buf, r = pair(i, buf, i/(2*block)%2 == 0)
				mine = append(mine, r)
			}
			mu.Lock()
			ratios = append(ratios, mine...)
			mu.Unlock()
		})
		report(b, ratios)
	})
}
