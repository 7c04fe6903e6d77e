package shmarena

import (
	"fmt"
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
	evict                    bool
	inFlight                 int64
	inFlightSet              bool
	schemaChange             bool  // OpenTypedMap: see WithSchemaChange
	bytes                    int64 // a map's value space (WithBytes); 0 = none
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
// on every slot (see Map.Add). Slots start on a 64-byte cache line, so a
// multiple of 64 keeps every slot's header and first bytes in one line: a
// counters map of 24-byte keys fits 64-byte slots, one line per counter.
func WithSlotSize(bytes int) RegionOption {
	return func(c *regionConfig) { c.slotSize = int64(bytes) }
}

// WithMaxInFlight sets a ring's pending-table capacity, in [0, 65536],
// capped at the ring's slots; default 64. It is a window, as TCP's is: an
// at-least-once group (WithAck) claims new records only while its oldest
// unfinished one (not yet acked or dead-lettered) is less than n records
// back. So a record held unacked holds the group's new claims to the n-1
// records after it until it is acked, or its lease ends and it is
// delivered again; a Claim there returns fewer records (or none), never
// an error. Size n for the records your members work on at once plus the
// spread of their finishing order. Each of the ring's 64 group entries gets a table of
// that many 40-byte entries whether or not it acks, so the option costs
// 64 x n x 40 bytes of the arena (160 KiB at the default; 0 makes rings
// that cannot hold acking groups and cost nothing). It is part of the
// ring's shape: every process must ask for the same value. A map refuses
// it with ErrInvalid.
func WithMaxInFlight(n int) RegionOption {
	return func(c *regionConfig) { c.inFlight, c.inFlightSet = int64(n), true }
}

// WithStripes sets the most write locks a map may have (default 64, at
// most 65536). Each lock owns one segment: a run of the map's slots where
// its keys live and probe, at least 4,096 of them, so the map has
// min(n, slots/4096) locks, and at least one: 64 locks from 262,144
// slots up with the default, 16 for 65,536 slots, one for a map of under
// 8,192. Writers of keys in different segments never wait for each other.
// A key's segment is fixed by its hash, and segments fill unevenly, so a
// plain map refuses a new key (ErrFull) when that key's segment is full or
// has no free slot within 1,024 of the key's home: not below 90% of the
// map's slots in our measurements, often above 92%.
func WithStripes(n int) RegionOption { return func(c *regionConfig) { c.stripes = int64(n) } }

// WithEviction makes a map a cache: when a new key needs room, the map
// evicts another entry instead of refusing with ErrFull. It is part of the
// map's shape: a process asking for the map without it (or with it, for a
// map made without) gets ErrShape naming the field. It works for
// OpenTypedMap too; Ring refuses it with ErrInvalid.
//
// Eviction follows S3-FIFO (Yang et al., SOSP 2023) per segment: a new key
// enters a small FIFO queue of about a tenth of the segment; at its head a
// key read since it entered moves to the main FIFO queue, else it is
// evicted; at the main queue's head a key read since it was last there goes
// around again (each read counts, up to 3), else it is evicted. Lapsed
// entries go first, counted in MapStats.Expired rather than Evicted. A
// segment holds at most 7/8 of its slots live, so probes stay short, and
// its queues cost 8 bytes per slot plus a byte per slot for the read
// counts. A read hit writes that byte only while it is below 3, and it
// lives apart from the slots readers validate.
func WithEviction() RegionOption { return func(c *regionConfig) { c.evict = true } }

// A WriteOption modifies one write to a map. It is a value rather than a
// function so that passing one costs no allocation on the write path.
type WriteOption struct {
	ttl     time.Duration
	ttlSet  bool
	keepTTL bool
}

type writeConfig = WriteOption

// WithTTL gives the entry a wall-clock deadline ttl from now, after which
// every process reads the key as absent. A ttl of zero or less is refused:
// the write returns ErrInvalid and changes nothing, as Redis refuses SET
// with EX 0 (so a TTL computed from a deadline that passed never makes an
// entry permanent). For no deadline pass no WithTTL; see docs/ttl.md for
// every rule.
func WithTTL(ttl time.Duration) WriteOption { return WriteOption{ttl: ttl, ttlSet: true} }

// WithKeepTTL keeps the deadline the key already has when it is
// overwritten, as Redis SET's KEEPTTL does; without it a write replaces the
// deadline. A new key gets no deadline from it. With WithTTL as well the
// write is refused with ErrInvalid, as Redis refuses SET with EX and
// KEEPTTL.
func WithKeepTTL() WriteOption { return WriteOption{keepTTL: true} }

// writeOpts combines a write's options, or returns ErrInvalid naming the
// fix; the last WithTTL wins.
func writeOpts(opts []WriteOption) (writeConfig, error) {
	var c writeConfig
	for _, o := range opts {
		if o.ttlSet {
			if o.ttl <= 0 {
				return c, fmt.Errorf("%w: WithTTL(%v): a TTL must be positive (for no deadline pass no WithTTL; Expire with zero or less deletes a key)", ErrInvalid, o.ttl)
			}
			c.ttl, c.ttlSet = o.ttl, true
		}
		c.keepTTL = c.keepTTL || o.keepTTL
	}
	if c.ttlSet && c.keepTTL {
		return c, fmt.Errorf("%w: WithTTL and WithKeepTTL together: pass one", ErrInvalid)
	}
	return c, nil
}

// writeOpts is writeOpts with the map named in its error.
func (m *Map) writeOpts(opts []WriteOption) (writeConfig, error) {
	if len(opts) == 0 { // the hot writes pass none: inlined, no call
		return writeConfig{}, nil
	}
	return m.writeOptsSlow(opts)
}

func (m *Map) writeOptsSlow(opts []WriteOption) (writeConfig, error) {
	c, err := writeOpts(opts)
	if err != nil {
		err = fmt.Errorf("shmarena: map %s: %w", quote(m.name), err)
	}
	return c, err
}
