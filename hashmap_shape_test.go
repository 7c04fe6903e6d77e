package shmarena

import (
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// tableShape walks m: live entries, tombstones, the mean and longest
// distance of a key from its home, and the mean length of a run of
// occupied slots.
func tableShape(m *Map) (live, tomb int, meanDist float64, maxDist uint64, meanRun float64) {
	var sum, runs, runTotal uint64
	run := uint64(0)
	for i := uint64(0); i < m.slots; i++ {
		off := m.slotOff(i)
		meta := mem.Load64(m.mem, off+sMeta)
		switch metaState(meta) {
		case stateLive:
			live++
			_, sp, home := m.place(mem.Load64(m.mem, off+sHash))
			d := sp.dist(home, i)
			sum += d
			maxDist = max(maxDist, d)
			run++
		case stateTombstone:
			tomb++
			run++
		default:
			if run > 0 {
				runs++
				runTotal += run
				run = 0
			}
		}
	}
	return live, tomb, float64(sum) / float64(live), maxDist, float64(runTotal) / float64(max(runs, 1))
}

// A plain map keeps its shape under churn: after 20 capacities of inserts
// and deletes at 75% live (4 under the race detector), no tombstone is left, and the mean distance of
// keys from home and the mean run of occupied slots (what a hit and a miss
// probe) stay those of the freshly filled table. Before deletes moved
// entries back, the runs grew until misses cost 2.3-2.9x.
func TestMapChurnKeepsShape(t *testing.T) {
	n := 16384
	a, _ := tempArena(t, 2<<20)
	m, err := a.Map("m", WithSlots(n), WithSlotSize(64))
	require.NoError(t, err)
	live := n * 3 / 4
	next := 0
	turn := func() {
		require.NoError(t, m.Store(benchKey(next%(4*n)), nil))
		if next >= live {
			require.True(t, m.Delete(benchKey((next-live)%(4*n))))
		}
		next++
	}
	for next < live {
		turn()
	}
	l0, _, dist0, _, run0 := tableShape(m)
	require.Equal(t, live, l0)
	for end := next + raceScaled(20*n); next < end; {
		turn()
	}
	l, tomb, dist, _, run := tableShape(m)
	t.Logf("fresh: mean distance %.2f, mean run %.1f; churned: %.2f, %.1f; %d moved", dist0, run0, dist, run, m.Stats().Moved)
	require.Equal(t, live, l)
	require.Zero(t, tomb)
	require.Less(t, dist, 1.25*dist0)
	require.Less(t, run, 1.25*run0)
}

// A plain map at 90% live whose keys expire as new ones come (TTL churn:
// each new key's arrival lapses the oldest) keeps taking new keys: expiry
// is lazy, so lapsed entries nobody reads or passes would pile up until,
// with about 97% of a segment's slots held, new keys' 1,024-slot windows
// had no free slot and most inserts failed (BenchmarkMapChurn's ttl/90%
// rows did). Inserts sweep a few slots each, and all of the segment before
// refusing. What remains is linear probing's own tail at 90% load: now
// and then a run of 1,024 occupied slots (1 to 13 inserts in 321,126 in
// our runs), and lapsed entries no sweep has reached yet (about 4%).
func TestMapTTLChurnAtNinetyPercent(t *testing.T) {
	n := 65536
	a, _ := tempArena(t, 8<<20)
	m, err := a.Map("m", WithSlots(n), WithSlotSize(64))
	require.NoError(t, err)
	live := n * 90 / 100
	refused := 0
	inserts := live + raceScaled(4*n)
	for i := 0; i < inserts; i++ {
		if err := m.Store(benchKey(i), nil, WithTTL(time.Hour)); err != nil {
			require.ErrorIs(t, err, ErrFull)
			refused++
		}
		if i >= live {
			m.Expire(benchKey(i-live), time.Nanosecond)
		}
	}
	st := m.Stats()
	t.Logf("%d refused of %d inserts: %+v", refused, inserts, st)
	require.Positive(t, st.Expired)
	require.Less(t, refused*2000, inserts, "more than 1 insert in 2,000 refused")
	used, _ := m.counts()
	require.Less(t, used, n*96/100, "lapsed entries piled up (live is 90%)")
}

// Refused inserts' sweeps go round the segment: a round removes every
// lapsed entry of the segment, and nothing else.
func TestMapSweepLapsed(t *testing.T) {
	a, _ := tempArena(t, 2<<20)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(48))
	require.NoError(t, err)
	for i := range 3000 {
		var opts []WriteOption
		if i%3 == 0 {
			opts = append(opts, WithTTL(time.Millisecond))
		}
		require.NoError(t, m.Store("k"+strconv.Itoa(i), nil, opts...))
	}
	time.Sleep(3 * time.Millisecond)
	before := m.Stats().Expired // inserts collected some on their paths
	round := func() (n int) {
		for range 4096 / refusalSweep {
			n += m.sweepMore(0)
		}
		return n
	}
	require.Equal(t, 1000-int(before), round())
	require.Equal(t, uint64(1000), m.Stats().Expired)
	require.Equal(t, 2000, m.Len())
	l, tomb, _, _, _ := tableShape(m)
	require.Equal(t, 2000, l)
	require.Zero(t, tomb)
	for i := range 3000 {
		require.Equal(t, i%3 != 0, m.Exists("k"+strconv.Itoa(i)), "k%d", i)
	}
	require.Zero(t, round())
}
