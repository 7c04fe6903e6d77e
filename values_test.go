package shmarena

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// requireValueBytes checks that the value space's figures agree with a
// walk of the map (got, its entries): every value too large for its slot
// holds its record's size, and Check finds nothing.
func requireValueBytes(t testing.TB, m *Map, got map[string][]byte) {
	t.Helper()
	st := m.Stats()
	var want int64
	for k, v := range got {
		if m.external(len(k), len(v)) {
			want += int64(recordSize(len(v)))
		}
	}
	require.Equal(t, want, st.BytesUsed, "live value bytes counted vs walked")
	require.Equal(t, int64(m.vs.share*m.stripes), st.BytesCapacity)
	require.LessOrEqual(t, st.BytesUsed+st.BytesDead, st.BytesCapacity)
	problems, _ := m.checkInvariants()
	require.Empty(t, problems)
}

func valueMap(t testing.TB, opts ...RegionOption) *Map {
	t.Helper()
	a, _ := tempArena(t, 64<<20)
	m, err := a.Map("v", opts...)
	require.NoError(t, err)
	return m
}

// randomValue returns n random bytes that carry their own checksum: the
// first 8 bytes are the key's hash of the rest (see checkValue).
func randomValue(r *rand.Rand, n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(r.Uint32())
	}
	return v
}

func TestValuesModel(t *testing.T) {
	for _, evict := range []bool{false, true} {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("evict=%v/seed=%d", evict, seed), func(t *testing.T) {
				fixedSeed(t)
				opts := []RegionOption{WithSlots(8192 * 2), WithSlotSize(96), WithStripes(2), WithBytes(2 * 64 << 10)}
				if evict {
					opts = append(opts, WithEviction())
				}
				m := valueMap(t, opts...)
				require.Equal(t, 64<<10-64<<10/32-recHeader, m.MaxValue())
				runModelKeys(t, m, rand.New(rand.NewPCG(seed, 7)), 4000, 200)
			})
		}
	}
}

func TestValuesInlineStayInline(t *testing.T) {
	m := valueMap(t, WithSlots(64), WithSlotSize(128), WithBytes(8192))
	require.NoError(t, m.Store("k", make([]byte, m.MaxPair()-1)))
	require.Zero(t, m.Stats().BytesUsed)
	require.NoError(t, m.Store("k", make([]byte, m.MaxPair())))
	require.Equal(t, int64(recordSize(m.MaxPair())), m.Stats().BytesUsed)
	require.NoError(t, m.Store("k", []byte("small again")))
	require.Zero(t, m.Stats().BytesUsed)
	v, ok := m.Load("k")
	require.True(t, ok)
	require.Equal(t, "small again", string(v))
}

func TestValuesTooLarge(t *testing.T) {
	m := valueMap(t, WithSlots(64), WithSlotSize(64), WithBytes(8192))
	require.Equal(t, 8192-8192/32-recHeader, m.MaxValue())
	require.NoError(t, m.Store("k", make([]byte, m.MaxValue())))
	err := m.Store("k", make([]byte, m.MaxValue()+1))
	require.ErrorIs(t, err, ErrTooLarge)
	require.Contains(t, err.Error(), fmt.Sprintf("value %d bytes, MaxValue is %d", m.MaxValue()+1, m.MaxValue()))
	v, ok := m.Load("k")
	require.True(t, ok, "a refused write changes nothing")
	require.Len(t, v, m.MaxValue())
	err = m.Store(strings.Repeat("k", m.MaxPair()-7), make([]byte, 100))
	require.ErrorIs(t, err, ErrTooLarge)

	plain := valueMap(t, WithSlots(64), WithSlotSize(64))
	require.Equal(t, plain.MaxPair()-1, plain.MaxValue())
	err = plain.Store("k", make([]byte, plain.MaxPair()))
	require.ErrorIs(t, err, ErrTooLarge)
	require.Contains(t, err.Error(), "WithBytes")
}

func TestValuesShape(t *testing.T) {
	a, _ := tempArena(t, 8<<20)
	_, err := a.Map("v", WithSlots(64), WithBytes(8192))
	require.NoError(t, err)
	_, err = a.Map("v", WithSlots(64), WithBytes(16384))
	require.ErrorIs(t, err, ErrShape)
	require.Contains(t, err.Error(), "WithBytes")
	_, err = a.Map("v", WithSlots(64))
	require.ErrorIs(t, err, ErrShape)
	_, err = a.Map("w", WithSlots(64), WithBytes(100))
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), "ask for 4096")
}

func TestValuesMapBytes(t *testing.T) {
	opts := []RegionOption{WithSlots(1 << 13), WithSlotSize(128), WithBytes(1 << 20), WithEviction()}
	n, err := MapBytes(opts...)
	require.NoError(t, err)
	plain, err := MapBytes(WithSlots(1<<13), WithSlotSize(128), WithEviction())
	require.NoError(t, err)
	require.GreaterOrEqual(t, n-plain, int64(1<<20))
	require.Less(t, n-plain, int64(1<<20+4096))
	a, _ := tempArena(t, layout.Align(MinSize)+n)
	m, err := a.Map("v", opts...)
	require.NoError(t, err, "an arena of MinSize + MapBytes holds the map")
	require.NoError(t, m.Store("k", make([]byte, m.MaxValue())))
}

// A plain map takes values until live bytes fill its share, whatever
// deletes and overwrites scattered: it compacts, and says how full it is
// when it refuses.
func TestValuesPlainFullOnlyWhenLiveFills(t *testing.T) {
	m := valueMap(t, WithSlots(4096), WithSlotSize(64), WithStripes(1), WithBytes(64<<10))
	r := rand.New(rand.NewPCG(1, 2))
	model := map[string][]byte{}
	var live uint64
	for i := range 20000 {
		k := "k" + strconv.Itoa(r.IntN(300))
		if old, ok := model[k]; ok && r.IntN(3) == 0 {
			require.True(t, m.Delete(k))
			live -= recordSize(len(old))
			delete(model, k)
			continue
		}
		v := randomValue(r, 64+r.IntN(3000))
		var freed uint64
		if old, ok := model[k]; ok && m.external(len(k), len(old)) {
			freed = recordSize(len(old))
		}
		err := m.Store(k, v)
		if live-freed+recordSize(len(v)) > m.vs.share-reserve(m.vs.share) {
			require.ErrorIs(t, err, ErrFull, "step %d", i)
			require.Contains(t, err.Error(), "held by live values")
			continue
		}
		require.NoError(t, err, "step %d: live %d, freed %d, value %d", i, live, freed, len(v))
		live += recordSize(len(v)) - freed
		model[k] = v
	}
	require.Greater(t, m.Stats().BytesMoved, uint64(0), "the test compacted")
	got := maps.Collect(m.All())
	require.Equal(t, model, got)
	requireValueBytes(t, m, got)
}

// An evicting map never refuses a value up to MaxValue, evicts by bytes,
// and what it keeps reads back whole.
func TestValuesEvictingNeverRefuses(t *testing.T) {
	m := valueMap(t, WithSlots(8192), WithSlotSize(64), WithStripes(2), WithBytes(2*32<<10), WithEviction())
	r := rand.New(rand.NewPCG(3, 4))
	model := map[string][]byte{}
	for i := range 20000 {
		k := "k" + strconv.Itoa(r.IntN(2000))
		n := 100 + r.IntN(400)
		if r.IntN(5) == 0 {
			n = 2000 + r.IntN(6000)
		}
		if r.IntN(500) == 0 {
			n = m.MaxValue()
		}
		v := randomValue(r, n)
		require.NoError(t, m.Store(k, v), "step %d", i)
		model[k] = v
		if i%7 == 0 {
			k := "k" + strconv.Itoa(r.IntN(2000))
			if got, ok := m.Load(k); ok {
				require.True(t, bytes.Equal(model[k], got), "key %s", k)
			}
		}
	}
	st := m.Stats()
	require.Greater(t, st.Evicted, uint64(0))
	got := maps.Collect(m.All())
	for k, v := range got {
		require.Equal(t, model[k], v)
	}
	requireValueBytes(t, m, got)
}

func TestValuesClear(t *testing.T) {
	m := valueMap(t, WithSlots(64), WithSlotSize(64), WithBytes(8192))
	require.NoError(t, m.Store("a", make([]byte, 1000)))
	m.Clear()
	st := m.Stats()
	require.Zero(t, st.BytesUsed)
	require.Zero(t, st.BytesDead)
	require.NoError(t, m.Store("b", make([]byte, m.MaxValue())))
	requireValueBytes(t, m, maps.Collect(m.All()))
}

// Readers in goroutines copy values while writers overwrite, compact and
// evict the space under them: every value read is whole (a race build
// also checks the copies are race-free).
func TestValuesConcurrentReadsDuringCompaction(t *testing.T) {
	for _, evict := range []bool{false, true} {
		t.Run(fmt.Sprintf("evict=%v", evict), func(t *testing.T) {
			opts := []RegionOption{WithSlots(64), WithSlotSize(64), WithStripes(1), WithBytes(minShare)}
			if evict {
				opts = append(opts, WithEviction())
			}
			m := valueMap(t, opts...)
			stop := make(chan struct{})
			errs := make(chan error, 4)
			for w := range 2 {
				go func() {
					r := rand.New(rand.NewPCG(uint64(w), 1))
					for i := 0; ; i++ {
						select {
						case <-stop:
							errs <- nil
							return
						default:
						}
						k := "k" + strconv.Itoa(r.IntN(12))
						err := m.Store(k, sealedValue(r, k, 16+r.IntN(1500)))
						if err != nil && !errors.Is(err, ErrFull) {
							errs <- err
							return
						}
						if i%5 == 0 {
							m.Delete(k)
						}
					}
				}()
			}
			var hits atomic.Int64
			for r := range 2 {
				go func() {
					var buf []byte
					rr := rand.New(rand.NewPCG(uint64(r), 2))
					for range 200000 / raceSlowdown {
						k := "k" + strconv.Itoa(rr.IntN(12))
						var ok bool
						if buf, ok = m.AppendLoad(buf[:0], k); ok {
							if err := checkSealed(k, buf); err != nil {
								errs <- err
								return
							}
							hits.Add(1)
						}
					}
					errs <- nil
				}()
			}
			for range 2 {
				require.NoError(t, <-errs)
			}
			close(stop)
			for range 2 {
				require.NoError(t, <-errs)
			}
			require.Positive(t, hits.Load())
			require.Positive(t, m.Stats().BytesMoved+uint64(m.Stats().Evicted), "the space was reclaimed under the readers")
			requireValueBytes(t, m, maps.Collect(m.All()))
		})
	}
}

// A reader that loaded a value's reference and is overtaken, before it
// copies, by writers that move the record and reuse its space, must not
// return the bytes it then copies: it validates the slot and reads again.
func TestValuesReadOvertakenByReuse(t *testing.T) {
	for _, evict := range []bool{false, true} {
		t.Run(fmt.Sprintf("evict=%v", evict), func(t *testing.T) {
			opts := []RegionOption{WithSlots(64), WithSlotSize(64), WithStripes(1), WithBytes(minShare)}
			if evict {
				opts = append(opts, WithEviction())
			}
			m := valueMap(t, opts...)
			r := rand.New(rand.NewPCG(1, 1))
			// A filler first, so that "a" is not at the log's head and
			// reclaiming the filler's space moves it.
			require.NoError(t, m.Store("f", sealedValue(r, "f", 1500)))
			want := sealedValue(r, "a", 500)
			require.NoError(t, m.Store("a", want))
			require.True(t, m.Delete("f"))
			m.Load("a") // read once, so an evicting map moves it rather than evicts it
			overtaken := false
			valueReadHook = func() {
				if overtaken {
					return
				}
				overtaken = true
				v, _, ok := m.readKey("a", m.hashKey("a"), nil, false)
				require.True(t, ok)
				ref := mem.Load64(m.mem, v.off+sData)
				at := m.vsOff(ref>>refShift) + vsHeader + int(ref&refMask)
				old := bytes.Clone(m.mem[at : at+512])
				for i := 0; bytes.Equal(old, m.mem[at:at+512]); i++ {
					require.Less(t, i, 20, "the record's space was never reused")
					require.NoError(t, m.Store("x", sealedValue(r, "x", 1500)))
				}
			}
			t.Cleanup(func() { valueReadHook = nil })
			got, ok := m.Load("a")
			require.True(t, overtaken)
			require.True(t, ok, "a moved record is still the key's")
			require.Equal(t, want, got)
			require.Positive(t, m.Stats().BytesMoved)
		})
	}
}

// FuzzLiveCorruptionValues damages a live map with a value space, slots
// and records alike, through a second mapping: reads, writes, Check and
// the repair never panic, hang or return a value of the wrong length.
func FuzzLiveCorruptionValues(f *testing.F) {
	fixedSeed(f)
	f.Add(0, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false)
	f.Add(-1, []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}, true) // the first record's header
	f.Add(-40, []byte{0, 0, 0, 0, 0, 0, 0, 0x10}, false)        // a head or tail
	f.Fuzz(func(t *testing.T, at int, patch []byte, evict bool) {
		opts := []RegionOption{WithSlots(32), WithSlotSize(64), WithBytes(minShare)}
		if evict {
			opts = append(opts, WithEviction())
		}
		a, path := tempArena(t, layout.HeaderSize+64<<10)
		m, err := a.Map("m", opts...)
		require.NoError(t, err)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 12 {
			k := "k" + strconv.Itoa(i)
			require.NoError(t, m.Store(k, sealedValue(r, k, 100+i*30)))
		}
		b, err := Open(path)
		require.NoError(t, err)
		defer b.Close()
		mb, err := b.Map("m", opts...)
		require.NoError(t, err)
		region := b.mem[mb.base : mb.vsOff(0)+vsHeader+int(mb.vs.share)]
		if at < 0 { // from the value space's start
			at = mb.vsOff(0) + vsHeader - mb.base + at + 1
		}
		if at < 0 || at >= len(region) {
			return
		}
		for i, c := range patch {
			o := at + i
			if o >= len(region) {
				break
			}
			if o >= mapHeader && o < mapHeader+int(mb.stripes)*stripeStride && (o-mapHeader)%stripeStride < 8 {
				continue // a lock held by a live process is waited for, by design
			}
			region[o] = c
		}
		_, _ = m.checkInvariants()
		for i := range 40 {
			k := "k" + strconv.Itoa(i%16)
			if v, ok := m.Load(k); ok && len(v) > m.MaxValue() {
				t.Fatalf("key %s: %d bytes", k, len(v))
			}
			_ = m.Store(k, sealedValue(r, k, 50+i*40))
		}
		for range m.All() {
		}
		_ = m.Stats()
	})
}
