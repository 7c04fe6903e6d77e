// Package ringlayout fixes where a ring's fields live inside its region.
// Offsets are relative to the start of the region, which the arena aligns
// to 64 bytes; every 64-bit word is 8-aligned and the futex word 4-aligned.
//
//	offset  size   field
//	0       8      magic "SHMRING1"
//	8       8      slots
//	16      8      slot size in bytes
//	24      8      ring layout version
//	32      8      protected mask: bit i set while group entry i is protected
//	               (acking or back-pressured); written under the group-table lock
//	40      8      floor cache: a lower bound of the oldest sequence a protected
//	               group has not finished, recomputed by a producer that finds
//	               the slot it would overwrite at or past it
//	48      8      pending-table capacity per group (max in flight, entries)
//	64      8      publish lock (robust lock word: owner's token, see internal/owner; 0 = free)
//	80      8      oversize count
//	88      8      abandoned count
//	96      8      publish lock's futex word for parked waiters (see internal/rlock)
//	104     8      hole count: the abandoned count before the hole being
//	               repaired (written before the hole sequence)
//	112     8      hole sequence: the sequence of the hole being, or last,
//	               repaired (0 = none yet). A repair of hole s sets the two
//	               once (if the sequence is not s), then stores abandoned =
//	               hole count + 1, marks the slot and advances next to s+1,
//	               so a recoverer that dies anywhere in it leaves a state
//	               the next one redoes to the same count.
//	128     4      futex word: bit 0 set by a reader about to sleep, bits 1-31
//	               a sequence bumped (and bit 0 cleared) after every commit
//	132     4      sleepers: readers waiting now (informational; a killed
//	               reader leaves it raised, wakes do not depend on it)
//	136     8      full: publishes refused (ErrRingFull) for want of room
//	144     8      waited: PublishWait calls that had to wait for room
//	152     4      room futex word: bit 0 set by a producer about to sleep for
//	               room, bits 1-31 a sequence bumped (and bit 0 cleared) when a
//	               protected group's floor moves
//	160     8      next sequence to publish (starts at 1; 0 never names a record).
//	               Not on the publish lock's line (layout 2 had it at 72):
//	               readers poll it, and a reader's load of the lock's line
//	               between a producer's acquire and release costs the producer
//	               the line twice more. Here it shares a line with the words
//	               readers read anyway (futex, room) and the producer reads
//	               after its commit (futex).
//	192     8      group-table lock (robust lock word)
//	224     8      group-table lock's futex word
//	256     28672  group table: 64 entries of 448 bytes
//	28928          slots (slots x slot size bytes)
//	then           pending tables: 64 tables (one per group entry) of
//	               max-in-flight entries of 40 bytes
//
// A group entry:
//
//	0    8   state (0 free, 1 being created, or dropped while a member held
//	         its lock: neither usable nor free; 2 ready)
//	8    8   position: the next sequence the group will look at
//	16   8   delivered
//	24   8   lapped
//	32   8   skipped (other topics)
//	40   8   abandoned (holes and damaged slots)
//	48   4   name length
//	52   4   topic length (0 = takes every topic)
//	56   64  name bytes
//	120  64  topic bytes
//	184  8   generation: bumped each time the entry is created
//	192  8   flags: bit 0 acking (at-least-once), bit 1 protected
//	200  8   lease in nanoseconds (acking groups)
//	208  4   max deliveries (0 = unlimited)
//	212  4   dead-letter topic length (0 = none)
//	216  64  dead-letter topic bytes
//	280  8   floor: the oldest sequence the acking group has not finished
//	         (every sequence below it is acked, dead-lettered or was not
//	         delivered); floor <= position <= floor + max in flight
//	288  8   redelivered
//	296  8   dead-lettered
//	304  8   claim journal: the position a claim is moving to (0 = none);
//	         written after the four counts below, before the position
//	312  8   journal: delivered count after that claim
//	320  8   group lock (robust lock word), serialising an acking group's
//	         pending-table updates
//	352  8   group lock's futex word
//	360  8   journal: skipped count after that claim
//	368  8   journal: lapped count after that claim
//	376  8   journal: abandoned count after that claim
//	384  8   lease journal: the sequence whose entry a redelivery or a
//	         dead-lettering is changing (0 = none); written last of the four
//	392  8   lease journal: that entry's state word once changed
//	400  8   lease journal: the count after it (redelivered or dead-lettered)
//	408  8   lease journal: which count, as its offset in the entry (288 or 296)
//
// A pending-table entry (acking groups): sequence s lives at entry
// s mod max-in-flight while floor <= s < position.
//
//	0   8   sequence the entry describes (a mismatch is a damaged entry:
//	        the record is made available for redelivery)
//	8   8   holder: token of the member holding the lease (0 = none)
//	16  8   deadline, Unix nanoseconds: the lease's end, or, with no
//	        holder, when the record may be redelivered
//	24  8   state (high 32 bits: 1 pending, 2 done) and deliveries (low 32)
//	32  8   first delivered, Unix nanoseconds
//
// A slot:
//
//	0   8   begin: sequence of the record being or last written
//	8   8   end: equals begin once the record is complete
//	16  8   lengths: topic length (low 32 bits), payload length (high 32);
//	        all ones marks an abandoned record
//	24      topic bytes, then payload bytes
package ringlayout

import "fmt"

const (
	Magic   uint64 = 0x31474e49524d4853 // "SHMRING1" little-endian
	Version uint64 = 3

	OffMagic     = 0
	OffSlots     = 8
	OffSlotSize  = 16
	OffVersion   = 24
	OffProtected = 32
	OffFloor     = 40
	OffInFlight  = 48
	OffLock      = 64
	OffNext      = 160
	OffOversize  = 80
	OffAbandoned = 88
	OffHoleCount = 104
	OffHoleSeq   = 112
	OffFutex     = 128
	OffSleepers  = 132
	OffFull      = 136
	OffWaited    = 144
	OffRoom      = 152
	OffGroupLock = 192
	OffGroups    = 256

	Groups    = 64
	GroupSize = 448

	HeaderSize = OffGroups + Groups*GroupSize // 28928

	GState        = 0
	GPosition     = 8
	GDelivered    = 16
	GLapped       = 24
	GSkipped      = 32
	GAbandoned    = 40
	GNameLen      = 48
	GTopicLen     = 52
	GName         = 56
	GTopic        = 120
	GGen          = 184
	GFlags        = 192
	GLease        = 200
	GMaxDeliv     = 208
	GDeadLen      = 212
	GDead         = 216
	GFloor        = 280
	GRedelivered  = 288
	GDeadLettered = 296
	GJPos         = 304
	GJDelivered   = 312
	GLock         = 320
	GJSkipped     = 360
	GJLapped      = 368
	GJAbandoned   = 376
	GLSeq         = 384
	GLState       = 392
	GLCount       = 400
	GLField       = 408
	MaxGroupName  = 64
	MaxGroupTopic = 64

	GroupFree     = 0
	GroupCreating = 1
	GroupReady    = 2

	FlagAck       = 1
	FlagProtected = 2

	// Pending-table entries.
	PSeq        = 0
	PHolder     = 8
	PDeadline   = 16
	PState      = 24
	PSince      = 32
	PendSize    = 40
	StPending   = 1
	StDone      = 2
	MaxInFlight = 1 << 16

	SBegin = 0
	SEnd   = 8
	SLens  = 16
	SBody  = 24

	// AbandonedLens in a slot's lengths word marks a record whose producer
	// died before finishing it.
	AbandonedLens = ^uint64(0)

	MinSlots    = 2
	MaxSlots    = 1 << 30
	MinSlotSize = 32
	MaxSlotSize = 1 << 20

	// MaxSeq bounds a valid next-sequence word; anything at or above it is
	// corruption (a ring would need centuries of publishing to reach it).
	MaxSeq = uint64(1) << 62
)

func init() {
	for _, o := range []int{OffLock, OffNext, OffOversize, OffAbandoned, OffHoleCount, OffHoleSeq, OffGroupLock, OffGroups, GroupSize, HeaderSize, GPosition, GName, GTopic,
		OffProtected, OffFloor, OffInFlight, OffFull, OffWaited, GGen, GFlags, GLease, GMaxDeliv, GDead, GFloor, GRedelivered, GDeadLettered, GLock, PendSize,
		GJPos, GJDelivered, GJSkipped, GJLapped, GJAbandoned, GLSeq, GLState, GLCount, GLField} {
		if o%8 != 0 {
			panic(fmt.Sprintf("ringlayout: offset %d not 8-aligned", o))
		}
	}
	if OffFutex%4 != 0 || OffRoom%4 != 0 || GLock%64 != 0 || OffSleepers%4 != 0 || HeaderSize%64 != 0 {
		panic("ringlayout: misaligned header")
	}
}

// GroupOff returns the offset of group entry i within the region.
func GroupOff(i int) int { return OffGroups + i*GroupSize }

// Length returns the region length a ring of this shape needs, or an error
// when the shape is out of range. slotSize must be a multiple of 8.
func Length(slots, slotSize int64) (int64, error) {
	switch {
	case slots < MinSlots || slots > MaxSlots:
		return 0, fmt.Errorf("slots %d outside [%d, %d]", slots, MinSlots, MaxSlots)
	case slotSize < MinSlotSize || slotSize > MaxSlotSize:
		return 0, fmt.Errorf("slot size %d bytes outside [%d, %d]", slotSize, MinSlotSize, MaxSlotSize)
	case slotSize%8 != 0:
		return 0, fmt.Errorf("slot size %d bytes is not a multiple of 8", slotSize)
	}
	return HeaderSize + slots*slotSize, nil
}

// LengthWithTables returns Length plus 64 pending tables of inFlight
// entries each, or an error when inFlight is out of [0, MaxInFlight].
func LengthWithTables(slots, slotSize, inFlight int64) (int64, error) {
	n, err := Length(slots, slotSize)
	if err != nil {
		return 0, err
	}
	if inFlight < 0 || inFlight > MaxInFlight {
		return 0, fmt.Errorf("max in flight %d outside [0, %d]", inFlight, MaxInFlight)
	}
	return n + Groups*inFlight*PendSize, nil
}
