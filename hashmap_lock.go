package shmarena

import (
	"fmt"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/rlock"
)

// This file: locking and recovery.

// lock takes stripe s for a write, or returns false after Close. It
// counts the write in flight first (see Arena.enter), so Close never
// retires the mapping under a lock held in the file.
func (m *Map) lock(s uint64) bool {
	if !m.a.enter(s) {
		return false
	}
	for {
		recovered, ok := rlock.Acquire(m.mem, m.lockOff(s), m.a.own)
		if !ok { // Close began while this write waited
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
// reports false when the lock had been taken over (see ErrLockLost). A
// recount left due (see recount) is tried again here, without waiting.
func (m *Map) unlock(s uint64) bool {
	ok := m.release(s)
	if mem.Load64(m.mem, m.base+mhRecountDue) != 0 {
		m.recount()
	}
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
func (m *Map) release(s uint64) bool { return rlock.Release(m.mem, m.lockOff(s), m.a.self) }

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
		m.release(s)
	}
}

// afterTakeover runs holding stripe s just taken from a dead owner: it
// repairs the slot the owner was writing, releases s, and recounts.
func (m *Map) afterTakeover(s uint64) {
	m.repairStripe(s)
	mem.Add64(m.mem, m.base+mhRecoveries, 1)
	m.release(s)
	m.recount()
}

// repairStripe makes the slot a dead holder of s was writing a tombstone.
func (m *Map) repairStripe(s uint64) {
	intent := m.lockOff(s) + 8
	idx := mem.Load64(m.mem, intent)
	crashPoint("recover")
	if idx != 0 && idx <= m.slots {
		off := m.slotOff(idx - 1)
		ver := mem.Load64(m.mem, off+sVersion)
		if ver&1 != 0 && ver>>1&(1<<(seqShift-1)-1) == s {
			mem.Store64(m.mem, off+sMeta, metaOf(stateTombstone, 0, 0, 0))
			mem.Store64(m.mem, off+sDeadline, 0)
			m.setTag(idx-1, tagTombstone) // while odd, as remove does
			mem.Store64(m.mem, off+sVersion, ver>>seqShift<<seqShift)
		}
	}
	mem.Store64(m.mem, intent, 0)
}

// recount recomputes used and tombstones from the slots, which needs every
// stripe at once. It never waits: it tries each stripe in order, taking
// over those of dead owners on the way, and if a live handle holds one (a
// slow Update, a stopped process) it gives them all back and leaves the
// recount due, for the next unlock of any stripe in any process to try
// again. Waiting there would make a reader that met a dead writer's slot,
// and every writer of the stripes already taken, wait for that live
// holder. Until then Len and Stats may be off by the dead writer's one
// operation, and each unlock pays up to one try per stripe (a rare state:
// a recovery while another stripe is held for long).
func (m *Map) recount() {
	mem.Store64(m.mem, m.base+mhRecountDue, 1)
	taken := uint64(0)
	for ; taken < m.stripes; taken++ {
		ok, recovered := rlock.TryAcquire(m.mem, m.lockOff(taken), m.a.own)
		if !ok {
			break
		}
		if recovered {
			m.repairStripe(taken)
			mem.Add64(m.mem, m.base+mhRecoveries, 1)
		}
	}
	if taken == m.stripes {
		crashPoint("recount")
		m.count()
		mem.Store64(m.mem, m.base+mhRecountDue, 0)
	}
	for s := uint64(0); s < taken; s++ {
		m.release(s)
	}
}

// count recomputes the used and tombstone counts; with every stripe held
// no slot may be mid-write, so an odd slot is a leftover and is repaired.
func (m *Map) count() {
	var used, tomb uint64
	for i := uint64(0); i < m.slots; i++ {
		off := m.slotOff(i)
		ver := mem.Load64(m.mem, off+sVersion)
		if ver&1 != 0 {
			mem.Store64(m.mem, off+sMeta, metaOf(stateTombstone, 0, 0, 0))
			m.setTag(i, tagTombstone)
			mem.Store64(m.mem, off+sVersion, ver>>seqShift<<seqShift)
		}
		switch metaState(mem.Load64(m.mem, off+sMeta)) {
		case stateLive:
			used++
		case stateTombstone:
			tomb++
		}
	}
	for s := uint64(0); s < m.stripes; s++ {
		mem.Store64(m.mem, m.lockOff(s)+stUsed, 0)
		mem.Store64(m.mem, m.lockOff(s)+stTomb, 0)
	}
	mem.Store64(m.mem, m.lockOff(0)+stUsed, used)
	mem.Store64(m.mem, m.lockOff(0)+stTomb, tomb)
}
