package shmarena

// Eviction (WithEviction) at the edges: tiny maps, segment boundaries
// and crafted queue state.

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tiny evicting maps and ones at segment boundaries: Store and Add never
// fail, the key just written is present, Len never passes the capacity
// (n - n/8 per segment) and Check finds nothing.
func TestEvictingMapsTinyAndAtSegmentBoundaries(t *testing.T) {
	a, _ := tempArena(t, 16<<20)
	for _, n := range []int{1, 2, 7, 8, 9, 4095, 4096, 4097, 8191, 8192, 8193} {
		m, err := a.Map("m"+strconv.Itoa(n), WithSlots(n), WithSlotSize(64), WithEviction())
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(uint64(n), 3))
		for range (8*n + 200) / raceSlowdown {
			k := "k" + strconv.Itoa(rng.IntN(3*n+3))
			switch rng.IntN(6) {
			case 0, 1:
				m.Load(k)
				continue
			case 2:
				k += "c"
				_, err = m.Add(k, 1)
			case 3:
				m.Delete(k)
				continue
			default:
				err = m.Store(k, []byte("v"), ttlOrNone(time.Duration(rng.IntN(2))*time.Hour)...)
			}
			require.NoError(t, err, "n=%d", n)
			require.True(t, m.Exists(k), "n=%d: %q just written is absent", n, k)
		}
		limit := 0
		for s := range m.stripes {
			sp := m.span(s)
			limit += int(max(1, sp.len()-sp.len()/8))
		}
		assert.LessOrEqual(t, m.Len(), limit, "n=%d", n)
	}
	fs, err := a.Check()
	require.NoError(t, err)
	assert.Empty(t, fs)
}

// Crafted eviction state (queue heads, tails and entries, use bytes, the
// ghost, the move version and move-from word) never makes an evicting map
// panic, refuse a write or hang; a repair-free map goes on serving.
func TestCraftedEvictionStateIsHarmless(t *testing.T) {
	m := testMap(t, WithSlots(2048), WithSlotSize(64), WithStripes(2), WithEviction())
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2200 {
		k := "k" + strconv.Itoa(i)
		require.NoError(t, m.Store(k, []byte(k)))
	}
	interesting := []uint64{0, 1, 2, 3, ^uint64(0), ^uint64(0) - 1, 1 << 63, 1<<32 - 1, uint64(m.q.mainCap), uint64(m.q.mainCap) + 1, uint64(m.q.smallCap)}
	word := func() uint64 {
		if rng.IntN(2) == 0 {
			return interesting[rng.IntN(len(interesting))]
		}
		return rng.Uint64()
	}
	start := time.Now()
	for round := range 300 {
		s := uint64(rng.IntN(int(m.stripes)))
		lk := m.lockOff(s)
		switch rng.IntN(6) {
		case 0: // a queue counter
			mem.Store64(m.mem, lk+[]int{stSmallHead, stSmallTail, stMainHead, stMainTail}[rng.IntN(4)], word())
		case 1: // queue entries: hashes of nothing, of another segment, of a live key
			q := m.small(s)
			if rng.IntN(2) == 0 {
				q = m.main(s)
			}
			for range 16 {
				h := word()
				if rng.IntN(2) == 0 {
					h = m.hashKey("k" + strconv.Itoa(rng.IntN(3000)))
				}
				mem.Store64(m.mem, q.ring+rng.IntN(int(q.cap))*8, h)
			}
		case 2: // use bytes
			for range 64 {
				m.setUse(uint64(rng.IntN(int(m.slots))), byte(rng.Uint32()))
			}
		case 3: // ghost
			for range 64 {
				mem.Store32(m.mem, m.ghostBase(s)+4*rng.IntN(int(m.q.ghostCap)), rng.Uint32())
			}
		case 4: // move version: even or odd, no writer
			mem.Store64(m.mem, lk+stMoveVer, word())
		case 5: // move-from
			mem.Store64(m.mem, lk+stMoveFrom, word())
		}
		for j := range 20 {
			k := "n" + strconv.Itoa(round*20+j)
			require.NoError(t, m.Store(k, []byte(k)), "round %d", round)
			v, ok := m.Load(k)
			require.True(t, ok, "round %d: %s just stored", round, k)
			require.Equal(t, k, string(v))
			m.Delete("n" + strconv.Itoa(round*20+j-rng.IntN(40)))
			m.Exists("absent" + strconv.Itoa(j))
		}
		for range m.Keys() {
		}
	}
	d := time.Since(start)
	st := m.Stats()
	t.Logf("300 rounds in %v, %+v", d, st)
	require.Zero(t, st.Full)
	require.Less(t, d, hangBound, "crafted state made operations crawl")
}
