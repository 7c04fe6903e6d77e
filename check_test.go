package shmarena

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rl "github.com/shmarena/shmarena/internal/ringlayout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkTarget is a healthy arena for the corruption tests, and where its
// interesting words are. The offsets come from the live handles, so a
// layout change updates them here.
type checkTarget struct {
	path                  string
	liveSlot, emptySlot   int // offsets of a live key's and an empty slot
	liveIndex, emptyIndex uint64
	moveVer               int // segment 0's move version
	smallHead             int // the evicting map's small queue head
	stripeShare           int // stripe 0's used share
	ringSlot              int // the slot of the ring's newest record
	group, table          int // the acking group's entry, and its pending entry for its floor
	floor                 uint64
	mapTagBase            int
}

func newCheckTarget(t *testing.T) checkTarget {
	fixedSeed(t)
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("m", WithSlots(64), WithStripes(2))
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c", "d"} {
		require.NoError(t, m.Store(k, []byte("value-"+k)))
	}
	_, err = m.Add("n", 3)
	require.NoError(t, err)
	require.True(t, m.Delete("d"))
	e, err := a.Map("e", WithSlots(64), WithSlotSize(64), WithEviction())
	require.NoError(t, err)
	for i := range 300 {
		require.NoError(t, e.Store(strconv.Itoa(i), []byte("v")))
		e.Load(strconv.Itoa(i / 2))
	}
	require.Positive(t, e.Stats().Evicted)
	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64), WithMaxInFlight(4))
	require.NoError(t, err)
	g, err := r.Group("g", WithAck(time.Minute))
	require.NoError(t, err)
	for i := 0; i < 11; i++ { // laps the ring once
		_, err := r.Publish("t", []byte{byte(i)})
		if err != nil {
			require.NoError(t, g.Ack(g.Claim(4)...))
			_, err = r.Publish("t", []byte{byte(i)})
		}
		require.NoError(t, err)
	}
	require.NotEmpty(t, g.Claim(2))

	ct := checkTarget{path: path, stripeShare: m.lockOff(0) + stUsed, mapTagBase: m.tagBase}
	v, ok := m.find("b", m.hashKey("b"))
	require.True(t, ok)
	ct.liveSlot, ct.liveIndex = v.off, m.slotIndex(v.off)
	for i := uint64(0); i < m.slots; i++ {
		if metaState(loadMeta(m, i)) == stateEmpty {
			ct.emptySlot, ct.emptyIndex = m.slotOff(i), i
		}
	}
	require.NotZero(t, ct.emptySlot)
	ct.moveVer = m.lockOff(0) + stMoveVer
	ct.smallHead = e.lockOff(0) + stSmallHead
	ct.ringSlot = r.slotOff(r.Head() - 1)
	ct.group = g.goff
	ct.floor = g.Stats().Floor
	ct.table = g.entry(ct.floor)
	require.NoError(t, a.Close())
	return ct
}

func loadMeta(m *Map, i uint64) uint64 {
	v, _ := patchRead(m.mem, m.slotOff(i)+sMeta)
	return v
}

func patchRead(b []byte, off int) (uint64, bool) {
	if off+8 > len(b) {
		return 0, false
	}
	var v uint64
	for k := 7; k >= 0; k-- {
		v = v<<8 | uint64(b[off+k])
	}
	return v, true
}

// checkFindings opens path read-only and returns Check's findings, or the
// open's error as the one finding (Open validates the header and each
// region's header itself).
func checkFindings(t *testing.T, path string) []string {
	a, err := Open(path, ReadOnly())
	if err != nil {
		require.ErrorIs(t, err, ErrCorrupt)
		return []string{err.Error()}
	}
	defer a.Close()
	fs, err := a.Check()
	require.NoError(t, err)
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

// inspect runs everything the shmarena command reads, for the fuzz
// targets: on any bytes it may report, never panic or hang.
func inspect(a *Arena) {
	_, _ = a.Check()
	_, _ = a.Stats()
	_, _ = a.Locks()
	_, _ = a.Info()
	for _, r := range a.Regions() {
		if r.Kind == KindRing {
			if rr, err := a.LookupRing(r.Name); err == nil {
				rr.Groups()
			}
		}
	}
}

func TestCheckHealthy(t *testing.T) {
	ct := newCheckTarget(t)
	before := fileHash(t, ct.path)
	assert.Empty(t, checkFindings(t, ct.path))
	assert.Equal(t, before, fileHash(t, ct.path), "Check wrote")
}

// Every corruption the fuzz targets make is found: bytes flipped in slot
// headers, tags, counts and ring words.
func TestCheckFindsCorruption(t *testing.T) {
	ct := newCheckTarget(t)
	orig, err := os.ReadFile(ct.path)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		at   int
		set  func(old uint64) uint64
		want string
	}{
		{"map slot state", ct.liveSlot + sMeta, func(o uint64) uint64 { return o&^0xff | 7 }, "state 7"},
		{"map slot lengths", ct.liveSlot + sMeta, func(o uint64) uint64 { return o | 0xffff<<16 }, "a slot holds"},
		{"map slot hash", ct.liveSlot + sHash, func(o uint64) uint64 { return o ^ 1<<50 }, "stored with hash"},
		{"map slot version", ct.liveSlot + sVersion, func(o uint64) uint64 { return o | 1 }, "being written"},
		{"map tag", ct.mapTagBase + int(ct.liveIndex), func(o uint64) uint64 { return o&^0xff | 0x77 }, "lookups skip it"},
		{"map tombstone at rest", ct.emptySlot + sMeta, func(o uint64) uint64 { return o&^0xff | stateTombstone }, "tombstone at rest"},
		{"map empty slot's tag", ct.mapTagBase + int(ct.emptyIndex), func(o uint64) uint64 { return o&^0xff | 0x55 }, "empty with tag"},
		{"map moves left open", ct.moveVer, func(o uint64) uint64 { return o | 1 }, "entries moving"},
		{"map queue head", ct.smallHead, func(o uint64) uint64 { return o + 1000 }, "small queue head"},
		{"map count", ct.stripeShare, func(o uint64) uint64 { return o + 1 }, "counts say"},
		{"ring slot sequence", ct.ringSlot + rl.SBegin, func(o uint64) uint64 { return o - 8 }, "puts sequence"},
		{"ring slot end", ct.ringSlot + rl.SEnd, func(o uint64) uint64 { return o + 1 }, "begun but ended"},
		{"ring slot lengths", ct.ringSlot + rl.SLens, func(o uint64) uint64 { return 0x7fff_0000_0000 }, "a slot holds"},
		{"group position", ct.group + rl.GPosition, func(o uint64) uint64 { return o + 1000 }, "position"},
		{"group floor", ct.group + rl.GFloor, func(o uint64) uint64 { return 0 }, "floor"},
		{"pending sequence", ct.table + rl.PSeq, func(o uint64) uint64 { return o + 4 }, "holds sequence"},
		{"pending state", ct.table + rl.PState, func(o uint64) uint64 { return 9<<32 | o&0xffffffff }, "has state 9"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "arena")
			require.NoError(t, os.WriteFile(path, orig, 0o600))
			old, ok := patchRead(orig, c.at)
			require.True(t, ok)
			_, err := patch64(path, c.at, c.set(old))
			require.NoError(t, err)
			found := checkFindings(t, path)
			require.NotEmpty(t, found, "%s went unnoticed", c.name)
			assert.Contains(t, strings.Join(found, "\n"), c.want)
		})
	}
}
