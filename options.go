package shmarena

import (
	"io/fs"
	"time"
)

// An OpenOption configures Open, OpenMemfd and OpenFile.
type OpenOption func(*openConfig)

type openConfig struct {
	size     int64
	mode     fs.FileMode
	readOnly bool
}

// WithSize sets the arena's total size in bytes. It is required to create
// an arena; when attaching it may be 0 (accept any size) or must equal the
// existing size, else Open returns ErrSizeMismatch.
func WithSize(bytes int64) OpenOption { return func(c *openConfig) { c.size = bytes } }

// WithMode sets the permission bits of a file Open creates (default 0600).
// It is applied exactly, whatever the process umask.
func WithMode(perm fs.FileMode) OpenOption { return func(c *openConfig) { c.mode = perm } }

// A RegionOption sets the shape of a map or ring. Every process must ask for
// the same shape; a region that exists with another shape is ErrShape.
type RegionOption func(*regionConfig)

type regionConfig struct {
	slots, slotSize, stripes int64
	encoded                  bool
	inFlight                 int64
	inFlightSet              bool
	schemaChange             bool // OpenTypedMap: see WithSchemaChange
}

// WithSlots sets the number of slots: entries of a map, records of a ring.
// Default 1024. A map takes 1 to 2^32-1 slots, a ring 2 to 2^30; outside
// that, Map or Ring returns ErrInvalid.
func WithSlots(n int) RegionOption { return func(c *regionConfig) { c.slots = int64(n) } }

// WithSlotSize sets the size of one slot in bytes, header included; it is
// rounded up to a multiple of 8. Default 256. A map's MaxPair is the slot
// size minus 32 bytes of slot header; a map's slot size is 48 bytes to
// 16 MiB (see Ring for a ring's range), else ErrInvalid. Keep a map's slot
// size a multiple of 16 bytes: only then can Map.Add skip the stripe lock
// on every slot (see Map.Add).
func WithSlotSize(bytes int) RegionOption {
	return func(c *regionConfig) { c.slotSize = int64(bytes) }
}

// WithMaxInFlight sets a ring's pending-table capacity: how many records
// one at-least-once group (WithAck) may have delivered and not yet
// finished (acked or dead-lettered), in [0, 65536], capped at the ring's
// slots. Default 64. Each of the ring's 64 group entries gets a table of
// that many 40-byte entries whether or not it acks, so the option costs
// 64 x n x 40 bytes of the arena (160 KiB at the default; 0 makes rings
// that cannot hold acking groups and cost nothing). It is part of the
// ring's shape: every process must ask for the same value. A map refuses
// it with ErrInvalid.
func WithMaxInFlight(n int) RegionOption {
	return func(c *regionConfig) { c.inFlight, c.inFlightSet = int64(n), true }
}

// WithStripes sets how many write locks a map has (default 64, at most
// 65536 and at most the number of slots). Writers of keys on different
// stripes never wait for each other.
func WithStripes(n int) RegionOption { return func(c *regionConfig) { c.stripes = int64(n) } }

// A WriteOption modifies one write to a map. It is a value rather than a
// function so that passing one costs no allocation on the write path.
type WriteOption struct {
	ttl     time.Duration
	keepTTL bool
}

type writeConfig = WriteOption

// WithTTL gives the entry a wall-clock deadline ttl from now, after which
// every process reads the key as absent. A ttl <= 0 means no deadline.
func WithTTL(ttl time.Duration) WriteOption { return WriteOption{ttl: ttl} }

// WithKeepTTL keeps the deadline the key already has when it is
// overwritten, as Redis SET's KEEPTTL does; without it a write replaces the
// deadline. A new key gets no deadline from it.
func WithKeepTTL() WriteOption { return WriteOption{keepTTL: true} }

func writeOpts(opts []WriteOption) writeConfig {
	var c writeConfig
	for _, o := range opts {
		if o.ttl != 0 {
			c.ttl = o.ttl
		}
		c.keepTTL = c.keepTTL || o.keepTTL
	}
	return c
}
