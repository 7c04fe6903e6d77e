package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// A SizeMix draws value sizes, in bytes. The two mixes are the value
// space's workloads (the same as BenchmarkValuesMemory in the core's
// values_bench_test.go).
type SizeMix struct {
	Name string
	draw func(r *rand.Rand) int
}

// Bimodal draws 80% of values uniformly from 100-400 bytes and 20% from
// 8-32 KiB: small JSON bodies and pages. Mean 4,346 bytes.
var Bimodal = SizeMix{"bimodal", func(r *rand.Rand) int {
	if r.IntN(5) == 0 {
		return 8<<10 + r.IntN(24<<10+1)
	}
	return 100 + r.IntN(301)
}}

// LogNormal draws 1 KiB·e^N(0,1): median 1,024 bytes, sigma 1 (as
// BenchmarkValuesMemory), mean 1,688, 95th percentile 5.3 KiB, capped at
// 1 MiB (reached with probability 1e-12).
var LogNormal = SizeMix{"log-normal", func(r *rand.Rand) int {
	return int(min(1024*math.Exp(r.NormFloat64()), 1<<20))
}}

// Sizes draws one value size for each key id below n, from a generator
// seeded with seed alone: a key's size is the same on every request and
// in every run.
func (x SizeMix) Sizes(n int, seed uint64) []uint32 {
	r := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(x.draw(r))
	}
	return out
}

// SizedTrace is a trace whose keys have value sizes.
type SizedTrace struct {
	*Trace
	Mix   string
	Sizes []uint32 // by key id: every id the trace requests has one
	Bytes int64    // key+value bytes of the trace's key space (see Entry)
}

// Sized gives t's keys value sizes drawn from x (seeded with seed). Bytes
// counts the Zipf key space, t.Spec.Keys keys: the budgets are shares of
// it.
func Sized(t *Trace, x SizeMix, seed uint64) *SizedTrace {
	n := uint32(0)
	for _, k := range t.Keys {
		n = max(n, k)
	}
	st := &SizedTrace{Trace: t, Mix: x.Name, Sizes: x.Sizes(int(n)+1, seed)}
	for k := range min(t.Spec.Keys, len(st.Sizes)) {
		st.Bytes += int64(st.Entry(uint32(k)))
	}
	return st
}

// Entry returns the bytes key k charges a cache: its key (the id in
// decimal, as every cache here stores it) plus its value.
func (t *SizedTrace) Entry(k uint32) int { return keyLen(k) + int(t.Sizes[k]) }

// keyLen is the length of k in decimal.
func keyLen(k uint32) int {
	n := 1
	for ; k >= 10; k /= 10 {
		n++
	}
	return n
}

// A SizedCache answers one request at a time, as Cache does, for a key
// whose value is size bytes (its key+value bytes are entry).
type SizedCache interface {
	Access(key uint32, size, entry int) (hit bool, err error)
}

// RunSized plays t against c, counting hits after the warm-up. It stops
// at the first error c returns.
func RunSized(t *SizedTrace, c SizedCache) (Result, error) {
	var r Result
	for i, k := range t.Keys {
		hit, err := c.Access(k, int(t.Sizes[k]), t.Entry(k))
		if err != nil {
			return r, fmt.Errorf("request %d: %w", i, err)
		}
		if i >= t.Warmup {
			r.Requests++
			if hit {
				r.Hits++
			}
		}
	}
	return r, nil
}
