package shmarena

import (
	"fmt"
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
	var key string
	var h, home uint64
	for i := 0; ; i++ { // an absent key whose home window fits and starts empty
		key = fmt.Sprintf("absent-%d", i)
		h = m.hashKey(key)
		var sp span
		_, sp, home = m.place(h)
		if home+8 <= sp.hi && m.tag(home) == 0 {
			break
		}
	}
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
