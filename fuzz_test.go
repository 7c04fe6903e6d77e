package shmarena

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/stretchr/testify/require"
)

// seedArena returns the bytes of a small valid arena holding one map.
func seedArena(t testing.TB) []byte {
	path := filepath.Join(t.TempDir(), "seed")
	a, err := Open(path, WithSize(layout.HeaderSize+8192+useTableBytes+computeTableBytes))
	require.NoError(t, err)
	m, err := a.Map("m", WithSlots(16), WithSlotSize(64), WithStripes(2))
	require.NoError(t, err)
	require.NoError(t, m.Store("key", []byte("value")))
	_, err = m.Add("n", 1)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// FuzzAttach writes arbitrary bytes over the header, directory and first
// region of a valid file, then attaches and uses it: errors are fine,
// panics, faults and hangs are not.
func FuzzAttach(f *testing.F) {
	seed := seedArena(f)
	f.Add(0, []byte{0xff})
	f.Add(layout.OffDir, []byte{2, 0, 0, 0, 1, 0, 0, 0, 200})
	f.Add(layout.OffDir+32, []byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(layout.HeaderSize+mapHeader+stripeStride*2+8, []byte{3, 0, 0xff, 0xff, 0xff, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, at int, patch []byte) {
		b := append([]byte(nil), seed...)
		if at < 0 || at >= len(b) {
			return
		}
		copy(b[at:], patch)
		path := filepath.Join(t.TempDir(), "a")
		require.NoError(t, os.WriteFile(path, b, 0o600))
		a, err := Open(path)
		if err != nil {
			return
		}
		defer a.Close()
		a.Regions()
		inspect(a)
		m, err := a.Map("m", WithSlots(16), WithSlotSize(64), WithStripes(2))
		if err != nil {
			return
		}
		exercise(m)
	})
}

// exercise runs every map operation once; results are not checked, only
// that nothing panics or hangs on whatever the slots hold.
func exercise(m *Map) {
	for _, k := range []string{"key", "n", "other", "k\x00"} {
		m.Load(k)
		m.Exists(k)
		m.Counter(k)
		m.TTL(k)
		_ = m.Store(k+"2", []byte("v"))
		_, _ = m.Add(k+"3", 1)
		_, _ = m.Add(k, 1)
		_, _, _ = m.Swap(k, []byte("s"))
		_, _ = m.CompareAndSwap(k, []byte("s"), []byte("t"))
		m.Expire(k, 0)
		m.Delete(k)
	}
	for range m.All() {
	}
	m.Stats()
}

// FuzzLiveCorruption mutates a live arena's map region while operations
// run on it through another mapping.
func FuzzLiveCorruption(f *testing.F) {
	fixedSeed(f)
	f.Add(0, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(200, []byte{1})
	f.Add(400, []byte{3, 1, 40, 0, 200, 0, 0, 0})
	f.Fuzz(func(t *testing.T, at int, patch []byte) {
		a, path := tempArena(t, layout.HeaderSize+8192+useTableBytes+computeTableBytes)
		m, err := a.Map("m", WithSlots(16), WithSlotSize(64), WithStripes(2))
		require.NoError(t, err)
		require.NoError(t, m.Store("key", []byte("value")))
		_, _ = m.Add("n", 5)
		b, err := Open(path)
		require.NoError(t, err)
		defer b.Close()
		mb, err := b.Map("m", WithSlots(16), WithSlotSize(64), WithStripes(2))
		require.NoError(t, err)
		region := b.mem[mb.base : mb.base+int(mapLength(16, 64, int64(mb.stripes), false))]
		if at < 0 || at >= len(region) {
			return
		}
		// Corrupt through one mapping (not lock words: a lock held by a
		// live process is, by design, waited for).
		for i, c := range patch {
			o := at + i
			if o >= len(region) {
				break
			}
			if o >= mapHeader && o < mapHeader+2*stripeStride && (o-mapHeader)%stripeStride < 8 {
				continue
			}
			region[o] = c
		}
		inspect(b) // on damage Open never validated
		exercise(m)
		inspect(a)
	})
}

// FuzzLiveCorruptionEvicting is FuzzLiveCorruption for an evicting map,
// whose region also holds read counts, queues of hashes and a ghost: any
// bytes there (heads past tails, hashes of other segments, counts out of
// range) cost at worst a queue rebuild, never a panic, a hang or ErrFull.
func FuzzLiveCorruptionEvicting(f *testing.F) {
	fixedSeed(f)
	f.Add(0, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(mapHeader+64, []byte{9, 0, 0, 0, 0, 0, 0, 0, 1})       // small head past its tail
	f.Add(mapHeader+stMoveVer, []byte{1})                        // a move left open
	f.Add(700, []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6}) // queue or ghost entries
	f.Fuzz(func(t *testing.T, at int, patch []byte) {
		opts := []RegionOption{WithSlots(16), WithSlotSize(64), WithEviction()}
		a, path := tempArena(t, layout.HeaderSize+16384)
		m, err := a.Map("m", opts...)
		require.NoError(t, err)
		for i := range 14 {
			require.NoError(t, m.Store("k"+strconv.Itoa(i), []byte("value")))
		}
		b, err := Open(path)
		require.NoError(t, err)
		defer b.Close()
		mb, err := b.Map("m", opts...)
		require.NoError(t, err)
		region := b.mem[mb.base : mb.base+int(mapLength(16, 64, int64(mb.stripes), true))]
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
		exercise(m)
		for i := range 40 {
			k := "new" + strconv.Itoa(i)
			if err := m.Store(k, []byte("v")); err != nil {
				require.NotErrorIs(t, err, ErrFull, "an evicting map refused %s", k)
			}
		}
	})
}
