package shmarena

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
)

// Benchmarks of the value space (WithBytes). Memory: live key and value
// bytes over the bytes the map's region holds (MapBytes), at steady state
// of churn, reported as the metric live/held; speed: a hit of each value
// size, with a plain copy from the mapping and an inline hit as the
// baselines. Run: go test -run '^$' -bench 'Values' -benchtime 2x .

// A mix draws value sizes.
type mix struct {
	name  string
	draw  func(r *rand.Rand) int
	slots int // sized so that slots and bytes run out together
}

var mixes = []mix{
	{"bimodal", func(r *rand.Rand) int { // 80% 100-400 B, 20% 8-32 KiB
		if r.IntN(5) == 0 {
			return 8<<10 + r.IntN(24<<10+1)
		}
		return 100 + r.IntN(301)
	}, 16384},
	{"lognormal-1KiB", func(r *rand.Rand) int { // median 1 KiB, sigma 1
		return int(min(1024*math.Exp(r.NormFloat64()), 1<<20))
	}, 32768},
}

var memBytes int64 = 32 << 20

func memMap(b *testing.B, x mix, evict bool) (*Map, int64) {
	opts := []RegionOption{WithSlots(x.slots), WithSlotSize(64), WithBytes(memBytes)}
	if evict {
		opts = append(opts, WithEviction())
	}
	held, err := MapBytes(opts...)
	if err != nil {
		b.Fatal(err)
	}
	a, _ := tempArena(b, held+(4<<20))
	m, err := a.Map("m", opts...)
	if err != nil {
		b.Fatal(err)
	}
	return m, held
}

// churn stores over keys 0..keys-1 until inserted bytes reach n, with
// sizes from draw times scale, deleting a random key whenever a plain map
// refuses; it tracks each key's live size in live.
func churn(m *Map, r *rand.Rand, draw func(*rand.Rand) int, scale int, n int64, keys int, live []int, buf []byte) {
	for done := int64(0); done < n; {
		k := r.IntN(keys)
		size := min(draw(r)*scale, m.MaxValue())
		key := "k" + strconv.Itoa(k)
		err := m.Store(key, buf[:size])
		for err != nil { // a plain map full: delete someone, as an application would
			d := r.IntN(keys)
			if m.Delete("k" + strconv.Itoa(d)) {
				live[d] = 0
			}
			err = m.Store(key, buf[:size])
		}
		live[k] = len(key) + size
		done += int64(size)
	}
}

// meanRatio churns one capacity (memBytes) in tenths and returns the mean
// of live/held after each: a plain map's ratio wanders by a few hundredths
// from one moment to the next (it refuses when the value space of one
// segment is full, and how full the others are then wanders with the
// keys and sizes each holds), so one sample would measure the moment.
func meanRatio(m *Map, r *rand.Rand, draw func(*rand.Rand) int, scale, keys int, live []int, buf []byte, held int64) float64 {
	var sum float64
	for range 10 {
		churn(m, r, draw, scale, memBytes/10, keys, live, buf)
		sum += float64(liveBytes(m)) / float64(held)
	}
	return sum / 10
}

// liveBytes sums the keys and values the map holds.
func liveBytes(m *Map) int64 {
	var n int64
	for k, v := range m.All() {
		n += int64(len(k) + len(v))
	}
	return n
}

func BenchmarkValuesMemory(b *testing.B) {
	for _, x := range mixes {
		for _, evict := range []bool{false, true} {
			b.Run(x.name+map[bool]string{false: "/plain", true: "/evicting"}[evict], func(b *testing.B) {
				for range b.N {
					m, held := memMap(b, x, evict)
					r := rand.New(rand.NewPCG(1, 2))
					keys := x.slots * 4
					live := make([]int, keys)
					buf := make([]byte, 4<<20)
					churn(m, r, x.draw, 1, 5*memBytes, keys, live, buf)
					moved := m.Stats().BytesMoved
					steady := 0.0
					for range 5 { // the mean over capacities 6 to 10
						steady += meanRatio(m, r, x.draw, 1, keys, live, buf, held) / 5
					}
					moved = (m.Stats().BytesMoved - moved) / 5
					// Shift: every value 4x larger; count capacities (in
					// bytes) of churn until the ratio is back within 0.02
					// of its steady value, at most 5.
					caps, after := 0, 0.0
					for caps < 5 {
						after = meanRatio(m, r, x.draw, 4, keys, live, buf, held)
						caps++
						if after >= steady-0.02 {
							break
						}
					}
					b.ReportMetric(steady, "live/held")
					b.ReportMetric(after, "live/held-after-4x")
					b.ReportMetric(float64(caps), "capacities-to-recover")
					b.ReportMetric(float64(moved)/float64(memBytes), "moved/stored")
					b.ReportMetric(memcachedEfficiency(x.draw), "memcached-1.25-live/held")
				}
			})
		}
	}
}

// memcachedEfficiency is the expected ratio of item bytes to chunk bytes
// in memcached's slab classes for sizes from draw (a 10-byte key, 48 bytes
// of item header, classes from 96 bytes growing by 1.25 and rounded to 8
// bytes, as memcached's default -f 1.25 -n 48): the waste inside chunks
// alone, not counting slab pages held by classes of yesterday's sizes.
func memcachedEfficiency(draw func(*rand.Rand) int) float64 {
	var classes []int
	for c := 96.0; c < 1<<20; c *= 1.25 {
		classes = append(classes, (int(c)+7)&^7)
	}
	classes = append(classes, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	var data, held float64
	for range 100000 {
		v := draw(r)
		item := 48 + 10 + v
		if item > 1<<20 {
			continue
		}
		for _, c := range classes {
			if c >= item {
				data += float64(10 + v)
				held += float64(c)
				break
			}
		}
	}
	return data / held
}

// BenchmarkValuesLoad is a hit of each size: inline (64 B in a map with and
// without a value space) and from the value space, with a plain copy of
// the same bytes from the mapping as the baseline.
func BenchmarkValuesLoad(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 16 << 10, 256 << 10} {
		for _, space := range []bool{false, true} {
			if !space && size > 64 {
				continue
			}
			name := strconv.Itoa(size) + "B/" + map[bool]string{false: "no-value-space", true: "value-space"}[space]
			b.Run(name, func(b *testing.B) {
				m := loadMap(b, space, size)
				buf := make([]byte, 0, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					buf, _ = m.AppendLoad(buf[:0], "key")
				}
			})
		}
		b.Run(strconv.Itoa(size)+"B/plain-copy-from-mapping", func(b *testing.B) {
			a, _ := tempArena(b, 16<<20)
			m, err := a.Map("m", WithSlots(4096), WithSlotSize(128), WithBytes(4<<20))
			if err != nil {
				b.Fatal(err)
			}
			off := m.vsOff(0) + vsHeader
			buf := make([]byte, 0, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				buf = mem.AppendBytes(buf[:0], m.mem, off, size)
			}
		})
	}
}

// BenchmarkValuesStore stores values of each size into an evicting map
// with a value space, under eviction.
func BenchmarkValuesStore(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 16 << 10, 256 << 10} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			a, _ := tempArena(b, 16<<20)
			m, err := a.Map("m", WithSlots(4096), WithSlotSize(128), WithBytes(4<<20), WithEviction())
			if err != nil {
				b.Fatal(err)
			}
			v := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := range b.N {
				if err := m.Store("k"+strconv.Itoa(i%1000), v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkValuesLoadRatio times a hit against its baseline in alternating
// short batches and reports the ratio of their fastest batches (metric
// x-baseline): on a busy machine a batch the scheduler interrupts is
// slower, never faster, so the fastest batches of each compare the code
// rather than the load. 16 KiB: a hit from the value space against a plain
// copy of 16 KiB from the same mapping (target <= 1.5); 64 B: an inline
// hit in a map with a value space against the same hit in a map without
// one (target <= 1.05).
func BenchmarkValuesLoadRatio(b *testing.B) {
	b.Run("16KiB-hit/plain-copy", func(b *testing.B) {
		const size = 16 << 10
		m := loadMap(b, true, size)
		off := m.vsOff(0) + vsHeader
		buf := make([]byte, 0, size)
		hit := func() { buf, _ = m.AppendLoad(buf[:0], "key") }
		plain := func() { buf = mem.AppendBytes(buf[:0], m.mem, off, size) }
		b.ReportMetric(fastestRatio(b, hit, plain, 64), "x-baseline")
	})
	b.Run("64B-hit/no-value-space", func(b *testing.B) {
		with, without := loadMap(b, true, 64), loadMap(b, false, 64)
		buf := make([]byte, 0, 64)
		hit := func() { buf, _ = with.AppendLoad(buf[:0], "key") }
		base := func() { buf, _ = without.AppendLoad(buf[:0], "key") }
		b.ReportMetric(fastestRatio(b, hit, base, 2048), "x-baseline")
	})
}

// loadMap returns a map holding a value of size bytes under "key", with a
// 4 MiB value space or without one.
func loadMap(b *testing.B, space bool, size int) *Map {
	opts := []RegionOption{WithSlots(4096), WithSlotSize(128)}
	if space {
		opts = append(opts, WithBytes(4<<20))
	}
	a, _ := tempArena(b, 16<<20)
	m, err := a.Map("m", opts...)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Store("key", make([]byte, size)); err != nil {
		b.Fatal(err)
	}
	return m
}

// fastestRatio runs op and base in alternating batches of n calls, b.N
// batches each, and returns the fastest op batch over the fastest base
// batch.
func fastestRatio(b *testing.B, op, base func(), n int) float64 {
	batch := func(f func()) time.Duration {
		t := time.Now()
		for range n {
			f()
		}
		return time.Since(t)
	}
	bestOp, bestBase := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for i := range b.N {
		if i&1 == 0 { // alternate which goes first
			bestOp, bestBase = min(bestOp, batch(op)), min(bestBase, batch(base))
		} else {
			bestBase, bestOp = min(bestBase, batch(base)), min(bestOp, batch(op))
		}
	}
	b.ReportMetric(float64(bestOp.Nanoseconds())/float64(n), "ns/hit")
	b.ReportMetric(float64(bestBase.Nanoseconds())/float64(n), "ns/baseline")
	return float64(bestOp) / float64(bestBase)
}
