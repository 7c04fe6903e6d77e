package shmarena

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/shmarena/shmarena/internal/rlock"
	"github.com/stretchr/testify/require"
)

// sameHome returns two keys whose home slot is the same (so of the same
// segment), so the second stored sits just past the first.
func sameHome(m *Map) (first, second string) {
	seen := map[uint64]string{}
	for i := 0; i < 1<<20; i++ {
		k := "h-" + strconv.Itoa(i)
		h := m.hashKey(k)
		if o, ok := seen[m.home(h)]; ok {
			return o, k
		}
		seen[m.home(h)] = k
	}
	panic("no two keys share a home")
}

// A reader of a live key meets, earlier on the key's probe
// chain, a slot left mid-claim by a writer that died; by the time it asks,
// another handle has taken the dead writer's stripe and is repairing it.
// The reader must keep waiting for that recoverer and then find the key,
// and, if the recoverer never finishes, give up counting Busy, never
// report the live key absent silently.
func TestReaderWaitsForLiveRecoverer(t *testing.T) {
	defer func(p time.Duration) { oddPatience = p }(oddPatience)
	oddPatience = hangBound // far beyond the recoverer's delay, however busy the machine: only a reader that gives up early fails
	for _, finishes := range []bool{true, false} {
		name := map[bool]string{true: "recoverer finishes", false: "recoverer never finishes"}[finishes]
		t.Run(name, func(t *testing.T) {
			if !finishes {
				oddPatience = 50 * time.Millisecond
			}
			a, path := tempArena(t, 4<<20)
			m, err := a.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
			require.NoError(t, err)
			dead, live := sameHome(m)
			require.NoError(t, m.Store(dead, []byte("half")))
			require.NoError(t, m.Store(live, []byte("v")))

			recoverer, err := Open(path)
			require.NoError(t, err)
			defer recoverer.Close()
			gone, err := Open(path)
			require.NoError(t, err)
			require.NoError(t, gone.Close()) // its token is dead from now on

			// The dead writer's state: its stripe held, the slot odd and
			// tagged as a claim in progress.
			v, found := m.find(dead, m.hashKey(dead))
			require.True(t, found)
			s := m.stripeOf(m.hashKey(dead))
			mem.Store64(m.mem, m.lockOff(s), gone.self)
			mem.Store64(m.mem, m.lockOff(s)+8, m.slotIndex(v.off)+1)
			m.setTag(m.slotIndex(v.off), tagUnknown)
			odd := m.begun(v.ver, s)
			mem.Store64(m.mem, v.off+sVersion, odd)

			// When the reader asks about the owner, the recoverer has just
			// taken the stripe over: the reader's own takeover must fail.
			var asked atomic.Bool
			repaired := make(chan struct{})
			aliveFn = func(h *owner.Handle, tok uint64) bool {
				if asked.CompareAndSwap(false, true) {
					require.True(t, mem.CAS64(m.mem, m.lockOff(s), gone.self, recoverer.self))
					if finishes {
						go func() {
							defer close(repaired)
							time.Sleep(20 * time.Millisecond)
							mr, err := recoverer.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
							if err == nil {
								mr.repairSegment(s)
								mr.release(s)
							}
						}()
					}
				}
				return h.Alive(tok)
			}
			defer func() { aliveFn = (*owner.Handle).Alive }()

			busy := m.Stats().Busy
			got, ok := m.Load(live)
			require.True(t, asked.Load(), "the reader never asked about the writer")
			if finishes {
				<-repaired
				require.True(t, ok, "a live key read as absent while its chain was being repaired")
				require.Equal(t, "v", string(got))
				require.Equal(t, busy, m.Stats().Busy)
				require.False(t, m.Exists(dead), "the half-written slot was cleared")
				return
			}
			require.False(t, ok)
			require.Equal(t, busy+1, m.Stats().Busy, "giving up on a slot still being repaired counts Busy")
			// Let the recoverer finish now, so the arena closes clean.
			m2, err := recoverer.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
			require.NoError(t, err)
			m2.repairSegment(s)
			require.True(t, m2.release(s))
		})
	}
}

// A process table full of live handles refuses one more with an error that
// names the limit; a closed handle's entry is taken by the next.
func TestOpenTooManyHandles(t *testing.T) {
	a, path := tempArena(t, MinSize+4096)
	handles := []*Arena{a}
	defer func() {
		for _, h := range handles[1:] {
			h.Close()
		}
	}()
	for len(handles) < owner.Entries {
		h, err := Open(path)
		require.NoError(t, err, "handle %d", len(handles))
		handles = append(handles, h)
	}
	_, err := Open(path)
	require.ErrorIs(t, err, ErrTooManyHandles)
	require.ErrorContains(t, err, "256")
	requireOnePrefix(t, err)
	require.NoError(t, handles[7].Close())
	h, err := Open(path)
	require.NoError(t, err, "a closed handle's entry is reused")
	handles[7] = h
	pids, err := a.Processes()
	require.NoError(t, err)
	require.Len(t, pids, 1, "256 handles, one process")
}

// An owner whose lock was taken over (here by hand, as a recoverer that
// judged it dead would) finds out when it ends its write or commits its
// record: it returns ErrLockLost and leaves the recoverer's work as it is.
func TestLostLockIsReported(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
	require.NoError(t, err)
	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	other, err := Open(path)
	require.NoError(t, err)
	defer other.Close()
	mo, err := other.Map("m", WithSlots(16384), WithSlotSize(64), WithStripes(4))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("old")))
	s := m.stripeOf(m.hashKey("k"))

	crashHook = func(point string) {
		if point != "overwrite" {
			return
		}
		// The recoverer takes the stripe and makes the slot a tombstone.
		require.True(t, mem.CAS64(m.mem, m.lockOff(s), a.self, other.self))
		mo.repairSegment(s)
	}
	err = m.Store("k", []byte("new"))
	crashHook = nil
	require.ErrorIs(t, err, ErrLockLost)
	requireOnePrefix(t, err)
	require.False(t, m.Exists("k"), "the recoverer's tombstone stands")
	require.Equal(t, other.self, rlock.Owner(m.mem, m.lockOff(s)), "the lock stays the recoverer's")
	require.True(t, mo.release(s))

	_, err = r.Publish("t", []byte("one"))
	require.NoError(t, err)
	publishHook = func(seq uint64) {
		require.True(t, mem.CAS64(r.b, r.off+rl.OffLock, a.self, other.self))
		ro, err := other.Ring("r", WithSlots(8), WithSlotSize(64))
		require.NoError(t, err)
		ro.repair()
	}
	seq, err := r.Publish("t", []byte("two"))
	publishHook = nil
	require.ErrorIs(t, err, ErrLockLost)
	require.Zero(t, seq)
	require.Equal(t, uint64(3), r.Head(), "the hole was committed once, by the recoverer")
	require.Equal(t, uint64(1), r.Stats().Abandoned)
	require.Equal(t, other.self, mem.Load64(r.b, r.off+rl.OffLock))
	mem.Store64(r.b, r.off+rl.OffLock, 0)
	seq, err = r.Publish("t", []byte("three"))
	require.NoError(t, err)
	require.Equal(t, uint64(3), seq)
}
