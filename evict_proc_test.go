package shmarena

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Four processes churn one evicting map: new keys (some with short TTLs),
// deletes, and reads of a hot set nobody stores again. A value is derived
// from its key, so any torn or misplaced read shows. A hot key read absent
// and then present again was a false miss (nobody stored it meanwhile),
// which only a reader that gave up (Busy) may report.

const (
	churnSlots = 8192 // two segments
	churnHot   = 64
)

func churnValue(k string) []byte {
	n := 8 + len(k)*3%40
	return bytes.Repeat([]byte(k[len(k)-1:]), n)
}

func evictingChurnMap(a *Arena) (*Map, error) {
	return a.Map("churn", WithSlots(churnSlots), WithSlotSize(96), WithEviction())
}

func init() {
	childRoles["evict-churn"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := evictingChurnMap(a)
		if err != nil {
			return err
		}
		id, inserts := envInt("SHMARENA_ID"), envInt("SHMARENA_N")
		r := rand.New(rand.NewPCG(uint64(id), 7))
		absent := map[string]bool{} // hot keys last read absent
		falseMisses := 0
		for i := 0; i < inserts; {
			switch op := r.IntN(10); {
			case op < 4: // a new key, a third of them with a short TTL
				k := fmt.Sprintf("p%d-%d", id, i)
				var opts []WriteOption
				if i%3 == 0 {
					opts = append(opts, WithTTL(time.Duration(1+r.IntN(5))*time.Millisecond))
				}
				if err := m.Store(k, churnValue(k), opts...); err != nil {
					return fmt.Errorf("store %s: %w", k, err)
				}
				i++
			case op < 5: // delete a recent key of this process
				k := fmt.Sprintf("p%d-%d", id, max(0, i-1-r.IntN(50)))
				m.Delete(k)
			case op < 6: // read a recent key: whole or absent
				k := fmt.Sprintf("p%d-%d", id, max(0, i-1-r.IntN(200)))
				if v, ok := m.Load(k); ok && !bytes.Equal(v, churnValue(k)) {
					return fmt.Errorf("key %s read %q", k, v)
				}
			default: // the hot set
				k := "hot-" + strconv.Itoa(r.IntN(churnHot))
				v, ok := m.Load(k)
				switch {
				case ok && !bytes.Equal(v, churnValue(k)):
					return fmt.Errorf("hot key %s read %q", k, v)
				case ok && absent[k]:
					falseMisses++
					delete(absent, k)
				case !ok:
					absent[k] = true
				}
			}
		}
		busy := m.Stats().Busy
		if uint64(falseMisses) > busy {
			return fmt.Errorf("%d hot keys read absent and then present, unstored, with %d busy reads", falseMisses, busy)
		}
		fmt.Fprintf(os.Stderr, "evict-churn %d: %d false misses, %d busy, %d hot keys absent at the end\n", id, falseMisses, busy, len(absent))
		return nil
	}
}

func TestEvictingMapChurnProcesses(t *testing.T) {
	size, err := MapBytes(WithSlots(churnSlots), WithSlotSize(96), WithEviction())
	require.NoError(t, err)
	a, path := tempArena(t, MinSize+size)
	m, err := evictingChurnMap(a)
	require.NoError(t, err)
	for i := range churnHot {
		k := "hot-" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, churnValue(k)))
	}
	// 100 capacities of inserts between the 4 processes (20 under the race
	// detector).
	perProcess := raceScaled(100 * churnSlots / 4)
	runChildren(t, "evict-churn", 4, "SHMARENA_PATH="+path, "SHMARENA_N="+strconv.Itoa(perProcess))

	st := m.Stats()
	t.Logf("after %d inserts: %+v", 4*perProcess, st)
	assert.Positive(t, st.Evicted)
	assert.Positive(t, st.Expired)
	assert.Positive(t, st.Moved)
	assert.Zero(t, st.Tombstones)
	assert.LessOrEqual(t, uint64(st.Used), uint64(churnSlots))

	// A walk of the table: every slot at rest, no key twice, every value
	// whole, tags agreeing with slots, and the counts the stats give.
	seen := map[string]bool{}
	at := map[string]int64{}
	live := 0
	for i := uint64(0); i < m.slots; i++ {
		off := m.slotOff(i)
		require.Zero(t, mem.Load64(m.mem, off+sVersion)&1, "slot %d left mid-write", i)
		meta := mem.Load64(m.mem, off+sMeta)
		switch metaState(meta) {
		case stateEmpty:
			require.Zero(t, m.tag(i), "slot %d", i)
			continue
		case stateLive:
		default:
			require.Failf(t, "tombstone at rest", "slot %d", i)
		}
		live++
		k := string(mem.AppendBytes(nil, m.mem, keyOff(off, meta), metaKeyLen(meta)))
		require.False(t, seen[k], "key %s twice", k)
		seen[k] = true
		h := m.hashKey(k)
		require.Equal(t, h, mem.Load64(m.mem, off+sHash), k)
		require.Equal(t, tagOf(h), m.tag(i), k)
		v := mem.AppendBytes(nil, m.mem, off+sData+len(k), metaValLen(meta))
		require.Equal(t, churnValue(k), v, "key %s", k)
		if deadline := int64(mem.Load64(m.mem, deadlineOff(off, meta))); !lapsed(deadline) {
			at[k] = deadline
		}
	}
	require.Equal(t, live, st.Used)
	// Then every key reads back whole, unless it lapsed since the walk (a
	// read collects a lapsed key, which moves others: hence after it).
	for k, deadline := range at {
		v, ok := m.Load(k)
		if ok || !lapsed(deadline) {
			require.True(t, ok, k)
			require.Equal(t, churnValue(k), v, k)
		}
	}
	for s := uint64(0); s < m.stripes; s++ {
		require.LessOrEqual(t, m.used(s), capacity(m.span(s).len()), "segment %d over its capacity", s)
	}
}
