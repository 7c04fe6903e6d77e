package shmarena

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
)

// This file: listing the locks held in an arena, and taking over those
// of dead processes (shmarena locks [--recover]).

// LockInfo describes one lock held in an arena's file.
type LockInfo struct {
	Region string
	Kind   RegionKind
	// Lock names the lock: "stripe 3" (a map's write lock), "publish" or
	// "group table" (a ring's), or "group \"name\"" (an acking group's).
	Lock string
	// Owner is the holder's token (process-table entry and generation);
	// Pid the pid it recorded (0 when its entry was taken again since),
	// or, for a live holder whose recorded pid no longer holds its entry
	// (it forked without exec and exited), the pid that does, as
	// ProcessInfo.Holders finds it.
	Owner uint64
	Pid   int
	// Alive is the kernel's word on the holder (see the package
	// documentation): a dead holder's lock is taken over by the next
	// process that needs it, or by RecoverLocks.
	Alive bool
}

// lockRef is where a lock word lives, and how to take it over.
type lockRef struct {
	info LockInfo
	off  int
	// recover runs with the lock just taken from a dead owner: it repairs
	// what the owner left, as the next user of the lock would, and
	// releases the lock.
	recover func()
}

// Locks returns every lock held in the arena right now, with its owner
// and whether the owner is alive. It reads only (a read-only handle may
// call it). The list is a snapshot: locks are taken and released all the
// time, so a lock held by a live process seldom shows. ErrClosed after
// Close.
func (a *Arena) Locks() (_ []LockInfo, err error) {
	defer catchFault(a, guard(), &err)
	refs, err := a.lockRefs()
	out := make([]LockInfo, 0, len(refs))
	for _, r := range refs {
		info := r.info
		if i, _ := owner.Split(info.Owner); info.Alive && info.Pid != 0 && i >= 0 {
			if pids := a.own.Holders(i); len(pids) > 0 && !slices.Contains(pids, info.Pid) {
				info.Pid = pids[0] // the recorded pid forked and exited: name the child
			}
		}
		out = append(out, info)
	}
	return out, err
}

// RecoverLocks takes over every lock whose owner is dead and repairs what
// the owner left (a half-written slot becomes absent, a half-written
// record abandoned, a half-made group is dropped, a half-done group
// update is finished), exactly as the next process to need each lock
// would. It returns the locks it took over. Errors: ErrReadOnly on a
// read-only handle, ErrClosed.
func (a *Arena) RecoverLocks() (_ []LockInfo, err error) {
	defer catchFault(a, guard(), &err)
	if err := a.refuse("arena "+quote(describePath(a.path)), "recover locks"); err != nil {
		return nil, err
	}
	refs, err := a.lockRefs()
	if err != nil {
		return nil, err
	}
	var done []LockInfo
	for _, r := range refs {
		if r.info.Alive {
			continue
		}
		if !a.enter(0) {
			return done, ErrClosed
		}
		ok, recovered := rlock.TryAcquire(a.mem, r.off, a.own)
		switch {
		case ok && recovered:
			r.recover()
			done = append(done, r.info)
		case ok: // released meanwhile
			rlock.Release(a.mem, r.off, a.self)
		}
		a.exit(0)
	}
	return done, nil
}

// lockRefs lists the held lock words of every region.
func (a *Arena) lockRefs() ([]lockRef, error) {
	if a.closed.Load() {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(a)
	var refs []lockRef
	add := func(e layout.Entry, name string, off int, rec func()) {
		tok := rlock.Owner(a.mem, off)
		if tok == 0 {
			return
		}
		refs = append(refs, lockRef{off: off, recover: rec, info: LockInfo{Region: e.Name, Kind: RegionKind(e.Kind),
			Lock: name, Owner: tok, Pid: a.own.Pid(tok), Alive: aliveFn(a.own, tok)}})
	}
	for _, e := range a.readyEntries() {
		switch RegionKind(e.Kind) {
		case KindMap:
			m := newMap(a, e)
			for s := uint64(0); s < m.stripes; s++ {
				add(e, fmt.Sprintf("stripe %d", s), m.lockOff(s), func() { m.afterTakeover(s) })
			}
		case KindRing:
			if checkRingEntry(a.mem, e) != nil {
				continue
			}
			r := newRing(a, a.mem, e.Name, e)
			add(e, "publish", r.off+rl.OffLock, func() {
				r.repair()
				rlock.Release(r.b, r.off+rl.OffLock, a.self)
			})
			add(e, "group table", r.off+rl.OffGroupLock, func() {
				r.dropHalfMade()
				rlock.Release(r.b, r.off+rl.OffGroupLock, a.self)
			})
			for i := 0; i < rl.Groups; i++ {
				goff := r.off + rl.GroupOff(i)
				if mem.Load64(r.b, goff+rl.GState) != rl.GroupReady {
					continue
				}
				nl := min(mem.Load32(r.b, goff+rl.GNameLen), rl.MaxGroupName)
				name := string(mem.AppendBytes(nil, r.b, goff+rl.GName, int(nl)))
				table := r.tables + i*int(r.inFlight)*rl.PendSize
				add(e, "group "+quote(name), goff+rl.GLock, func() {
					if mem.Load64(r.b, goff+rl.GFlags)&rl.FlagAck != 0 && r.inFlight != 0 {
						applyJournal(r.b, goff)
						applyLeaseJournal(r.b, goff, table, r.inFlight)
					}
					rlock.Release(r.b, goff+rl.GLock, a.self)
				})
			}
		}
	}
	return refs, nil
}
