package shmarena

import (
	"fmt"
	"runtime"

	"github.com/shmarena/shmarena/internal/mem"
)

// Add adds delta (which may be negative) to the counter at key and returns
// the new value. It wraps on overflow, where Redis INCRBY returns an error.
// An absent or lapsed key becomes a counter holding delta with opts applied
// (WithTTL sets its deadline). opts are ignored for a live counter, which
// keeps its deadline, so a fixed-window rate limit needs no reset. Errors: ErrNotCounter (the key
// holds another value, left as it was), ErrEncoded (typed map), ErrFull,
// ErrEmptyKey, ErrTooLarge, ErrClosed.
//
// Counters are Redis INCRBY's counterpart. On amd64 with slot sizes a
// multiple of 16 bytes, an Add to a live counter takes no lock: it swaps
// the slot's version and value together in one 16-byte compare-and-swap,
// so it never lands on a slot that was deleted and reused meanwhile (the
// reuse changed the version). Elsewhere, and to create a counter, Add
// takes the key's stripe lock. An Add racing with Close either takes
// effect in the file or returns ErrClosed.
func (m *Map) Add(key string, delta int64, opts ...WriteOption) (n int64, err error) {
	defer catchFault(m.a, guard(), &err)
	return m.add(key, delta, opts)
}

// add is Add under its fault guard. Add is split in three (Add, add,
// addLocked) so that each function's defers are open-coded: the compiler
// stops open-coding when returns times defers pass 15, and an Add with one
// body, two defers and 10 returns paid the runtime's deferred-call records
// (deferprocStack, deferreturn, nextDefer), about 180 instructions of the
// 850 an Add to one of 100,000 counters ran.
func (m *Map) add(key string, delta int64, opts []WriteOption) (int64, error) {
	if err := m.refuse("add"); err != nil {
		return 0, err
	}
	if err := m.check(key, 8); err != nil {
		return 0, err
	}
	if m.encoded {
		return 0, fmt.Errorf("shmarena: map %s: %w", quote(m.name), ErrEncoded)
	}
	c, err := m.writeOpts(opts)
	if err != nil {
		return 0, err
	}
	h := m.hashKey(key)
	if !lockedAddsForTest {
		if n, err, done := m.addInPlace(key, h, delta); done {
			runtime.KeepAlive(m)
			return n, err
		}
	}
	return m.addLocked(key, h, delta, c)
}

// addLocked is add's locked path: to create a counter, and wherever
// addInPlace cannot add without the stripe.
func (m *Map) addLocked(key string, h uint64, delta int64, c writeConfig) (n int64, err error) {
	s := m.stripeOf(h)
	if !m.lock(s) {
		return 0, m.a.closedErr()
	}
	defer m.unlockErr(s, &err)
	v, free, found := m.locate(key, h, s)
	if found && !lapsed(v.deadline) {
		if metaFlags(v.meta)&flagCounter == 0 {
			return 0, fmt.Errorf("shmarena: map %s: key %s: %w", quote(m.name), quote(key), ErrNotCounter)
		}
		crashPoint("add")
		// An atomic add: lock-free adders (addInPlace) may race with it,
		// but holding the stripe keeps the slot this key's.
		return int64(mem.Add64(m.mem, v.off+sCount, uint64(delta))), nil
	}
	if found {
		m.stat(mhExpired)
	}
	e := entry{key: key, h: h, counter: true, n: delta, deadline: deadlineFor(c, v, false)}
	if err := m.put(s, &e, v, free, found); err != nil {
		return 0, err
	}
	return delta, nil
}

// addInPlace adds delta to key's live counter without the stripe lock, and
// reports done false when the caller must take the locked path: the key is
// absent, lapsed or busy, the CPU lacks CAS128, the slot is not 16-aligned,
// or the counter kept changing under it. It reads the slot as any reader
// does, then swaps the slot's version and value as one 16-byte word, so
// the add lands only if no writer began the slot since the read: every
// change to a slot (a delete, an overwrite, a reuse by another key, a
// repair) moves its version on, and a holder of the stripe that writes
// according to a counter's value pins the slot first (see pin). After
// Close the mapping is private zeros, where no live version can match, so
// the swap fails and the locked path reports ErrClosed. done with a nil
// error is an add that took effect in the file.
func (m *Map) addInPlace(key string, h uint64, delta int64) (n int64, err error, done bool) {
	if !mem.HasCAS128 {
		return 0, nil, false
	}
	var v view
	found := false
	// The hint's hash bits are tested here, inline: where counters
	// outnumber the hints most Adds find another key's hint.
	if e := mem.Load64(m.counterHints, int(hintIndex(h)*8)); e>>32 == h&(1<<32-1) {
		v, found = m.hintedKey(key, h, e)
	}
	if !found || metaFlags(v.meta)&flagCounter == 0 {
		if _, found = m.read(key, h, nil, false, &v); !found {
			return 0, nil, false
		}
		if metaFlags(v.meta)&flagCounter == 0 {
			return 0, fmt.Errorf("shmarena: map %s: key %s: %w", quote(m.name), quote(key), ErrNotCounter), true
		}
		m.noteHint(h, v.off)
	}
	// A live slot's version is never 0; a crafted file's could be, and
	// the private zero pages that replace the mapping at Close hold 0:
	// a swap expecting 0 there would report an add that never happened.
	if (v.off+sCount)&15 != 0 || v.ver == 0 {
		return 0, nil, false
	}
	crashPoint("add-in-place")
	for range addRetries {
		old := mem.Load64(m.mem, v.off+sCount)
		if mem.CAS128(m.mem, v.off+sCount, old, v.ver, old+uint64(delta), v.ver) {
			return int64(old + uint64(delta)), nil, true
		}
		if mem.Load64(m.mem, v.off+sVersion) != v.ver {
			return 0, nil, false // a writer began the slot: look again, locked
		}
	}
	return 0, nil, false
}

// Counters are hot keys (a rate limit is hit on every request), and a
// counter created in a table already full is often many slots from its
// home, each skipped by its tag at a cost. So Add remembers where it found
// a counter, in a small process-local table indexed by hash, and looks
// there first, skipping the probe. A hint is only a guess, checked as any
// read is: a key lives in at most one live slot at a time, so a
// consistent read that finds it at the hinted slot has found it, and a
// stale hint (the key deleted, the slot reused) costs one slot read.
// Hints are written only when they change, so a steady set of hot
// counters writes none.
const hintEntries = 1024

func hintIndex(h uint64) uint64 { return h >> 40 & (hintEntries - 1) }

// A hint holds the hash's low 32 bits over the slot index + 1.
func hintOf(h uint64, i uint64) uint64 { return h<<32 | (i + 1) }

// noteHint records that key h was found at off. The table is words in
// a byte slice written with plain stores (mem.Put64): goroutines may race
// to write one hint, and any of their values is a fine guess, while an
// atomic store's exchange, paid on every Add where many keys are added
// once each and keep replacing each other's hints, cost more than the
// hint saved.
func (m *Map) noteHint(h uint64, off int) {
	i := m.slotIndex(off)
	if e := hintIndex(h) * 8; mem.Load64(m.counterHints, int(e)) != hintOf(h, i) {
		mem.Put64(m.counterHints, int(e), hintOf(h, i))
	}
}

// hintedKey reads the slot that hint e, key h's, names, and reports whether it
// holds key, live and not lapsed. The read is not closed by a second load
// of the version: the caller's compare-and-swap of the version does that,
// and it must not act on the view otherwise.
func (m *Map) hintedKey(key string, h uint64, e uint64) (view, bool) {
	i := e&(1<<32-1) - 1
	if i >= m.slots {
		return view{}, false
	}
	off := m.slotOff(i)
	ver := mem.Load64(m.mem, off+sVersion)
	meta := mem.Load64(m.mem, off+sMeta)
	if ver&1 != 0 || !m.holds(off, meta, key, h) {
		return view{}, false
	}
	deadline := int64(mem.Load64(m.mem, deadlineOff(off, meta)))
	if lapsed(deadline) {
		return view{}, false
	}
	return view{off: off, ver: ver, meta: meta, deadline: deadline}, true
}

// addRetries bounds addInPlace's attempts against other adders of the same
// counter before it queues on the stripe lock instead.
const addRetries = 16

// Counter returns the counter at key and true, or 0 and false when the key
// is absent, lapsed, holds another kind of value, or the map is typed.
// Lock-free: one consistent read of the slot.
func (m *Map) Counter(key string) (int64, bool) {
	defer catchFault(m.a, guard(), nil)
	if m.encoded || key == "" || m.a.closed.Load() {
		return 0, false
	}
	var buf [8]byte
	v, out, ok := m.readKey(key, m.hashKey(key), buf[:0], true)
	runtime.KeepAlive(m)
	if !ok {
		return 0, false
	}
	return counterIn(v, out)
}

// counterIn is the counter a read saw: v its view, out its 8-byte value;
// false when the slot held another kind of value.
func counterIn(v view, out []byte) (int64, bool) {
	if metaFlags(v.meta)&flagCounter == 0 || len(out) != 8 {
		return 0, false
	}
	return int64(uint64(out[0]) | uint64(out[1])<<8 | uint64(out[2])<<16 | uint64(out[3])<<24 |
		uint64(out[4])<<32 | uint64(out[5])<<40 | uint64(out[6])<<48 | uint64(out[7])<<56), true
}
