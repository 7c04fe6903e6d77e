package shmarena

import (
	"strconv"
	"strings"
	"testing"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// findings runs Check on a and returns its findings as text, the
// unjudged ones apart.
func findings(t *testing.T, a *Arena) (problems, unjudged []string) {
	t.Helper()
	fs, err := a.Check()
	require.NoError(t, err)
	for _, f := range fs {
		if f.Unjudged {
			unjudged = append(unjudged, f.String())
		} else {
			problems = append(problems, f.String())
		}
	}
	return problems, unjudged
}

// A repair at work is no damage: Check run while a repair of segment 1
// has a slot half written (each slot it clears) reports nothing. The
// repair's writes name their segment as every writer's do; before, they
// named segment 0, and Check reported "names stripe 0, its segment is 1".
func TestCheckReportsNothingDuringARepair(t *testing.T) {
	a, _ := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(8192), WithSlotSize(64), WithStripes(2))
	require.NoError(t, err)
	for i := range 3000 {
		require.NoError(t, m.Store("k"+strconv.Itoa(i), []byte("v")))
	}
	var during []string
	checks := 0
	crashHook = func(p string) {
		if p == "repair" && checks < 3 {
			checks++
			fs, _ := findings(t, a)
			during = append(during, fs...)
		}
	}
	t.Cleanup(func() { crashHook = nil })
	require.True(t, m.lock(1))
	m.repairSegment(1)
	require.True(t, m.unlock(1))
	crashHook = nil
	require.Equal(t, 3, checks)
	assert.Empty(t, during, "Check during a repair")
	fs, unjudged := findings(t, a)
	assert.Empty(t, fs)
	assert.Empty(t, unjudged)
}

// A key stored in two slots (damage no writer leaves at rest: a move's
// copy is begun until its source is cleared) is reported: a Delete would
// remove one copy and Load still return the other.
func TestCheckReportsAKeyInTwoSlots(t *testing.T) {
	a, _ := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(64), WithStripes(1))
	require.NoError(t, err)
	require.NoError(t, m.Store("twice", []byte("value")))
	v, ok := m.find("twice", m.hashKey("twice"))
	require.True(t, ok)
	i := m.slotIndex(v.off)
	j := m.span(0).add(i, 1)
	require.Equal(t, uint64(stateEmpty), metaState(mem.Load64(m.mem, m.slotOff(j)+sMeta)))
	copy(m.mem[m.slotOff(j):m.slotOff(j)+m.slotSize], m.mem[v.off:v.off+m.slotSize])
	m.setTag(j, m.tag(i))
	m.addCounts(0, 1, 0)

	fs, _ := findings(t, a)
	assert.Contains(t, strings.Join(fs, "\n"), "is also in slot", "a key in two slots")
}

// Intent and move-from words set while nobody writes are reported: a
// recovery would act on them (clear the slot the intent names, keep the
// slot the move-from word names over its copy).
func TestCheckReportsIntentAndMoveFromWordsAtRest(t *testing.T) {
	a, _ := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(4096), WithSlotSize(64), WithStripes(1))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("value")))
	fs, _ := findings(t, a)
	require.Empty(t, fs)
	mem.Store64(m.mem, m.lockOff(0)+stIntent, 6)
	mem.Store64(m.mem, m.lockOff(0)+stMoveFrom, 9)
	fs, _ = findings(t, a)
	all := strings.Join(fs, "\n")
	assert.Contains(t, all, "intent word names slot 5")
	assert.Contains(t, all, "move-from word names slot 8")
}

// Check on a segment that never holds still (here its lock is held the
// whole time) finishes and says it could not judge it, rather than
// passing it silently; released, the segment is judged, and a count
// that was wrong all along is then reported.
func TestCheckSaysWhenItCouldNotJudgeASegment(t *testing.T) {
	a, _ := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(8192), WithSlotSize(64), WithStripes(2))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", []byte("value")))
	m.addCounts(1, 1, 0) // a count the slots belie
	require.True(t, m.lock(1))
	fs, unjudged := findings(t, a)
	assert.Empty(t, fs)
	require.Len(t, unjudged, 1)
	assert.Contains(t, unjudged[0], "segment 1 not judged")
	require.True(t, m.unlock(1))
	fs, unjudged = findings(t, a)
	assert.Empty(t, unjudged)
	assert.Contains(t, strings.Join(fs, "\n"), "segment 1: counts say")
}
