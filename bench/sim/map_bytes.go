package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/shmarena/shmarena"
)

// SizedMapCache runs requests against a real shmarena evicting Map with a
// value space: a hit is an AppendLoad that finds the key (copying its
// value out); on a miss the key is Stored with a value of its drawn size
// (real bytes, copied in). A value larger than the map's MaxValue is not
// stored (a miss that changes nothing, as the references refuse an entry
// larger than their budget). Not safe for concurrent use.
type SizedMapCache struct {
	Map     *shmarena.Map
	arena   *shmarena.Arena
	buf     []byte
	payload []byte
	key     []byte
}

// MapSlotSize is the slot size of the map under a byte budget: 64 bytes,
// so a slot holds a key of up to 48 bytes with its value-space
// reference, and every value of the mixes here (100 bytes and up, all but
// 0.3% of the log-normal's) lives in the value space the budget sizes.
const MapSlotSize = 64

// SizedMapOptions returns the options of the map under a byte budget:
// WithSlots(slots), WithSlotSize(MapSlotSize), WithBytes(bytes) and
// WithEviction, default stripes.
func SizedMapOptions(slots int, bytes int64) []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(slots), shmarena.WithSlotSize(MapSlotSize),
		shmarena.WithBytes(bytes), shmarena.WithEviction()}
}

// NewSizedMapCache creates a map of SizedMapOptions(slots, bytes) in an
// anonymous arena just big enough. Close releases it.
func NewSizedMapCache(slots int, bytes int64) (*SizedMapCache, error) {
	a, m, err := openMap("hitratio-bytes", SizedMapOptions(slots, bytes)...)
	if err != nil {
		return nil, err
	}
	payload := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	return &SizedMapCache{Map: m, arena: a, buf: make([]byte, 0, 64<<10), payload: payload}, nil
}

// Access implements SizedCache. It returns Store's error, if any.
func (c *SizedMapCache) Access(k uint32, size, _ int) (bool, error) {
	c.key = strconv.AppendUint(c.key[:0], uint64(k), 10)
	key := string(c.key)
	var ok bool
	if c.buf, ok = c.Map.AppendLoad(c.buf[:0], key); ok {
		if len(c.buf) != size {
			return true, fmt.Errorf("load %s: %d bytes, stored %d", key, len(c.buf), size)
		}
		return true, nil
	}
	if size > c.Map.MaxValue() || size > len(c.payload) {
		return false, nil
	}
	if err := c.Map.Store(key, c.payload[:size]); err != nil {
		return false, fmt.Errorf("store %s (%d bytes): %w", key, size, err)
	}
	return false, nil
}

// Close closes the arena, which frees the map.
func (c *SizedMapCache) Close() error { return c.arena.Close() }
