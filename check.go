package shmarena

import (
	"runtime"
)

// A Finding is one thing Arena.Check found wrong: a region's name ("" for
// the header and directory) and what is wrong, in words.
type Finding struct {
	Region  string `json:",omitempty"`
	Problem string
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
// slot headers, tags, probe distances and counts, every ring's slots,
// group entries and pending tables. It never writes, so it may run on a
// read-only handle, while other processes use the arena: a slot or record
// being written under a held lock is normal (a dead holder's is left to
// RecoverLocks or to the next user of the lock), and counts are compared
// only when they held still.
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
		var problems []string
		switch RegionKind(e.Kind) {
		case KindMap:
			problems = newMap(a, e).checkInvariants()
		case KindRing:
			problems = newRing(a, a.mem, e.Name, e).checkInvariants()
		}
		for _, p := range problems {
			out = append(out, Finding{Region: e.Name, Problem: p})
		}
	}
	if a.closed.Load() {
		return nil, ErrClosed
	}
	return out, fs.err(a)
}
