package shmarena

import (
	"runtime"
)

// A Finding is one thing Arena.Check found wrong: a region's name ("" for
// the header and directory) and what is wrong, in words.
//
// A Finding with Unjudged set reports no damage: it says that part of a
// region (a map segment whose writers never paused while Check read it)
// could not be judged, so the checks that need a still read were not
// made there. Check again when the arena is quieter.
type Finding struct {
	Region   string `json:",omitempty"`
	Problem  string
	Unjudged bool `json:",omitempty"`
}

// String returns "region: problem", or the problem alone.
func (f Finding) String() string {
	if f.Region == "" {
		return f.Problem
	}
	return quote(f.Region) + ": " + f.Problem
}

// Check validates the whole arena against its invariants and returns
// what it finds wrong (nil for a healthy arena): the header and
// directory, then each region's header (as Open does), and every map's
// slot headers, tags, probe distances, keys stored twice, intent and
// move-from words and counts, every ring's slots, group entries and
// pending tables. It never writes, so it may run on a read-only handle,
// while other processes use the arena: a slot or record being written
// under a held lock is normal (a dead holder's is left to RecoverLocks or
// to the next user of the lock, and a repair at work is not damage), and
// what a writer at work could cause is judged only from a read of a map
// segment that held still. A segment that does not hold still through a
// few reads (milliseconds apart) is named in a Finding marked Unjudged,
// so Check always finishes.
//
// It also asks the kernel what became of the file: when another process
// shrank it, Check returns an error wrapping ErrTruncated and no findings
// (the regions are gone); when it was removed, or its path names another
// file now, Check returns its findings and an error wrapping ErrRemoved.
// It returns ErrClosed after Close.
func (a *Arena) Check() (_ []Finding, err error) {
	defer catchFault(a, guard(), &err)
	if a.closed.Load() {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(a)
	fs := a.fileState()
	if fs.truncated {
		return nil, fs.err(a)
	}
	if err := validate(a.mem, int64(len(a.mem)), 0); err != nil {
		return []Finding{{Problem: err.Error()}}, fs.err(a)
	}
	var out []Finding
	for _, e := range a.readyEntries() {
		if err := kinds[RegionKind(e.Kind)].validate(a.mem, e); err != nil {
			out = append(out, Finding{Region: e.Name, Problem: err.Error()})
			continue
		}
		var problems, unjudged []string
		switch RegionKind(e.Kind) {
		case KindMap:
			problems, unjudged = newMap(a, e).checkInvariants()
		case KindRing:
			problems = newRing(a, a.mem, e.Name, e).checkInvariants()
		}
		for _, p := range problems {
			out = append(out, Finding{Region: e.Name, Problem: p})
		}
		for _, p := range unjudged {
			out = append(out, Finding{Region: e.Name, Problem: p, Unjudged: true})
		}
	}
	if a.closed.Load() {
		return nil, ErrClosed
	}
	return out, fs.err(a)
}
