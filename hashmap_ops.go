package shmarena

import (
	"encoding/binary"
	"iter"
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/zeebo/xxh3"
)

// This file: public operations.

// Store sets key to value, replacing any entry and its deadline (with
// WithTTL a new one, else none; WithKeepTTL keeps the current one), as
// Redis SET does. Errors: ErrEmptyKey, ErrTooLarge (len(key)+len(value) >
// MaxPair), ErrFull (new key, no free slot; counted in Stats.Full),
// ErrClosed; ErrLockLost (see there). A refused write changes nothing. The
// value is copied.
func (m *Map) Store(key string, value []byte, opts ...WriteOption) (err error) {
	defer catchFault(m.a, guard(), &err)
	if err := m.refuse("store"); err != nil {
		return err
	}
	if err := m.check(key, len(value)); err != nil {
		return err
	}
	c, err := m.writeOpts(opts)
	if err != nil {
		return err
	}
	h := m.hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return m.a.closedErr()
	}
	// No defer: nothing under the lock calls out of the package, and
	// Store is the hottest write.
	err = m.storeLocked(s, key, h, value, c, nil)
	if !m.unlock(s) && err == nil {
		err = m.errLockLost(s)
	}
	return err
}

// storeLocked stores value for key holding stripe s. With previous not
// nil, it sets *previous to a copy of the live value it replaces (non-nil,
// if empty), read after pinning a counter (see pin).
func (m *Map) storeLocked(s uint64, key string, h uint64, value []byte, c writeConfig, previous *[]byte) error {
	v, free, found := m.locate(key, h, s)
	live := found && !lapsed(v.deadline)
	if found && !live {
		m.stat(mhExpired)
	}
	// Making room in the value space may evict entries (this key's
	// included: the store then inserts it again) or reuse the old value's
	// space, so the old value is copied first. A counter holds no value
	// space and is never evicted for it, but may move: it is pinned (see
	// pin) only after the room is made.
	counter := live && metaFlags(v.meta)&flagCounter != 0
	if live && previous != nil && !counter {
		*previous = m.appendValue([]byte{}, v.off, v.meta)
	}
	if m.external(len(key), len(value)) { // roomFor's own first test, to skip its call
		var err error
		if v, free, found, err = m.roomFor(s, key, h, len(value), v, free, found); err != nil {
			return err
		}
	}
	if counter && previous != nil && found && metaFlags(v.meta)&flagCounter != 0 {
		m.pin(s, v) // put begins the same slot again: a no-op
		*previous = m.appendValue([]byte{}, v.off, v.meta)
	}
	e := entry{key: key, h: h, val: value, deadline: deadlineFor(c, v, live)}
	return m.put(s, &e, v, free, found)
}

// Load returns a copy of key's value and true, or nil and false when the
// key is absent, lapsed, busy (see Stats.Busy) or the arena is closed. A
// counter reads as its 8-byte little-endian value. Lock-free.
func (m *Map) Load(key string) ([]byte, bool) {
	v, ok := m.AppendLoad(nil, key)
	if ok && v == nil {
		v = []byte{}
	}
	return v, ok
}

// AppendLoad appends key's value to dst and returns the extended slice and
// true; on a miss it returns dst unchanged and false. It allocates only if
// dst lacks capacity. Lock-free; the same misses as Load.
func (m *Map) AppendLoad(dst []byte, key string) ([]byte, bool) {
	defer catchFault(m.a, guard(), nil)
	if key == "" || m.a.closed.Load() {
		return dst, false
	}
	// read, written out: the hottest read saves a call.
	h := m.hashKey(key)
	out, r := m.readNear(key, h, dst, true, nil)
	if r != nearHit && r != nearAbsent {
		out, r = m.readFar(key, h, dst, true, nil, r)
	}
	ok := r == nearHit
	m.uses.hit(ok)
	runtime.KeepAlive(m)
	return out, ok
}

// Exists reports whether key is present and not lapsed. Lock-free.
func (m *Map) Exists(key string) bool {
	defer catchFault(m.a, guard(), nil)
	if key == "" || m.a.closed.Load() {
		return false
	}
	_, ok := m.read(key, m.hashKey(key), nil, false, nil)
	runtime.KeepAlive(m)
	return ok
}

// Delete removes key and reports whether it was present (a lapsed entry is
// collected but reports false). False after Close.
func (m *Map) Delete(key string) bool {
	defer catchFault(m.a, guard(), nil)
	if m.a.readOnly {
		return false
	}
	_, ok := m.loadAndDelete(key, false)
	return ok
}

// LoadAndDelete removes key and returns the value it had, as sync.Map's
// LoadAndDelete does.
func (m *Map) LoadAndDelete(key string) (value []byte, loaded bool) {
	defer catchFault(m.a, guard(), nil)
	if m.a.readOnly {
		return nil, false
	}
	return m.loadAndDelete(key, true)
}

func (m *Map) loadAndDelete(key string, load bool) (value []byte, loaded bool) {
	if key == "" || m.a.closed.Load() {
		return nil, false
	}
	h := m.hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return nil, false
	}
	defer m.unlock(s)
	v, found := m.find(key, h)
	if !found {
		return nil, false
	}
	if lapsed(v.deadline) {
		if m.remove(s, v) {
			m.stat(mhExpired)
		}
		return nil, false
	}
	if load {
		m.pin(s, v)
		value = m.appendValue([]byte{}, v.off, v.meta)
	}
	if !m.remove(s, v) {
		return nil, false
	}
	return value, true
}

// LoadOrStore returns the existing value for key (loaded true) if present,
// else stores value with opts and returns it (loaded false), as sync.Map's
// LoadOrStore does. Errors as for Store; on error nothing changes.
func (m *Map) LoadOrStore(key string, value []byte, opts ...WriteOption) (actual []byte, loaded bool, err error) {
	defer catchFault(m.a, guard(), &err)
	if err := m.refuse("load or store"); err != nil {
		return nil, false, err
	}
	if err := m.check(key, len(value)); err != nil {
		return nil, false, err
	}
	c, err := m.writeOpts(opts)
	if err != nil {
		return nil, false, err
	}
	h := m.hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return nil, false, m.a.closedErr()
	}
	defer m.unlockErr(s, &err)
	v, found := m.find(key, h)
	if found && !lapsed(v.deadline) {
		return m.appendValue([]byte{}, v.off, v.meta), true, nil
	}
	if err := m.storeLocked(s, key, h, value, c, nil); err != nil {
		return nil, false, err
	}
	return value, false, nil
}

// Swap stores value for key and returns the previous value, if any, as
// sync.Map's Swap does. Options and errors as for Store.
func (m *Map) Swap(key string, value []byte, opts ...WriteOption) (previous []byte, loaded bool, err error) {
	defer catchFault(m.a, guard(), &err)
	if err := m.refuse("swap"); err != nil {
		return nil, false, err
	}
	if err := m.check(key, len(value)); err != nil {
		return nil, false, err
	}
	c, err := m.writeOpts(opts)
	if err != nil {
		return nil, false, err
	}
	h := m.hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return nil, false, m.a.closedErr()
	}
	defer m.unlockErr(s, &err)
	if err := m.storeLocked(s, key, h, value, c, &previous); err != nil {
		return nil, false, err
	}
	return previous, previous != nil, nil
}

// CompareAndSwap stores new for key if its value equals old byte for byte,
// keeping the entry's deadline, and reports whether it swapped. An absent
// key never matches. A counter compares as its 8-byte little-endian value
// and stops being a counter when swapped. Errors: ErrTooLarge for new,
// ErrEmptyKey, ErrClosed, ErrLockLost.
func (m *Map) CompareAndSwap(key string, old, new []byte) (swapped bool, err error) {
	defer catchFault(m.a, guard(), &err)
	if err := m.refuse("compare and swap"); err != nil {
		return false, err
	}
	if err := m.check(key, len(new)); err != nil {
		return false, err
	}
	if swapped, err, broken := brokenCompareAndSwap(m, key, old, new); broken {
		return swapped, err
	}
	h := m.hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return false, m.a.closedErr()
	}
	defer m.unlockErr(s, &err)
	v, found := m.find(key, h)
	if !found || lapsed(v.deadline) || !m.valueEqual(v, old) {
		return false, nil
	}
	if m.external(len(key), len(new)) {
		deadline := v.deadline
		var free view
		if v, free, found, err = m.roomFor(s, key, h, len(new), v, view{off: -1}, true); err != nil {
			return false, err
		}
		if !found { // an evicting map evicted it to make room, after it matched: the swap stands
			if err := m.put(s, &entry{key: key, h: h, val: new, deadline: deadline}, v, free, false); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	if !m.pinEqual(s, v, old) {
		return false, nil
	}
	odd := m.begin(s, v)
	m.fill(v.off, &entry{key: key, h: h, val: new, deadline: v.deadline})
	if !m.end(v.off, odd) {
		return false, m.errLockLost(s)
	}
	m.clearIntent(s)
	return true, nil
}

// CompareAndDelete deletes key if its value equals old and reports
// whether it did. False after Close.
func (m *Map) CompareAndDelete(key string, old []byte) (deleted bool) {
	defer catchFault(m.a, guard(), nil)
	if m.a.readOnly {
		return false
	}
	if key == "" || m.a.closed.Load() {
		return false
	}
	h := m.hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return false
	}
	defer m.unlock(s)
	v, found := m.find(key, h)
	if !found || lapsed(v.deadline) || !m.valueEqual(v, old) || !m.pinEqual(s, v, old) {
		return false
	}
	return m.remove(s, v)
}

// pin begins the slot of v, found holding stripe s, when it is a counter,
// which lock-free adders may change (see addInPlace): a write decided by a
// counter's value must read the value after shutting them out, and only an
// odd version does. It pins whether or not this process can add lock-free:
// the adders may be other processes (another build, or one run with
// GODEBUG=cpu.cx16=off). begin's exchange is a full barrier, so a value
// read after it holds every add that landed and no add lands later. The
// write that follows begins the slot again, which stores the same version
// and intent, and ends it.
func (m *Map) pin(s uint64, v view) {
	if metaFlags(v.meta)&flagCounter != 0 {
		m.begin(s, v)
	}
}

// pinEqual pins v, for a write to follow, if its value still equals b, and
// reports whether it did. A value that is no counter cannot change under
// the stripe lock, so it is not read again. A counter is pinned and
// compared in one CAS128 of its version and value where it can be, so a
// compare that fails writes nothing; elsewhere the slot is begun, compared
// and, on a difference, ended unchanged (a process killed in that window
// leaves the counter absent, as one killed mid-write does).
func (m *Map) pinEqual(s uint64, v view, b []byte) bool {
	if metaFlags(v.meta)&flagCounter == 0 {
		return true
	}
	if mem.HasCAS128 && (v.off+sCount)&15 == 0 && len(b) == 8 {
		m.setIntent(s, v.off)
		n := binary.LittleEndian.Uint64(b)
		if mem.CAS128(m.mem, v.off+sCount, n, v.ver, n, m.begun(v.ver, s)) {
			return true
		}
		m.clearIntent(s)
		return false
	}
	odd := m.begin(s, v)
	if !m.valueEqual(v, b) {
		if m.end(v.off, odd) {
			m.clearIntent(s)
		}
		return false
	}
	return true
}

func (m *Map) valueEqual(v view, b []byte) bool {
	if metaValLen(v.meta) != len(b) {
		return false
	}
	if metaFlags(v.meta)&flagExternal != 0 {
		return m.externalEqual(v, b)
	}
	if metaFlags(v.meta)&flagCounter != 0 {
		var w [8]byte
		return string(m.appendValue(w[:0], v.off, v.meta)) == string(b)
	}
	return mem.Equal(m.mem, v.off+sData+metaKeyLen(v.meta), b)
}

// Expire sets key's deadline to ttl from now and reports whether the key
// was present, as Redis EXPIRE does; a ttl of zero or less deletes the key
// (Redis's EXPIRE k 0), reporting whether it was present. A lapsed entry is
// collected (counted in Stats.Expired) and reports false. False on a
// read-only handle and after Close. It takes the key's stripe lock.
func (m *Map) Expire(key string, ttl time.Duration) bool {
	if ttl <= 0 {
		return m.Delete(key)
	}
	return m.setDeadline(key, ttl)
}

// Persist removes key's deadline and reports whether it had one, as Redis
// PERSIST does: false for an absent or lapsed key (a lapsed one is
// collected) and for a key without a deadline. False on a read-only handle
// and after Close. It takes the key's stripe lock.
func (m *Map) Persist(key string) bool { return m.setDeadline(key, 0) }

// setDeadline sets key's deadline to ttl from now, or removes it (ttl 0),
// and reports whether it changed a live key's deadline (Expire) or removed
// one (Persist).
func (m *Map) setDeadline(key string, ttl time.Duration) bool {
	defer catchFault(m.a, guard(), nil)
	if m.a.readOnly {
		return false
	}
	if key == "" || m.a.closed.Load() {
		return false
	}
	h := m.hashKey(key)
	s := m.stripeOf(h)
	if !m.lock(s) {
		return false
	}
	defer m.unlock(s)
	v, found := m.find(key, h)
	if !found || ttl == 0 && v.deadline == 0 {
		return false
	}
	crashPoint("expire")
	// Liveness is decided once, by one clock reading taken with the slot
	// begun: lock-free readers wait from then until the write ends, so
	// none can see the entry lapse and then see it live again, and the new
	// deadline counts from the reading that found it live.
	odd := m.begin(s, v)
	n := now()
	if v.deadline != 0 && v.deadline <= n {
		if m.remove(s, v) { // begins the slot again: the same version, a no-op
			m.stat(mhExpired)
		}
		return false
	}
	var d int64
	if ttl > 0 {
		d = deadlineFrom(n, ttl)
		m.noteDeadlines()
	}
	mem.Store64(m.mem, deadlineOff(v.off, v.meta), uint64(d))
	if !m.end(v.off, odd) {
		return false
	}
	m.clearIntent(s)
	return true
}

// TTL returns how long key has left and true; 0 and true for a key with
// no deadline; 0 and false when absent. Lock-free.
func (m *Map) TTL(key string) (time.Duration, bool) {
	defer catchFault(m.a, guard(), nil)
	if key == "" || m.a.closed.Load() {
		return 0, false
	}
	v, _, ok := m.readKey(key, m.hashKey(key), nil, false)
	runtime.KeepAlive(m)
	if !ok {
		return 0, false
	}
	return ttlOf(v), true
}

// ttlOf is the time a read's view v has left: 0 for no deadline, else at
// least 1 ns (a lapsed key is no hit).
func ttlOf(v view) time.Duration {
	if v.deadline == 0 {
		return 0
	}
	return max(time.Duration(v.deadline-now()), 1)
}

// All returns an iterator over the live entries, segment by segment,
// yielding each key with a copy of its value. It is a walk, not a snapshot
// and not a lock, with sync.Map.Range's promise: each key present for the
// whole walk is yielded exactly once, and entries stored or deleted while
// it runs may or may not appear. A key's value is read as Load reads it,
// at some moment of the walk. The walk waits for a slot being written as
// a writer waits for the segment's lock: until the writer finishes or is
// found dead (see walkSegment). Empty after Close.
func (m *Map) All() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		defer catchFault(m.a, guard(), nil)
		m.walk(true, yield)
	}
}

// Keys returns an iterator over the live keys, with All's rules.
func (m *Map) Keys() iter.Seq[string] {
	return func(yield func(string) bool) {
		defer catchFault(m.a, guard(), nil)
		m.walk(false, func(key string, _ []byte) bool { return yield(key) })
	}
}

// hashKey hashes a key with XXH3-64 under the arena's seed, chosen at
// random when the arena was created: nobody who cannot read the file can
// compute which keys collide in a probe chain.
func (m *Map) hashKey(key string) uint64 { return xxh3.HashStringSeed(key, m.seed) }
