package shmarena

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// Check on healthy maps left by heavy churn of evicting and plain maps
// (TTLs, deletes, counters, evictions, Clear) finds nothing, for several
// stripe counts and segment boundaries.
func TestCheckAfterChurnFindsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []RegionOption
	}{
		{"evict-1", []RegionOption{WithSlots(1), WithSlotSize(64), WithEviction()}},
		{"evict-8191", []RegionOption{WithSlots(8191), WithSlotSize(64), WithEviction()}},
		{"evict-8192", []RegionOption{WithSlots(8192), WithSlotSize(64), WithEviction()}},
		{"evict-8193", []RegionOption{WithSlots(8193), WithSlotSize(64), WithEviction()}},
		{"evict-16384-stripes-3", []RegionOption{WithSlots(16384), WithSlotSize(64), WithEviction(), WithStripes(3)}},
		{"evict-20000-stripes-1", []RegionOption{WithSlots(20000), WithSlotSize(64), WithEviction(), WithStripes(1)}},
		{"plain-8191", []RegionOption{WithSlots(8191), WithSlotSize(64)}},
		{"plain-8193", []RegionOption{WithSlots(8193), WithSlotSize(64)}},
		{"plain-1", []RegionOption{WithSlots(1), WithSlotSize(64)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := tempArena(t, 8<<20)
			m, err := a.Map("m", tc.opts...)
			require.NoError(t, err)
			evict := m.q.on
			rng := rand.New(rand.NewPCG(1, 2))
			keys := 3 * m.Capacity()
			for i := range 6 * m.Capacity() / raceSlowdown {
				k := strconv.Itoa(rng.IntN(keys))
				switch rng.IntN(6) {
				case 0, 1:
					err := m.Store("k"+k, []byte("v"+k), ttlOrNone(time.Duration(rng.IntN(3))*time.Millisecond)...)
					if evict {
						require.NoError(t, err)
					} else if err != nil {
						require.ErrorIs(t, err, ErrFull)
					}
				case 2:
					m.Delete("k" + k)
				case 3:
					if _, err := m.Add("c"+k, 1); err != nil && !evict {
						require.ErrorIs(t, err, ErrFull)
					} else {
						require.NoError(t, err)
					}
				case 4:
					m.Load("k" + k)
				case 5:
					if i%(2*m.Capacity()+1) == 0 {
						m.Clear()
					}
				}
			}
			fs, err := a.Check()
			require.NoError(t, err)
			assert.Empty(t, fs)
			n := 0
			for range m.Keys() {
				n++
			}
			assert.LessOrEqual(t, n, m.Len(), "Keys yields no more than Len counts")
			if evict {
				assert.LessOrEqual(t, m.Len(), max(1, m.Capacity()-m.Capacity()/8)*int(m.stripes), "7/8 of the slots at most")
			}
			m.Clear()
			assert.Zero(t, m.Len())
			fs, err = a.Check()
			require.NoError(t, err)
			assert.Empty(t, fs)
		})
	}
}

// checkWhileWriting runs Check (on a writable and a read-only handle)
// up to 300 times while goroutines churn an evicting, a plain and a typed
// map (TTLs, deletes, counters, Clear), and returns the findings whose
// text contains want (every finding when want is "").
func checkWhileWriting(t *testing.T, want string, skip string) []string {
	a, path := tempArena(t, 16<<20)
	m, err := a.Map("ev", WithSlots(8193), WithSlotSize(64), WithEviction(), WithStripes(2))
	require.NoError(t, err)
	p, err := a.Map("pl", WithSlots(8191), WithSlotSize(64))
	require.NoError(t, err)
	tm, err := OpenTypedMap[testRoute](a, "tm", WithSlots(4096), WithEviction())
	require.NoError(t, err)
	ro, err := Open(path, ReadOnly())
	require.NoError(t, err)
	defer ro.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for !stop.Load() {
				k := strconv.Itoa(rng.IntN(30000))
				switch rng.IntN(9) {
				case 0, 1:
					_ = m.Store("k"+k, []byte(k), ttlOrNone(time.Duration(rng.IntN(5))*time.Millisecond)...)
				case 2:
					m.Delete("k" + k)
				case 3:
					_, _ = m.Add("c"+k, 1)
				case 4:
					m.Load("k" + k)
				case 5:
					_ = p.Store("p"+strconv.Itoa(rng.IntN(7000)), []byte(k))
					p.Delete("p" + strconv.Itoa(rng.IntN(7000)))
				case 6:
					_, _ = tm.Update("u"+k, func(o testRoute, _ bool) (testRoute, bool) { o.Weight++; return o, true })
				case 7:
					if rng.IntN(2000) == 0 {
						m.Clear()
						tm.Clear()
						p.Clear()
					}
				case 8:
					tm.Delete("u" + k)
				}
			}
		}()
	}
	var findings []string
	for i := 0; i < raceScaled(300) && len(findings) == 0; i++ {
		for _, h := range []*Arena{a, ro} {
			fs, err := h.Check()
			require.NoError(t, err)
			for _, f := range fs {
				if s := f.String(); !f.Unjudged && strings.Contains(s, want) && (skip == "" || !strings.Contains(s, skip)) {
					findings = append(findings, s)
				}
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	fs, err := a.Check()
	require.NoError(t, err)
	require.Empty(t, fs, "the maps are healthy at rest")
	return findings
}

// Check reads the longest probe distance once, before its scan: a key
// inserted further from home during the scan raises it, and is then
// reported "beyond the longest probe distance".
func TestCheckWhileWritersRunNoKeyBeyondLongestProbe(t *testing.T) {
	assert.Empty(t, checkWhileWriting(t, "beyond the longest probe distance", ""), "Check while writers run")
}

// Check samples a segment's lock once, before scanning its slots: a
// delete that takes the lock after that leaves a hole (a tombstone while
// entries move back) that Check reports as "a tombstone at rest".
func TestCheckWhileWritersRunNoOtherFinding(t *testing.T) {
	assert.Empty(t, checkWhileWriting(t, "", "beyond the longest probe distance"), "Check while writers run")
}

// Check compares a map's counts with its slots only when the counts held
// still during the scan; an evicting map at capacity keeps Used constant
// while every insert evicts another entry, so the counts "hold still"
// while the slots change under the scan.
func TestCheckCountsOfAFullCacheWhileItEvicts(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	m, err := a.Map("ev", WithSlots(8192), WithSlotSize(64), WithEviction())
	require.NoError(t, err)
	for i := range 3 * 8192 {
		require.NoError(t, m.Store("f"+strconv.Itoa(i), []byte("v")))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				_ = m.Store("g"+strconv.Itoa(g)+":"+strconv.Itoa(i), []byte("v"))
			}
		}()
	}
	var findings []string
	for i := 0; i < raceScaled(500) && len(findings) == 0; i++ {
		fs, err := a.Check()
		require.NoError(t, err)
		for _, f := range fs {
			if strings.Contains(f.String(), "counts say") {
				findings = append(findings, f.String())
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	fs, err := a.Check()
	require.NoError(t, err)
	require.Empty(t, fs, "the map is healthy at rest")
	assert.Empty(t, findings, "Check while a full cache evicts")
}
