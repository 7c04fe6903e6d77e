package shmarena

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// This file: MapKeyValue's reads, which wait out a key being written.

// kvBusyPatience bounds how long a KeyValue read of a Map reads again
// after give-ups on a key being written (see readPatiently); a variable so
// tests can shorten it.
var kvBusyPatience = time.Second

// readPatiently is read for KeyValue, whose callers cannot tell a miss
// from Map's give-up on a busy key (see Stats.Busy): a read that gave up
// on a slot or segment that kept changing reads again, until it hits or
// misses, ctx ends (ctx's error, wrapped), or kvBusyPatience has passed
// (the miss Map reports; only a writer stopped inside its write, or a
// damaged file, holds a key that long). On a busy machine a writer
// descheduled inside its write outlasts Map's own patience (oddPatience),
// so without this a present key read absent through KeyValue.
func (m *Map) readPatiently(ctx context.Context, key string, dst []byte, want bool, v *view) (out []byte, found bool, err error) {
	if key == "" || m.a.closed.Load() {
		return dst, false, nil
	}
	h := m.hashKey(key)
	out, r := m.readOutcome(key, h, dst, want, v)
	if r != nearBusy {
		return out, r == nearHit, nil
	}
	for start := time.Now(); time.Since(start) < kvBusyPatience; {
		if err := ctx.Err(); err != nil {
			return dst, false, fmt.Errorf("shmarena: read of %q waited for a writer until the context ended: %w", key, err)
		}
		if out, r = m.readOutcome(key, h, dst, want, v); r != nearBusy {
			return out, r == nearHit, nil
		}
	}
	return dst, false, nil
}

// appendLoadPatiently is AppendLoad for MapKeyValue (see readPatiently).
func (m *Map) appendLoadPatiently(ctx context.Context, dst []byte, key string) (out []byte, ok bool, err error) {
	defer catchFault(m.a, guard(), &err)
	if out, ok, err = m.readPatiently(ctx, key, dst, true, nil); err == nil {
		m.uses.hit(ok)
	}
	runtime.KeepAlive(m)
	return out, ok, err
}

// counterPatiently is Counter for MapKeyValue (see readPatiently).
func (m *Map) counterPatiently(ctx context.Context, key string) (n int64, ok bool, err error) {
	defer catchFault(m.a, guard(), &err)
	if m.encoded {
		return 0, false, nil
	}
	var buf [8]byte
	var v view
	out, found, err := m.readPatiently(ctx, key, buf[:0], true, &v)
	runtime.KeepAlive(m)
	if err != nil || !found {
		return 0, false, err
	}
	n, ok = counterIn(v, out)
	return n, ok, nil
}

// ttlPatiently is TTL for MapKeyValue (see readPatiently).
func (m *Map) ttlPatiently(ctx context.Context, key string) (d time.Duration, ok bool, err error) {
	defer catchFault(m.a, guard(), &err)
	var v view
	_, found, err := m.readPatiently(ctx, key, nil, false, &v)
	runtime.KeepAlive(m)
	if err != nil || !found {
		return 0, false, err
	}
	return ttlOf(v), true, nil
}
