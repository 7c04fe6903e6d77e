package shmarena

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArenaStatsAndInfo(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(64), WithStripes(4))
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		require.NoError(t, m.Store(k, []byte(k)))
	}
	m.Delete("c")
	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64), WithMaxInFlight(4))
	require.NoError(t, err)
	g, err := r.Group("work", WithAck(time.Minute), WithTopic("t"))
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		_, err := r.Publish("t", []byte{byte(i)})
		require.NoError(t, err)
	}
	recs := g.Claim(2)
	require.Len(t, recs, 2)
	require.NoError(t, g.Ack(recs[0]))

	st, err := a.Stats()
	require.NoError(t, err)
	require.Len(t, st.Regions, 2)
	assert.Equal(t, 1, st.Processes)
	assert.Equal(t, int64(4<<20), st.Size)
	ms := st.Regions[0]
	assert.Equal(t, KindMap, ms.Kind)
	assert.Equal(t, m.Stats(), *ms.Map)
	rs := st.Regions[1]
	assert.Equal(t, r.Stats(), *rs.Ring)
	require.Len(t, rs.Groups, 1)
	want := g.Stats()
	want.Mine = 0 // one process's claims: not in the file
	got := rs.Groups[0]
	assert.Equal(t, want.OldestPending > 0, got.OldestPending > 0)
	want.OldestPending, got.OldestPending = 0, 0
	assert.Equal(t, want, got)
	assert.Equal(t, 1, got.Pending)
	assert.EqualValues(t, 3, got.Lag)

	b, err := json.Marshal(st)
	require.NoError(t, err)
	var back ArenaStats
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, st.Regions[0], back.Regions[0])
	assert.Contains(t, string(b), `"Kind":"ring"`)

	in, err := a.Info()
	require.NoError(t, err)
	assert.Equal(t, path, in.Path)
	assert.WithinDuration(t, time.Now(), in.Created, time.Minute)
	require.Len(t, in.Regions, 2)
	assert.Equal(t, RegionInfo{Name: "m", Kind: KindMap, Offset: in.Regions[0].Offset, Length: in.Regions[0].Length,
		Slots: 64, SlotSize: 256, Stripes: 1}, in.Regions[0], "64 slots make one segment, whatever the stripes asked")
	assert.Equal(t, 4, in.Regions[1].MaxInFlight)
	require.Len(t, in.Processes, 1)
	assert.Equal(t, os.Getpid(), in.Processes[0].Pid)
	assert.True(t, in.Processes[0].Alive && in.Processes[0].Self)

	lm, err := a.LookupMap("m")
	require.NoError(t, err)
	v, ok := lm.Load("a")
	assert.True(t, ok)
	assert.Equal(t, "a", string(v))
	_, err = a.LookupMap("r")
	require.ErrorIs(t, err, ErrNoRegion)
	assert.Contains(t, err.Error(), `the arena's maps: ["m"]`)
	lr, err := a.LookupRing("r")
	require.NoError(t, err)
	assert.Equal(t, r.Head(), lr.Head())

	require.NoError(t, a.Close())
	_, err = a.Stats()
	require.ErrorIs(t, err, ErrClosed)
}
