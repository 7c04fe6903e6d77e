package shmarena

import (
	"testing"

	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A dead writer's stripe (with its half-written slot) and a dead
// producer's publish lock: Locks lists them dead, a read-only handle may
// not recover them, RecoverLocks takes both over and repairs, and Check
// is clean afterwards.
func TestLocksListAndRecover(t *testing.T) {
	ct := newCheckTarget(t)
	a, err := Open(ct.path)
	require.NoError(t, err)
	m, err := a.LookupMap("m")
	require.NoError(t, err)
	r, err := a.LookupRing("r")
	require.NoError(t, err)
	h := m.hashKey("b")
	s := m.stripeOf(h)
	v, ok := m.find("b", h)
	require.True(t, ok)
	head := r.Head()
	require.NoError(t, a.Close())

	dead := uint64(5)<<16 | 201
	for _, p := range [][2]uint64{
		{uint64(m.lockOff(s)), dead},
		{uint64(m.lockOff(s) + 8), m.slotIndex(v.off) + 1}, // the intent: the slot it writes
		{uint64(v.off + sVersion), m.begun(v.ver, s)},
		{uint64(r.off + rl.OffLock), dead},
		{uint64(r.slotOff(head) + rl.SBegin), head}, // it had begun the record
	} {
		_, err := patch64(ct.path, int(p[0]), p[1])
		require.NoError(t, err)
	}

	ro, err := Open(ct.path, ReadOnly())
	require.NoError(t, err)
	found, err := ro.Check()
	require.NoError(t, err)
	assert.Empty(t, found, "a dead writer's half-done write is normal, not damage")
	locks, err := ro.Locks()
	require.NoError(t, err)
	require.Len(t, locks, 2)
	assert.Equal(t, LockInfo{Region: "m", Kind: KindMap, Lock: "stripe " + itoa(s), Owner: dead}, locks[0])
	assert.Equal(t, LockInfo{Region: "r", Kind: KindRing, Lock: "publish", Owner: dead}, locks[1])
	_, err = ro.RecoverLocks()
	require.ErrorIs(t, err, ErrReadOnly)
	require.NoError(t, ro.Close())

	w, err := Open(ct.path)
	require.NoError(t, err)
	defer w.Close()
	done, err := w.RecoverLocks()
	require.NoError(t, err)
	assert.Len(t, done, 2)
	locks, err = w.Locks()
	require.NoError(t, err)
	assert.Empty(t, locks)
	found, err = w.Check()
	require.NoError(t, err)
	assert.Empty(t, found)
	wm, err := w.LookupMap("m")
	require.NoError(t, err)
	_, ok = wm.Load("b")
	assert.False(t, ok, "the dead writer's key became absent")
	assert.EqualValues(t, 1, wm.Stats().Recoveries)
	wr, err := w.LookupRing("r")
	require.NoError(t, err)
	assert.EqualValues(t, 1, wr.Stats().Abandoned, "the dead producer's record is a counted hole")
}

func itoa(v uint64) string {
	if v < 10 {
		return string(rune('0' + v))
	}
	return itoa(v/10) + string(rune('0'+v%10))
}
