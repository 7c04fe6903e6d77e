package shmarena

import (
	"encoding/hex"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"golang.org/x/sys/unix"
)

// This file: what an arena holds and who is attached, for people and
// monitoring (Info, Stats, Regions, Processes, LookupMap, LookupRing).

// Processes returns the pids of the processes with a handle attached to the
// arena, this one included, each once. Liveness is the kernel's word (see
// "Processes and crashes" in the package documentation); the pid is as the
// attaching process saw itself, so a process in another PID namespace
// shows its pid there, and two such processes may show the same one.
// ErrClosed after Close.
func (a *Arena) Processes() ([]int, error) {
	if a.closed.Load() {
		return nil, ErrClosed
	}
	var pids []int
	for _, e := range a.own.List() {
		if e.Alive && !slices.Contains(pids, e.Pid) {
			pids = append(pids, e.Pid)
		}
	}
	runtime.KeepAlive(a)
	return pids, nil
}

// Size returns the arena's total size in bytes, or 0 after Close.
func (a *Arena) Size() int64 {
	if a.closed.Load() {
		return 0
	}
	return int64(len(a.mem))
}

// Sync flushes the mapping to the file's storage (msync MS_SYNC). Other
// processes see writes at once without it; it only matters for
// durability of a file on disk across a machine crash.
func (a *Arena) Sync() error {
	if a.closed.Load() {
		return ErrClosed
	}
	defer runtime.KeepAlive(a)
	if err := unix.Msync(a.mem, unix.MS_SYNC); err != nil {
		return fmt.Errorf("shmarena: sync %s: %w", a.path, err)
	}
	return nil
}

// Regions lists the arena's regions in directory order, or nil after
// Close.
func (a *Arena) Regions() []RegionInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil
	}
	var out []RegionInfo
	for _, e := range a.readyEntries() {
		out = append(out, regionInfo(e))
	}
	return out
}

// regionInfo describes the ready directory entry e.
func regionInfo(e layout.Entry) RegionInfo {
	ri := RegionInfo{Name: e.Name, Kind: RegionKind(e.Kind), Offset: e.Offset, Length: e.Length,
		Slots: int(e.Params[0]), SlotSize: int(e.Params[1])}
	switch ri.Kind {
	case KindMap:
		ri.Stripes, ri.Typed, ri.Evicting = int(e.Params[2]), e.Params[3] != 0, e.Params[4] != 0
	case KindRing:
		ri.MaxInFlight = int(e.Params[3])
	}
	return ri
}

// readyEntries returns the directory's ready entries, in order.
func (a *Arena) readyEntries() []layout.Entry {
	var out []layout.Entry
	for i := 0; i < layout.DirEntries; i++ {
		if mem.Load32(a.mem, layout.OffDir+i*layout.EntrySize) == layout.EntryReady {
			out = append(out, layout.ReadEntry(a.mem, i))
		}
	}
	return out
}

// ArenaInfo describes an arena file: its header, its regions and the
// handles attached to it.
type ArenaInfo struct {
	Path          string // "" for an arena reached through a descriptor
	LayoutVersion uint32
	Size          int64     // bytes
	Used          int64     // bytes carved: the header and every region
	Created       time.Time // zero when the file does not record it
	BootID        string    // the boot that last owned the file, hex
	ReadOnly      bool      // this handle was opened with ReadOnly
	Regions       []RegionInfo
	// Processes lists every process-table entry ever taken, live or not;
	// a read-only handle takes none and is not listed.
	Processes []ProcessInfo
}

// ProcessInfo is one entry of an arena's process table: a handle that
// attached, and whether it still is (the kernel's word, see the package
// documentation). Pid is as the attaching process saw itself.
type ProcessInfo struct {
	Pid   int
	Alive bool
	Since time.Time // when it attached
	Self  bool      // this handle
}

// Info returns the arena's header, regions and process table. It reads
// only, and is safe for concurrent use; ErrClosed after Close.
func (a *Arena) Info() (ArenaInfo, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return ArenaInfo{}, ErrClosed
	}
	h := layout.ReadHeader(a.mem)
	in := ArenaInfo{Path: a.path, LayoutVersion: h.Version, Size: int64(len(a.mem)), Used: h.NextFree,
		BootID: hex.EncodeToString(h.BootID[:]), ReadOnly: a.readOnly}
	if c := mem.Load64(a.mem, layout.OffCreated); c != 0 {
		in.Created = time.Unix(0, int64(c))
	}
	for _, e := range a.readyEntries() {
		in.Regions = append(in.Regions, regionInfo(e))
	}
	for _, p := range a.own.List() {
		in.Processes = append(in.Processes, ProcessInfo{Pid: p.Pid, Alive: p.Alive, Since: time.Unix(0, p.Since), Self: p.Self})
	}
	return in, nil
}

// ArenaStats are every region's shared counters at one moment (each
// region's read as its own Stats method reads it), in one value that
// marshals to JSON: publish it with expvar in one line (see the Example).
type ArenaStats struct {
	Size      int64 // bytes
	Used      int64 // bytes carved: the header and every region
	Processes int   // live handles attached (read-only ones not counted)
	Regions   []RegionStats
}

// RegionStats are one region's counters: Map for a map, Ring and Groups
// for a ring.
type RegionStats struct {
	Name  string
	Kind  RegionKind
	Bytes int64
	Map   *MapStats  `json:",omitempty"`
	Ring  *RingStats `json:",omitempty"`
	// Groups are the ring's consumer groups, as Ring.Groups returns them.
	Groups []GroupStats `json:",omitempty"`
}

// Stats returns every region's statistics (see ArenaStats). It reads
// only: it works on a read-only handle and joins no group. Errors:
// ErrClosed after Close; ErrCorrupt for a ring whose directory entry is
// damaged (the other regions are still returned). Safe for concurrent use.
func (a *Arena) Stats() (ArenaStats, error) {
	if a.closed.Load() {
		return ArenaStats{}, ErrClosed
	}
	defer runtime.KeepAlive(a)
	st := ArenaStats{Size: int64(len(a.mem)), Used: layout.ReadHeader(a.mem).NextFree}
	for _, p := range a.own.List() {
		if p.Alive {
			st.Processes++
		}
	}
	var err error
	for _, e := range a.readyEntries() {
		rs := RegionStats{Name: e.Name, Kind: RegionKind(e.Kind), Bytes: e.Length}
		switch rs.Kind {
		case KindMap:
			ms := newMap(a, e).Stats()
			rs.Map = &ms
		case KindRing:
			if cerr := checkRingEntry(a.mem, e); cerr != nil {
				err = fmt.Errorf("shmarena: ring %s: %w: %v", quote(e.Name), ErrCorrupt, cerr)
				continue
			}
			r := newRing(a, a.mem, e.Name, e)
			rst := r.Stats()
			rs.Ring, rs.Groups = &rst, r.Groups()
		}
		st.Regions = append(st.Regions, rs)
	}
	if a.closed.Load() {
		return ArenaStats{}, ErrClosed
	}
	return st, err
}

// LookupMap returns the map named name whatever its shape, creating
// nothing: for tools that inspect an arena they did not make. A typed map
// is returned as its byte view (values are msgpack encodings). Errors:
// ErrNoRegion when there is no such region or it is a ring; ErrClosed.
func (a *Arena) LookupMap(name string) (*Map, error) {
	e, err := a.lookup(name, KindMap)
	if err != nil {
		return nil, err
	}
	return newMap(a, e), nil
}

// LookupRing returns the ring named name whatever its shape, creating
// nothing. Errors: ErrNoRegion when there is no such region or it is a
// map; ErrCorrupt when its directory entry is damaged; ErrClosed.
func (a *Arena) LookupRing(name string) (*Ring, error) {
	e, err := a.lookup(name, KindRing)
	if err != nil {
		return nil, err
	}
	if err := checkRingEntry(a.mem, e); err != nil {
		return nil, fmt.Errorf("shmarena: ring %s: %w: %v", quote(name), ErrCorrupt, err)
	}
	return newRing(a, a.mem, name, e), nil
}

func (a *Arena) lookup(name string, kind RegionKind) (layout.Entry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return layout.Entry{}, ErrClosed
	}
	var names []string
	for _, e := range a.readyEntries() {
		if e.Name == name && RegionKind(e.Kind) == kind {
			return e, nil
		}
		if RegionKind(e.Kind) == kind {
			names = append(names, e.Name)
		}
	}
	return layout.Entry{}, fmt.Errorf("shmarena: %v %s: %w (the arena's %vs: %s)", kind, quote(name), ErrNoRegion, kind, quoteAll(names))
}

// quoteAll quotes names for an error, "none" for none.
func quoteAll(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quote(n)
	}
	return fmt.Sprint(q)
}
