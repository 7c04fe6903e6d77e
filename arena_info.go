package shmarena

import (
	"encoding/hex"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	"golang.org/x/sys/unix"
)

// This file: what an arena holds and who is attached, for people and
// monitoring (Info, Stats, Regions, Processes, LookupMap, LookupRing).

// Processes returns the pids of the processes with a handle attached to the
// arena, this one included, each once. Liveness is the kernel's word (see
// "Processes and crashes" in the package documentation). A handle's pid is
// the pid that holds it now, as ProcessInfo.Holders finds it: after a fork
// without exec that may be the child (or both) rather than the process
// that opened it. Where /proc cannot tell (another PID namespace, hidepid,
// no /proc) it is the pid the attaching process saw itself as, so two
// processes in different namespaces may show the same one. ErrClosed after
// Close.
func (a *Arena) Processes() (_ []int, err error) {
	defer catchFault(a, guard(), &err)
	if a.closed.Load() {
		return nil, ErrClosed
	}
	var pids []int
	for _, e := range a.own.List() {
		if !e.Alive {
			continue
		}
		for _, pid := range a.holders(e) {
			if !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
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
func (a *Arena) Sync() (err error) {
	defer catchFault(a, guard(), &err)
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
	defer catchFault(a, guard(), nil)
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

// holders returns the pids that hold live entry e now, or its recorded
// pid when /proc cannot tell.
func (a *Arena) holders(e owner.Info) []int {
	if pids := a.own.Holders(e.Index); len(pids) > 0 {
		return pids
	}
	return []int{e.Pid}
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
	// Removed: the file was removed, or its path names another file now
	// (or none), since this handle opened it. Processes that open the path
	// reach another arena: this one's data is no longer shared with them.
	// See docs/lifecycle.md.
	Removed bool `json:",omitempty"`
	// Truncated: another process shrank the file; the regions past its
	// end are gone (Info then returns only Path, Size and the flags, and
	// an error wrapping ErrTruncated).
	Truncated bool `json:",omitempty"`
}

// ProcessInfo is one entry of an arena's process table: a handle that
// attached, and whether it still is (the kernel's word, see the package
// documentation). Pid is as the attaching process saw itself.
type ProcessInfo struct {
	Pid   int
	Alive bool
	Since time.Time // when it attached
	Self  bool      // this handle
	// Holders are the pids of the processes that hold the handle now, as
	// this process's /proc shows them (read from /proc/<pid>/fdinfo, for a
	// live entry): Pid alone as a rule; after a fork without exec, the
	// child as well, or the child alone once Pid has exited (the handle
	// stays alive while the child lives). Empty when /proc cannot tell
	// (another PID namespace, hidepid, no /proc).
	Holders []int `json:",omitempty"`
}

// Info returns the arena's header, regions and process table, and what
// became of its file (Removed, Truncated). It reads only, and is safe for
// concurrent use. Errors: ErrClosed after Close; ErrTruncated when another
// process shrank the file (see ArenaInfo.Truncated).
func (a *Arena) Info() (_ ArenaInfo, err error) {
	defer catchFault(a, guard(), &err)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return ArenaInfo{}, ErrClosed
	}
	fs := a.fileState()
	if fs.truncated {
		return ArenaInfo{Path: a.path, Size: int64(len(a.mem)), ReadOnly: a.readOnly, Removed: fs.removed || fs.replaced,
			Truncated: true}, fs.err(a)
	}
	h := layout.ReadHeader(a.mem)
	in := ArenaInfo{Path: a.path, LayoutVersion: h.Version, Size: int64(len(a.mem)), Used: h.NextFree,
		BootID: hex.EncodeToString(h.BootID[:]), ReadOnly: a.readOnly, Removed: fs.removed || fs.replaced}
	if c := mem.Load64(a.mem, layout.OffCreated); c != 0 {
		in.Created = time.Unix(0, int64(c))
	}
	for _, e := range a.readyEntries() {
		in.Regions = append(in.Regions, regionInfo(e))
	}
	for _, p := range a.own.List() {
		pi := ProcessInfo{Pid: p.Pid, Alive: p.Alive, Since: time.Unix(0, p.Since), Self: p.Self}
		if p.Alive {
			pi.Holders = a.own.Holders(p.Index)
		}
		in.Processes = append(in.Processes, pi)
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
	// Removed and Truncated are ArenaInfo's: what became of the file.
	Removed   bool `json:",omitempty"`
	Truncated bool `json:",omitempty"`
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
// damaged (the other regions are still returned); ErrTruncated when
// another process shrank the file (only Size and the flags are returned).
// A removed or replaced file is reported in Removed, not as an error.
// Safe for concurrent use.
func (a *Arena) Stats() (_ ArenaStats, err error) {
	defer catchFault(a, guard(), &err)
	if a.closed.Load() {
		return ArenaStats{}, ErrClosed
	}
	defer runtime.KeepAlive(a)
	fs := a.fileState()
	if fs.truncated {
		return ArenaStats{Size: int64(len(a.mem)), Removed: fs.removed || fs.replaced, Truncated: true}, fs.err(a)
	}
	st := ArenaStats{Size: int64(len(a.mem)), Used: layout.ReadHeader(a.mem).NextFree, Removed: fs.removed || fs.replaced}
	for _, p := range a.own.List() {
		if p.Alive {
			st.Processes++
		}
	}
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
func (a *Arena) LookupMap(name string) (_ *Map, err error) {
	defer catchFault(a, guard(), &err)
	e, err := a.lookup(name, KindMap)
	if err != nil {
		return nil, err
	}
	return newMap(a, e), nil
}

// LookupRing returns the ring named name whatever its shape, creating
// nothing. Errors: ErrNoRegion when there is no such region or it is a
// map; ErrCorrupt when its directory entry is damaged; ErrClosed.
func (a *Arena) LookupRing(name string) (_ *Ring, err error) {
	defer catchFault(a, guard(), &err)
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
