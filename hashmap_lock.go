package shmarena

import (
	"fmt"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/rlock"
)

// This file: locking and recovery.

// lock takes stripe s for a write, or returns false after Close (or once
// a fault abandoned the handle, while it waited: see closedErr). It
// counts the write in flight first (see Arena.enter), so Close never
// retires the mapping under a lock held in the file.
func (m *Map) lock(s uint64) bool {
	if !m.a.enter(s) {
		return false
	}
	for {
		recovered, ok := rlock.Acquire(m.mem, m.lockOff(s), m.a.own)
		if !ok { // Close began, or a fault abandoned the handle, while this write waited
			m.a.exit(s)
			return false
		}
		if !recovered {
			return true
		}
		m.afterTakeover(s)
	}
}

// unlock releases a stripe taken by lock and ends the operation. It
// reports false when the lock had been taken over (see ErrLockLost).
func (m *Map) unlock(s uint64) bool {
	ok := m.release(s)
	m.a.exit(s)
	return ok
}

// unlockErr is unlock for an operation that returns *err: a lost lock
// becomes ErrLockLost, unless the operation failed already.
func (m *Map) unlockErr(s uint64, err *error) {
	if !m.unlock(s) && *err == nil {
		*err = m.errLockLost(s)
	}
}

func (m *Map) errLockLost(s uint64) error {
	return fmt.Errorf("shmarena: map %q: stripe %d: %w", m.name, s, ErrLockLost)
}

// release frees stripe s without ending an operation; false when the lock
// was no longer this handle's.
//
// It counts the release first, still holding the lock, so a reader that
// sees the lock free and the count unchanged on both sides of a read of
// the segment knows no write ran in between (see checkSegment).
func (m *Map) release(s uint64) bool {
	o := m.lockOff(s) + stWrites
	mem.Put64(m.mem, o, mem.Load64(m.mem, o)+1)
	return rlock.Release(m.mem, m.lockOff(s), m.a.self)
}

// repairDead takes over stripe s from a dead owner if it can, repairs it
// and releases it.
func (m *Map) repairDead(s uint64) {
	if !m.a.enter(s) {
		return
	}
	defer m.a.exit(s)
	if ok, recovered := rlock.TryAcquire(m.mem, m.lockOff(s), m.a.own); ok {
		if recovered {
			m.afterTakeover(s)
			return
		}
		if mem.Load64(m.mem, m.lockOff(s)+stMoveVer)&1 != 0 {
			// Moves open with nobody holding the segment: damage, not a
			// writer at work (a dead one's are repaired on takeover).
			m.repairSegment(s)
		}
		m.release(s)
	}
}

// afterTakeover runs holding stripe s just taken from a dead owner: it
// repairs the segment and releases s.
func (m *Map) afterTakeover(s uint64) {
	m.repairSegment(s)
	mem.Add64(m.mem, m.base+mhRecoveries, 1)
	m.release(s)
}
