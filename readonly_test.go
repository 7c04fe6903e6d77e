package shmarena

import (
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
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
	assert.Contains(t, err.Error(), "move to a new file to change it")
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

func init() {
	// region-churner churns every kind of region until killed, printing
	// nothing; it sets up the regions and groups itself.
	childRoles["region-churner"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		ev, pl, tm, r, err := churnedRegions(a)
		if err != nil {
			return err
		}
		g, err := r.Group("audit", WithTopic("t"))
		if err != nil {
			return err
		}
		q, err := r.Group("mailer", WithAck(time.Minute))
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
		for n := 0; ; n++ {
			k := strconv.Itoa(rng.IntN(20000))
			switch rng.IntN(10) {
			case 0, 1, 2:
				if err := ev.Store("e"+k, []byte("value-"+k), WithTTL(time.Duration(1+rng.IntN(50))*time.Millisecond)); err != nil {
					return err
				}
			case 3:
				ev.Delete("e" + k)
			case 4:
				if _, err := ev.Add("c"+strconv.Itoa(rng.IntN(300)), 1); err != nil {
					return err
				}
			case 5:
				_ = pl.Store("p"+strconv.Itoa(rng.IntN(6000)), []byte("v"+k))
				pl.Delete("p" + strconv.Itoa(rng.IntN(6000)))
			case 6:
				if err := tm.Store("r"+k, testRoute{"10.0.0." + k, n}); err != nil {
					return err
				}
			case 7:
				if _, err := tm.Update("r"+strconv.Itoa(rng.IntN(2000)), func(o testRoute, _ bool) (testRoute, bool) { o.Weight++; return o, true }); err != nil {
					return err
				}
			case 8:
				_, _ = r.Publish("t", []byte("rec "+k))
			case 9:
				g.Claim(4)
				if recs := q.Claim(4); len(recs) > 1 {
					_ = q.Ack(recs[1:]...)
				}
			}
		}
	}
}

// churnedRegions opens (or creates) the regions region-churner churns.
func churnedRegions(a *Arena) (ev, pl *Map, tm *TypedMap[testRoute], r *Ring, err error) {
	if ev, err = a.Map("cache", WithSlots(8192), WithSlotSize(128), WithEviction()); err != nil {
		return
	}
	if pl, err = a.Map("plain", WithSlots(8193), WithSlotSize(128)); err != nil {
		return
	}
	if tm, err = OpenTypedMap[testRoute](a, "routes", WithSlots(1024), WithEviction()); err != nil {
		return
	}
	r, err = a.Ring("events", WithSlots(256), WithSlotSize(128), WithMaxInFlight(8))
	return
}

// readEveryRegion calls every read method of a read-only handle on the
// churned regions and checks every write is refused with ErrReadOnly.
func readEveryRegion(t *testing.T, ro *Arena) {
	ev, pl, tm, r, err := churnedRegions(ro)
	require.NoError(t, err)
	for _, m := range []*Map{ev, pl, tm.Bytes()} {
		for i := range 300 / raceSlowdown {
			k := strconv.Itoa(i)
			m.Load("e" + k)
			m.Exists("p" + k)
			m.Counter("c" + k)
			m.TTL("e" + k)
			m.AppendLoad(nil, "r"+k)
		}
		n := 0
		for range m.All() {
			n++
		}
		for range m.Keys() {
			n++
		}
		_ = m.Stats()
		_ = m.Len()
		m.Clear() // does nothing on a read-only handle
		require.ErrorIs(t, m.Store("x", []byte("y")), ErrReadOnly)
		_, err := m.Add("c1", 1)
		require.ErrorIs(t, err, ErrReadOnly)
		_, _, err = m.LoadOrStore("x", []byte("y"))
		require.ErrorIs(t, err, ErrReadOnly)
		assert.False(t, m.Delete("e1"))
		assert.False(t, m.Expire("e1", time.Second))
	}
	for i := range 100 {
		_, _, _ = tm.Load("r" + strconv.Itoa(i))
	}
	for range tm.All() {
	}
	_, err = tm.Update("r1", func(o testRoute, _ bool) (testRoute, bool) { return o, true })
	require.ErrorIs(t, err, ErrReadOnly)
	_ = tm.Len()
	_ = r.Stats()
	_ = r.Groups()
	_ = r.Head()
	c := r.Cursor(FromStart())
	c.Read(64)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	_ = c.Wait(ctx)
	cancel()
	_, err = r.Group("audit", WithTopic("t"))
	require.ErrorIs(t, err, ErrReadOnly)
	_, err = r.Publish("t", []byte("x"))
	require.ErrorIs(t, err, ErrReadOnly)
	_, err = ro.Check()
	require.NoError(t, err)
	_, err = ro.Locks()
	require.NoError(t, err)
	_, err = ro.Info()
	require.NoError(t, err)
	_, err = ro.Stats()
	require.NoError(t, err)
	_, err = ro.RecoverLocks()
	require.ErrorIs(t, err, ErrReadOnly)
}

// A read-only handle reads every region while a writer churns them, and
// after the writer is SIGKILLed mid-write reads them all again without
// writing a byte (no repair, no use count, no collection).
func TestReadOnlyAgainstKilledWriter(t *testing.T) {
	a, path := tempArena(t, 16<<20)
	_, _, _, _, err := churnedRegions(a)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	for round := range 2 {
		w := child(t, "region-churner", "SHMARENA_PATH="+path)
		require.NoError(t, w.Start())
		ro, err := Open(path, ReadOnly())
		require.NoError(t, err)
		ev, _, _, _, err := churnedRegions(ro)
		require.NoError(t, err)
		moved0 := ev.Stats().Moved
		require.Eventually(t, func() bool { return ev.Stats().Moved > moved0+1000 }, hangBound, time.Millisecond,
			"the writer churns the evicting map")
		readEveryRegion(t, ro) // while the writer runs: no panic, no fault
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		require.NoError(t, w.Process.Signal(syscall.SIGKILL))
		_ = w.Wait()
		before := fileHash(t, path)
		func() {
			defer func(d time.Duration) { oddPatience = d }(oddPatience)
			oddPatience = 2 * time.Millisecond
			readEveryRegion(t, ro)
			fs, err := ro.Check()
			require.NoError(t, err)
			assert.Empty(t, fs, "round %d: Check after a SIGKILL", round)
		}()
		require.NoError(t, ro.Close())
		require.Equal(t, before, fileHash(t, path), "round %d: a read-only handle wrote to the file", round)
	}
}
