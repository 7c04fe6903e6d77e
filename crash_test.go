package shmarena

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Crash tests: a child process reaches a crash point (crashHook) inside a
// critical section, tells the parent by a line on stdout, and sleeps; the
// parent SIGKILLs it there and checks that the others recover in bounded
// time with every value whole and every count right.

// The crash map's shape. Few stripes, so neighbours share the victim's.
const (
	crashSlots    = 16384
	crashSlotSize = 96
	crashStripes  = 4
	crashBound    = hangBound
)

func crashMap(a *Arena) (*Map, error) {
	return a.Map("crash", WithSlots(crashSlots), WithSlotSize(crashSlotSize), WithStripes(crashStripes))
}

// takeovers collects every takeover time the crash tests measure, so each
// test can log the running median and maximum.
var takeovers struct {
	sync.Mutex
	all []time.Duration
}

func noteTakeover(t *testing.T, what string, d time.Duration) {
	t.Helper()
	takeovers.Lock()
	takeovers.all = append(takeovers.all, d)
	s := slices.Clone(takeovers.all)
	takeovers.Unlock()
	slices.Sort(s)
	t.Logf("takeover %s: %v (all %d so far: median %v, max %v)", what, d, len(s), s[len(s)/2], s[len(s)-1])
	assert.Less(t, d, crashBound, "%s: no takeover", what)
}

func init() {
	// crash-op runs one map operation (SHMARENA_OP) on SHMARENA_KEY and
	// parks at crash point SHMARENA_POINT until the parent kills it.
	childRoles["crash-op"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := crashMap(a)
		if err != nil {
			return err
		}
		parkAt(os.Getenv("SHMARENA_POINT"))
		key := os.Getenv("SHMARENA_KEY")
		switch op := os.Getenv("SHMARENA_OP"); op {
		case "store":
			err = m.Store(key, []byte(os.Getenv("SHMARENA_VAL")))
		case "delete":
			m.Delete(key)
		case "add":
			_, err = m.Add(key, 5)
		case "carve":
			_, err = a.Map(key, WithSlots(16), WithSlotSize(64), WithStripes(2))
		default:
			return fmt.Errorf("unknown op %q", op)
		}
		return fmt.Errorf("%s returned (%v) without reaching crash point %s", os.Getenv("SHMARENA_OP"), err, os.Getenv("SHMARENA_POINT"))
	}
}

// parkAt makes the process announce itself and sleep forever when it
// reaches crash point point.
func parkAt(point string) {
	lockedAddsForTest = point == "add" // only a locked Add reaches it
	crashHook = func(p string) {
		if p != point {
			return
		}
		fmt.Fprintf(os.Stdout, "AT %s\n", p)
		for {
			time.Sleep(time.Hour)
		}
	}
}

// killAt starts a crash-op child, waits until it is parked at its crash
// point, SIGKILLs and reaps it, and returns the time of the kill.
func killAt(t *testing.T, path, op, point, key, val string) time.Time {
	t.Helper()
	cmd := child(t, "crash-op", "SHMARENA_PATH="+path, "SHMARENA_OP="+op, "SHMARENA_POINT="+point,
		"SHMARENA_KEY="+key, "SHMARENA_VAL="+val)
	return killParked(t, cmd, point)
}

func killParked(t *testing.T, cmd *exec.Cmd, point string) time.Time {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child ended before crash point %s: %v", point, err)
	}
	require.Equal(t, "AT "+point+"\n", line)
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child status %v (%v)", cmd.ProcessState, err)
	return killed
}

// keyInStripe returns a key named prefix-N that hashes to stripe s.
func keyInStripe(m *Map, prefix string, s uint64) string {
	for i := 0; i < 1<<20; i++ {
		k := prefix + "-" + strconv.Itoa(i)
		if m.stripeOf(m.hashKey(k)) == s {
			return k
		}
	}
	panic(fmt.Sprintf("no key in stripe %d of a map of %d", s, m.stripes))
}

// tableCounts walks every slot and counts live entries and tombstones,
// requiring every slot to be at rest (even version).
func tableCounts(t *testing.T, m *Map) (used, tomb int) {
	t.Helper()
	for i := uint64(0); i < m.slots; i++ {
		off := m.slotOff(i)
		require.Zero(t, mem.Load64(m.mem, off+sVersion)&1, "slot %d left odd", i)
		tag := m.mem[m.tagBase+int(i)]
		switch meta := mem.Load64(m.mem, off+sMeta); metaState(meta) {
		case stateLive:
			used++
			require.Equal(t, tagOf(mem.Load64(m.mem, off+sHash)), tag, "slot %d: live, tagged %d", i, tag)
		case stateTombstone:
			tomb++
			require.Equal(t, byte(tagTombstone), tag, "slot %d: a tombstone tagged %d", i, tag)
		default:
			require.Zero(t, tag, "slot %d: empty, tagged %d", i, tag)
		}
	}
	return used, tomb
}

// crashFixture is a crash map with neighbours filled in, around a victim.
type crashFixture struct {
	a     *Arena
	path  string
	m     *Map
	s     uint64            // the victim's stripe
	neigh map[string]string // neighbour keys, several in the victim's stripe
}

func newCrashFixture(t *testing.T) *crashFixture {
	a, path := tempArena(t, 4<<20)
	m, err := crashMap(a)
	require.NoError(t, err)
	f := &crashFixture{a: a, path: path, m: m, s: 1, neigh: map[string]string{}}
	for i := 0; i < 24; i++ {
		k := "n" + strconv.Itoa(i)
		if i < 6 {
			k = keyInStripe(m, "same"+strconv.Itoa(i), f.s)
		}
		v := strings.Repeat(strconv.Itoa(i%10), 20+i)
		require.NoError(t, m.Store(k, []byte(v)))
		f.neigh[k] = v
	}
	// Some tombstones too, so their count is checked.
	for i := 0; i < 3; i++ {
		k := "gone" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, []byte("x")))
		require.True(t, m.Delete(k))
	}
	return f
}

// check verifies neighbours, the counts against a walk, and that the stripe
// and every other lock are free with no intent left.
func (f *crashFixture) check(t *testing.T, tookOver bool) {
	t.Helper()
	for k, v := range f.neigh {
		got, ok := f.m.Load(k)
		require.True(t, ok, "neighbour %q lost", k)
		require.Equal(t, v, string(got), "neighbour %q changed", k)
	}
	used, tomb := tableCounts(t, f.m)
	st := f.m.Stats()
	assert.Equal(t, used, st.Used, "Stats().Used against a walk of the table")
	assert.Equal(t, tomb, st.Tombstones, "Stats().Tombstones against a walk of the table")
	n := 0
	for range f.m.All() {
		n++
	}
	assert.Equal(t, used, n, "All() against a walk of the table")
	if tookOver {
		assert.Positive(t, st.Recoveries, "the takeover was not counted")
	} else {
		assert.Zero(t, st.Recoveries, "a victim that held no lock left something to recover")
	}
	for s := uint64(0); s < f.m.stripes; s++ {
		assert.Zero(t, rlock.Owner(f.m.mem, f.m.lockOff(s)), "stripe %d still held", s)
		assert.Zero(t, mem.Load64(f.m.mem, f.m.lockOff(s)+8), "stripe %d intent left", s)
	}
}

// writeSameStripe stores a new key in the victim's stripe and returns how
// long after killed it completed.
func (f *crashFixture) writeSameStripe(t *testing.T, killed time.Time) time.Duration {
	t.Helper()
	k := keyInStripe(f.m, "after", f.s)
	require.NoError(t, f.m.Store(k, []byte("written after the crash")))
	d := time.Since(killed)
	f.neigh[k] = "written after the crash"
	return d
}

// A writer killed inside each critical section of the map: the next writer
// of the stripe takes over within crashBound, the slot being written is
// old, new or absent (never a mix), neighbours and counts are intact.
func TestCrashWriterMidOperation(t *testing.T) {
	oldVal := strings.Repeat("o", 40)
	newVal := strings.Repeat("N", 50)
	for _, tc := range []struct {
		name, op, point, val string
		existing             bool   // victim stored before the crash
		counter              bool   // victim is a counter
		lockFree             bool   // the crash point holds no lock
		allowed              []any  // what the victim may read as afterwards (nil = absent)
		wantCounter          *int64 // for counters: the exact value
	}{
		{name: "store-overwrite", op: "store", point: "overwrite", val: newVal, existing: true, allowed: []any{nil, oldVal, newVal}},
		{name: "delete", op: "delete", point: "delete", existing: true, allowed: []any{nil, oldVal}},
		{name: "insert-claimed", op: "store", point: "claimed", val: newVal, allowed: []any{nil, newVal}},
		{name: "insert-unpublished", op: "store", point: "insert", val: newVal, allowed: []any{nil, newVal}},
		{name: "add-create-claimed", op: "add", point: "claimed", counter: true, allowed: []any{nil, int64(5)}},
		{name: "add-create-unpublished", op: "add", point: "insert", counter: true, allowed: []any{nil, int64(5)}},
		{name: "add-existing", op: "add", point: "add", existing: true, counter: true, allowed: []any{int64(10)}},
		// A lock-free Add killed before its compare-and-swap holds
		// nothing, so nothing is taken over (check, lockFree).
		{name: "add-in-place", op: "add", point: "add-in-place", existing: true, counter: true, lockFree: true, allowed: []any{int64(10)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.point == "add-in-place" && !mem.HasCAS128 {
				t.Skip("no 16-byte compare-and-swap on this architecture: Add takes the locked path, which the other cases cover")
			}
			f := newCrashFixture(t)
			victim := keyInStripe(f.m, "victim", f.s)
			if tc.existing {
				if tc.counter {
					_, err := f.m.Add(victim, 10)
					require.NoError(t, err)
				} else {
					require.NoError(t, f.m.Store(victim, []byte(oldVal)))
				}
			}
			killed := killAt(t, f.path, tc.op, tc.point, victim, tc.val)
			d := f.writeSameStripe(t, killed)
			noteTakeover(t, tc.name, d)

			var got any
			if tc.counter {
				if n, ok := f.m.Counter(victim); ok {
					got = n
				} else {
					require.False(t, f.m.Exists(victim), "victim present but not a counter")
				}
			} else if v, ok := f.m.Load(victim); ok {
				got = string(v)
			}
			require.Contains(t, tc.allowed, got, "victim reads as a value it never had")
			t.Logf("victim afterwards: %v", got)
			f.check(t, !tc.lockFree)
			// The stripe works normally afterwards, the victim included.
			if tc.counter {
				n, err := f.m.Add(victim, 1)
				require.NoError(t, err)
				if got == nil {
					require.Equal(t, int64(1), n)
				} else {
					require.Equal(t, got.(int64)+1, n)
				}
			} else {
				require.NoError(t, f.m.Store(victim, []byte("again")))
			}
			used, _ := tableCounts(t, f.m)
			require.Equal(t, used, f.m.Len())
		})
	}
}

// A reader that meets a slot left odd by a dead writer reports the key
// absent within crashBound, without any other writer coming along, and
// repairs it.
func TestCrashReaderMeetsDeadWriter(t *testing.T) {
	f := newCrashFixture(t)
	victim := keyInStripe(f.m, "victim", f.s)
	require.NoError(t, f.m.Store(victim, []byte("old")))
	killed := killAt(t, f.path, "store", "overwrite", victim, "new")
	// The dead child still owns the stripe and the slot is odd.
	require.NotZero(t, rlock.Owner(f.m.mem, f.m.lockOff(f.s)))
	v, found := f.m.Load(victim)
	d := time.Since(killed)
	noteTakeover(t, "reader", d)
	if found {
		require.Contains(t, []string{"old", "new"}, string(v))
	}
	require.False(t, found, "a slot repaired by the reader reads as absent")
	// The read itself repaired the stripe: the lock is free, no writer needed.
	f.check(t, true)
	require.NoError(t, f.m.Store(victim, []byte("fresh")))
	v, found = f.m.Load(victim)
	require.True(t, found)
	require.Equal(t, "fresh", string(v))
}

// A process that dies while recovering leaves a lock the next one can
// recover too: a writer dies mid-overwrite, a second process dies in
// the middle of taking its stripe over (holding it, the slot still odd,
// the segment's move version odd), and a third recovers.
func TestCrashRecovererDies(t *testing.T) {
	for _, point := range []string{"recover"} {
		t.Run(point, func(t *testing.T) {
			f := newCrashFixture(t)
			victim := keyInStripe(f.m, "victim", f.s)
			require.NoError(t, f.m.Store(victim, []byte("old")))
			killAt(t, f.path, "store", "overwrite", victim, "new")
			// The second writes to the same stripe, takes it over, and dies
			// inside the recovery.
			killed := killAt(t, f.path, "store", point, keyInStripe(f.m, "second", f.s), "v2")
			owner := rlock.Owner(f.m.mem, f.m.lockOff(f.s))
			require.NotZero(t, owner)
			require.False(t, f.a.own.Alive(owner), "the stripe is held by the dead recoverer")
			d := f.writeSameStripe(t, killed)
			noteTakeover(t, "after dead recoverer at "+point, d)
			_, found := f.m.Load(victim)
			require.False(t, found, "the half-written victim was cleared")
			f.check(t, true)
			// A write to every other stripe works at once too.
			for s := uint64(0); s < f.m.stripes; s++ {
				start := time.Now()
				k := keyInStripe(f.m, "each", s)
				require.NoError(t, f.m.Store(k, []byte("ok")))
				f.neigh[k] = "ok"
				require.Less(t, time.Since(start), crashBound)
			}
			f.check(t, true)
		})
	}
}

// A lock word is judged by the kernel, not by a pid: the token of a live
// handle (another handle of this very process) is respected; a token
// whose process-table entry has moved on to a newer generation, one naming
// an entry never taken, and one no entry can hold are dead and taken over.
func TestCrashStaleToken(t *testing.T) {
	f := newCrashFixture(t)
	other, err := Open(f.path)
	require.NoError(t, err)
	defer other.Close()
	i, gen := owner.Split(other.self)
	require.GreaterOrEqual(t, i, 0)
	require.True(t, f.a.own.Alive(other.self))
	for _, tc := range []struct {
		name string
		tok  uint64
	}{
		{"entry taken again since", owner.Token(i, gen-1)},
		{"entry never taken", owner.Token(owner.Entries-1, 7)},
		{"no such entry", 0xffff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lock := f.m.lockOff(f.s)
			// The live handle's lock is respected...
			mem.Store64(f.m.mem, lock, other.self)
			ok, _ := rlock.TryAcquire(f.m.mem, lock, f.a.own)
			require.False(t, ok, "a lock of a live handle was taken")
			// ...a stale or impossible token is not.
			require.False(t, f.a.own.Alive(tc.tok))
			mem.Store64(f.m.mem, lock, tc.tok)
			t0 := time.Now()
			d := f.writeSameStripe(t, t0)
			noteTakeover(t, "stale token ("+tc.name+")", d)
			f.check(t, true)
		})
	}
}

// A copy of a file taken with locks held (a map stripe mid-write, the ring
// publish lock mid-record, by this very process, which is alive), opened
// under another boot id, comes up clean: no lock held, nothing to wait for.
func TestCrashBootIDChange(t *testing.T) {
	f := newCrashFixture(t)
	r, err := f.a.Ring("ring", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	_, err = r.Publish("t", []byte("one"))
	require.NoError(t, err)
	victim := keyInStripe(f.m, "victim", f.s)
	require.NoError(t, f.m.Store(victim, []byte("old")))

	// Hold every stripe and the ring's locks; leave victim and record 2
	// half-written.
	for s := uint64(0); s < f.m.stripes; s++ {
		f.m.lock(s)
	}
	v, found := f.m.find(victim, f.m.hashKey(victim))
	require.True(t, found)
	odd := f.m.begin(f.s, v)
	mem.Store64(r.b, r.off+rl.OffLock, f.a.self)
	mem.Store64(r.b, r.off+rl.OffGroupLock, f.a.self)
	mem.Store64(r.b, r.slotOff(2)+rl.SBegin, 2)
	b, err := os.ReadFile(f.path)
	require.NoError(t, err)
	cp := filepath.Join(t.TempDir(), "copy")
	require.NoError(t, os.WriteFile(cp, b, 0o600))

	boot, ok := owner.BootID()
	require.True(t, ok)
	boot[15] ^= 0x5a
	owner.SetBootIDForTest(&boot)
	defer owner.SetBootIDForTest(nil)
	a2, err := Open(cp)
	require.NoError(t, err)
	defer a2.Close()
	m2, err := crashMap(a2)
	require.NoError(t, err)
	r2, err := a2.Ring("ring", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	for s := uint64(0); s < m2.stripes; s++ {
		require.Zero(t, rlock.Owner(m2.mem, m2.lockOff(s)), "stripe %d still held", s)
	}
	require.Zero(t, mem.Load64(r2.b, r2.off+rl.OffLock), "ring publish lock still held")
	require.Zero(t, mem.Load64(r2.b, r2.off+rl.OffGroupLock), "ring group lock still held")

	t0 := time.Now()
	require.NoError(t, m2.Store(keyInStripe(m2, "after", f.s), []byte("x")))
	seq, err := r2.Publish("t", []byte("three"))
	require.NoError(t, err)
	_, err = r2.Group("g")
	require.NoError(t, err)
	d := time.Since(t0)
	t.Logf("first writes after the reboot: %v", d)
	assert.Zero(t, m2.Stats().Recoveries, "nothing to take over after a reboot: the reset freed every lock")
	assert.Less(t, d, crashBound)
	assert.Equal(t, uint64(3), seq, "record 2 was abandoned")
	assert.Equal(t, uint64(1), r2.Stats().Abandoned)
	_, found = m2.Load(victim)
	assert.False(t, found, "the half-written victim became a tombstone")
	for k, v := range f.neigh {
		got, ok := m2.Load(k)
		require.True(t, ok, k)
		require.Equal(t, v, string(got))
	}
	used, tomb := tableCounts(t, m2)
	assert.Equal(t, used, m2.Stats().Used)
	assert.Equal(t, tomb, m2.Stats().Tombstones)
	recs := r2.Cursor(FromStart()).Read(0)
	require.Len(t, recs, 2)
	assert.Equal(t, "one", string(recs[0].Payload))
	assert.Equal(t, "three", string(recs[1].Payload))

	// Release what this process holds in the original.
	for s := uint64(0); s < f.m.stripes; s++ {
		f.m.unlock(s)
	}
	f.m.end(v.off, odd)
	f.m.clearIntent(f.s)
	mem.Store64(r.b, r.off+rl.OffLock, 0)
	mem.Store64(r.b, r.off+rl.OffGroupLock, 0)
}

// A process killed while carving a region leaves no visible half region:
// the next carve of any region works and the file still attaches.
func TestCrashMidCarve(t *testing.T) {
	for _, point := range []string{"carve", "carved"} {
		t.Run(point, func(t *testing.T) {
			f := newCrashFixture(t)
			killAt(t, f.path, "carve", point, "half", "")
			for _, ri := range f.a.Regions() {
				require.NotEqual(t, "half", ri.Name, "a half-carved region is visible")
			}
			// Another process attaches (validating the whole directory).
			b, err := Open(f.path)
			require.NoError(t, err, "attach after a carver died")
			require.NoError(t, b.Close())
			// Carve another region, then the one that was interrupted.
			other, err := f.a.Map("other", WithSlots(16), WithSlotSize(64), WithStripes(2))
			require.NoError(t, err)
			require.NoError(t, other.Store("k", []byte("v")))
			half, err := f.a.Map("half", WithSlots(16), WithSlotSize(64), WithStripes(2))
			require.NoError(t, err)
			assert.Equal(t, MapStats{Capacity: 16}, half.Stats(), "the new region starts clean")
			require.NoError(t, half.Store("k", []byte("v")))
			names := []string{}
			for _, ri := range f.a.Regions() {
				names = append(names, ri.Name)
			}
			assert.ElementsMatch(t, []string{"crash", "other", "half"}, names)
			b, err = Open(f.path)
			require.NoError(t, err, "attach after the carves")
			require.NoError(t, b.Close())
			for k, v := range f.neigh {
				got, ok := f.m.Load(k)
				require.True(t, ok)
				require.Equal(t, v, string(got))
			}
		})
	}
}

func init() {
	// crash-adder adds 1 to "total" until "stop" is set, writing each value
	// Add returned as one line ("a <n>", a single write: a kill cannot tear
	// it), then its slowest Add ("max <ns>").
	childRoles["crash-adder"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := crashMap(a)
		if err != nil {
			return err
		}
		var worst time.Duration
		buf := make([]byte, 0, 32)
		park := -1
		if p := os.Getenv("SHMARENA_PARK"); p != "" {
			park, _ = strconv.Atoi(p)
		}
		for i := 0; ; i++ {
			if n, _ := m.Counter("stop"); n > 0 {
				break
			}
			if park >= 0 && i%16 == 0 {
				if n, _ := m.Counter("arm"); n == int64(park) {
					parkAt("add") // the next Add stops inside the stripe lock
					park = -1
				}
			}
			t0 := time.Now()
			n, err := m.Add("total", 1)
			if err != nil {
				return err
			}
			worst = max(worst, time.Since(t0))
			buf = strconv.AppendInt(append(buf[:0], "a "...), n, 10)
			if _, err := os.Stdout.Write(append(buf, '\n')); err != nil {
				return err
			}
		}
		_, err = fmt.Fprintf(os.Stdout, "max %d\n", worst)
		return err
	}
	// crash-reader reads uniform values and a counter without end,
	// failing on a value that is not whole.
	childRoles["crash-reader"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := crashMap(a)
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stdout, "reading")
		var buf []byte
		for i := 0; ; i++ {
			k := "r" + strconv.Itoa(i%8)
			var ok bool
			if buf, ok = m.AppendLoad(buf[:0], k); ok {
				if len(buf) != 40 || strings.Count(string(buf), string(buf[:1])) != len(buf) {
					return fmt.Errorf("%s reads %q: not a value ever stored", k, buf)
				}
			}
			m.Counter("rc")
			if i%64 == 0 {
				for range m.All() {
				}
			}
		}
	}
}

// lineReader collects a child's complete stdout lines (a line cut short by
// a kill has no newline and is dropped).
type lineReader struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	got   []string
	// parked is closed when the child prints "AT <point>" (it then sleeps
	// at that crash point); that line is not kept in got.
	parked chan struct{}
}

func startLines(t *testing.T, cmd *exec.Cmd) *lineReader {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lr := &lineReader{cmd: cmd, lines: make(chan string, 1), done: make(chan struct{}), parked: make(chan struct{})}
	go func() {
		defer close(lr.done)
		br := bufio.NewReader(out)
		first := true
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				if first {
					close(lr.lines)
				}
				return
			}
			l = strings.TrimSuffix(l, "\n")
			if strings.HasPrefix(l, "AT ") {
				close(lr.parked)
				continue
			}
			if first {
				lr.lines <- l
				first = false
			}
			lr.got = append(lr.got, l)
		}
	}()
	return lr
}

// waitFirst waits for the child's first line.
func (lr *lineReader) waitFirst(t *testing.T) {
	t.Helper()
	_, ok := <-lr.lines
	require.True(t, ok, "child ended before its first line")
}

// kill SIGKILLs the child and requires that it died of it (not earlier of
// a failed check).
func (lr *lineReader) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGKILL))
	<-lr.done // drain the pipe before Wait closes it
	err := lr.cmd.Wait()
	ws := lr.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child status %v (%v)", lr.cmd.ProcessState, err)
}

func counterOf(m *Map, key string) int64 {
	n, _ := m.Counter(key)
	return n
}

// 16 processes Add to one counter in a loop and are SIGKILLed at random
// times, some of them inside the stripe lock. What is asserted:
//   - every value an Add returned is distinct and at most the final total T:
//     no two Adds saw the same count, none was lost under another;
//   - T - (number of Adds that returned and were reported) is between 0 and
//     the number of kills: each Add adds exactly 1, and a killed child may
//     have had at most one Add in flight whose atomic add landed but whose
//     return it never reported (killed between the add and its write to the
//     pipe). A child killed before the add, in the crash window of the lock,
//     adds nothing; so "the sum of Adds equals the number that returned"
//     holds up to that one in-flight Add per killed process, and exactly
//     for processes that were not killed;
//   - after each kill the parent's own Add completes within crashBound,
//     and every survivor's slowest Add is under crashBound.
//
// The other children's Adds take no lock (see addInPlace) and run on while
// a parked child holds the stripe; the parent's Adds take the lock, so each
// one after a kill measures a takeover.
func TestCrashKillAddersAtRandom(t *testing.T) {
	procs, kills := 16, 8
	if raceSlowdown > 1 {
		procs, kills = 8, 4 // each child under the race detector costs several
	}
	lockedAddsForTest = true
	t.Cleanup(func() { lockedAddsForTest = false })
	a, path := tempArena(t, 4<<20)
	m, err := crashMap(a)
	require.NoError(t, err)
	_, err = m.Add("total", 0)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	order := rng.Perm(procs)[:kills]
	// Half the victims are killed inside the stripe lock, at crash point
	// "add" (before the atomic add) after a random number of Adds; the
	// others wherever the kill finds them.
	parkers := map[int]bool{}
	kids := make([]*lineReader, procs)
	for i := range kids {
		env := []string{"SHMARENA_PATH=" + path}
		if slices.Index(order, i) >= kills/2 {
			parkers[i] = true
			env = append(env, "SHMARENA_PARK="+strconv.Itoa(i+1))
		}
		kids[i] = startLines(t, child(t, "crash-adder", env...))
	}
	for _, k := range kids {
		k.waitFirst(t)
	}
	var mine []int64
	for _, i := range order {
		if parkers[i] {
			// Arm this one (only one at a time: a parked child holds the
			// lock everyone needs), and wait until it parks.
			time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
			_, err := m.Add("arm", int64(i+1)-counterOf(m, "arm"))
			require.NoError(t, err)
			select {
			case <-kids[i].parked:
			case <-time.After(10 * time.Second):
				t.Fatalf("adder %d never parked", i)
			}
		} else {
			time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
		}
		// The clock starts once the victim is reaped: kill also drains its
		// pipe, which under the race detector can take longer than the
		// takeover being measured.
		kids[i].kill(t)
		killed := time.Now()
		n, err := m.Add("total", 1)
		require.NoError(t, err)
		mine = append(mine, n)
		noteTakeover(t, "parent Add after killing an adder", time.Since(killed))
	}
	_, err = m.Add("stop", 1)
	require.NoError(t, err)
	killedSet := map[int]bool{}
	for _, i := range order {
		killedSet[i] = true
	}
	seen := map[int64]bool{}
	for _, n := range mine {
		seen[n] = true
	}
	reported := len(mine)
	for i, k := range kids {
		if !killedSet[i] {
			<-k.done
			require.NoError(t, k.cmd.Wait(), "survivor %d", i)
			last := k.got[len(k.got)-1]
			require.True(t, strings.HasPrefix(last, "max "), "survivor %d ended with %q", i, last)
			ns, err := strconv.ParseInt(strings.TrimPrefix(last, "max "), 10, 64)
			require.NoError(t, err)
			assert.Less(t, time.Duration(ns), crashBound, "survivor %d's slowest Add", i)
			k.got = k.got[:len(k.got)-1]
		}
		for _, l := range k.got {
			n, err := strconv.ParseInt(strings.TrimPrefix(l, "a "), 10, 64)
			require.NoError(t, err, "child %d line %q", i, l)
			require.False(t, seen[n], "value %d returned twice", n)
			seen[n] = true
			reported++
		}
	}
	total, ok := m.Counter("total")
	require.True(t, ok)
	for n := range seen {
		require.LessOrEqual(t, n, total)
	}
	inFlight := int(total) - reported
	t.Logf("total %d, %d Adds returned and reported, %d landed in flight in %d killed processes; recoveries %d",
		total, reported, inFlight, kills, m.Stats().Recoveries)
	assert.GreaterOrEqual(t, inFlight, 0)
	assert.LessOrEqual(t, inFlight, kills-len(parkers), "processes killed before their add cannot have one in flight")
	assert.GreaterOrEqual(t, m.Stats().Recoveries, uint64(len(parkers)), "each lock left by a parked victim was taken over")
	used, tomb := tableCounts(t, m)
	assert.Equal(t, used, m.Stats().Used)
	assert.Equal(t, tomb, m.Stats().Tombstones)
	for s := uint64(0); s < m.stripes; s++ {
		assert.Zero(t, rlock.Owner(m.mem, m.lockOff(s)), "stripe %d still held", s)
	}
}

// Readers hold no lock: killing reader processes in a loop, mid-read,
// leaves writers undisturbed (nothing to take over, no write slowed to a
// takeover, every value whole).
func TestCrashKillReaders(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := crashMap(a)
	require.NoError(t, err)
	vals := [2][]byte{[]byte(strings.Repeat("a", 40)), []byte(strings.Repeat("b", 40))}
	for i := 0; i < 8; i++ {
		require.NoError(t, m.Store("r"+strconv.Itoa(i), vals[0]))
	}
	const live, rounds = 3, 12
	readers := make([]*lineReader, live)
	start := func(i int) {
		readers[i] = startLines(t, child(t, "crash-reader", "SHMARENA_PATH="+path))
		readers[i].waitFirst(t)
	}
	for i := range readers {
		start(i)
	}
	stop := make(chan struct{})
	var worst time.Duration
	var writes int
	wdone := make(chan error)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				wdone <- nil
				return
			default:
			}
			t0 := time.Now()
			if err := m.Store("r"+strconv.Itoa(i%8), vals[i/8%2]); err != nil {
				wdone <- err
				return
			}
			if _, err := m.Add("rc", 1); err != nil {
				wdone <- err
				return
			}
			worst = max(worst, time.Since(t0))
			writes++
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for r := 0; r < rounds; r++ {
		time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond)
		i := rng.IntN(live)
		readers[i].kill(t)
		start(i)
	}
	close(stop)
	require.NoError(t, <-wdone)
	for _, rd := range readers {
		rd.kill(t)
	}
	t.Logf("%d readers killed mid-read; %d writes, slowest %v", rounds+live, writes, worst)
	assert.Positive(t, writes)
	assert.Less(t, worst, crashBound)
	st := m.Stats()
	assert.Zero(t, st.Recoveries, "readers left a lock to take over")
	n, ok := m.Counter("rc")
	require.True(t, ok)
	assert.Equal(t, int64(writes), n)
	used, tomb := tableCounts(t, m)
	assert.Equal(t, used, st.Used)
	assert.Equal(t, tomb, st.Tombstones)
	for s := uint64(0); s < m.stripes; s++ {
		assert.Zero(t, rlock.Owner(m.mem, m.lockOff(s)), "stripe %d held", s)
	}
}
