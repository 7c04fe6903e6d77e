package shmarena

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

type codecInner struct {
	Name  string            `msgpack:"name"`
	Tags  map[string]string `msgpack:"tags"`
	Score float64           `msgpack:"score"`
}

// codecRich exercises the encodings a user's values are made of.
type codecRich struct {
	Inner    codecInner
	PInner   *codecInner
	Nested   []map[string][]codecInner
	ByInt    map[int64]string
	ByStr    map[string]int
	Strings  []string
	When     time.Time
	Raw      []byte
	Unicode  string
	MinI64   int64
	MaxI64   int64
	MaxU64   uint64
	MinI32   int32
	MaxU32   uint32
	MinI8    int8
	MaxU8    uint8
	NegSmall int
	Float    float64
	Bool     bool
	Array    [3]uint16
	Empty    []int
}

func richValue() codecRich {
	return codecRich{
		Inner:  codecInner{Name: "inner", Tags: map[string]string{"b": "2", "a": "1"}, Score: -1.5},
		PInner: &codecInner{Name: "pointed", Score: math.MaxFloat64},
		Nested: []map[string][]codecInner{
			{"x": {{Name: "x0"}, {Name: "x1", Tags: map[string]string{"k": "v"}}}},
			{"y": nil, "z": {{Score: math.SmallestNonzeroFloat64}}},
		},
		ByInt:    map[int64]string{-1: "minus one", 0: "zero", 1 << 40: "big", 7: "seven"},
		ByStr:    map[string]int{"one": 1, "min": math.MinInt, "max": math.MaxInt},
		Strings:  []string{"", "plain", "nul\x00inside"},
		When:     time.Date(2024, 2, 29, 23, 59, 59, 123456789, time.FixedZone("X", 5*3600)),
		Raw:      []byte{0, 1, 2, 0xc1, 0xff},
		Unicode:  "héllo, 世界 🌍 \u202e",
		MinI64:   math.MinInt64,
		MaxI64:   math.MaxInt64,
		MaxU64:   math.MaxUint64,
		MinI32:   math.MinInt32,
		MaxU32:   math.MaxUint32,
		MinI8:    math.MinInt8,
		MaxU8:    math.MaxUint8,
		NegSmall: -32,
		Float:    math.Inf(-1),
		Bool:     true,
		Array:    [3]uint16{0, 1, math.MaxUint16},
		Empty:    []int{},
	}
}

// sameRich returns an error describing how got differs from want. Times are
// compared as instants (decoding yields time.Local).
func sameRich(want, got codecRich) error {
	if !want.When.Equal(got.When) {
		return fmt.Errorf("When: want %v, got %v", want.When, got.When)
	}
	want.When, got.When = time.Time{}, time.Time{}
	if !reflect.DeepEqual(want, got) {
		return fmt.Errorf("want %#v\ngot  %#v", want, got)
	}
	return nil
}

func testTyped[V any](t testing.TB, opts ...RegionOption) *TypedMap[V] {
	t.Helper()
	a, _ := tempArena(t, 8<<20)
	m, err := OpenTypedMap[V](a, "typed", opts...)
	require.NoError(t, err)
	return m
}

func init() {
	childRoles["codec-store"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := OpenTypedMap[codecRich](a, "rich", WithSlotSize(2048))
		if err != nil {
			return err
		}
		return m.Store("from-child", richValue())
	}
	childRoles["codec-load"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := OpenTypedMap[codecRich](a, "rich", WithSlotSize(2048))
		if err != nil {
			return err
		}
		got, ok, err := m.Load("from-parent")
		if err != nil || !ok {
			return fmt.Errorf("load: ok=%v err=%v", ok, err)
		}
		return sameRich(richValue(), got)
	}
	childRoles["codec-update"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		defer a.Close()
		m, err := OpenTypedMap[[]int](a, "list", WithSlots(8), WithSlotSize(64<<10))
		if err != nil {
			return err
		}
		id := envInt("SHMARENA_ID")
		for i := range 1000 {
			_, err := m.Update("list", func(old []int, ok bool) ([]int, bool) {
				return append(old, id*1000+i), true
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
}

func TestTypedMapRoundTripAcrossProcesses(t *testing.T) {
	a, path := tempArena(t, 8<<20)
	m, err := OpenTypedMap[codecRich](a, "rich", WithSlotSize(2048))
	require.NoError(t, err)

	// Child stores, parent loads.
	require.NoError(t, child(t, "codec-store", "SHMARENA_PATH="+path).Run())
	got, ok, err := m.Load("from-child")
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, sameRich(richValue(), got))

	// Parent stores, child loads and compares.
	require.NoError(t, m.Store("from-parent", richValue()))
	require.NoError(t, child(t, "codec-load", "SHMARENA_PATH="+path).Run())

	// Both encodings are byte-identical: the encoding is deterministic
	// across processes even with maps of several entries.
	b1, _ := m.Bytes().Load("from-child")
	b2, _ := m.Bytes().Load("from-parent")
	require.Equal(t, b1, b2)

	// Each Load is a fresh value.
	v1, _, _ := m.Load("from-parent")
	v2, _, _ := m.Load("from-parent")
	v1.Raw[0] = 99
	v1.Inner.Tags["a"] = "changed"
	v1.PInner.Name = "changed"
	require.NoError(t, sameRich(richValue(), v2))
}

func TestTypedMapBasics(t *testing.T) {
	type Route struct {
		Upstream string `msgpack:"upstream"`
		Weight   int    `msgpack:"weight"`
	}
	m := testTyped[Route](t, WithSlots(64))
	require.Equal(t, "typed", m.Name())

	_, ok, err := m.Load("example.org")
	require.NoError(t, err)
	require.False(t, ok)

	r := Route{"10.0.0.1:80", 3}
	require.NoError(t, m.Store("example.org", r, WithTTL(time.Hour)))
	got, ok, err := m.Load("example.org")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r, got)
	require.True(t, m.Exists("example.org"))
	require.Equal(t, 1, m.Len())

	actual, loaded, err := m.LoadOrStore("example.org", Route{"other", 1})
	require.NoError(t, err)
	require.True(t, loaded)
	require.Equal(t, r, actual)
	actual, loaded, err = m.LoadOrStore("b.example", Route{"10.0.0.2:80", 1})
	require.NoError(t, err)
	require.False(t, loaded)
	require.Equal(t, Route{"10.0.0.2:80", 1}, actual)

	swapped, err := m.CompareAndSwap("example.org", Route{"10.0.0.1:80", 4}, Route{"x", 0})
	require.NoError(t, err)
	require.False(t, swapped)
	swapped, err = m.CompareAndSwap("example.org", Route{"10.0.0.1:80", 3}, Route{"10.0.0.9:80", 5})
	require.NoError(t, err)
	require.True(t, swapped)
	got, _, _ = m.Load("example.org")
	require.Equal(t, Route{"10.0.0.9:80", 5}, got)
	ttl, ok := m.Bytes().TTL("example.org")
	require.True(t, ok)
	require.Greater(t, ttl, 59*time.Minute, "CompareAndSwap keeps the deadline")
	swapped, err = m.CompareAndSwap("absent", Route{}, Route{"x", 1})
	require.NoError(t, err)
	require.False(t, swapped)

	// Update: read-modify-write, keeping the deadline.
	nv, err := m.Update("example.org", func(old Route, ok bool) (Route, bool) {
		require.True(t, ok)
		old.Weight++
		return old, true
	})
	require.NoError(t, err)
	require.Equal(t, Route{"10.0.0.9:80", 6}, nv)
	got, _, _ = m.Load("example.org")
	require.Equal(t, nv, got)
	ttl, _ = m.Bytes().TTL("example.org")
	require.Greater(t, ttl, 59*time.Minute, "Update keeps the deadline")
	_, err = m.Update("example.org", func(old Route, ok bool) (Route, bool) { return old, true }, WithTTL(time.Minute))
	require.NoError(t, err)
	ttl, _ = m.Bytes().TTL("example.org")
	require.LessOrEqual(t, ttl, time.Minute, "Update with WithTTL sets a new deadline")

	// Update of an absent key creates it; keep=false deletes; deleting an
	// absent key is a no-op.
	nv, err = m.Update("new", func(old Route, ok bool) (Route, bool) {
		require.False(t, ok)
		require.Zero(t, old)
		return Route{"n", 1}, true
	})
	require.NoError(t, err)
	require.Equal(t, Route{"n", 1}, nv)
	ttl, ok = m.Bytes().TTL("new")
	require.True(t, ok)
	require.Zero(t, ttl)
	nv, err = m.Update("new", func(old Route, ok bool) (Route, bool) { return old, false })
	require.NoError(t, err)
	require.Zero(t, nv)
	require.False(t, m.Exists("new"))
	_, err = m.Update("never", func(old Route, ok bool) (Route, bool) { return Route{"x", 1}, false })
	require.NoError(t, err)
	require.False(t, m.Exists("never"))

	all := map[string]Route{}
	for k, v := range m.All() {
		all[k] = v
	}
	require.Equal(t, map[string]Route{"example.org": {"10.0.0.9:80", 6}, "b.example": {"10.0.0.2:80", 1}}, all)

	require.True(t, m.Delete("b.example"))
	require.False(t, m.Delete("b.example"))
	_, ok, err = m.Load("b.example")
	require.NoError(t, err)
	require.False(t, ok)

	_, err = m.Update("", func(old Route, ok bool) (Route, bool) { return old, true })
	require.ErrorIs(t, err, ErrEmptyKey)
	require.ErrorIs(t, m.Store("", r), ErrEmptyKey)
}

func TestTypedMapLapsed(t *testing.T) {
	m := testTyped[string](t, WithSlots(16))
	require.NoError(t, m.Store("k", "v", WithTTL(time.Nanosecond)))
	deadline := time.Now().Add(time.Second)
	for m.Exists("k") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // waiting for the clock, not for another process
	}
	_, ok, err := m.Load("k")
	require.NoError(t, err)
	require.False(t, ok)
	nv, err := m.Update("k", func(old string, ok bool) (string, bool) {
		require.False(t, ok, "a lapsed entry reads as absent in Update")
		require.Empty(t, old)
		return "fresh", true
	})
	require.NoError(t, err)
	require.Equal(t, "fresh", nv)
	ttl, ok := m.Bytes().TTL("k")
	require.True(t, ok)
	require.Zero(t, ttl, "a lapsed deadline is not kept")
}

func TestTypedMapUpdateAcrossProcesses(t *testing.T) {
	a, path := tempArena(t, 8<<20)
	m, err := OpenTypedMap[[]int](a, "list", WithSlots(8), WithSlotSize(64<<10))
	require.NoError(t, err)
	runChildren(t, "codec-update", 4, "SHMARENA_PATH="+path)
	got, ok, err := m.Load("list")
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, got, 4000)
	// Every append is there once, and each process's appends in its order.
	next := make([]int, 4)
	for _, v := range got {
		id, i := v/1000, v%1000
		require.Less(t, id, 4)
		require.Equal(t, next[id], i, "process %d", id)
		next[id]++
	}
	require.Equal(t, []int{1000, 1000, 1000, 1000}, next)
	b, _ := m.Bytes().Load("list")
	t.Logf("4000 ints encode to %d bytes", len(b))
}

func TestTypedMapShape(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	_, err := a.Map("bytes", WithSlots(16))
	require.NoError(t, err)
	_, err = OpenTypedMap[string](a, "bytes", WithSlots(16))
	require.ErrorIs(t, err, ErrShape)
	require.ErrorContains(t, err, "encoded flag")

	_, err = OpenTypedMap[string](a, "typed", WithSlots(16))
	require.NoError(t, err)
	_, err = a.Map("typed", WithSlots(16))
	require.ErrorIs(t, err, ErrShape)
	require.ErrorContains(t, err, "encoded flag")

	// Another V is refused (see typed_schema_test.go), unless deliberate.
	_, err = OpenTypedMap[int](a, "typed", WithSlots(16))
	require.ErrorIs(t, err, ErrShape)
	_, err = OpenTypedMap[int](a, "typed", WithSlots(16), WithSchemaChange())
	require.NoError(t, err)
}

func TestTypedMapByteView(t *testing.T) {
	m := testTyped[int64](t, WithSlots(16))
	require.NoError(t, m.Store("n", 5))
	_, err := m.Bytes().Add("n", 1)
	require.ErrorIs(t, err, ErrEncoded)
	_, err = m.Bytes().Add("fresh", 1)
	require.ErrorIs(t, err, ErrEncoded)
	require.False(t, m.Bytes().Exists("fresh"))
	_, ok := m.Bytes().Counter("n")
	require.False(t, ok)
	b, ok := m.Bytes().Load("n")
	require.True(t, ok)
	want, err := msgpack.Marshal(int64(5))
	require.NoError(t, err)
	require.Equal(t, want, b, "the byte view sees the msgpack encoding")
}

func TestTypedMapUnencodable(t *testing.T) {
	type withFunc struct {
		Name string
		Fn   func()
	}
	m := testTyped[any](t, WithSlots(16))
	for _, v := range []any{func() {}, make(chan int), withFunc{"x", func() {}}, []any{1, make(chan int)}} {
		err := m.Store("k", v)
		require.ErrorIs(t, err, ErrEncode, "%T", v)
		_, _, err = m.LoadOrStore("k", v)
		require.ErrorIs(t, err, ErrEncode)
		_, err = m.Update("k", func(any, bool) (any, bool) { return v, true })
		require.ErrorIs(t, err, ErrEncode)
		require.False(t, m.Exists("k"))
	}
	require.Zero(t, m.Len())

	// A failed Update leaves the present value as it was.
	require.NoError(t, m.Store("k", "kept"))
	_, err := m.Update("k", func(any, bool) (any, bool) { return make(chan int), true })
	require.ErrorIs(t, err, ErrEncode)
	_, err = m.CompareAndSwap("k", "kept", make(chan int))
	require.ErrorIs(t, err, ErrEncode)
	got, ok, err := m.Load("k")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "kept", got)
}

func TestTypedMapCorrupt(t *testing.T) {
	type Route struct {
		Upstream string
		Weight   int
	}
	m := testTyped[Route](t, WithSlots(16))
	require.NoError(t, m.Store("good", Route{"a", 1}))
	good, _ := m.Bytes().Load("good")
	garbage := map[string][]byte{
		"invalid-code": {0xc1},
		"truncated":    good[:len(good)-1],
		"trailing":     append(slices.Clone(good), 0x00),
		"wrong-type":   {0xa3, 'a', 'b', 'c'}, // a string, not a struct
		"empty":        {},
		"huge-length":  {0xdd, 0xff, 0xff, 0xff, 0xff},
	}
	for k, b := range garbage {
		require.NoError(t, m.Bytes().Store(k, b))
	}
	for k := range garbage {
		want := ErrCorrupt
		if k == "wrong-type" {
			want = ErrTypeMismatch // well-formed msgpack of another type
		}
		v, ok, err := m.Load(k)
		require.ErrorIs(t, err, want, k)
		require.ErrorContains(t, err, k)
		require.False(t, ok, k)
		require.Zero(t, v, k)

		_, _, err = m.LoadOrStore(k, Route{"x", 1})
		require.ErrorIs(t, err, want, k)

		called := false
		_, err = m.Update(k, func(old Route, ok bool) (Route, bool) { called = true; return old, true })
		require.ErrorIs(t, err, want, k)
		require.False(t, called, "fn is not called on a corrupt value")
		b, _ := m.Bytes().Load(k)
		require.Equal(t, garbage[k], b, "nothing changed")
	}
	// All skips corrupt entries rather than yielding zero values.
	var keys []string
	for k, v := range m.All() {
		keys = append(keys, k)
		require.Equal(t, Route{"a", 1}, v)
	}
	require.Equal(t, []string{"good"}, keys)

	// A corrupt entry can be overwritten or deleted.
	require.NoError(t, m.Store("wrong-type", Route{"b", 2}))
	got, ok, err := m.Load("wrong-type")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Route{"b", 2}, got)
	require.True(t, m.Delete("invalid-code"))
}

func TestTypedMapTooLarge(t *testing.T) {
	m := testTyped[string](t, WithSlots(16), WithSlotSize(128)) // MaxPair 96
	require.NoError(t, m.Store("k", "small"))
	big := string(make([]byte, 200))
	require.ErrorIs(t, m.Store("k", big), ErrTooLarge)
	require.ErrorIs(t, m.Store("new", big), ErrTooLarge)
	_, _, err := m.LoadOrStore("new", big)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = m.CompareAndSwap("k", "small", big)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = m.Update("k", func(string, bool) (string, bool) { return big, true })
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = m.Update("new", func(string, bool) (string, bool) { return big, true })
	require.ErrorIs(t, err, ErrTooLarge)
	require.False(t, m.Exists("new"))
	got, _, err := m.Load("k")
	require.NoError(t, err)
	require.Equal(t, "small", got)

	// The limit is on key plus encoding: 1 key byte + 2 header bytes + 93.
	require.NoError(t, m.Store("k", string(make([]byte, 93))))
	require.ErrorIs(t, m.Store("k", string(make([]byte, 94))), ErrTooLarge)
}

func TestTypedMapUpdatePanic(t *testing.T) {
	m := testTyped[int](t, WithSlots(16), WithStripes(1))
	require.NoError(t, m.Store("k", 1))
	require.PanicsWithValue(t, "boom", func() {
		_, _ = m.Update("k", func(old int, ok bool) (int, bool) { panic("boom") })
	})
	got, _, err := m.Load("k")
	require.NoError(t, err)
	require.Equal(t, 1, got, "a panicking Update stores nothing")

	// The stripe lock was released: writers of the same key go on.
	done := make(chan error, 1)
	go func() { done <- m.Store("k", 2) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Store after a panicking Update did not finish: lock held")
	}
	nv, err := m.Update("k", func(old int, ok bool) (int, bool) { return old + 1, true })
	require.NoError(t, err)
	require.Equal(t, 3, nv)
}

func TestTypedMapClosed(t *testing.T) {
	a, err := Open(filepath.Join(t.TempDir(), "arena"), WithSize(1<<20))
	require.NoError(t, err)
	m, err := OpenTypedMap[string](a, "m", WithSlots(16))
	require.NoError(t, err)
	require.NoError(t, m.Store("k", "v"))
	require.NoError(t, a.Close())
	require.ErrorIs(t, m.Store("k", "v"), ErrClosed)
	_, ok, err := m.Load("k")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = m.Update("k", func(o string, ok bool) (string, bool) { return o, true })
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = m.LoadOrStore("k", "v")
	require.ErrorIs(t, err, ErrClosed)
	_, err = m.CompareAndSwap("k", "v", "w")
	require.ErrorIs(t, err, ErrClosed)
	require.False(t, m.Delete("k"))
	for range m.All() {
		t.Fatal("All yielded after Close")
	}
	_, err = OpenTypedMap[string](a, "m", WithSlots(16))
	require.ErrorIs(t, err, ErrClosed)
}

// Maps the encoder does not sort (map[int]string, map[string]int, maps
// inside interfaces) still encode to one canonical form, so
// CompareAndSwap with an equal value built in another order succeeds.
func TestTypedMapDeterministic(t *testing.T) {
	type V struct {
		ByInt map[int]string
		ByStr map[string]int
		Any   any
	}
	build := func(order []int) V {
		v := V{ByInt: map[int]string{}, ByStr: map[string]int{}}
		inner := map[int]bool{}
		for _, i := range order {
			v.ByInt[i] = fmt.Sprint(i)
			v.ByStr[fmt.Sprint("k", i)] = i
			inner[i] = i%2 == 0
		}
		v.Any = inner
		return v
	}
	order := make([]int, 50)
	for i := range order {
		order[i] = i*7919%1000 - 500
	}
	m := testTyped[V](t, WithSlots(16), WithSlotSize(4096))
	require.NoError(t, m.Store("k", build(order)))
	first, _ := m.Bytes().Load("k")
	for range 20 {
		slices.Reverse(order)
		require.NoError(t, m.Store("k", build(order)))
		b, _ := m.Bytes().Load("k")
		require.Equal(t, first, b)
	}
	// An equal value built in yet another order matches.
	shuffled := slices.Clone(order)
	slices.Sort(shuffled)
	swapped, err := m.CompareAndSwap("k", build(shuffled), build(order[:10]))
	require.NoError(t, err)
	require.True(t, swapped)
	got, _, err := m.Load("k")
	require.NoError(t, err)
	require.Len(t, got.ByInt, 10)
}

func TestCanonicalMatchesDecoder(t *testing.T) {
	// The canonical pass keeps every value decodable and equal.
	v := map[string]any{"b": map[int]string{3: "c", 1: "a"}, "a": []any{int8(1), "x", nil, true, 1.5, []byte{1}}}
	b, err := msgpack.Marshal(v)
	require.NoError(t, err)
	c, rest, err := canonical(nil, b, 0)
	require.NoError(t, err)
	require.Empty(t, rest)
	m := testTyped[any](t, WithSlots(16))
	require.NoError(t, m.Bytes().Store("orig", b))
	require.NoError(t, m.Bytes().Store("canon", c))
	back1, _, err := m.Load("orig")
	require.NoError(t, err)
	back2, _, err := m.Load("canon")
	require.NoError(t, err)
	assert.Equal(t, back1, back2)
	assert.Equal(t, map[string]any{
		"b": map[any]any{int8(3): "c", int8(1): "a"},
		"a": []any{int8(1), "x", nil, true, 1.5, []byte{1}},
	}, back2, "maps in interfaces decode, with string keys as map[string]any")

	for _, bad := range [][]byte{{}, {0xc1}, {0x92, 0x01}, {0xdb, 0, 0, 0, 9, 'a'}, {0xdf, 0xff, 0xff, 0xff, 0xff}} {
		_, _, err := canonical(nil, bad, 0)
		require.Error(t, err, "% x", bad)
	}
}

// FuzzTypedMapDecode stores arbitrary bytes through the byte view: typed
// reads report a value or ErrCorrupt, never panic, and the canonical pass
// either fails or yields a fixed point that still decodes. (It may change
// what a map with duplicate keys decodes to, last key winning; encodings
// of Go values have no duplicate keys.)
func FuzzTypedMapDecode(f *testing.F) {
	for _, seed := range [][]byte{{0xc1}, {0x81, 0xc0, 0x01}, {0x82, 0x01, 0x02, 0x01, 0x03}, {0xdf, 0xff, 0xff, 0xff, 0xff}, {0xc7, 0x0c, 0xff}} {
		f.Add(seed)
	}
	b, _ := msgpack.Marshal(richValue())
	f.Add(b)
	a, _ := tempArena(f, 8<<20)
	rich, err := OpenTypedMap[codecRich](a, "rich", WithSlots(16), WithSlotSize(4096))
	require.NoError(f, err)
	anyMap, err := OpenTypedMap[any](a, "any", WithSlots(16), WithSlotSize(4096))
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4000 {
			return
		}
		require.NoError(t, rich.Bytes().Store("k", data))
		if _, ok, err := rich.Load("k"); err != nil {
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTypeMismatch), err)
			require.False(t, ok)
		}
		require.NoError(t, anyMap.Bytes().Store("k", data))
		_, _, err1 := anyMap.Load("k")
		c, rest, err := canonical(nil, data, 0)
		if err != nil || len(rest) != 0 || err1 != nil {
			return
		}
		c2, rest, err := canonical(nil, c, 0)
		require.NoError(t, err)
		require.Empty(t, rest)
		require.Equal(t, c, c2, "canonical is idempotent")
		require.NoError(t, anyMap.Bytes().Store("c", c))
		_, _, err = anyMap.Load("c")
		require.NoError(t, err)
	})
}

// An entry live when Update's fn gets it keeps its deadline even if that
// deadline passes while fn runs: the write must not make it permanent.
func TestTypedMapUpdateLapsesDuringFn(t *testing.T) {
	var m *TypedMap[string]
	withShortLife(t, func(ttl time.Duration) bool {
		m = testTyped[string](t, WithSlots(16))
		require.NoError(t, m.Store("k", "v", WithTTL(ttl)))
		lapsedBy := time.Now().Add(ttl)
		var sawLive bool
		nv, err := m.Update("k", func(old string, ok bool) (string, bool) {
			sawLive = ok
			for !time.Now().After(lapsedBy) {
				time.Sleep(time.Millisecond) // waiting for the clock, not for another process
			}
			return old + "+", true
		})
		require.NoError(t, err)
		if !sawLive {
			return false // fn must get the entry while it is live: try a longer TTL
		}
		require.Equal(t, "v+", nv)
		require.False(t, m.Exists("k"), "the entry lapsed while fn ran: it must stay lapsed, not become permanent")
		_, ok := m.Bytes().TTL("k")
		require.False(t, ok)
		return true
	})

	// An entry absent when fn runs is a fresh insert: no deadline.
	nv, err := m.Update("k", func(old string, ok bool) (string, bool) {
		require.False(t, ok)
		return "fresh", true
	})
	require.NoError(t, err)
	require.Equal(t, "fresh", nv)
	ttl, ok := m.Bytes().TTL("k")
	require.True(t, ok)
	require.Zero(t, ttl)
}
