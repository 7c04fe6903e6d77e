// Package layout fixes where things live in an arena file: the header, the
// process table and the region directory. Every multi-byte field is native
// little-endian and every atomically accessed word is 8-aligned.
//
//	offset  size  field
//	0       8     magic "SHMARENA", written last on create
//	8       4     layout version
//	12      4     byte-order probe 0x01020304
//	16      4     word size (8)
//	20      4     header size
//	24      8     total file size in bytes
//	32      16    boot id of the boot that last owned the file
//	48      4     regions in use
//	52      4     directory capacity
//	56      8     next free offset (bump allocator for regions)
//	64      8     hash seed, chosen at random when the file is created
//	72      8     when the file was created, Unix nanoseconds (0: unknown, a
//	              file made before this field was written)
//	2048    8192  directory: 64 entries of 128 bytes
//	10240   6144  process table: 256 entries of 24 bytes (see internal/owner)
//	16384         first region
//
// A directory entry:
//
//	0   4   state (0 free, 1 being carved, 2 ready)
//	4   4   kind
//	8   4   name length
//	16  8   region offset
//	24  8   region length in bytes
//	32  48  six shape parameters (u64 each, meaning per kind)
//	80  48  name bytes
package layout

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/shmarena/shmarena/internal/mem"
)

const (
	Magic      uint64 = 0x414e4552414d4853 // "SHMARENA" little-endian
	Version    uint32 = 9
	OrderProbe uint32 = 0x01020304
	WordSize   uint32 = 8

	OffMagic       = 0
	OffVersion     = 8
	OffProbe       = 12
	OffWordSize    = 16
	OffHeaderSize  = 20
	OffTotalSize   = 24
	OffBootID      = 32
	OffRegionCount = 48
	OffDirCap      = 52
	OffNextFree    = 56
	OffSeed        = 64
	OffCreated     = 72

	OffProcTable  = 10240
	ProcSlots     = 256
	ProcEntrySize = 24

	OffDir     = 2048
	DirEntries = 64
	EntrySize  = 128

	HeaderSize = 16384

	// RegionAlign aligns every region to a cache line.
	RegionAlign = 64

	MaxName = 48
	Params  = 6

	EntryFree    = 0
	EntryCarving = 1
	EntryReady   = 2

	eState  = 0
	eKind   = 4
	eName   = 8
	eOff    = 16
	eLen    = 24
	eParams = 32
	eBytes  = 80
)

// Entry is a decoded directory entry.
type Entry struct {
	Index  int
	State  uint32
	Kind   uint32
	Name   string
	Offset int64
	Length int64
	Params [Params]uint64
}

func entryOff(i int) int { return OffDir + i*EntrySize }

// ProcSlotOff returns the offset of process-table entry i.
func ProcSlotOff(i int) int { return OffProcTable + ProcEntrySize*i }

// ReadEntry decodes entry i without validating it.
func ReadEntry(b []byte, i int) Entry {
	o := entryOff(i)
	e := Entry{
		Index:  i,
		State:  binary.LittleEndian.Uint32(b[o+eState:]),
		Kind:   binary.LittleEndian.Uint32(b[o+eKind:]),
		Offset: int64(binary.LittleEndian.Uint64(b[o+eOff:])),
		Length: int64(binary.LittleEndian.Uint64(b[o+eLen:])),
	}
	n := int(binary.LittleEndian.Uint32(b[o+eName:]))
	if n > MaxName {
		n = MaxName + 1 // invalid; Validate reports it
		e.Name = string(b[o+eBytes : o+eBytes+MaxName])
	} else {
		e.Name = string(b[o+eBytes : o+eBytes+n])
	}
	for k := range e.Params {
		e.Params[k] = binary.LittleEndian.Uint64(b[o+eParams+8*k:])
	}
	if n > MaxName {
		e.Name += "\x00" // length marker for Validate
	}
	return e
}

// WriteEntry writes every field of e except the state, which SetState
// publishes separately.
func WriteEntry(b []byte, e Entry) {
	o := entryOff(e.Index)
	binary.LittleEndian.PutUint32(b[o+eKind:], e.Kind)
	binary.LittleEndian.PutUint32(b[o+eName:], uint32(len(e.Name)))
	binary.LittleEndian.PutUint64(b[o+eOff:], uint64(e.Offset))
	binary.LittleEndian.PutUint64(b[o+eLen:], uint64(e.Length))
	for k, p := range e.Params {
		binary.LittleEndian.PutUint64(b[o+eParams+8*k:], p)
	}
	clear(b[o+eBytes : o+eBytes+MaxName])
	copy(b[o+eBytes:], e.Name)
}

// SetState publishes an entry's state with an atomic store.
func SetState(b []byte, i int, state uint32) { mem.Store32(b, entryOff(i)+eState, state) }

// ClearEntry zeroes entry i.
func ClearEntry(b []byte, i int) { clear(b[entryOff(i) : entryOff(i)+EntrySize]) }

// ValidateName checks a region name.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("region name is empty")
	}
	if len(name) > MaxName {
		return fmt.Errorf("region name is %d bytes, at most %d", len(name), MaxName)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("region name is not valid UTF-8")
	}
	return nil
}

// ValidateEntry checks a ready entry against the file: its name, and that
// its region lies inside [HeaderSize, nextFree) and is aligned.
func ValidateEntry(e Entry, nextFree int64) error {
	if err := ValidateName(e.Name); err != nil {
		return fmt.Errorf("directory entry %d: %v", e.Index, err)
	}
	if e.Offset < HeaderSize || e.Offset%RegionAlign != 0 || e.Length <= 0 ||
		e.Length > nextFree-e.Offset {
		return fmt.Errorf("directory entry %d (%q): region [%d, +%d) outside [%d, %d)",
			e.Index, e.Name, e.Offset, e.Length, HeaderSize, nextFree)
	}
	return nil
}

// WriteHeader writes every header field except the magic.
func WriteHeader(b []byte, size int64, boot [16]byte, seed uint64) {
	binary.LittleEndian.PutUint32(b[OffVersion:], Version)
	binary.NativeEndian.PutUint32(b[OffProbe:], OrderProbe)
	binary.LittleEndian.PutUint32(b[OffWordSize:], WordSize)
	binary.LittleEndian.PutUint32(b[OffHeaderSize:], HeaderSize)
	binary.LittleEndian.PutUint64(b[OffTotalSize:], uint64(size))
	copy(b[OffBootID:OffBootID+16], boot[:])
	binary.LittleEndian.PutUint32(b[OffRegionCount:], 0)
	binary.LittleEndian.PutUint32(b[OffDirCap:], DirEntries)
	binary.LittleEndian.PutUint64(b[OffNextFree:], HeaderSize)
	binary.LittleEndian.PutUint64(b[OffSeed:], seed)
}

// Header is the decoded fixed header.
type Header struct {
	Magic       uint64
	Version     uint32
	Probe       uint32
	WordSize    uint32
	HeaderSize  uint32
	TotalSize   int64
	BootID      [16]byte
	RegionCount uint32
	DirCap      uint32
	NextFree    int64
	Seed        uint64
}

// ReadHeader decodes the header; b must hold at least HeaderSize bytes.
func ReadHeader(b []byte) Header {
	h := Header{
		Magic:       mem.Load64(b, OffMagic),
		Version:     binary.LittleEndian.Uint32(b[OffVersion:]),
		Probe:       binary.NativeEndian.Uint32(b[OffProbe:]),
		WordSize:    binary.LittleEndian.Uint32(b[OffWordSize:]),
		HeaderSize:  binary.LittleEndian.Uint32(b[OffHeaderSize:]),
		TotalSize:   int64(binary.LittleEndian.Uint64(b[OffTotalSize:])),
		RegionCount: binary.LittleEndian.Uint32(b[OffRegionCount:]),
		DirCap:      binary.LittleEndian.Uint32(b[OffDirCap:]),
		NextFree:    int64(binary.LittleEndian.Uint64(b[OffNextFree:])),
		Seed:        binary.LittleEndian.Uint64(b[OffSeed:]),
	}
	copy(h.BootID[:], b[OffBootID:OffBootID+16])
	return h
}

// SetNextFree and SetRegionCount update the allocator fields.
func SetNextFree(b []byte, v int64) { binary.LittleEndian.PutUint64(b[OffNextFree:], uint64(v)) }

// SetRegionCount stores the number of ready regions.
func SetRegionCount(b []byte, n uint32) { binary.LittleEndian.PutUint32(b[OffRegionCount:], n) }

// SetBootID records the owning boot.
func SetBootID(b []byte, id [16]byte) { copy(b[OffBootID:OffBootID+16], id[:]) }

// Align rounds n up to a multiple of RegionAlign.
func Align(n int64) int64 { return (n + RegionAlign - 1) &^ (RegionAlign - 1) }

// The header's parts must not overlap: a negative array length here is a
// compile error.
var (
	_ [OffProcTable - (OffDir + DirEntries*EntrySize)]struct{}
	_ [HeaderSize - (OffProcTable + ProcSlots*ProcEntrySize)]struct{}
)
