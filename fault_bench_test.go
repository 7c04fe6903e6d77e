package shmarena

import (
	"runtime"
	"testing"
)

// BenchmarkFaultGuard measures what the guard against a truncated file
// (fault.go) costs the read path: a hit through AppendLoad, guarded, and
// the same read without the guard, in one run. Compare the two with
// benchstat over interleaved -count runs.
func BenchmarkFaultGuard(b *testing.B) {
	m, keys := benchMap(b)
	b.Run("unguarded", func(b *testing.B) {
		buf := make([]byte, 0, 128)
		for i := 0; b.Loop(); i++ {
			buf, _ = appendLoadUnguarded(m, buf[:0], keys[benchOrder[i%benchFill]])
		}
	})
	b.Run("guarded", func(b *testing.B) {
		buf := make([]byte, 0, 128)
		for i := 0; b.Loop(); i++ {
			buf, _ = m.AppendLoad(buf[:0], keys[benchOrder[i%benchFill]])
		}
	})
}

// appendLoadUnguarded is AppendLoad without its guard.
func appendLoadUnguarded(m *Map, dst []byte, key string) ([]byte, bool) {
	if key == "" || m.a.closed.Load() {
		return dst, false
	}
	_, out, ok := m.readKey(key, m.hashKey(key), dst, true)
	runtime.KeepAlive(m)
	return out, ok
}

// BenchmarkGuardAlone is the guard's own cost: a call that does nothing,
// with and without it.
func BenchmarkGuardAlone(b *testing.B) {
	a, _ := tempArena(b, 1<<20)
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			nothing(a)
		}
	})
	b.Run("guarded", func(b *testing.B) {
		for b.Loop() {
			nothingGuarded(a)
		}
	})
}

//go:noinline
func nothing(a *Arena) error { return nil }

//go:noinline
func nothingGuarded(a *Arena) (err error) {
	defer catchFault(a, guard(), &err)
	return nil
}
