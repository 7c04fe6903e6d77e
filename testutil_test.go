package shmarena

import (
	"encoding/binary"
	"os"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// fixedSeed makes every arena the test creates hash with seed 1, so that
// which keys collide is the same in every run (fuzz targets replay their
// inputs); it is undone when the test ends.
func fixedSeed(t testing.TB) {
	s := uint64(1)
	seedForTest = &s
	t.Cleanup(func() { seedForTest = nil })
}

// patch64 replaces the little-endian word at off in the file at path and
// returns the old value.
func patch64(path string, off int, v uint64) (uint64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var w [8]byte
	if _, err := f.ReadAt(w[:], int64(off)); err != nil {
		return 0, err
	}
	old := binary.LittleEndian.Uint64(w[:])
	binary.LittleEndian.PutUint64(w[:], v)
	_, err = f.WriteAt(w[:], int64(off))
	return old, err
}

// lapseNow puts key's deadline in the past, as a write would, so that a
// test can have lapsed entries without waiting for the clock: a TTL short
// enough to lapse during a test can as well lapse before the test is
// ready for it on a busy machine.
func lapseNow(t testing.TB, m *Map, key string) {
	t.Helper()
	h := m.hashKey(key)
	s := m.stripeOf(h)
	require.True(t, m.lock(s), "lock for %q", key)
	defer m.unlock(s)
	v, found := m.find(key, h)
	require.True(t, found, "%q is not in the map", key)
	odd := m.begin(s, v)
	mem.Store64(m.mem, v.off+sDeadline, 1) // 1 ns after the epoch
	m.noteDeadlines()
	require.True(t, m.end(v.off, odd), "slot of %q changed under its lock", key)
	m.clearIntent(s)
}

// lapsingTTLs are the lives a test of a deadline passing in the middle
// of an operation gives its entry, shortest first: a short one keeps the
// test fast, and a machine too busy for it (the entry lapsed before the
// operation reached it) gets the next.
var lapsingTTLs = []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second, 10 * time.Second}

// withLapsingTTL runs try with each of lapsingTTLs until try reports
// that the entry was still live where the test needed it (try returns
// false before asserting anything when it was not), so that the test
// judges what happens when a deadline passes, never how fast the machine
// got there.
func withLapsingTTL(t testing.TB, try func(ttl time.Duration) (reached bool)) {
	t.Helper()
	for _, ttl := range lapsingTTLs {
		if try(ttl) {
			return
		}
		t.Logf("the entry lapsed before the operation reached it with a TTL of %v: trying a longer one", ttl)
	}
	t.Fatalf("the entry lapsed before the operation reached it even with a TTL of %v", lapsingTTLs[len(lapsingTTLs)-1])
}
