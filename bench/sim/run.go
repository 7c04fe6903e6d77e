package sim

import (
	"fmt"
	"strconv"

	"github.com/shmarena/shmarena"
)

// MapCache runs requests against a real shmarena evicting Map: a hit is
// a Load that finds the key; on a miss the key is Stored. Keys are the
// request ids in decimal, values 8 bytes. Not safe for concurrent use
// (the Map is; the cache's buffers are not).
type MapCache struct {
	Map   *shmarena.Map
	arena *shmarena.Arena
	buf   []byte
	val   []byte
}

// NewMapCache creates a Map WithSlots(slots), WithSlotSize(64) and
// WithEviction, default stripes, in an anonymous arena just big enough.
// Close releases it.
func NewMapCache(slots int) (*MapCache, error) {
	a, m, err := openMap("hitratio", shmarena.WithSlots(slots), shmarena.WithSlotSize(64), shmarena.WithEviction())
	if err != nil {
		return nil, err
	}
	return &MapCache{Map: m, arena: a, buf: make([]byte, 0, 64), val: []byte("12345678")}, nil
}

// openMap returns a map of opts in an anonymous arena named name, just big
// enough (with 1 MiB to spare); closing the arena releases both.
func openMap(name string, opts ...shmarena.RegionOption) (*shmarena.Arena, *shmarena.Map, error) {
	need, err := shmarena.MapBytes(opts...)
	if err != nil {
		return nil, nil, err
	}
	a, err := shmarena.OpenMemfd(name, shmarena.WithSize(shmarena.MinSize+need+1<<20))
	if err != nil {
		return nil, nil, err
	}
	m, err := a.Map("cache", opts...)
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, m, nil
}

// Access implements Cache. It returns Store's error, if any.
func (c *MapCache) Access(k uint32) (bool, error) {
	key := strconv.FormatUint(uint64(k), 10)
	var ok bool
	if c.buf, ok = c.Map.AppendLoad(c.buf[:0], key); ok {
		return true, nil
	}
	if err := c.Map.Store(key, c.val); err != nil {
		return false, fmt.Errorf("store %s: %w", key, err)
	}
	return false, nil
}

// Close closes the arena, which frees the map.
func (c *MapCache) Close() error { return c.arena.Close() }

// Segments returns how many segments shmarena gives a map of slots slots
// with the default stripe count: min(64, slots/4096), at least 1 (the
// core's segmentsFor and minSegmentSlots in hashmap.go; see WithStripes).
func Segments(slots int) int { return max(1, min(64, slots/4096)) }

// MapModel returns the S3-FIFO simulator's shape for shmarena's evicting
// map of slots slots: its segments, 7/8 of each segment's slots live, an
// entry read once in the small queue moving to the main one, and, with
// ghost, the map's per-segment fingerprint ghost (without, the map as it
// was before it had one).
func MapModel(slots int, ghost bool) S3Config {
	return S3Config{SegmentSlots: slots, Segments: Segments(slots), Threshold: 1,
		NoGhost: !ghost, FingerprintGhost: ghost}
}

// Result is one cache's score on one trace.
type Result struct {
	Hits, Requests int // counted requests only: warm-up excluded
}

// Ratio returns the hit ratio, 0 for no requests.
func (r Result) Ratio() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Requests)
}

// Run plays t against c, counting hits after the warm-up. It stops at
// the first error c returns.
func Run(t *Trace, c Cache) (Result, error) {
	var r Result
	for i, k := range t.Keys {
		hit, err := c.Access(k)
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

// RunMap plays t against a fresh MapCache of slots slots and returns its
// result with the map's final stats.
func RunMap(t *Trace, slots int) (Result, shmarena.MapStats, error) {
	c, err := NewMapCache(slots)
	if err != nil {
		return Result{}, shmarena.MapStats{}, err
	}
	defer c.Close()
	r, err := Run(t, c)
	return r, c.Map.Stats(), err
}
