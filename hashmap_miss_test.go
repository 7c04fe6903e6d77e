package shmarena

import (
	"testing"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// A miss that readNear sees is believed there (nearAbsent) only inside an
// even, unchanged move version of the key's segment, as readFar believed
// it: while entries move back (an odd move version) it is a plain
// nearMiss, which sends the read to readFar and confirmMiss, and the read
// still misses once the move is over.
func TestAbsentNearBelievesOnlyAQuietSegment(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64), WithStripes(1))
	require.NoError(t, m.Store("present", []byte("v")))
	key := nearKey(t, m, "absent-", 8) // absent, its home window fits and starts empty
	h := m.hashKey(key)
	_, _, home := m.place(h)
	_, r := m.readNear(key, h, nil, true, nil)
	require.Equal(t, nearAbsent, r)
	require.Equal(t, nearAbsent, m.absentNear(h, home))

	mv := m.lockOff(m.stripeOf(h)) + stMoveVer
	before := mem.Load64(m.mem, mv)
	mem.Store64(m.mem, mv, before+1) // entries moving
	require.Equal(t, nearMiss, m.absentNear(h, home), "believed a miss while entries moved")
	_, r = m.readNear(key, h, nil, true, nil)
	require.Equal(t, nearMiss, r)
	mem.Store64(m.mem, mv, before+2) // the move is over
	_, ok := m.Load(key)
	require.False(t, ok)
	v, ok := m.Load("present")
	require.True(t, ok)
	require.Equal(t, "v", string(v))
}
