// Package sim holds the hit-ratio benchmark of the evicting map: reference cache
// simulators (exact LRU and S3-FIFO as libCacheSim implements it), the
// synthetic request traces they and shmarena's evicting Map are run on,
// and the driver that runs one against the other.
//
// Everything here is deterministic: a trace is a function of its Spec,
// seed included, so two runs give the same hit ratios to the last digit
// for the simulators (the Map's hash seed is random per file, so its
// ratios vary slightly from run to run).
package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Kind names a trace shape.
type Kind string

const (
	// Zipf draws every request from a Zipf(Alpha) distribution over Keys
	// keys, the ranks assigned to keys by a fixed random permutation.
	Zipf Kind = "zipf"
	// OneHit is Zipf(Alpha) with OneHitFrac of the requests replaced by
	// keys requested once and never again (one-hit wonders).
	OneHit Kind = "onehit"
	// Scan is Zipf(Alpha) where, in every block of ScanEvery requests, the
	// last ScanLen are a sequential scan of a cold table: keys outside the
	// Zipf key space, read in order, each read once in the whole trace.
	Scan Kind = "scan"
)

// Spec describes a trace.
type Spec struct {
	Name       string
	Kind       Kind
	Alpha      float64 // Zipf exponent
	Keys       int     // size of the Zipf key space
	Requests   int     // requests in all, warm-up included
	WarmupFrac float64 // leading fraction of requests not counted
	OneHitFrac float64 // OneHit: fraction of one-hit-wonder requests
	ScanEvery  int     // Scan: block length, requests
	ScanLen    int     // Scan: scan requests at the end of each block
	Seed       uint64
}

// Trace is a generated request sequence: key ids, and how many leading
// requests are warm-up.
type Trace struct {
	Spec   Spec
	Keys   []uint32
	Warmup int
}

// Generate builds the trace spec describes. It returns an error for a
// spec it cannot build (no keys, a fraction out of range, a key space
// that does not fit 32-bit ids).
func Generate(spec Spec) (*Trace, error) {
	if spec.Keys <= 0 || spec.Requests <= 0 || spec.Alpha <= 0 {
		return nil, fmt.Errorf("sim: trace %q: need Keys, Requests and Alpha > 0", spec.Name)
	}
	if spec.WarmupFrac < 0 || spec.WarmupFrac >= 1 || spec.OneHitFrac < 0 || spec.OneHitFrac >= 1 {
		return nil, fmt.Errorf("sim: trace %q: fractions must be in [0, 1)", spec.Name)
	}
	if int64(spec.Keys)+int64(spec.Requests) >= math.MaxUint32 {
		return nil, fmt.Errorf("sim: trace %q: key ids would overflow 32 bits", spec.Name)
	}
	if spec.Kind == Scan && (spec.ScanEvery <= 0 || spec.ScanLen < 0 || spec.ScanLen > spec.ScanEvery) {
		return nil, fmt.Errorf("sim: trace %q: need 0 <= ScanLen <= ScanEvery, ScanEvery > 0", spec.Name)
	}
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))
	z := newZipf(spec.Alpha, spec.Keys, rng)
	keys := make([]uint32, spec.Requests)
	cold := uint32(spec.Keys) // ids past the Zipf space: one-hit wonders and scans
	for i := range keys {
		switch {
		case spec.Kind == OneHit && rng.Float64() < spec.OneHitFrac:
			keys[i] = cold
			cold++
		case spec.Kind == Scan && i%spec.ScanEvery >= spec.ScanEvery-spec.ScanLen:
			keys[i] = cold
			cold++
		case spec.Kind == Zipf || spec.Kind == OneHit || spec.Kind == Scan:
			keys[i] = z.next()
		default:
			return nil, fmt.Errorf("sim: trace %q: unknown kind %q", spec.Name, spec.Kind)
		}
	}
	return &Trace{Spec: spec, Keys: keys, Warmup: int(float64(spec.Requests) * spec.WarmupFrac)}, nil
}

// zipf samples ranks 1..n with P(k) proportional to 1/k^alpha by binary
// search of the cumulative distribution (math/rand's Zipf needs alpha >
// 1), and maps rank k to key perm[k-1].
type zipf struct {
	cdf  []float64
	perm []uint32
	rng  *rand.Rand
}

func newZipf(alpha float64, n int, rng *rand.Rand) *zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range cdf {
		sum += math.Pow(float64(k+1), -alpha)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	perm := make([]uint32, n)
	for i, p := range rng.Perm(n) {
		perm[i] = uint32(p)
	}
	return &zipf{cdf: cdf, perm: perm, rng: rng}
}

func (z *zipf) next() uint32 {
	u := z.rng.Float64()
	k := sort.SearchFloat64s(z.cdf, u)
	if k == len(z.cdf) {
		k--
	}
	return z.perm[k]
}
