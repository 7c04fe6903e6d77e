package shmarena

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/rlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SIGKILL inside eviction and inside a delete's moves: the next writer of
// the segment repairs it within crashBound, and the map holds no key
// twice, no tombstone, no half-written value, and counts that agree with
// its slots.

func crashEvictMap(a *Arena) (*Map, error) {
	return a.Map("evict", WithSlots(256), WithSlotSize(128), WithEviction())
}

func init() {
	// crash-evict-op runs SHMARENA_OP on the crash-evict map (store: new
	// keys; overwrite and delete: k0, k1, ...; clear; add: one counter)
	// until it reaches crash point SHMARENA_POINT, where it parks until
	// killed.
	childRoles["crash-evict-op"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		m, err := crashEvictMap(a)
		if err != nil {
			return err
		}
		parkAt(os.Getenv("SHMARENA_POINT"))
		for i := range 10000 {
			switch os.Getenv("SHMARENA_OP") {
			case "store":
				k := "new" + strconv.Itoa(i)
				err = m.Store(k, churnValue(k))
			case "overwrite":
				k := "k" + strconv.Itoa(i)
				err = m.Store(k, churnValue(k))
			case "delete":
				m.Delete("k" + strconv.Itoa(i))
			case "clear":
				m.Clear()
			case "add":
				_, err = m.Add("ctr", 1)
			}
			if err != nil {
				return err
			}
		}
		return fmt.Errorf("never reached crash point %s", os.Getenv("SHMARENA_POINT"))
	}
}

func TestCrashInsideEvictionAndMoves(t *testing.T) {
	for _, tc := range []struct{ op, point string }{
		{"store", "evict"},   // chose a victim, about to remove it
		{"store", "move"},    // an eviction's delete, mid-move
		{"delete", "move"},   // a delete, mid-move: the entry in two slots
		{"delete", "delete"}, // a delete, its slot mid-write
		{"store", "claimed"}, // an insert after evicting, mid-write
	} {
		t.Run(tc.op+"-"+tc.point, func(t *testing.T) {
			a, path := tempArena(t, 1<<20)
			m, err := crashEvictMap(a)
			require.NoError(t, err)
			sp := m.span(0)
			before := map[string]bool{}
			for i := range int(capacity(sp.len())) {
				k := "k" + strconv.Itoa(i)
				require.NoError(t, m.Store(k, churnValue(k)))
				before[k] = true
			}
			require.Zero(t, m.Stats().Evicted)
			killed := killParked(t, child(t, "crash-evict-op", "SHMARENA_PATH="+path,
				"SHMARENA_OP="+tc.op, "SHMARENA_POINT="+tc.point), tc.point)
			require.NotZero(t, rlock.Owner(m.mem, m.lockOff(0)), "the child died holding the segment")

			require.NoError(t, m.Store("after", churnValue("after")))
			d := time.Since(killed)
			noteTakeover(t, "evicting map, "+tc.op+" at "+tc.point, d)
			st := m.Stats()
			assert.Positive(t, st.Recoveries)

			seen := map[string]bool{}
			live := 0
			for i := sp.lo; i < sp.hi; i++ {
				off := m.slotOff(i)
				require.Zero(t, mem.Load64(m.mem, off+sVersion)&1, "slot %d odd", i)
				meta := mem.Load64(m.mem, off+sMeta)
				if metaState(meta) == stateEmpty {
					require.Zero(t, m.tag(i))
					continue
				}
				require.Equal(t, uint64(stateLive), metaState(meta), "slot %d: a tombstone at rest", i)
				live++
				k := string(mem.AppendBytes(nil, m.mem, keyOff(off, meta), metaKeyLen(meta)))
				require.False(t, seen[k], "key %s twice", k)
				seen[k] = true
				require.Equal(t, tagOf(m.hashKey(k)), m.tag(i), k)
				v, ok := m.Load(k)
				require.True(t, ok, "key %s in slot %d does not read", k, i)
				require.True(t, bytes.Equal(churnValue(k), v), "key %s: %q", k, v)
			}
			require.Equal(t, live, st.Used)
			require.Zero(t, st.Tombstones)
			require.Zero(t, mem.Load64(m.mem, m.lockOff(0)+stMoveVer)&1, "moves left open")
			require.True(t, seen["after"])
			lost := 0
			for k := range before {
				if !seen[k] {
					lost++
				}
			}
			if tc.op == "store" {
				// What vanished was evicted: by the child, counted before it
				// died or not (one in flight), or by the store after.
				require.LessOrEqual(t, uint64(lost), st.Evicted+1, "keys lost beyond evictions")
			} else {
				// The child deleted k0, k1, ... in order: what is gone is
				// a prefix of them (the one in flight either way).
				for i := range lost {
					require.False(t, seen["k"+strconv.Itoa(i)], "k%d kept while a later key was lost", i)
				}
				require.Positive(t, lost)
			}
			require.Zero(t, rlock.Owner(m.mem, m.lockOff(0)))
			// And it keeps working: a round of churn, then every key reads.
			for i := range 300 {
				k := "later" + strconv.Itoa(i)
				require.NoError(t, m.Store(k, churnValue(k)))
				m.Delete("k" + strconv.Itoa(i))
			}
			for k := range m.Keys() {
				v, ok := m.Load(k)
				require.True(t, ok, k)
				require.Equal(t, churnValue(k), v, k)
			}
		})
	}
}

// An evicting map at capacity evicts lapsed entries first, counted as
// Expired, not Evicted; and a read counts a use with at most one byte
// written, none once the count reaches 3, in the use byte beside the tags.
func TestEvictionTakesLapsedFirstAndHitsStopWriting(t *testing.T) {
	a, _ := tempArena(t, 1<<20)
	m, err := crashEvictMap(a)
	require.NoError(t, err)
	c := int(capacity(m.span(0).len()))
	for i := range c {
		var opts []WriteOption
		if i%4 == 0 {
			opts = append(opts, WithTTL(time.Hour)) // lapsed below, not by the clock
		}
		k := "k" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, churnValue(k), opts...))
		m.Load(k) // read once: no live key is a first choice for eviction
	}
	// Every fourth key's deadline is put in the past only now that all are
	// stored and read, so that none lapses (and is collected by its own
	// read) while the map fills, however slowly the test runs.
	for i := 0; i < c; i += 4 {
		lapseNow(t, m, "k"+strconv.Itoa(i))
	}
	before := m.Stats()
	lapsedKeys := (c + 3) / 4
	for i := range lapsedKeys / 2 {
		k := "new" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, churnValue(k)))
	}
	st := m.Stats()
	assert.Equal(t, before.Evicted, st.Evicted, "live keys evicted while lapsed ones held slots")
	assert.GreaterOrEqual(t, st.Expired-before.Expired, uint64(lapsedKeys/2), "each new key's room came from a lapsed entry")
	for i := 1; i < c; i += 4 {
		assert.True(t, m.Exists("k"+strconv.Itoa(i)), "live key k%d", i)
	}

	// Use counts: one per hit up to 3, then the byte is left alone.
	k := "k1"
	v, _, ok := m.readKey(k, m.hashKey(k), nil, false)
	require.True(t, ok)
	i := m.slotIndex(v.off)
	m.setUse(i, m.use(i)&^useCount)
	for want := byte(1); want <= 5; want++ {
		m.Load(k)
		assert.Equal(t, min(want, useCount), m.use(i)&useCount, "after %d hits", want)
	}
	m.setUse(i, m.use(i)|useCount)
	word := m.q.useBase + int(i)&^3
	w0 := mem.Load32(m.mem, word)
	for range 100 {
		m.Load(k)
	}
	assert.Equal(t, w0, mem.Load32(m.mem, word), "a hit at the cap wrote")
}

// fillEvictSegment fills the crash-evict map's segment to its capacity with
// k0, k1, ... and returns their set.
func fillEvictSegment(t *testing.T, m *Map) map[string]bool {
	before := map[string]bool{}
	for i := range int(capacity(m.span(0).len())) {
		k := "k" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, churnValue(k)))
		before[k] = true
	}
	return before
}

// Crashes at the points TestCrashInsideEvictionAndMoves leaves out, and a
// recoverer killed inside the moves of its own repair (reseat): the next
// writer repairs, and the map agrees with itself with no key lost but
// those the crashed operations could remove.
func TestCrashEvictPointsAndDeadRecoverer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   [][2]string // (op, point) per killed child, in order
		maxGone int         // keys of k0.. that may be gone
	}{
		{"clear", [][2]string{{"clear", "clear"}}, 0},
		{"overwrite", [][2]string{{"overwrite", "overwrite"}}, 1},
		{"add-insert", [][2]string{{"add", "insert"}}, 1},
		{"recover-in-reseat", [][2]string{{"delete", "move"}, {"store", "move"}}, 400},
		{"recover-dies-twice", [][2]string{{"delete", "move"}, {"store", "recover"}, {"store", "move"}}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, path := tempArena(t, 1<<20)
			m, err := crashEvictMap(a)
			require.NoError(t, err)
			before := fillEvictSegment(t, m)
			for _, st := range tc.steps {
				killParked(t, child(t, "crash-evict-op", "SHMARENA_PATH="+path,
					"SHMARENA_OP="+st[0], "SHMARENA_POINT="+st[1]), st[1])
				require.NotZero(t, rlock.Owner(m.mem, m.lockOff(0)), "the child died holding the segment")
			}
			require.NoError(t, m.Store("after", churnValue("after")))
			require.Positive(t, m.Stats().Recoveries)
			seen := checkMapAtRest(t, m, func(k string) []byte {
				if k == "ctr" {
					return nil
				}
				return churnValue(k)
			})
			require.True(t, seen["after"])
			gone := 0
			for k := range before {
				if !seen[k] {
					gone++
				}
			}
			// The store of "after" found the segment at capacity: it
			// evicted one more.
			require.LessOrEqual(t, gone, tc.maxGone+1, "keys lost")
			if tc.name == "recover-in-reseat" || tc.name == "recover-dies-twice" {
				// The deleter removed a prefix k0..; the recoverers
				// deleted nothing.
				for i := range gone {
					require.False(t, seen["k"+strconv.Itoa(i)], "k%d kept while a later key was lost", i)
				}
			}
			for i := range 300 {
				k := "later" + strconv.Itoa(i)
				require.NoError(t, m.Store(k, churnValue(k)))
				m.Delete("k" + strconv.Itoa(i))
			}
			checkMapAtRest(t, m, func(k string) []byte {
				if k == "ctr" {
					return nil
				}
				return churnValue(k)
			})
		})
	}
}
