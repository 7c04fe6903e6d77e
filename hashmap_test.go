package shmarena

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testMap(t testing.TB, opts ...RegionOption) *Map {
	t.Helper()
	a, _ := tempArena(t, 8<<20)
	m, err := a.Map("m", opts...)
	require.NoError(t, err)
	return m
}

func TestMapBasics(t *testing.T) {
	m := testMap(t, WithSlots(64), WithSlotSize(128))
	require.Equal(t, 64, m.Capacity())
	require.Equal(t, 96, m.MaxPair())

	_, ok := m.Load("a")
	require.False(t, ok)
	require.NoError(t, m.Store("a", []byte("1")))
	v, ok := m.Load("a")
	require.True(t, ok)
	require.Equal(t, []byte("1"), v)
	require.True(t, m.Exists("a"))
	require.Equal(t, 1, m.Len())

	// Keys and values are arbitrary bytes; an empty value is a value.
	require.NoError(t, m.Store("k\x00ey", []byte{0, 1, 0}))
	v, ok = m.Load("k\x00ey")
	require.True(t, ok)
	require.Equal(t, []byte{0, 1, 0}, v)
	require.False(t, m.Exists("k"))
	require.NoError(t, m.Store("empty", nil))
	v, ok = m.Load("empty")
	require.True(t, ok)
	require.NotNil(t, v)
	require.Empty(t, v)

	// Overwrite, swap, compare-and-swap.
	require.NoError(t, m.Store("a", []byte("22")))
	prev, loaded, err := m.Swap("a", []byte("333"))
	require.NoError(t, err)
	require.True(t, loaded)
	require.Equal(t, []byte("22"), prev)
	swapped, err := m.CompareAndSwap("a", []byte("nope"), []byte("x"))
	require.NoError(t, err)
	require.False(t, swapped)
	swapped, err = m.CompareAndSwap("a", []byte("333"), []byte("4444"))
	require.NoError(t, err)
	require.True(t, swapped)
	v, _ = m.Load("a")
	require.Equal(t, []byte("4444"), v)
	swapped, err = m.CompareAndSwap("absent", nil, []byte("x"))
	require.NoError(t, err)
	require.False(t, swapped)

	actual, loaded, err := m.LoadOrStore("a", []byte("other"))
	require.NoError(t, err)
	require.True(t, loaded)
	require.Equal(t, []byte("4444"), actual)
	actual, loaded, err = m.LoadOrStore("b", []byte("bb"))
	require.NoError(t, err)
	require.False(t, loaded)
	require.Equal(t, []byte("bb"), actual)

	require.False(t, m.CompareAndDelete("b", []byte("zz")))
	require.True(t, m.CompareAndDelete("b", []byte("bb")))
	require.False(t, m.Exists("b"))

	v, loaded = m.LoadAndDelete("a")
	require.True(t, loaded)
	require.Equal(t, []byte("4444"), v)
	require.False(t, m.Delete("a"))
	require.NoError(t, m.Store("c", []byte("c")))
	require.True(t, m.Delete("c"))

	st := m.Stats()
	require.Equal(t, 2, st.Used) // "k\x00ey" and "empty"
	require.Zero(t, st.Tombstones, "deletes leave no tombstones")
	require.Equal(t, 64, st.Capacity)
}

func TestMapAppendLoadNoAlias(t *testing.T) {
	m := testMap(t)
	require.NoError(t, m.Store("k", []byte("value")))
	dst := []byte("prefix:")
	out, ok := m.AppendLoad(dst, "k")
	require.True(t, ok)
	require.Equal(t, "prefix:value", string(out))
	out[len(out)-1] = 'X' // must not reach the mapping
	v, _ := m.Load("k")
	require.Equal(t, "value", string(v))
	out, ok = m.AppendLoad(dst, "missing")
	require.False(t, ok)
	require.Equal(t, dst, out)
}

func TestMapBadInput(t *testing.T) {
	m := testMap(t, WithSlots(4), WithSlotSize(64))
	require.ErrorIs(t, m.Store("", []byte("x")), ErrEmptyKey)
	_, err := m.Add("", 1)
	require.ErrorIs(t, err, ErrEmptyKey)
	require.ErrorIs(t, m.Store("k", make([]byte, m.MaxPair())), ErrTooLarge)
	require.NoError(t, m.Store("k", make([]byte, m.MaxPair()-1)))
	require.Equal(t, 1, m.Len())

	// Fill the table; a new key is refused, an overwrite is not.
	for i := 1; i < 4; i++ {
		require.NoError(t, m.Store("k"+strconv.Itoa(i), []byte("v")))
	}
	require.ErrorIs(t, m.Store("new", []byte("v")), ErrFull)
	_, err = m.Add("newc", 1)
	require.ErrorIs(t, err, ErrFull)
	_, _, err = m.LoadOrStore("new", []byte("v"))
	require.ErrorIs(t, err, ErrFull)
	require.NoError(t, m.Store("k1", []byte("again")))
	st := m.Stats()
	require.Equal(t, uint64(3), st.Full)
	require.Equal(t, 4, st.Used)
	// Delete frees a slot as a tombstone, which the next insert reuses.
	require.True(t, m.Delete("k2"))
	require.NoError(t, m.Store("new", []byte("v")))
	st = m.Stats()
	require.Equal(t, 4, st.Used)
	require.Equal(t, 0, st.Tombstones)

	// A refused write leaves the entry as it was.
	require.NoError(t, m.Store("k3", []byte("text")))
	_, err = m.Add("k3", 1)
	require.ErrorIs(t, err, ErrNotCounter)
	v, _ := m.Load("k3")
	require.Equal(t, "text", string(v))
	require.ErrorIs(t, m.Store("k3", make([]byte, 100)), ErrTooLarge)
	v, _ = m.Load("k3")
	require.Equal(t, "text", string(v))
}

func TestMapCounters(t *testing.T) {
	m := testMap(t)
	n, err := m.Add("c", 5)
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	n, err = m.Add("c", -7)
	require.NoError(t, err)
	require.Equal(t, int64(-2), n)
	c, ok := m.Counter("c")
	require.True(t, ok)
	require.Equal(t, int64(-2), c)
	v, ok := m.Load("c")
	require.True(t, ok)
	require.Equal(t, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, v)
	require.NoError(t, m.Store("s", []byte("x")))
	_, ok = m.Counter("s")
	require.False(t, ok)
	_, ok = m.Counter("absent")
	require.False(t, ok)
	// A counter is overwritten by Store like any value.
	require.NoError(t, m.Store("c", []byte("plain")))
	_, err = m.Add("c", 1)
	require.ErrorIs(t, err, ErrNotCounter)
}

func TestMapTTL(t *testing.T) {
	m := testMap(t)
	require.NoError(t, m.Store("k", []byte("v"), WithTTL(time.Hour)))
	left, ok := m.TTL("k")
	require.True(t, ok)
	require.InDelta(t, float64(time.Hour), float64(left), float64(time.Minute))
	// KeepTTL keeps the deadline; a plain Store clears it, as Redis SET.
	require.NoError(t, m.Store("k", []byte("v2"), WithKeepTTL()))
	left, _ = m.TTL("k")
	require.Greater(t, left, 59*time.Minute)
	require.NoError(t, m.Store("k", []byte("v3")))
	left, ok = m.TTL("k")
	require.True(t, ok)
	require.Zero(t, left)
	require.True(t, m.Expire("k", time.Hour))
	left, _ = m.TTL("k")
	require.Greater(t, left, 59*time.Minute)
	require.True(t, m.Persist("k"))
	left, _ = m.TTL("k")
	require.Zero(t, left)
	require.False(t, m.Expire("absent", time.Second))

	// A lapsed entry reads as absent and is collected.
	require.NoError(t, m.Store("short", []byte("v"), WithTTL(time.Millisecond)))
	time.Sleep(5 * time.Millisecond)
	require.False(t, m.Exists("short"))
	_, ok = m.Load("short")
	require.False(t, ok)
	require.Equal(t, uint64(1), m.Stats().Expired)
	require.Zero(t, m.Stats().Tombstones)

	// A live counter keeps its deadline; a lapsed one restarts at delta.
	_, err := m.Add("win", 1, WithTTL(time.Hour))
	require.NoError(t, err)
	n, err := m.Add("win", 1, WithTTL(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	left, _ = m.TTL("win")
	require.LessOrEqual(t, left, time.Hour, "the second Add kept the first deadline")
	lapseNow(t, m, "win")
	n, err = m.Add("win", 3)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	left, ok = m.TTL("win")
	require.True(t, ok)
	require.Zero(t, left)
}

func TestMapAllKeys(t *testing.T) {
	m := testMap(t, WithSlots(128))
	want := map[string][]byte{}
	for i := range 50 {
		k := fmt.Sprintf("key-%d", i)
		want[k] = []byte(strconv.Itoa(i * i))
		require.NoError(t, m.Store(k, want[k]))
	}
	require.True(t, m.Delete("key-7"))
	delete(want, "key-7")
	got := maps.Collect(m.All())
	require.Equal(t, want, got)
	keys := 0
	for k := range m.Keys() {
		require.Contains(t, want, k)
		keys++
	}
	require.Equal(t, len(want), keys)
	// Stopping early is honoured.
	n := 0
	for range m.All() {
		n++
		break
	}
	require.Equal(t, 1, n)
}

func TestMapShapeOptions(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	_, err := a.Map("m", WithSlots(0))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = a.Map("m", WithSlotSize(8))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = a.Map("m", WithSlots(8), WithStripes(maxStripes+1))
	require.ErrorIs(t, err, ErrInvalid)
	m, err := a.Map("m", WithSlots(8), WithSlotSize(100)) // rounded to 104
	require.NoError(t, err)
	require.Equal(t, 72, m.MaxPair())
	_, err = a.Map("m", WithSlots(16), WithSlotSize(104))
	require.ErrorIs(t, err, ErrShape)
	require.ErrorContains(t, err, "slots")
	_, err = a.Map("m", WithSlots(8), WithSlotSize(200))
	require.ErrorContains(t, err, "slot size")
	_, err = a.Map("m", WithSlots(8), WithSlotSize(104), WithStripes(2))
	require.NoError(t, err, "a map of 8 slots has one segment, whatever the stripes asked")
	_, err = a.Map("m", WithSlots(8), WithSlotSize(104), WithEviction())
	require.ErrorIs(t, err, ErrShape)
	require.ErrorContains(t, err, "eviction")
	_, err = a.Map("big", WithSlots(16384), WithSlotSize(48))
	require.NoError(t, err)
	_, err = a.Map("big", WithSlots(16384), WithSlotSize(48), WithStripes(2))
	require.ErrorIs(t, err, ErrShape)
	require.ErrorContains(t, err, "stripes")
	_, err = a.Map("big", WithSlots(16384), WithSlotSize(48), WithStripes(4))
	require.NoError(t, err, "16,384 slots make 4 segments of 4,096")
	_, err = a.openMap("m", true, []RegionOption{WithSlots(8), WithSlotSize(104)})
	require.ErrorContains(t, err, "encoded flag")
	_, err = a.Map("m", WithSlots(8), WithSlotSize(104))
	require.NoError(t, err)
}

// TestMapModel runs random operations against a Go map as the model.
func TestMapModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m := testMap(t, WithSlots(97), WithSlotSize(64), WithStripes(7))
	runModel(t, m, r, 20000)
}

// An evicting map against the model: tables smaller than the key set, so
// eviction runs all the time, with one segment and with two (8,193 slots
// make one segment of 4,096 slots and one of 4,097).
func TestMapModelEvicting(t *testing.T) {
	for _, slots := range []int{1, 5, 16, 97, 8193} {
		t.Run(strconv.Itoa(slots), func(t *testing.T) {
			m := testMap(t, WithSlots(slots), WithSlotSize(64), WithEviction())
			runModelKeys(t, m, rand.New(rand.NewPCG(uint64(slots), 3)), max(raceScaled(20000), 8*slots), max(2*slots, 40)) // 8 ops a slot even under race: enough inserts to evict
			require.Positive(t, m.Stats().Evicted)
		})
	}
}

// A plain map of several segments against the model.
func TestMapModelSegments(t *testing.T) {
	m := testMap(t, WithSlots(9000), WithSlotSize(64))
	require.Equal(t, uint64(2), m.stripes)
	runModelKeys(t, m, rand.New(rand.NewPCG(5, 6)), 40000, 7000)
}

// Tables of under eight slots, where every probe wraps and a window of
// eight tags reaches past the last one.
func TestMapModelSmallTables(t *testing.T) {
	for slots := 1; slots <= 9; slots++ {
		t.Run(strconv.Itoa(slots), func(t *testing.T) {
			m := testMap(t, WithSlots(slots), WithSlotSize(64), WithStripes(min(slots, 3)))
			runModel(t, m, rand.New(rand.NewPCG(uint64(slots), 2)), 2000)
		})
	}
}

// A padding byte past the last tag that equals a key's tag (a corrupt
// file) is never taken for a slot: no read past the table, no panic.
func TestMapSmallTablePaddingLikeATag(t *testing.T) {
	sz, err := MapBytes(WithSlots(3), WithSlotSize(48), WithStripes(1))
	require.NoError(t, err)
	a, _ := tempArena(t, MinSize+sz) // the map ends the file
	m, err := a.Map("m", WithSlots(3), WithSlotSize(48), WithStripes(1))
	require.NoError(t, err)
	for _, k := range []string{"s0", "s1", "s2"} { // every slot live: no empty tag comes first
		require.NoError(t, m.Store(k, []byte("v")))
	}
	tried := 0
	for i := 0; i < 40; i++ {
		k := "k" + strconv.Itoa(i)
		if m.home(m.hashKey(k)) != m.slots-1 {
			continue
		}
		tried++
		tag := tagOf(m.hashKey(k))
		for j := int(m.slots); j < 9; j++ {
			m.mem[m.tagBase+j] = tag ^ 0x80 | 3 // neither candidate nor free
		}
		m.mem[m.tagBase+9] = tag // seven slots past the table's last
		require.NotPanics(t, func() {
			_, ok := m.Load(k)
			require.False(t, ok, k)
			require.True(t, m.Exists("s1"))
		})
	}
	require.Positive(t, tried, "no key with its home at the last slot")
}

func runModel(t testing.TB, m *Map, r *rand.Rand, steps int) {
	runModelKeys(t, m, r, steps, 120)
}

// runModelKeys runs steps random operations on keys k0 to k(nkeys-1)
// against a Go map as the model, with a Clear one step in 10 x nkeys. On an
// evicting map a key may vanish from the map and not the model; the model
// learns it before each operation on the key (see sync), and counts it:
// every key so lost must be one the map counted as evicted or expired.
// Nothing vanishes from a plain map, and a key present in the map always
// holds the model's value.
func runModelKeys(t testing.TB, m *Map, r *rand.Rand, steps, nkeys int) {
	model := map[string][]byte{}
	counters := map[string]bool{}
	evicting := m.q.on
	vanished := uint64(0)
	sync := func(k string) {
		if _, ok := model[k]; ok && evicting && !m.Exists(k) {
			delete(model, k)
			delete(counters, k)
			vanished++
		}
	}
	full := func(err error) bool { // ErrFull, which an evicting map never returns
		if errors.Is(err, ErrFull) && evicting {
			require.Fail(t, "an evicting map refused a key", "%v", err)
		}
		return errors.Is(err, ErrFull)
	}
	// A plain map with a value space may refuse any write of a large
	// value, an overwrite included, when live values fill it.
	bytesFull := func(err error) bool { return m.vs.share != 0 && full(err) }
	for step := 0; step < steps; step++ {
		k := "k" + strconv.Itoa(r.IntN(nkeys))
		val := modelValue(r, m, len(k))
		if r.IntN(10*nkeys) == 0 {
			m.Clear()
			clear(model)
			clear(counters)
			require.Zero(t, m.Len())
			continue
		}
		sync(k)
		switch op := r.IntN(10); op {
		case 0, 1:
			err := m.Store(k, val)
			if _, ok := model[k]; (ok && !bytesFull(err)) || !full(err) {
				require.NoError(t, err)
				model[k] = val
				delete(counters, k)
			}
		case 2:
			got, ok := m.Load(k)
			want, wok := model[k]
			require.Equal(t, wok, ok, "step %d key %s", step, k)
			if ok {
				require.Equal(t, want, got)
			}
		case 3:
			_, wok := model[k]
			require.Equal(t, wok, m.Delete(k))
			delete(model, k)
			delete(counters, k)
		case 4:
			n, err := m.Add(k, 3)
			_, present := model[k]
			switch {
			case present && !counters[k]:
				require.ErrorIs(t, err, ErrNotCounter)
			case !present && full(err):
			default:
				require.NoError(t, err)
				var old int64
				if present {
					old = int64(leUint64(model[k]))
				}
				require.Equal(t, old+3, n)
				model[k] = leBytes(uint64(n))
				counters[k] = true
			}
		case 5:
			prev, loaded, err := m.Swap(k, val)
			want, wok := model[k]
			if err != nil {
				require.True(t, full(err), "%v", err)
				require.True(t, !wok || bytesFull(err))
				continue
			}
			require.Equal(t, wok, loaded)
			if wok {
				require.Equal(t, want, prev)
			}
			model[k] = val
			delete(counters, k)
		case 6:
			if !evicting {
				require.Equal(t, len(model), m.Len())
			}
			st := m.Stats()
			require.LessOrEqual(t, st.Used+st.Tombstones, st.Capacity)
			require.LessOrEqual(t, vanished, st.Evicted+st.Expired, "keys vanished that the map never counted as evicted")
		case 7:
			got, loaded := m.LoadAndDelete(k)
			want, wok := model[k]
			require.Equal(t, wok, loaded)
			if wok {
				require.Equal(t, want, got)
			}
			delete(model, k)
			delete(counters, k)
		case 8, 9:
			// Compare against the current value half the time (a counter's
			// included), else against a value it may not have.
			old, wok := model[k]
			if r.IntN(2) == 0 || !wok {
				old = val[:min(len(val), 8)]
			}
			matches := wok && bytes.Equal(old, model[k])
			if op == 8 {
				swapped, err := m.CompareAndSwap(k, old, val)
				if bytesFull(err) {
					continue
				}
				require.NoError(t, err)
				require.Equal(t, matches, swapped, "step %d key %s", step, k)
				if swapped {
					model[k] = val
					delete(counters, k)
				}
			} else {
				require.Equal(t, matches, m.CompareAndDelete(k, old), "step %d key %s", step, k)
				if matches {
					delete(model, k)
					delete(counters, k)
				}
			}
		}
	}
	got := maps.Collect(m.All())
	for k, v := range got {
		require.Equal(t, model[k], v, "key %s: the map holds a value the model does not", k)
	}
	if !evicting {
		require.Len(t, got, len(model))
	}
	require.Equal(t, len(got), m.Len())
	st := m.Stats()
	require.LessOrEqual(t, vanished+uint64(len(model)-len(got)), st.Evicted+st.Expired)
	requireValueBytes(t, m, got)
}

// modelValue returns a value for key of klen bytes: up to the slot's room,
// and for a map with a value space, one time in two larger, up to
// MaxValue, of random bytes.
func modelValue(r *rand.Rand, m *Map, klen int) []byte {
	if m.vs.share == 0 || r.IntN(2) == 0 {
		return bytes.Repeat([]byte{byte(r.IntN(256))}, r.IntN(m.MaxPair()-klen+1))
	}
	n := m.MaxPair() - klen + 1 + r.IntN(4*m.MaxPair())
	if r.IntN(8) == 0 {
		n = r.IntN(m.MaxValue() + 1)
	}
	v := make([]byte, min(n, m.MaxValue()))
	for i := range v {
		v[i] = byte(r.Uint32())
	}
	return v
}

func leUint64(b []byte) uint64 {
	var n uint64
	for i := 7; i >= 0; i-- {
		n = n<<8 | uint64(b[i])
	}
	return n
}

func leBytes(n uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(n >> (8 * i))
	}
	return b
}

func FuzzMapOps(f *testing.F) {
	fixedSeed(f) // a failing input must replay with the same collisions
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(99), uint64(7))
	f.Add(uint64(4), uint64(3))
	f.Add(uint64(5), uint64(6)) // evicting
	f.Add(uint64(8), uint64(9)) // evicting, 3 slots
	f.Add(uint64(1), uint64(1)) // a value space
	f.Add(uint64(7), uint64(3)) // a value space, evicting
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		// 61 slots, or 2 to 9 (where every probe wraps) for one seed in 4.
		slots := 61
		if s1%4 == 0 {
			slots = 2 + int(s2%8)
		}
		var opts []RegionOption
		if s2%3 == 0 {
			opts = append(opts, WithEviction())
		}
		if s1%3 == 1 { // values of up to MaxValue in a value space
			opts = append(opts, WithBytes(int64(minShare*(1+s2%4))))
		}
		m := testMap(t, append(opts, WithSlots(slots), WithSlotSize(64), WithStripes(min(slots, 3)))...)
		runModel(t, m, rand.New(rand.NewPCG(s1, s2)), 500)
	})
}

// --- multi-process ---

func init() {
	childRoles["map-add"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := a.Map("m")
		if err != nil {
			return err
		}
		for range envInt("SHMARENA_N") {
			if _, err := m.Add("hits", 1); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestMapAddProcesses(t *testing.T) {
	a, path := tempArena(t, 1<<20)
	m, err := a.Map("m")
	require.NoError(t, err)
	runChildren(t, "map-add", 4, "SHMARENA_PATH="+path, "SHMARENA_N=10000")
	n, ok := m.Counter("hits")
	require.True(t, ok)
	require.Equal(t, int64(40000), n)
}

const tornKeys = 8

func init() {
	// Writers alternate whole-slot values of 0x00 and 0xFF; readers check
	// that every value they see is uniform.
	childRoles["map-torn-writer"] = func() error {
		m, done, err := tornMap()
		if err != nil {
			return err
		}
		defer done()
		zero := make([]byte, m.MaxPair()-2)
		ones := bytes.Repeat([]byte{0xff}, len(zero))
		for i := 0; i < envInt("SHMARENA_N"); i++ {
			v := zero
			if i%2 == 1 {
				v = ones
			}
			if err := m.Store("k"+strconv.Itoa(i%tornKeys), v); err != nil {
				return err
			}
		}
		return nil
	}
	childRoles["map-torn-reader"] = func() error {
		m, done, err := tornMap()
		if err != nil {
			return err
		}
		defer done()
		var buf []byte
		hits := 0
		for i := 0; i < envInt("SHMARENA_N"); i++ {
			var ok bool
			buf, ok = m.AppendLoad(buf[:0], "k"+strconv.Itoa(i%tornKeys))
			if !ok {
				continue
			}
			hits++
			if len(buf) != m.MaxPair()-2 {
				return fmt.Errorf("read %d bytes, stored %d", len(buf), m.MaxPair()-2)
			}
			for _, c := range buf {
				if c != buf[0] {
					return fmt.Errorf("mixed value: %x", buf)
				}
			}
		}
		if hits == 0 {
			return fmt.Errorf("no read found a key")
		}
		fmt.Fprintf(os.Stderr, "reader: %d reads, %d hits\n", envInt("SHMARENA_N"), hits)
		return nil
	}
}

func tornMap() (*Map, func(), error) {
	a, err := Open(os.Getenv("SHMARENA_PATH"))
	if err != nil {
		return nil, nil, err
	}
	m, err := a.Map("torn", WithSlots(64), WithSlotSize(256))
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return m, func() { a.Close() }, nil
}

func TestMapTornReadsProcesses(t *testing.T) {
	a, path := tempArena(t, 1<<20)
	m, err := a.Map("torn", WithSlots(64), WithSlotSize(256))
	require.NoError(t, err)
	for i := range tornKeys {
		require.NoError(t, m.Store("k"+strconv.Itoa(i), make([]byte, m.MaxPair()-2)))
	}
	reads, writes := raceScaled(1_000_000), raceScaled(300_000)
	if testing.Short() {
		reads, writes = 100_000, 30_000
	}
	w1 := child(t, "map-torn-writer", "SHMARENA_PATH="+path, "SHMARENA_N="+strconv.Itoa(writes))
	w2 := child(t, "map-torn-writer", "SHMARENA_PATH="+path, "SHMARENA_N="+strconv.Itoa(writes))
	require.NoError(t, w1.Start())
	require.NoError(t, w2.Start())
	runChildren(t, "map-torn-reader", 2, "SHMARENA_PATH="+path, "SHMARENA_N="+strconv.Itoa(reads))
	require.NoError(t, w1.Wait())
	require.NoError(t, w2.Wait())
	t.Logf("busy reads: %d", m.Stats().Busy)
}

func init() {
	childRoles["map-insert"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := a.Map("fill", WithSlots(4096))
		if err != nil {
			return err
		}
		id, n := envInt("SHMARENA_ID"), envInt("SHMARENA_N")
		for i := range n {
			if err := m.Store(fmt.Sprintf("p%d-%d", id, i), []byte(strconv.Itoa(i))); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestMapDisjointInsertsProcesses(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("fill", WithSlots(4096))
	require.NoError(t, err)
	// 2 x 1600 keys into 4096 slots, one segment: 78% full at the end.
	runChildren(t, "map-insert", 2, "SHMARENA_PATH="+path, "SHMARENA_N=1600")
	for id := range 2 {
		for i := range 1600 {
			v, ok := m.Load(fmt.Sprintf("p%d-%d", id, i))
			require.True(t, ok, "p%d-%d", id, i)
			require.Equal(t, strconv.Itoa(i), string(v))
		}
	}
	require.Equal(t, 3200, m.Len())
	st := m.Stats()
	require.Equal(t, 3200, st.Used)
	require.Zero(t, st.Tombstones)
	n := 0
	for range m.Keys() {
		n++
	}
	assert.Equal(t, 3200, n)
}

func init() {
	childRoles["map-ttl"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := a.Map("m")
		if err != nil {
			return err
		}
		if err := m.Store("session", []byte("x"), WithTTL(50*time.Millisecond)); err != nil {
			return err
		}
		if left, ok := m.TTL("session"); !ok || left > 50*time.Millisecond {
			return fmt.Errorf("TTL right after Store: %v %v", left, ok)
		}
		_, err = m.Add("window", 10, WithTTL(50*time.Millisecond))
		return err
	}
}

func TestMapTTLProcesses(t *testing.T) {
	a, path := tempArena(t, 1<<20)
	m, err := a.Map("m")
	require.NoError(t, err)
	runChildren(t, "map-ttl", 1, "SHMARENA_PATH="+path)
	// The child's deadline is wall-clock time, the same here: whatever is
	// left of it is at most 50 ms, and once it has passed the key is gone.
	if left, ok := m.TTL("session"); ok {
		require.Greater(t, left, time.Duration(0))
		require.LessOrEqual(t, left, 50*time.Millisecond)
	}
	time.Sleep(60 * time.Millisecond)
	require.False(t, m.Exists("session"))
	_, ok := m.Load("session")
	require.False(t, ok)
	n, err := m.Add("window", 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "a lapsed counter restarts at the delta")
	require.GreaterOrEqual(t, m.Stats().Expired, uint64(2))
}

// A "forever" TTL saturates instead of wrapping into the past.
func TestMapHugeTTL(t *testing.T) {
	m := testMap(t)
	forever := time.Duration(math.MaxInt64)
	require.NoError(t, m.Store("k", []byte("v"), WithTTL(forever)))
	require.True(t, m.Exists("k"))
	left, ok := m.TTL("k")
	require.True(t, ok)
	require.Greater(t, left, 100*365*24*time.Hour)
	_, err := m.Add("c", 1, WithTTL(forever))
	require.NoError(t, err)
	n, err := m.Add("c", 1, WithTTL(forever))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.True(t, m.Expire("k", forever))
	require.True(t, m.Exists("k"))
}

func init() {
	childRoles["map-churn"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := a.Map("churn", WithSlots(4096))
		if err != nil {
			return err
		}
		id, n := envInt("SHMARENA_ID"), envInt("SHMARENA_N")
		for i := range n {
			if err := m.Store(fmt.Sprintf("c%d-%d", id, i), []byte("v")); err != nil {
				return err
			}
			if i%2 == 1 && !m.Delete(fmt.Sprintf("c%d-%d", id, i-1)) {
				return fmt.Errorf("delete of c%d-%d failed", id, i-1)
			}
		}
		return nil
	}
}

// Two processes inserting and deleting at once keep Len and Stats exact:
// the counts are shares kept per stripe, summed on read.
func TestMapCountsUnderChurnProcesses(t *testing.T) {
	a, path := tempArena(t, 4<<20)
	m, err := a.Map("churn", WithSlots(4096))
	require.NoError(t, err)
	runChildren(t, "map-churn", 2, "SHMARENA_PATH="+path, "SHMARENA_N=1500")
	var used, tomb int
	for i := uint64(0); i < m.slots; i++ {
		switch metaState(mem.Load64(m.mem, m.slotOff(i)+sMeta)) {
		case stateLive:
			used++
		case stateTombstone:
			tomb++
		}
	}
	require.Equal(t, 1500, used)
	st := m.Stats()
	require.Equal(t, used, st.Used)
	require.Equal(t, tomb, st.Tombstones)
	require.Equal(t, used, m.Len())
}

// scanTags, which tests eight tags at a time, agrees with a scan of one
// tag at a time, for random tags, starting slots, limits, both kinds of
// search (a key's, a free slot's) and segments whose size is not a
// multiple of eight (so the eight-tag window reaches past the segment's
// last tag, into the next segment's tags or padding it must ignore).
func TestScanTagsMatchesBytewiseScan(t *testing.T) {
	a, _ := tempArena(t, 1<<20)
	m, err := a.Map("tags", WithSlots(3*minSegmentSlots+5), WithSlotSize(48), WithStripes(3))
	require.NoError(t, err)
	require.Equal(t, uint64(3), m.stripes)
	rng := rand.New(rand.NewPCG(1, 2))
	naive := func(sp span, i, left uint64, below, want byte) (uint64, byte) {
		for skip := uint64(0); skip < left; skip++ {
			if t := m.mem[m.tagBase+int(i)]; t < below || t == want {
				return skip, t
			}
			i = sp.add(i, 1)
		}
		return left, 0
	}
	for i := m.tagBase + int(m.slots); i < m.tagBase+int(layout.Align(int64(m.slots))); i++ {
		require.Zero(t, m.mem[i], "padding past the tags reads as empty slots' tags")
	}
	for round := 0; round < raceScaled(20000); round++ {
		// Few distinct values, so 0, 1, 2 and want are common, and runs of
		// zeros followed by ones exercise the borrow of bytesEqual.
		sp := m.span(rng.Uint64N(m.stripes))
		for i := sp.lo; i < sp.hi; i++ {
			m.mem[m.tagBase+int(i)] = byte(rng.IntN(6))
		}
		i, left := sp.lo+rng.Uint64N(sp.len()), 1+rng.Uint64N(sp.len())
		below, want := byte(belowKey), byte(3+rng.IntN(3))
		if rng.IntN(2) == 0 {
			below, want = belowFree, 0
		}
		skip, tag := m.scanTags(sp, i, left, below, want)
		wantSkip, wantTag := naive(sp, i, left, below, want)
		require.Equal(t, wantSkip, skip, "round %d: from %d, %d slots, below %d, tag %d", round, i, left, below, want)
		require.Equal(t, wantTag, tag, "round %d", round)
	}
}

// A crafted value length of 2^31 or more is refused as too long, not
// turned negative on 32-bit builds (where int is 32 bits).
func TestMapHugeValueLengthInFile(t *testing.T) {
	m := testMap(t, WithSlots(16), WithSlotSize(64))
	require.NoError(t, m.Store("k", []byte("v")))
	v, _, ok := m.readKey("k", m.hashKey("k"), nil, false)
	require.True(t, ok)
	for _, vlen := range []uint64{1 << 31, 1<<32 - 1, uint64(m.maxPair) + 1} {
		meta := metaOf(stateLive, 0, 1, 0) | vlen<<32
		require.False(t, m.valid(meta), "value length %d", vlen)
		mem.Store64(m.mem, v.off+sMeta, meta)
		require.NotPanics(t, func() {
			_, ok := m.Load("k")
			require.False(t, ok)
			for range m.All() {
			}
		})
	}
}

// A delete leaves no tombstone: every slot's tag is 0 for an empty slot or
// its key's tag, and an insert takes the first empty slot from its key's
// home, found by the tags in a map that never held a deadline and slot by
// slot in one that has.
func TestMapInsertTakesFirstFreeSlot(t *testing.T) {
	for _, ttl := range []bool{false, true} {
		m := testMap(t, WithSlots(64), WithSlotSize(64), WithStripes(4))
		if ttl {
			require.NoError(t, m.Store("with-deadline", nil, WithTTL(time.Hour)))
		}
		slotOf := func(k string) uint64 {
			v, _, ok := m.readKey(k, m.hashKey(k), nil, false)
			require.True(t, ok, k)
			return m.slotIndex(v.off)
		}
		for i := range 44 {
			require.NoError(t, m.Store("a"+strconv.Itoa(i), nil))
		}
		for i := 0; i < 44; i += 3 {
			require.True(t, m.Delete("a"+strconv.Itoa(i)))
		}
		for i := uint64(0); i < m.slots; i++ {
			meta := mem.Load64(m.mem, m.slotOff(i)+sMeta)
			switch metaState(meta) {
			case stateEmpty:
				require.Zero(t, m.mem[m.tagBase+int(i)], "slot %d", i)
			case stateLive:
				require.Equal(t, tagOf(mem.Load64(m.mem, m.slotOff(i)+sHash)), m.mem[m.tagBase+int(i)], "slot %d", i)
			default:
				require.Failf(t, "tombstone left", "slot %d: state %d", i, metaState(meta))
			}
		}
		for i := range 20 {
			k := "b" + strconv.Itoa(i)
			_, sp, want := m.place(m.hashKey(k))
			for st := metaState(mem.Load64(m.mem, m.slotOff(want)+sMeta)); st == stateLive; st = metaState(mem.Load64(m.mem, m.slotOff(want)+sMeta)) {
				want = sp.add(want, 1)
			}
			require.NoError(t, m.Store(k, nil))
			require.Equal(t, want, slotOf(k), "deadlines %v: %s went past a free slot", ttl, k)
		}
	}
}

// readNear, the short read path, decides the common cases itself: a key
// (plain or counter, with or without a deadline) alone in its window is a
// hit, and an absent key whose home slot is empty is a miss. Anything it
// sends to searchKey costs both paths.
func TestReadNearDecidesCommonCases(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64), WithStripes(1)) // MaxPair 32: the pairs below fill it
	// Each key is picked once the ones before it are stored, so it lands
	// at its own home: picked first, two could share a window, and one
	// stored there before the other with the same tag sends its read on.
	plain := nearKey(t, m, "p", 5)
	require.NoError(t, m.Store(plain, []byte("a value of 27 bytes .......")))
	ttl := nearKey(t, m, "t", 3)
	require.NoError(t, m.Store(ttl, []byte("value"), WithTTL(time.Hour)))
	counter := nearKey(t, m, "counter-0123456789ab", 24) // 24 bytes and the 8-byte value
	_, err := m.Add(counter, 7)
	require.NoError(t, err)
	for _, k := range []string{plain, ttl, counter} {
		h := m.hashKey(k)
		var v view
		out, r := m.readNear(k, h, nil, true, &v)
		require.Equal(t, nearHit, r, k)
		want, ok := m.Load(k)
		require.True(t, ok)
		require.Equal(t, want, out, k)
		require.Equal(t, v.off, func() int { var v view; m.searchKey(k, h, nil, false, &v); return v.off }(), k)
	}
	absent := nearKey(t, m, "absent", 6)
	_, r := m.readNear(absent, m.hashKey(absent), nil, true, new(view))
	require.Equal(t, nearAbsent, r, "a miss confirmed by the move version")
}

// nearKey returns the first key of n bytes, prefix then a number, whose
// home window (8 slots from its home) lies inside its segment and holds no
// entry yet. The seed is random, so a fixed key may land where readNear
// rightly hands over to searchKey (a segment's end, a neighbour's tag).
func nearKey(t *testing.T, m *Map, prefix string, n int) string {
	t.Helper()
	for i := range 1000 {
		k := prefix + strconv.Itoa(i)
		k += strings.Repeat("-", max(0, n-len(k)))
		_, sp, home := m.place(m.hashKey(k))
		if home+8 <= sp.hi && mem.Load8(m.mem, m.tagBase+int(home)) == 0 {
			return k
		}
	}
	require.FailNow(t, "no key with an empty home window", prefix)
	return ""
}

// An entry that lapses while Expire holds it (between finding it and
// writing its new deadline) stays dead and is collected as expired: Expire
// must not bring it back, with a new deadline or, through Persist (ttl 0
// here), for good.
func TestMapExpireLapsingEntryStaysDead(t *testing.T) {
	for _, ttl := range []time.Duration{0, time.Hour} {
		t.Run(ttl.String(), func(t *testing.T) {
			m := testMap(t)
			require.NoError(t, m.Store("k", []byte("v"), WithTTL(20*time.Millisecond)))
			lapsedBy := time.Now().Add(20 * time.Millisecond)
			hooked := 0
			crashHook = func(p string) {
				if p != "expire" {
					return
				}
				hooked++
				for !time.Now().After(lapsedBy) {
					time.Sleep(time.Millisecond) // waiting for the clock, not for another process
				}
			}
			t.Cleanup(func() { crashHook = nil })
			var expired bool
			if ttl == 0 {
				expired = m.Persist("k")
			} else {
				expired = m.Expire("k", ttl)
			}
			require.Equal(t, 1, hooked, "Expire must pass the hook between find and write")
			require.False(t, m.Exists("k"), "a lapsed entry came back to life")
			require.False(t, expired, "the entry lapsed before Expire wrote: it was not there to expire")
			_, ok := m.TTL("k")
			require.False(t, ok)
			st := m.Stats()
			require.Equal(t, uint64(1), st.Expired)
			require.Equal(t, 0, st.Used)
			require.Zero(t, st.Tombstones)
		})
	}
}

// WithEviction is a map option: an evicting typed map evicts; a ring
// refuses the option.
func TestEvictionOptionScope(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	tm, err := OpenTypedMap[int](a, "typed", WithSlots(16), WithSlotSize(64), WithEviction())
	require.NoError(t, err)
	for i := range 100 {
		require.NoError(t, tm.Store("k"+strconv.Itoa(i), i))
	}
	got, ok, err := tm.Load("k99")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 99, got)
	require.Equal(t, 14, tm.Len(), "16 slots hold 7/8")
	require.Equal(t, uint64(86), tm.Bytes().Stats().Evicted)
	_, err = a.Ring("r", WithEviction())
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "eviction")
}
