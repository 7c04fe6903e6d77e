package shmarena

import (
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"
)

// The adversarial-keys test: keys chosen to share one home slot under a
// known seed cost a bounded probe when that seed is used, and nothing
// special under the random seed a real arena has.

const adversaryKeys = 2000

// adversarySlots is the map's size: 65,536 slots, or 16,384 under the race
// detector, which slows the brute force tenfold (a home is shared by one
// key in slots).
var adversarySlots = 1 << 16

// collidingKeys finds, by brute force with the map's own placement, n
// keys whose home under seed 0 is the home of "target" in m (a map of
// adversarySlots slots, whatever its seed): about n x 65,536 hashes, split
// over the CPUs.
func collidingKeys(m *Map, n int) []string {
	home := func(k []byte) uint64 {
		_, _, i := m.place(xxh3.HashSeed(k, 0))
		return i
	}
	target := home([]byte("target"))
	workers := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	var keys []string
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 24)
			for i := w; ; i += workers {
				buf = strconv.AppendInt(append(buf[:0], "adv-"...), int64(i), 10)
				if home(buf) != target {
					continue
				}
				mu.Lock()
				if len(keys) >= n {
					mu.Unlock()
					return
				}
				keys = append(keys, string(buf))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return keys
}

// meanProbe stores keys into m and returns the mean number of slots from
// each key's home to its slot, plus one (the slots a hit reads).
func meanProbe(t *testing.T, m *Map, keys []string) float64 {
	total := 0.0
	for _, k := range keys {
		require.NoError(t, m.Store(k, []byte("v")))
		h := m.hashKey(k)
		v, _, ok := m.readKey(k, h, nil, false)
		require.True(t, ok, k)
		_, sp, home := m.place(h)
		total += float64(sp.dist(home, m.slotIndex(v.off)) + 1)
	}
	return total / float64(len(keys))
}

func adversaryMap(t *testing.T, seed uint64, opts ...RegionOption) *Map {
	s := seed
	seedForTest = &s
	defer func() { seedForTest = nil }()
	opts = append([]RegionOption{WithSlots(adversarySlots), WithSlotSize(48)}, opts...)
	size, err := MapBytes(opts...)
	require.NoError(t, err)
	a, _ := tempArena(t, MinSize+size)
	require.Equal(t, seed, a.seed)
	m, err := a.Map("m", opts...)
	require.NoError(t, err)
	return m
}

func TestAdversarialKeys(t *testing.T) {
	n := adversaryKeys
	if raceSlowdown > 1 || testing.Short() {
		// One segment of 4,096 slots: a key shares the target's home one
		// time in 4,096, a sixteenth of the brute force of the full map.
		adversarySlots = 1 << 12
		defer func() { adversarySlots = 1 << 16 }()
		n = probeBound + 100 // past the bound still
	}
	probe := adversaryMap(t, 0)
	keys := collidingKeys(probe, n)
	require.Len(t, keys, n)
	t.Logf("%d keys sharing one home slot of %d under seed 0", len(keys), adversarySlots)

	t.Run("random seed", func(t *testing.T) {
		// Half full with other keys first, so probes are not trivially 1.
		const seed = 0x9e3779b97f4a7c15
		filler := make([]string, adversarySlots/2)
		for i := range filler {
			filler[i] = "fill-" + strconv.Itoa(i)
		}
		random := make([]string, len(keys))
		for i := range random {
			random[i] = "rand-" + strconv.Itoa(i)
		}
		adv := adversaryMap(t, seed)
		meanProbe(t, adv, filler)
		advMean := meanProbe(t, adv, keys)
		ref := adversaryMap(t, seed)
		meanProbe(t, ref, filler)
		refMean := meanProbe(t, ref, random)
		t.Logf("mean probe: chosen keys %.2f slots, random keys %.2f", advMean, refMean)
		require.LessOrEqual(t, advMean, 2*refMean, "keys chosen under seed 0 collide under a random seed")
	})

	t.Run("seed 0, plain", func(t *testing.T) {
		m := adversaryMap(t, 0)
		stored, refused := 0, 0
		for _, k := range keys {
			switch err := m.Store(k, []byte("v")); {
			case err == nil:
				stored++
			case errors.Is(err, ErrFull):
				refused++
			default:
				require.NoError(t, err)
			}
		}
		st := m.Stats()
		t.Logf("stored %d, refused %d, stats %+v", stored, refused, st)
		require.Equal(t, probeBound, stored, "the probe bound's worth of slots fill, then the bound refuses")
		require.Equal(t, uint64(refused), st.ProbeLimited, "every refusal at the bound is counted")
		require.Equal(t, uint64(refused), st.Full)
		require.Less(t, st.MaxProbe, probeBound, "no key sits past the bound")
		// The rest of the table is untouched: ordinary keys still go in,
		// but for those whose home falls inside the packed run (their
		// free slot is past the bound).
		ts, _, target := m.place(m.hashKey(keys[0]))
		refusedOthers := 0
		for i := range 1000 {
			k := "other-" + strconv.Itoa(i)
			err := m.Store(k, nil)
			if err == nil {
				continue
			}
			require.ErrorIs(t, err, ErrFull)
			s, sp, home := m.place(m.hashKey(k))
			require.Equal(t, ts, s, "%s refused outside the attacked segment", k)
			require.Less(t, sp.dist(target, home), uint64(probeBound), "%s refused, its home %d outside the packed run from %d", k, home, target)
			refusedOthers++
		}
		require.Less(t, refusedOthers, 100)
		for _, k := range keys[:stored] {
			require.True(t, m.Exists(k), k)
		}
	})

	t.Run("seed 0, evicting", func(t *testing.T) {
		m := adversaryMap(t, 0, WithEviction())
		for _, k := range keys {
			require.NoError(t, m.Store(k, []byte("v")), "an evicting map never refuses")
		}
		st := m.Stats()
		t.Logf("stats %+v", st)
		require.Equal(t, uint64(len(keys)-probeBound), st.ProbeLimited)
		require.Equal(t, uint64(len(keys)-probeBound), st.Evicted, "each key past the bound evicted one within it")
		require.Equal(t, probeBound, st.Used)
		require.Less(t, st.MaxProbe, probeBound)
		require.True(t, m.Exists(keys[len(keys)-1]), "the last key stored is present")
	})
}
