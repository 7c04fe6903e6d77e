package shmarena

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fileHash returns the SHA-256 of the file at path.
func fileHash(t testing.TB, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

// busyArena fills an arena with what a read may want to touch: a live
// key, a counter, a lapsed key (a writable reader would collect it), a
// ring with records and an acking group holding a lease.
func busyArena(t *testing.T) string {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("v")))
	_, err = m.Add("n", 7)
	require.NoError(t, err)
	require.NoError(t, m.Store("gone", []byte("x"), WithTTL(time.Millisecond)))
	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64), WithMaxInFlight(4))
	require.NoError(t, err)
	for _, p := range []string{"a", "b", "c"} {
		_, err := r.Publish("t", []byte(p))
		require.NoError(t, err)
	}
	g, err := r.Group("g", FromStart(), WithAck(time.Minute))
	require.NoError(t, err)
	require.Len(t, g.Claim(1), 1)
	require.NoError(t, a.Close())
	time.Sleep(5 * time.Millisecond) // "gone" lapses
	return path
}

func TestReadOnlyReadsAndRefusesWrites(t *testing.T) {
	path := busyArena(t)
	before := fileHash(t, path)

	a, err := Open(path, ReadOnly())
	require.NoError(t, err)
	assert.True(t, a.ReadOnly())
	m, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	v, ok := m.Load("k")
	require.True(t, ok)
	assert.Equal(t, "v", string(v))
	n, ok := m.Counter("n")
	assert.True(t, ok)
	assert.EqualValues(t, 7, n)
	_, ok = m.Load("gone") // lapsed: absent, and not collected
	assert.False(t, ok)
	assert.Equal(t, 3, m.Len(), "the lapsed entry stays until a writer collects it")
	assert.Zero(t, m.Stats().Expired)
	keys := 0
	for range m.All() {
		keys++
	}
	assert.Equal(t, 2, keys)

	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64), WithMaxInFlight(4))
	require.NoError(t, err)
	recs := r.Cursor(FromStart()).Read(0)
	require.Len(t, recs, 3)
	assert.Equal(t, "c", string(recs[2].Payload))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, r.Cursor().Wait(ctx), context.DeadlineExceeded)

	for name, err := range map[string]error{
		"Store": m.Store("k", []byte("w")),
		"Add":   func() error { _, err := m.Add("n", 1); return err }(),
		"Swap":  func() error { _, _, err := m.Swap("k", nil); return err }(),
		"LoadOrStore": func() error {
			_, _, err := m.LoadOrStore("new", nil)
			return err
		}(),
		"CompareAndSwap": func() error { _, err := m.CompareAndSwap("k", []byte("v"), nil); return err }(),
		"Publish":        func() error { _, err := r.Publish("t", nil); return err }(),
		"PublishWait":    func() error { _, err := r.PublishWait(context.Background(), "t", nil); return err }(),
		"Group":          func() error { _, err := r.Group("g"); return err }(),
		"DropGroup":      r.DropGroup("g"),
		"new map":        func() error { _, err := a.Map("other"); return err }(),
		"new ring":       func() error { _, err := a.Ring("other"); return err }(),
		"typed update": func() error {
			tm := &TypedMap[int]{m: m}
			_, err := tm.Update("k", func(int, bool) (int, bool) { return 1, true })
			return err
		}(),
	} {
		require.ErrorIs(t, err, ErrReadOnly, name)
		assert.Contains(t, err.Error(), "open the arena without", name)
	}
	assert.False(t, m.Delete("k"))
	_, ok = m.LoadAndDelete("k")
	assert.False(t, ok)
	assert.False(t, m.CompareAndDelete("k", []byte("v")))
	assert.False(t, m.Expire("k", time.Hour))
	require.NoError(t, a.Sync())

	assert.Equal(t, before, fileHash(t, path), "changed while the read-only handle was open")
	require.NoError(t, a.Close())
	assert.Equal(t, before, fileHash(t, path), "changed by the read-only handle's Close")
}

func TestReadOnlyTakesNoProcessEntry(t *testing.T) {
	path := busyArena(t)
	w, err := Open(path)
	require.NoError(t, err)
	defer w.Close()
	ro, err := Open(path, ReadOnly())
	require.NoError(t, err)
	alive := 0
	for _, e := range w.own.List() {
		if e.Alive {
			alive++
		}
	}
	assert.Equal(t, 1, alive, "only the writable handle holds an entry")
	// The read-only handle still tells the live writer from the dead.
	assert.True(t, ro.own.Alive(w.self))
	assert.False(t, ro.own.Alive(0))
	require.NoError(t, w.Close())
	assert.False(t, ro.own.Alive(w.self))
	require.NoError(t, ro.Close())
}

// A read-only reader meets a slot a dead writer left half-written, and a
// publish lock a dead producer holds: it reports the key absent and the
// ring empty, repairs nothing and writes nothing.
func TestReadOnlyRepairsNothing(t *testing.T) {
	path := busyArena(t)
	w, err := Open(path)
	require.NoError(t, err)
	m, err := w.Map("m", WithSlots(64))
	require.NoError(t, err)
	h := m.hashKey("k")
	v, found := m.find("k", h)
	require.True(t, found)
	s := m.stripeOf(h)
	r, err := w.Ring("r", WithSlots(8), WithSlotSize(64), WithMaxInFlight(4))
	require.NoError(t, err)
	ringLock := r.off + rl.OffLock
	mapLock := m.lockOff(s)
	slotVer := v.off + sVersion
	require.NoError(t, w.Close())
	dead := uint64(1)<<16 | 200 // entry 199, generation 1: never taken, so dead
	_, err = patch64(path, mapLock, dead)
	require.NoError(t, err)
	_, err = patch64(path, slotVer, m.begun(v.ver, s))
	require.NoError(t, err)
	_, err = patch64(path, ringLock, dead)
	require.NoError(t, err)
	before := fileHash(t, path)

	defer func(d, c time.Duration) { oddPatience, holeCheckAfter = d, c }(oddPatience, holeCheckAfter)
	oddPatience, holeCheckAfter = time.Millisecond, time.Millisecond
	a, err := Open(path, ReadOnly())
	require.NoError(t, err)
	rm, err := a.Map("m", WithSlots(64))
	require.NoError(t, err)
	_, ok := rm.Load("k")
	assert.False(t, ok, "a half-written slot reads absent")
	assert.NotZero(t, mem.Load64(a.mem, slotVer)&1, "the slot was left as the dead writer left it")
	rr, err := a.Ring("r", WithSlots(8), WithSlotSize(64), WithMaxInFlight(4))
	require.NoError(t, err)
	c := rr.Cursor()
	for i := 0; i < 5; i++ {
		_, ok := c.Next()
		assert.False(t, ok)
		time.Sleep(2 * time.Millisecond)
	}
	assert.Equal(t, dead, mem.Load64(a.mem, ringLock), "the dead producer's lock was not taken over")
	require.NoError(t, a.Close())
	assert.Equal(t, before, fileHash(t, path))

	// A writable handle does the repairs the read-only one left.
	w, err = Open(path)
	require.NoError(t, err)
	defer w.Close()
	m, err = w.Map("m", WithSlots(64))
	require.NoError(t, err)
	_, _ = m.Load("k")
	assert.NotEqual(t, before, fileHash(t, path))
}

func TestReadOnlyOpenErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir+"/missing", ReadOnly(), WithSize(1<<20))
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "never creates")
	_, err = os.Stat(dir + "/missing")
	assert.True(t, errors.Is(err, os.ErrNotExist), "nothing was created")
	_, err = OpenMemfd("x", WithSize(1<<20), ReadOnly())
	require.ErrorIs(t, err, ErrInvalid)

	path := busyArena(t)
	_, err = Open(path, ReadOnly(), WithSize(8<<20))
	require.ErrorIs(t, err, ErrSizeMismatch)
	assert.Contains(t, err.Error(), "remove the file to change it")
	_, err = Open("")
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "the path is empty")

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	a, err := OpenFile(f, ReadOnly())
	require.NoError(t, err, "a read-only descriptor attaches read-only")
	assert.True(t, a.ReadOnly())
	require.NoError(t, a.Close())
}

// A read-only handle on an evicting map counts no use on a hit (the
// mapping is read-only: a write would fault), and Clear does nothing.
func TestReadOnlyEvictingMapWritesNothing(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("cache", WithSlots(64), WithSlotSize(64), WithEviction())
	require.NoError(t, err)
	for i := range 40 {
		require.NoError(t, m.Store("k"+strconv.Itoa(i), []byte("v")))
	}
	before := fileHash(t, path)
	ro, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer ro.Close()
	mr, err := ro.Map("cache", WithSlots(64), WithSlotSize(64), WithEviction())
	require.NoError(t, err)
	hits := 0
	for range 5 {
		for i := range 40 {
			if _, ok := mr.Load("k" + strconv.Itoa(i)); ok {
				hits++
			}
			mr.Exists("absent" + strconv.Itoa(i))
		}
	}
	require.Positive(t, hits)
	mr.Clear()
	require.Equal(t, m.Len(), mr.Len(), "Clear on a read-only handle does nothing")
	require.Positive(t, mr.Len())
	require.Equal(t, before, fileHash(t, path), "a read-only handle wrote to the file")
}
