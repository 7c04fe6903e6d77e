package shmarena

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mapping"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	"golang.org/x/sys/unix"
)

// MinSize is the smallest arena in bytes: the header alone.
const MinSize = layout.HeaderSize

// MaxRegions is how many named regions one arena holds.
const MaxRegions = layout.DirEntries

// An Arena is one memory-mapped file shared by processes, holding named
// regions (maps and rings). Its methods are safe for concurrent use by
// goroutines; any number of processes may open the same arena at once.
type Arena struct {
	f      *os.File
	path   string
	mem    []byte
	closed atomic.Bool
	// own is this handle's entry in the file's process table: its identity
	// in lock words and the proof, to other processes, that it is alive.
	own  *owner.Handle
	self uint64 // own.Token()
	seed uint64 // the maps' hash seed, from the header

	// readOnly: opened with ReadOnly. The file is mapped PROT_READ, own
	// holds no process-table entry (token 0), enter always fails, and no
	// write, repair or lazy collection is attempted.
	readOnly bool

	mu sync.Mutex // serialises region carving and Close in this process

	retired *mapping.Retired // the mapping once Close replaced it (under mu)

	usesMu sync.Mutex
	usesBy map[int]*uses // each map's use counts, by use-table offset (see usesOf)

	faulted atomic.Pointer[error] // the first fault met on the mapping (fault.go)
	id      fileID                // which file was opened (lifecycle.go)

	// inflight counts operations of this process that may hold a lock in
	// the file (writes, publishes, repairs). Close retires the mapping
	// only once every count is zero; reads, which take no lock, are not
	// counted. The counts are sharded (by stripe for maps) on their own
	// cache lines, so writers of different stripes do not bounce one word.
	inflight [inflightShards]struct {
		n atomic.Int64
		_ [56]byte
	}
}

// RegionKind says what a region holds.
type RegionKind uint32

// The region kinds.
const (
	KindMap  RegionKind = 1
	KindRing RegionKind = 2
)

// MarshalText returns the kind's String, so it reads as "map", "ring" or
// "schema" in JSON.
func (k RegionKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads what MarshalText writes; anything else is
// ErrInvalid.
func (k *RegionKind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "map":
		*k = KindMap
	case "ring":
		*k = KindRing
	case "schema":
		*k = KindSchema
	default:
		return fmt.Errorf("shmarena: region kind %s: %w: want \"map\" or \"ring\"", quote(string(b)), ErrInvalid)
	}
	return nil
}

// String returns "map", "ring" or "schema".
func (k RegionKind) String() string {
	switch k {
	case KindMap:
		return "map"
	case KindRing:
		return "ring"
	case KindSchema:
		return "schema"
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// RegionInfo describes one region of an arena. Offset and Length are in
// bytes from the start of the file. The rest is the shape the region was
// made with (the options of Arena.Map or Arena.Ring).
type RegionInfo struct {
	Name   string
	Kind   RegionKind
	Offset int64
	Length int64
	// Slots and SlotSize (bytes, slot header included) of a map or ring.
	Slots, SlotSize int
	// Stripes is a map's number of write locks; Typed says it was made by
	// OpenTypedMap (its values are msgpack encodings); Evicting that it
	// was made WithEviction (a cache).
	Stripes  int  `json:",omitempty"`
	Typed    bool `json:",omitempty"`
	Evicting bool `json:",omitempty"`
	// MaxInFlight is a ring's pending-table capacity per group.
	MaxInFlight int `json:",omitempty"`
}

// kindOps are what each region kind provides to the arena.
type kindOps struct {
	// validate checks a ready region's bytes against its directory entry.
	validate func(b []byte, e layout.Entry) error
	// reset clears every lock and half-done write in a region whose
	// owners all died with a previous boot.
	reset func(b []byte, e layout.Entry)
}

var kinds = map[RegionKind]kindOps{}

// Open creates the arena file at path or attaches to the one there.
//
// With WithSize(n), a missing file is created with n bytes reserved up
// front (a filesystem without room fails here, never with SIGBUS later) and
// permission WithMode (default 0600, exact whatever the umask). An existing
// file is attached: it must be an arena of this layout version, byte order
// and word size (else ErrNotArena or ErrIncompatible), of size n when n is
// not 0 (else ErrSizeMismatch), and pass full validation (else ErrCorrupt).
// Without WithSize a missing file is an error wrapping os.ErrNotExist.
// Open never follows a symbolic link at path (ErrSymlink) and never
// truncates or extends an existing file. A zero-filled file left by a
// creator that died before finishing is initialised.
func Open(path string, opts ...OpenOption) (*Arena, error) {
	cfg := openConfig{mode: 0o600}
	for _, o := range opts {
		o(&cfg)
	}
	if path == "" {
		return nil, fmt.Errorf("shmarena: open: %w: the path is empty; give the arena file's path (OpenMemfd makes an arena without one)", ErrInvalid)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("shmarena: open %s: %w", path, err)
	}
	if cfg.readOnly {
		return openReadOnly(path, cfg)
	}
	for attempt := 0; ; attempt++ {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			a, err := attach(os.NewFile(uintptr(fd), path), path, cfg)
			if errors.Is(err, errUnlinked) && attempt < 3 {
				continue // a failed creator removed it: start again
			}
			return a, err
		case errors.Is(err, unix.ELOOP):
			return nil, fmt.Errorf("shmarena: open %s: %w", path, ErrSymlink)
		case !errors.Is(err, unix.ENOENT):
			return nil, fmt.Errorf("shmarena: open %s: %w", path, openError(path, err))
		case cfg.size == 0:
			return nil, fmt.Errorf("shmarena: open %s: no arena there and no WithSize to create one: %w", path, os.ErrNotExist)
		}
		a, err := create(path, cfg)
		if errors.Is(err, unix.EEXIST) {
			if attempt < 3 {
				continue // another process created it first: attach
			}
			err = fmt.Errorf("shmarena: create %s: %w", path, err) // it kept coming and going
		}
		return a, err
	}
}

func (c *openConfig) check() error {
	if c.size != 0 && c.size < MinSize {
		return fmt.Errorf("%w: size %d bytes is below the minimum %d", ErrInvalid, c.size, MinSize)
	}
	if c.size > int64(^uint(0)>>1) {
		return fmt.Errorf("%w: size %d bytes does not fit this platform's address space", ErrInvalid, c.size)
	}
	if c.mode&^0o777 != 0 {
		return fmt.Errorf("%w: mode %v has bits beyond the permission bits", ErrInvalid, c.mode)
	}
	return nil
}

func create(path string, cfg openConfig) (*Arena, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(cfg.mode))
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, err
		}
		return nil, fmt.Errorf("shmarena: create %s: %w", path, openError(path, err))
	}
	f := os.NewFile(uintptr(fd), path)
	// The creator's mode, set at once: whoever builds the file keeps it.
	if err := unix.Fchmod(fd, uint32(cfg.mode)); err != nil {
		_ = os.Remove(path)
		f.Close()
		return nil, fmt.Errorf("shmarena: create %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("shmarena: create %s: lock: %w", path, err)
	}
	// Between our O_EXCL create and our flock another process may find the
	// empty file, take it for an interrupted create and build it. So the
	// creator goes through attach too: under the flock, an empty file is
	// built and a built one validated. A failed build removes the file
	// while still holding the flock, and an opener that then gets the
	// flock sees the file unlinked and starts again.
	a, err := attachUnderLock(f, path, cfg)
	if err != nil {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Size == 0 {
			_ = os.Remove(path) // nothing was built: leave nothing behind
		}
	}
	_ = unix.Flock(fd, unix.LOCK_UN)
	if err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

// errUnlinked reports a file removed between its open and its flock.
var errUnlinked = errors.New("shmarena: arena file was removed while opening")

// initFile reserves the blocks, writes the header and publishes the magic
// last. The caller holds the flock (or is the only one with the file).
func initFile(f *os.File, path string, cfg openConfig) (*Arena, error) {
	fd := int(f.Fd())
	b, err := reserveAndMap(fd, path, cfg.size)
	if err != nil {
		return nil, err
	}
	boot, _ := owner.BootID()
	layout.WriteHeader(b, cfg.size, boot, newSeed())
	mem.Store64(b, layout.OffCreated, uint64(time.Now().UnixNano()))
	mem.Store64(b, layout.OffMagic, layout.Magic)
	a, err := newArena(f, path, b, false)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// seedForTest, when set by a test, is the hash seed of every arena created
// from then on.
var seedForTest *uint64

// newSeed returns a random hash seed for a new arena.
func newSeed() uint64 {
	if seedForTest != nil {
		return *seedForTest
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return binary.LittleEndian.Uint64(b[:])
}

// newArena registers a handle for the mapped arena b of file f in the
// file's process table, on an open file description of its own (so that
// a descriptor this process passes on, or inherited, never keeps this
// handle's identity alive after it is gone). It unmaps b on failure.
func newArena(f *os.File, path string, b []byte, readOnly bool) (*Arena, error) {
	if readOnly {
		return newReadOnlyArena(f, path, b)
	}
	fd, err := owner.Reopen(int(f.Fd()), path)
	if err != nil {
		_ = mapping.Unmap(b)
		return nil, fmt.Errorf("shmarena: open %s: %w", describePath(path), reopenError(err))
	}
	own, err := owner.Register(b, fd, os.Getpid(), time.Now().UnixNano())
	if err != nil {
		unix.Close(fd)
		_ = mapping.Unmap(b)
		if errors.Is(err, owner.ErrTableFull) {
			err = fmt.Errorf("%w: %w", ErrTooManyHandles, err)
		}
		return nil, fmt.Errorf("shmarena: open %s: %w", describePath(path), err)
	}
	a := &Arena{f: f, path: path, mem: b, own: own, self: own.Token(), seed: layout.ReadHeader(b).Seed}
	a.identify()
	return a, nil
}

func reserveAndMap(fd int, path string, size int64) ([]byte, error) {
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("shmarena: create %s: reserving %d bytes on %s: %w", path, size, fsName(fd), err)
		}
		// No fallocate on this filesystem: size it, unreserved.
		if err := unix.Ftruncate(fd, size); err != nil {
			return nil, fmt.Errorf("shmarena: create %s: %w", path, err)
		}
	}
	b, err := mapping.Map(fd, int(size))
	if err != nil {
		return nil, fmt.Errorf("shmarena: map %s shared read-write: %w", describePath(path), err)
	}
	return b, nil
}

// fsName names the filesystem holding fd, for error messages.
func fsName(fd int) string {
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) != nil {
		return "its filesystem"
	}
	switch int64(st.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("filesystem type %#x", int64(st.Type))
}

func attach(f *os.File, path string, cfg openConfig) (*Arena, error) {
	a, err := attachLocked(f, path, cfg)
	if err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

func attachLocked(f *os.File, path string, cfg openConfig) (*Arena, error) {
	fd := int(f.Fd())
	how := unix.LOCK_EX
	if cfg.readOnly {
		how = unix.LOCK_SH // waits out a creator; never blocks another reader
	}
	if err := unix.Flock(fd, how); err != nil {
		return nil, fmt.Errorf("shmarena: open %s: lock: %w", path, err)
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	return attachUnderLock(f, path, cfg)
}

// attachUnderLock validates the file, or builds it if it is an
// interrupted create, holding the flock.
func attachUnderLock(f *os.File, path string, cfg openConfig) (*Arena, error) {
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shmarena: open %s: %w", describePath(path), err)
	}
	if st.Nlink == 0 && path != "" {
		return nil, errUnlinked
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("shmarena: open %s: %w: not a regular file", describePath(path), ErrNotArena)
	}
	if st.Size == 0 || st.Size < MinSize {
		if st.Size == 0 && cfg.size != 0 && !cfg.readOnly && st.Uid == uint32(os.Geteuid()) {
			// A creator died before reserving: finish its job.
			return initFile(f, path, cfg)
		}
		return nil, fmt.Errorf("shmarena: open %s: %w: file is %d bytes, smaller than an arena header (%d); remove it", describePath(path), ErrNotArena, st.Size, MinSize)
	}
	if st.Size > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("shmarena: open %s: %w: %d bytes do not fit this platform's address space", describePath(path), ErrIncompatible, st.Size)
	}
	mapFile, how := mapping.Map, "read-write"
	if cfg.readOnly {
		mapFile, how = mapping.MapReadOnly, "read-only"
	}
	b, err := mapFile(fd, int(st.Size))
	if err != nil {
		return nil, fmt.Errorf("shmarena: map %s shared %s: %w", describePath(path), how, err)
	}
	if mem.Load64(b, layout.OffMagic) == 0 && cfg.size == st.Size && !cfg.readOnly &&
		st.Uid == uint32(os.Geteuid()) && allZero(b) {
		_ = mapping.Unmap(b)
		return initFile(f, path, cfg)
	}
	if err := validate(b, st.Size, cfg.size); err != nil {
		err = withAttached(err, func() int { return liveHandles(b, fd) }, false)
		_ = mapping.Unmap(b)
		return nil, fmt.Errorf("shmarena: open %s: %w", describePath(path), err)
	}
	a, err := newArena(f, path, b, cfg.readOnly)
	if err != nil {
		return nil, err
	}
	if boot, ok := owner.BootID(); ok && !a.readOnly && layout.ReadHeader(b).BootID != boot && !a.own.AnyAlive() {
		a.resetAfterReboot(boot)
	}
	return a, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// validate checks the header and directory of a mapped file.
func validate(b []byte, fileSize, want int64) error {
	h := layout.ReadHeader(b)
	switch {
	case h.Magic == 0:
		return fmt.Errorf("%w: no magic (a half-made file, or not an arena); remove it", ErrNotArena)
	case h.Magic != layout.Magic:
		return fmt.Errorf("%w: magic %#x", ErrNotArena, h.Magic)
	case h.Probe != layout.OrderProbe:
		return fmt.Errorf("%w: byte-order probe %#x, this machine writes %#x", ErrIncompatible, h.Probe, layout.OrderProbe)
	case h.Version != layout.Version:
		return fmt.Errorf("%w: layout version %d, this build reads %d: open it with the shmarena release that made it, or remove the file to start afresh", ErrIncompatible, h.Version, layout.Version)
	case h.WordSize != layout.WordSize:
		return fmt.Errorf("%w: word size %d", ErrIncompatible, h.WordSize)
	case h.HeaderSize != layout.HeaderSize:
		return fmt.Errorf("%w: header size %d", ErrIncompatible, h.HeaderSize)
	case h.TotalSize != fileSize:
		return fmt.Errorf("%w: header says %d bytes, file is %d (truncated or extended by other means): stop its users, remove the file and create it again", ErrSizeMismatch, h.TotalSize, fileSize)
	case want != 0 && want != h.TotalSize:
		return fmt.Errorf("%w: asked for %d bytes, the file holds an arena of %d; an arena's size is fixed when it is created: move to a new file to change it (docs/lifecycle.md), or pass WithSize(0) to attach at any size", ErrSizeMismatch, want, h.TotalSize)
	case h.DirCap != layout.DirEntries || h.RegionCount > h.DirCap:
		return fmt.Errorf("%w: directory of %d entries with %d in use", ErrCorrupt, h.DirCap, h.RegionCount)
	case h.NextFree < layout.HeaderSize || h.NextFree > h.TotalSize || h.NextFree%layout.RegionAlign != 0:
		return fmt.Errorf("%w: allocation mark %d outside [%d, %d]", ErrCorrupt, h.NextFree, layout.HeaderSize, h.TotalSize)
	}
	var ready []layout.Entry
	carving := uint32(0)
	for i := 0; i < layout.DirEntries; i++ {
		e := layout.ReadEntry(b, i)
		if e.State != layout.EntryReady {
			if e.State > layout.EntryReady {
				return fmt.Errorf("%w: directory entry %d has state %d", ErrCorrupt, i, e.State)
			}
			if e.State == layout.EntryCarving {
				carving++
			}
			continue
		}
		if err := layout.ValidateEntry(e, h.NextFree); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		ops, ok := kinds[RegionKind(e.Kind)]
		if !ok {
			return fmt.Errorf("%w: region %q has unknown kind %d", ErrCorrupt, e.Name, e.Kind)
		}
		for _, r := range ready {
			if r.Name == e.Name {
				return fmt.Errorf("%w: region %q appears twice", ErrCorrupt, e.Name)
			}
			if e.Offset < r.Offset+r.Length && r.Offset < e.Offset+e.Length {
				return fmt.Errorf("%w: regions %q and %q overlap", ErrCorrupt, r.Name, e.Name)
			}
		}
		if err := ops.validate(b, e); err != nil {
			return fmt.Errorf("%w: region %q: %v", ErrCorrupt, e.Name, err)
		}
		ready = append(ready, e)
	}
	// A carver that died after counting its region, before publishing
	// it, left the count one high and its entry carving; the next carve
	// drops the entry and corrects the count.
	if n := uint32(len(ready)); h.RegionCount < n || h.RegionCount > n+carving {
		return fmt.Errorf("%w: header counts %d regions, directory holds %d", ErrCorrupt, h.RegionCount, len(ready))
	}
	return nil
}

// resetAfterReboot clears what handles of a previous boot left: every
// lock and every half-done write. It is only a shortcut (a dead owner's
// lock is recovered anyway when someone needs it), taken under the flock
// by the first handle of a new boot, and only when the kernel proves that
// no other handle is attached: a boot id that looks different (a file
// copied from another machine) never clears a live process's lock.
func (a *Arena) resetAfterReboot(boot [16]byte) {
	for i := 0; i < layout.DirEntries; i++ {
		e := layout.ReadEntry(a.mem, i)
		if e.State == layout.EntryReady {
			kinds[RegionKind(e.Kind)].reset(a.mem, e)
		}
	}
	layout.SetBootID(a.mem, boot)
}

// regionSpec asks for a region.
type regionSpec struct {
	name   string
	kind   RegionKind
	params [layout.Params]uint64
	names  [layout.Params]string // parameter names, for ErrShape messages
	length int64
	init   func(b []byte, off int64) // writes the region's header
}

// region finds the region named spec.name or carves it. It runs under the
// file lock, so a process that dies half-way leaves nothing visible: an
// entry is published (state ready) only after its region is written.
func (a *Arena) region(spec regionSpec) (layout.Entry, error) {
	if err := layout.ValidateName(spec.name); err != nil {
		return layout.Entry{}, fmt.Errorf("shmarena: region %s: %w: %v", quote(spec.name), ErrInvalid, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return layout.Entry{}, ErrClosed
	}
	if a.readOnly {
		return a.lookupRegion(spec)
	}
	// The handle's own description, never a.f's: a.f's may be shared with
	// a child (File, ExtraFiles), and a flock belongs to the description,
	// so a child holding it would keep this process's lock after it died.
	fd := a.own.Fd()
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return layout.Entry{}, fmt.Errorf("shmarena: region %s: lock: %w", quote(spec.name), err)
	}
	defer unix.Flock(fd, unix.LOCK_UN)

	h := layout.ReadHeader(a.mem)
	size := int64(len(a.mem))
	if h.NextFree < layout.HeaderSize || h.NextFree > size || h.NextFree%layout.RegionAlign != 0 {
		return layout.Entry{}, fmt.Errorf("shmarena: region %s: %w: allocation mark %d outside [%d, %d]",
			quote(spec.name), ErrCorrupt, h.NextFree, layout.HeaderSize, size)
	}
	free, ready := -1, uint32(0)
	for i := 0; i < layout.DirEntries; i++ {
		e := layout.ReadEntry(a.mem, i)
		switch e.State {
		case layout.EntryReady:
			if e.Name == spec.name {
				return e, withAttached(spec.sameShape(e, h.NextFree, size), a.attached, true)
			}
			ready++
		case layout.EntryCarving:
			// A carver died half-way (we hold the flock). If it had not
			// moved the allocation mark, its bytes lie past it: zero them
			// (bytes never carved are still the zeros fallocate left), then
			// drop its entry. Zeroing first means dying here leaves the
			// entry for the next carver to clean up again.
			if e.Offset == h.NextFree && e.Length > 0 {
				mem.Zero(a.mem, int(h.NextFree), int(min(e.Length, size-h.NextFree)&^7))
			}
			layout.ClearEntry(a.mem, i)
			fallthrough
		default:
			if free < 0 {
				free = i
			}
		}
	}
	if free < 0 {
		return layout.Entry{}, fmt.Errorf("shmarena: region %s: %w: all %d directory entries are in use", quote(spec.name), ErrArenaFull, layout.DirEntries)
	}
	length := layout.Align(spec.length)
	if avail := size - h.NextFree; length > avail {
		return layout.Entry{}, fmt.Errorf("shmarena: region %s: %w: needs %d bytes, %d free", quote(spec.name), ErrArenaFull, length, avail)
	}
	e := layout.Entry{Index: free, State: layout.EntryReady, Kind: uint32(spec.kind), Name: spec.name,
		Offset: h.NextFree, Length: length, Params: spec.params}
	layout.WriteEntry(a.mem, e)
	layout.SetState(a.mem, free, layout.EntryCarving)
	spec.init(a.mem, e.Offset)
	crashPoint("carve")
	layout.SetNextFree(a.mem, e.Offset+length)
	// The count is the ready entries seen, not the header's count plus
	// one: a carver that died after counting left the count one high.
	layout.SetRegionCount(a.mem, ready+1)
	crashPoint("carved")
	layout.SetState(a.mem, free, layout.EntryReady)
	return e, nil
}

func (s regionSpec) sameShape(e layout.Entry, nextFree, size int64) error {
	if RegionKind(e.Kind) != s.kind {
		return fmt.Errorf("shmarena: region %s: %w: it is a %v, asked for a %v", quote(s.name), ErrShape, RegionKind(e.Kind), s.kind)
	}
	for k, n := range s.names {
		if n != "" && e.Params[k] != s.params[k] {
			return fmt.Errorf("shmarena: region %s: %w: %s is %d, asked for %d", quote(s.name), ErrShape, n, e.Params[k], s.params[k])
		}
	}
	if err := layout.ValidateEntry(e, nextFree); err != nil {
		return fmt.Errorf("shmarena: %w: %v", ErrCorrupt, err)
	}
	if e.Length < s.length || e.Length > size-e.Offset {
		return fmt.Errorf("shmarena: region %s: %w: %d bytes at %d, its shape needs %d in a %d-byte file", quote(s.name), ErrCorrupt, e.Length, e.Offset, s.length, size)
	}
	return nil
}
