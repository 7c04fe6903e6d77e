package shmarena

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/shmarena/shmarena/internal/futex"
	"github.com/shmarena/shmarena/internal/mem"
)

// This file: LoadOrCompute, one computation per missing key on the host.
//
// The compute table, at the map's tail, has computeEntries entries of 32
// bytes:
//
//	0   8  owner: the token of the handle computing (0 = free)
//	8   8  the hash of the key it computes
//	16  4  a futex word, bumped at every change of the entry, that waiters
//	       sleep on
//
// A key's computation is looked for, and claimed, among the computeWindow
// entries from its hash, always under the lock of the key's stripe: so two
// callers of one key never both claim, and one that finds the key absent
// and no computation of it knows it is the first. Keys of other stripes
// may claim the same entries, so a claim is a compare-and-swap of the
// owner. An entry whose owner is dead (its process died or closed the
// arena inside the function) is claimed again, by a waiter of its key or
// by any claimer that needs room: the work is handed on.
const (
	computeEntries    = 128
	computeEntrySize  = 32
	computeTableBytes = computeEntries * computeEntrySize
	computeWindow     = 16

	ceOwner = 0
	ceHash  = 8
	ceSeq   = 16

	// computePoll is how often a waiter asks whether the computing
	// process is alive, and a caller finding no free entry tries again.
	computePoll = 10 * time.Millisecond
)

// LoadOrCompute returns key's value and true when it is present. When it
// is absent, exactly one caller on the host, among all processes, runs fn
// and stores what it returns with opts (WithTTL gives the deadline); the
// other callers of the key wait for that value and return it with true.
// The caller that ran fn returns its value with false. This is the cure
// for a cache stampede: a popular key lapses and every worker, in every
// process, would recompute it at once.
//
// An error from fn is returned, wrapped, to the caller that ran fn and is
// not stored: waiting callers then compete again, and one of them runs its
// own fn. If the computing process dies (or closes the arena) inside fn,
// one waiter takes the work over, as locks are taken over from dead
// processes. A waiter gives up when ctx ends, returning ctx.Err(). fn
// receives the caller's ctx.
//
// It counts a hit or a miss in Stats, then a load or a load failure for
// each fn run. Errors: ErrEmptyKey, ErrReadOnly, ErrClosed, ctx.Err(), fn's
// error; and, returned with fn's value, ErrTooLarge or ErrFull when the
// map refuses to store it (counted as a load failure). A hit costs a
// lock-free read; a miss takes the key's stripe lock twice around fn. At
// most 128 keys per map are computed at once; more callers wait their turn.
// Safe for concurrent use by goroutines and processes.
func (m *Map) LoadOrCompute(ctx context.Context, key string, fn func(ctx context.Context) ([]byte, error), opts ...WriteOption) (value []byte, loaded bool, err error) {
	defer catchFault(m.a, guard(), &err)
	if err := m.refuse("load or compute"); err != nil {
		return nil, false, err
	}
	if err := m.check(key, 0); err != nil {
		return nil, false, err
	}
	c, err := m.writeOpts(opts)
	if err != nil {
		return nil, false, err
	}
	defer runtime.KeepAlive(m)
	h := m.hashKey(key)
	if _, v, ok := m.readKey(key, h, []byte{}, true); ok {
		m.uses.add(useHits)
		return v, true, nil
	}
	m.uses.add(useMisses)
	s := m.stripeOf(h)
	for {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		if !m.lock(s) {
			return nil, false, m.a.closedErr()
		}
		if v, found := m.find(key, h); found && !lapsed(v.deadline) {
			m.pin(s, v)
			val := m.appendValue([]byte{}, v.off, v.meta)
			m.unlock(s)
			return val, true, nil
		}
		e, tok, seq, mine := m.claimCompute(h)
		m.unlock(s)
		switch {
		case mine:
			return m.compute(ctx, key, h, s, e, fn, c)
		case e < 0: // no free entry near h: wait for one
			if err := sleepCtx(ctx, computePoll); err != nil {
				return nil, false, err
			}
		default:
			if err := m.awaitCompute(ctx, e, tok, seq); err != nil {
				return nil, false, err
			}
		}
	}
}

// claimCompute, holding h's stripe, finds the computation of the key of
// hash h, or claims an entry for it. It returns the entry and, when
// another live handle computes the key, its token and the entry's futex
// word as read (mine false); mine true when the entry is now this
// handle's; e -1 when every entry near h is busy with other keys.
func (m *Map) claimCompute(h uint64) (e int, tok uint64, seq uint32, mine bool) {
	for range computeWindow {
		free, taken := -1, 0
		var busy [computeWindow]int
		for j := range computeWindow {
			i := int((h + uint64(j)) % computeEntries)
			o := m.computeOff(i)
			seq := mem.Load32(m.mem, o+ceSeq)
			owner := mem.Load64(m.mem, o+ceOwner)
			switch {
			case owner == 0:
				if free < 0 {
					free = i
				}
			case mem.Load64(m.mem, o+ceHash) != h:
				busy[taken], taken = i, taken+1
			case aliveFn(m.a.own, owner):
				return i, owner, seq, false
			case m.takeCompute(o, owner, h): // its computer died: take the work over
				return i, 0, 0, true
			default: // raced for it with a claimer of another key
				free, taken = -2, 0
			}
			if free == -2 {
				break
			}
		}
		if free == -2 {
			continue
		}
		if free >= 0 && m.takeCompute(m.computeOff(free), 0, h) {
			return free, 0, 0, true
		}
		for _, i := range busy[:taken] { // entries of dead computers of other keys
			o := m.computeOff(i)
			if owner := mem.Load64(m.mem, o+ceOwner); owner != 0 && !aliveFn(m.a.own, owner) &&
				m.takeCompute(o, owner, h) {
				return i, 0, 0, true
			}
		}
		if free < 0 {
			return -1, 0, 0, false
		}
	}
	return -1, 0, 0, false
}

// takeCompute claims the entry at o, whose owner was owner (0, or a dead
// handle), for the key of hash h, and wakes whoever waited on it.
func (m *Map) takeCompute(o int, owner, h uint64) bool {
	if !mem.CAS64(m.mem, o+ceOwner, owner, m.a.self) {
		return false
	}
	mem.Store64(m.mem, o+ceHash, h)
	m.bumpCompute(o)
	return true
}

// freeCompute gives entry o up, holding its key's stripe, and wakes its
// waiters.
func (m *Map) freeCompute(o int) {
	mem.Store64(m.mem, o+ceHash, 0)
	mem.CAS64(m.mem, o+ceOwner, m.a.self, 0)
	m.bumpCompute(o)
}

func (m *Map) bumpCompute(o int) {
	mem.Add32(m.mem, o+ceSeq, 1)
	futex.Wake(mem.Ptr32(m.mem, o+ceSeq), math.MaxInt32)
}

func (m *Map) computeOff(i int) int { return m.computeTable + i*computeEntrySize }

// compute runs fn for key, whose computation entry e this handle claimed,
// stores its value, and frees the entry, also when fn panics.
func (m *Map) compute(ctx context.Context, key string, h, s uint64, e int, fn func(context.Context) ([]byte, error), c writeConfig) (value []byte, loaded bool, err error) {
	o := m.computeOff(e)
	freed, locked := false, false
	defer func() {
		// fn panicked, or the store faulted holding the stripe (a file
		// cut under the mapping): let a waiter compute. A stripe still
		// held is this call's; taking it again would wait for ever.
		if !freed && (locked || m.lock(s)) {
			m.freeCompute(o)
			m.unlock(s)
		}
	}()
	crashPoint("compute")
	value, err = fn(ctx)
	if err != nil {
		m.uses.add(useLoadFailures)
		if m.lock(s) {
			m.freeCompute(o)
			m.unlock(s)
		}
		freed = true
		return nil, false, fmt.Errorf("shmarena: map %s: computing %s: %w", quote(m.name), quote(key), err)
	}
	if err = m.check(key, len(value)); err == nil {
		if !m.lock(s) {
			freed = true
			return value, false, m.a.closedErr()
		}
		locked = true
		err = m.storeLocked(s, key, h, value, c, nil)
		m.freeCompute(o)
		locked = false
		m.unlockErr(s, &err)
	} else if m.lock(s) {
		m.freeCompute(o)
		m.unlock(s)
	}
	freed = true
	if err != nil {
		m.uses.add(useLoadFailures)
		return value, false, err
	}
	m.uses.add(useLoads)
	return value, false, nil
}

// awaitCompute sleeps until entry e's futex word moves on from seq (the
// computation ended or changed hands) or its owner tok is found dead. It
// returns ctx.Err() when ctx ends first, ErrClosed after Close.
func (m *Map) awaitCompute(ctx context.Context, e int, tok uint64, seq uint32) error {
	o := m.computeOff(e)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.a.stopped(); err != nil {
			return err // also a fault's: the computation may be this handle's, cut short
		}
		d := computePoll
		if dl, ok := ctx.Deadline(); ok {
			d = max(min(d, time.Until(dl)), time.Microsecond)
		}
		futex.Wait(mem.Ptr32(m.mem, o+ceSeq), seq, d)
		if mem.Load32(m.mem, o+ceSeq) != seq || !aliveFn(m.a.own, tok) {
			return nil
		}
	}
}

// sleepCtx sleeps for d or until ctx ends, and returns ctx.Err().
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// LoadOrCompute returns key's value, decoded, and true when it is present;
// when it is absent, exactly one caller on the host runs fn and stores its
// value with opts, and the others wait for it, with Map.LoadOrCompute's
// rules and errors. The caller that ran fn returns fn's value itself (not
// a decoded copy) with false. ErrEncode when fn's value cannot be
// encoded (counted as a load failure, nothing stored); ErrCorrupt or
// ErrTypeMismatch when the stored bytes do not decode as V.
func (t *TypedMap[V]) LoadOrCompute(ctx context.Context, key string, fn func(ctx context.Context) (V, error), opts ...WriteOption) (value V, loaded bool, err error) {
	var made V
	b, loaded, err := t.m.LoadOrCompute(ctx, key, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		made = v
		st := getEnc()
		defer putEnc(st)
		b, err := t.encode(st, &v)
		if err != nil {
			return nil, errEncoded{err}
		}
		return append([]byte(nil), b...), nil
	}, opts...)
	switch {
	case err != nil:
		var e errEncoded
		if errors.As(err, &e) {
			err = e.err
		}
		return value, false, err
	case !loaded:
		return made, false, nil
	}
	if err := t.decode(key, b, &value); err != nil {
		var zero V
		return zero, true, err
	}
	return value, true, nil
}

// errEncoded carries an encoding error of a typed LoadOrCompute's value
// out through Map.LoadOrCompute, which wraps the errors of fn.
type errEncoded struct{ err error }

func (e errEncoded) Error() string { return e.err.Error() }
