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

// shortLives are the lives (TTLs, leases, delays) a test of something
// running out in the middle of its work gives it, shortest first: a short
// life keeps the test fast, and a machine too busy for it (the life ran
// out before the test reached the point that needed it alive) gets the
// next.
var shortLives = []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second, 10 * time.Second}

// withShortLife runs try with each of shortLives until try reports that
// what it gave that life was still alive where the test needed it (try
// returns false, before asserting what depends on it, when it was not),
// so that the test judges what happens when a life runs out, never how
// fast the machine got there. A behaviour that is wrong fails with every
// life.
func withShortLife(t testing.TB, try func(life time.Duration) (reached bool)) {
	t.Helper()
	for _, life := range shortLives {
		if try(life) {
			return
		}
		t.Logf("a life of %v ran out before the test reached the point that needed it: trying a longer one", life)
	}
	t.Fatalf("a life of %v ran out before the test reached the point that needed it", shortLives[len(shortLives)-1])
}

// hangBound is how long a test waits for what must happen (a takeover
// after a kill, a wake-up, a survivor's next operation) before it calls
// it a hang. It detects hangs and judges no speed: a loaded machine can
// stall a process for seconds, and how fast these happen is measured by
// benchmarks (BenchmarkRecoveryAfterKill, BenchmarkContended*).
const hangBound = 30 * time.Second

// loadPatiently is Load for a test that checks a present key is found
// while other goroutines write. A lock-free read that keeps losing to
// writers (64 changed versions in a row, or a writer inside its write for
// oddPatience) gives up and reports the key absent, counted in
// Stats().Busy; on a busy machine a descheduled writer is enough. A miss
// that came with a Busy count is read again; any other miss is returned,
// so a present key reported absent for another reason still fails.
func loadPatiently(m *Map, key string) ([]byte, bool) {
	for try := 0; ; try++ {
		busy := mem.Load64(m.mem, m.base+mhBusy)
		v, ok := m.Load(key)
		if ok || mem.Load64(m.mem, m.base+mhBusy) == busy || try == 1000 {
			return v, ok
		}
	}
}

// raceScaled returns n, or n/raceSlowdown (at least 1) under the race
// detector: a long test does less of the same work there, where every
// operation costs several times more, so that the race run keeps wide
// headroom under its timeout; the plain run, which CI also does, keeps
// the full size.
func raceScaled(n int) int { return max(1, n/raceSlowdown) }
