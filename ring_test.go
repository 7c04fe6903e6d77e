package shmarena

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func openTestArena(t testing.TB, size int64) (*Arena, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "arena")
	a, err := Open(path, WithSize(size))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return a, path
}

func TestRingPublishRead(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("work", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), r.Head())
	c := r.Cursor()
	_, ok := c.Next()
	assert.False(t, ok)

	seq, err := r.Publish("jobs", []byte("hello"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), seq)
	seq, err = r.Publish("", nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), seq)
	assert.Equal(t, uint64(3), r.Head())

	rec, ok := c.Next()
	require.True(t, ok)
	assert.Equal(t, Record{Topic: "jobs", Payload: []byte("hello"), Seq: 1}, rec)
	rec, ok = c.Next()
	require.True(t, ok)
	assert.Equal(t, "", rec.Topic)
	assert.Empty(t, rec.Payload)
	assert.Equal(t, uint64(2), rec.Seq)
	_, ok = c.Next()
	assert.False(t, ok)
	assert.Equal(t, CursorStats{Position: 3, Delivered: 2}, c.Stats())

	// The payload is a copy.
	p := []byte("abc")
	_, err = r.Publish("t", p)
	require.NoError(t, err)
	rec, _ = c.Next()
	rec.Payload[0] = 'X'
	again := r.Cursor(FromStart()).Read(0)
	require.Len(t, again, 3)
	assert.Equal(t, []byte("abc"), again[2].Payload)

	// Exactly a slot's worth fits; one byte more is refused.
	max := 64 - rl.SBody
	_, err = r.Publish("tt", make([]byte, max-2))
	require.NoError(t, err)
	_, err = r.Publish("tt", make([]byte, max-1))
	assert.ErrorIs(t, err, ErrTooLarge)
	st := r.Stats()
	assert.Equal(t, RingStats{Published: 4, Oversize: 1, Slots: 16, SlotSize: 64}, st)

	// Same shape joins; another shape is ErrShape naming the field.
	_, err = a.Ring("work", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	_, err = a.Ring("work", WithSlots(32), WithSlotSize(64))
	assert.ErrorIs(t, err, ErrShape)
	assert.Contains(t, err.Error(), "slots")
	_, err = a.Ring("bad", WithSlots(1))
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = a.Ring("bad", WithStripes(4))
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestRingSlowReaderLapped(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("small", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	c := r.Cursor()
	publish := func(n int) {
		for i := 0; i < n; i++ {
			_, err := r.Publish("t", []byte(fmt.Sprint(i)))
			require.NoError(t, err)
		}
	}
	publish(3)
	_, ok := c.Next()
	require.True(t, ok)
	publish(20) // 23 published; the ring holds 16..23
	recs := c.Read(0)
	require.Len(t, recs, 8)
	assert.Equal(t, uint64(16), recs[0].Seq)
	assert.Equal(t, uint64(23), recs[7].Seq)
	st := c.Stats()
	assert.Equal(t, uint64(9), st.Delivered)
	assert.Equal(t, uint64(14), st.Lapped) // seqs 2..15
	assert.Equal(t, uint64(23), st.Delivered+st.Lapped+st.Abandoned)
	assert.Equal(t, uint64(24), st.Position)

	// A replay from the start sees the 8 held records.
	fs := r.Cursor(FromStart())
	assert.Len(t, fs.Read(0), 8)

	// Read(n) limits; groups lap too.
	g, err := r.Group("g", FromStart())
	require.NoError(t, err)
	publish(30)
	got := g.Claim(3)
	require.Len(t, got, 3)
	gs := g.Stats()
	assert.Equal(t, uint64(3), gs.Delivered)
	assert.Equal(t, gs.Position-16, gs.Delivered+gs.Lapped+gs.Skipped+gs.Abandoned)
	assert.Positive(t, gs.Lapped)
}

func TestGroupTopics(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("work", WithSlots(64), WithSlotSize(64))
	require.NoError(t, err)
	jobs, err := r.Group("jobs", WithTopic("jobs"))
	require.NoError(t, err)
	all, err := r.Group("all")
	require.NoError(t, err)
	c := r.Cursor()
	for i := 0; i < 10; i++ {
		topic := "jobs"
		if i%2 == 1 {
			topic = "logs"
		}
		_, err := r.Publish(topic, []byte{byte(i)})
		require.NoError(t, err)
	}
	late, err := r.Group("late")
	require.NoError(t, err)
	assert.Empty(t, late.Claim(0), "a group created after publishing starts at the head")
	replay, err := r.Group("replay", FromStart())
	require.NoError(t, err)
	assert.Len(t, replay.Claim(0), 10)

	got := jobs.Claim(0)
	require.Len(t, got, 5)
	for _, rec := range got {
		assert.Equal(t, "jobs", rec.Topic)
	}
	assert.Len(t, all.Claim(0), 10, "groups do not consume from each other")
	assert.Len(t, c.Read(0), 10, "a cursor sees everything")
	st := jobs.Stats()
	assert.Equal(t, GroupStats{Name: "jobs", Topic: "jobs", Position: 11, Delivered: 5, Skipped: 5, Mine: 5}, st)
	assert.Equal(t, "jobs", jobs.Topic())
	assert.Equal(t, uint64(11), jobs.Position())

	// Joining shares the position; another topic is an error naming it.
	j2, err := r.Group("jobs", WithTopic("jobs"))
	require.NoError(t, err)
	assert.Empty(t, j2.Claim(0))
	_, err = r.Group("jobs", WithTopic("logs"))
	assert.ErrorIs(t, err, ErrShape)
	assert.Contains(t, err.Error(), `"jobs"`)
	assert.Contains(t, err.Error(), `"logs"`)
	_, err = r.Group("jobs")
	assert.ErrorIs(t, err, ErrShape)

	// The table holds 64 groups.
	for i := 0; i < 64-4; i++ {
		_, err := r.Group(fmt.Sprintf("g%d", i))
		require.NoError(t, err)
	}
	_, err = r.Group("one-too-many")
	assert.ErrorIs(t, err, ErrTooManyGroups)
	_, err = r.Group("all")
	assert.NoError(t, err, "joining still works when the table is full")
	_, err = r.Group("")
	assert.ErrorIs(t, err, ErrInvalid)
}

// A cancel or a Close wakes a sleeper, not the backstop, which is raised
// to an hour so that only a real wake passes.
func TestRingWaitCancelAndClose(t *testing.T) {
	defer func(d time.Duration) { waitBackstop = d }(waitBackstop)
	waitBackstop = time.Hour
	const prompt = time.Minute // a hang detector: only a real wake returns before the backstop
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("w", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	c := r.Cursor()
	g, err := r.Group("g")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan time.Time, 2)
	errs := make(chan error, 2)
	go func() { errs <- c.Wait(ctx); done <- time.Now() }()
	go func() { errs <- g.Wait(ctx); done <- time.Now() }()
	for r.sleepers() < 2 {
		time.Sleep(time.Millisecond) // polling for a state, not synchronising on time
	}
	t0 := time.Now()
	cancel()
	for i := 0; i < 2; i++ {
		assert.ErrorIs(t, <-errs, context.Canceled)
		assert.Less(t, (<-done).Sub(t0), prompt)
	}

	// A publish wakes a sleeper; something readable returns at once.
	go func() { errs <- c.Wait(context.Background()) }()
	for r.sleepers() < 1 {
		time.Sleep(time.Millisecond)
	}
	_, err = r.Publish("x", nil)
	require.NoError(t, err)
	require.NoError(t, <-errs)
	require.NoError(t, g.Wait(context.Background()))

	// Close wakes sleepers with ErrClosed; everything after is closed.
	c.Read(0)
	g.Claim(0)
	go func() { errs <- c.Wait(context.Background()) }()
	for r.sleepers() < 1 {
		time.Sleep(time.Millisecond)
	}
	t0 = time.Now()
	require.NoError(t, a.Close())
	assert.ErrorIs(t, <-errs, ErrClosed)
	assert.Less(t, time.Since(t0), prompt)

	_, err = r.Publish("x", nil)
	assert.ErrorIs(t, err, ErrClosed)
	assert.Zero(t, r.Head())
	assert.Zero(t, r.Stats())
	_, ok := c.Next()
	assert.False(t, ok)
	assert.Nil(t, c.Read(0))
	assert.Zero(t, c.Stats())
	assert.Nil(t, g.Claim(0))
	assert.Zero(t, g.Position())
	assert.Zero(t, g.Stats())
	assert.ErrorIs(t, g.Wait(context.Background()), ErrClosed)
	_, err = r.Group("h")
	assert.ErrorIs(t, err, ErrClosed)
	_, err = a.Ring("w")
	assert.ErrorIs(t, err, ErrClosed)
	for range g.Records(context.Background()) {
		t.Fatal("records after close")
	}
	_, ok = r.Cursor().Next()
	assert.False(t, ok)
}

func TestRingResetAfterReboot(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("w", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	_, err = r.Publish("a", []byte("1"))
	require.NoError(t, err)
	// Fake a producer of a previous boot that died holding the lock,
	// half-way through record 2.
	mem.Store64(r.b, r.off+rl.OffLock, a.self)
	mem.Store64(r.b, r.slotOff(2)+rl.SBegin, 2)
	require.NoError(t, a.Close())

	boot := [16]byte{1, 2, 3}
	owner.SetBootIDForTest(&boot)
	defer owner.SetBootIDForTest(nil)
	a2, err := Open(path)
	require.NoError(t, err)
	defer a2.Close()
	r2, err := a2.Ring("w", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	seq, err := r2.Publish("b", nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), seq)
	assert.Equal(t, uint64(1), r2.Stats().Abandoned)
	c := r2.Cursor(FromStart())
	recs := c.Read(0)
	require.Len(t, recs, 2)
	assert.Equal(t, uint64(1), recs[0].Seq)
	assert.Equal(t, uint64(3), recs[1].Seq)
	assert.Equal(t, uint64(1), c.Stats().Abandoned)
}

func TestRingValidateOnAttach(t *testing.T) {
	a, path := openTestArena(t, 1<<20)
	r, err := a.Ring("w", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	g, err := r.Group("g", WithAck(time.Second), WithMaxDeliveries(2)) // entry 0
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := r.Publish("t", nil)
		require.NoError(t, err)
	}
	require.Len(t, g.Claim(0), 3) // floor 1, position 4, head 4
	off := r.off
	require.NoError(t, a.Close())
	for _, tc := range []struct {
		name string
		at   int
		v    uint64
	}{
		{"magic", rl.OffMagic, 1}, {"slots", rl.OffSlots, 9}, {"slot size", rl.OffSlotSize, 72},
		{"next", rl.OffNext, 0}, {"group state", rl.GroupOff(3) + rl.GState, 7},
		{"abandoned", rl.OffAbandoned, 5}, {"hole sequence", rl.OffHoleSeq, 5}, {"hole count", rl.OffHoleCount, 1},
		{"floor cache", rl.OffFloor, 99}, {"max in flight", rl.OffInFlight, 7},
		{"group flags", rl.GroupOff(0) + rl.GFlags, 4}, {"group flags ack unprotected", rl.GroupOff(0) + rl.GFlags, rl.FlagAck},
		{"group lease", rl.GroupOff(0) + rl.GLease, 0}, {"group floor", rl.GroupOff(0) + rl.GFloor, 5},
		{"group floor zero", rl.GroupOff(0) + rl.GFloor, 0}, {"group max deliveries", rl.GroupOff(0) + rl.GMaxDeliv, 1 << 31},
		{"group dead-letter topic length", rl.GroupOff(0) + rl.GMaxDeliv, 65 << 32},
		{"group lease journal count", rl.GroupOff(0) + rl.GLField, 8}, {"group claim journal", rl.GroupOff(0) + rl.GJPos, 1 << 62},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, err := patch64(path, off+tc.at, tc.v)
			require.NoError(t, err)
			_, err = Open(path)
			assert.ErrorIs(t, err, ErrCorrupt)
			_, err = patch64(path, off+tc.at, old)
			require.NoError(t, err)
			a, err := Open(path)
			require.NoError(t, err)
			a.Close()
		})
	}
}

func init() {
	childRoles["ring-sleeper"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		r, err := a.Ring("r", WithSlots(8), WithSlotSize(64))
		if err != nil {
			return err
		}
		return r.Cursor().Wait(context.Background()) // killed while asleep
	}
}

// A reader killed while asleep costs at most one wake system call: the
// next publish clears the waiters flag it set.
func TestKilledSleeperCostsOneWake(t *testing.T) {
	a, path := tempArena(t, 1<<20)
	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	c := child(t, "ring-sleeper", "SHMARENA_PATH="+path)
	require.NoError(t, c.Start())
	deadline := time.Now().Add(10 * time.Second)
	for r.sleepers() == 0 {
		require.True(t, time.Now().Before(deadline), "the child never slept")
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, c.Process.Kill())
	_ = c.Wait()
	flag := func() uint32 { return mem.Load32(r.b, r.off+rl.OffFutex) & futexWaiters }
	require.Equal(t, uint32(futexWaiters), flag())
	_, err = r.Publish("", []byte("x"))
	require.NoError(t, err)
	require.Zero(t, flag(), "the publish cleared the flag; later ones make no system call")
}

// Records of one Read or Claim share an allocation; appending to one
// payload must not write into the next.
func TestRingBatchPayloadsAreIsolated(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("iso", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	c := r.Cursor()
	g, err := r.Group("g")
	require.NoError(t, err)
	for _, p := range []string{"", "aa", "bb", "cc"} {
		_, err := r.Publish("t", []byte(p))
		require.NoError(t, err)
	}
	for name, recs := range map[string][]Record{"Read": c.Read(0), "Claim": g.Claim(0)} {
		require.Len(t, recs, 4, name)
		require.NotNil(t, recs[0].Payload, "%s: an empty payload is empty, not nil", name)
		require.Empty(t, recs[0].Payload, name)
		recs = recs[1:]
		recs[0].Payload = append(recs[0].Payload, 'X')
		assert.Equal(t, "aaX", string(recs[0].Payload), name)
		assert.Equal(t, "bb", string(recs[1].Payload), name)
		assert.Equal(t, "cc", string(recs[2].Payload), name)
		assert.Equal(t, []uint64{2, 3, 4}, []uint64{recs[0].Seq, recs[1].Seq, recs[2].Seq}, name)
	}
	assert.Equal(t, uint64(4), g.Stats().Delivered)
	assert.Equal(t, uint64(4), g.Stats().Mine)
}

// A group reuses the last topic string it claimed; the topics it returns
// are still each record's own, across Claims and topic changes.
func TestGroupTopicsAcrossClaims(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("topics", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	g, err := r.Group("g")
	require.NoError(t, err)
	want := []string{"x", "y", "y", "", "x"}
	for _, tp := range want {
		_, err := r.Publish(tp, []byte("p"))
		require.NoError(t, err)
	}
	var got []string
	for range want {
		recs := g.Claim(1)
		require.Len(t, recs, 1)
		got = append(got, recs[0].Topic)
	}
	assert.Equal(t, want, got)
}

// Records stops when ctx ends even while records keep coming: it claims
// nothing with a cancelled ctx, and a cancel inside the loop ends it before
// the next claim, leaving the rest to the other members.
func TestGroupRecordsStopsOnCancel(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r, err := a.Ring("rec", WithSlots(16), WithSlotSize(64))
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		_, err := r.Publish("", []byte{byte(i)})
		require.NoError(t, err)
	}
	// A bound on every wait, so a broken Records fails rather than hangs.
	bound, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()

	g, err := r.Group("cancelled", FromStart())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(bound)
	cancel()
	n := 0
	for range g.Records(ctx) {
		n++
	}
	assert.Zero(t, n, "a cancelled ctx yields nothing")
	assert.Equal(t, uint64(1), g.Position(), "nor claims anything")

	g, err = r.Group("midway", FromStart())
	require.NoError(t, err)
	ctx, cancel = context.WithCancel(bound)
	defer cancel()
	var got []uint64
	for rec := range g.Records(ctx) {
		got = append(got, rec.Seq)
		if len(got) == 2 {
			cancel()
		}
	}
	assert.Equal(t, []uint64{1, 2}, got, "the loop ends at the first claim after the cancel")
	assert.Equal(t, uint64(3), g.Position())
	assert.Len(t, g.Claim(0), 3, "the rest stays for other members")
}
