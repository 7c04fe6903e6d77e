package shmarena

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// compareSeeks holds each key's stripe and asks both seeks, which must
// agree: the near read is a shortcut, never a different answer (a lapsed
// entry included: seek's callers judge deadlines themselves).
func compareSeeks(t *testing.T, m *Map, keys []string, what string) (near, nearLapsed int) {
	t.Helper()
	for _, k := range keys {
		h := m.hashKey(k)
		s := m.stripeOf(h)
		require.True(t, m.lock(s))
		v1, f1 := m.seek(k, h)
		v2, f2 := m.seekProbe(k, h)
		nv, r := m.seekNear(k, h)
		m.unlock(s)
		if r == nearHit || r == nearAbsent {
			near++
		}
		if r == nearHit && lapsed(nv.deadline) {
			nearLapsed++
		}
		require.Equal(t, f2, f1, "%s: key %q found (near %d)", what, k, r)
		require.Equal(t, v2, v1, "%s: key %q view (near %d)", what, k, r)
	}
	return near, nearLapsed
}

func TestSeekAgreesWithGeneralProbe(t *testing.T) {
	shapes := []struct {
		slots, stripes, slotSize int
		bytes                    int64
		evict                    bool
	}{
		{64, 1, 64, 0, false},
		{64, 8, 64, 0, false},
		{32, 8, 64, 0, false},
		{1024, 4, 64, 0, false},
		{1024, 4, 128, 1 << 20, false}, // values space
		{256, 2, 64, 1 << 18, false},
		{4, 1, 64, 0, false}, // under 8 slots: never near
		{1, 1, 64, 0, false},
		{8, 1, 64, 0, false},
		{16384, 2, 64, 0, false}, // two segments: keys near each one's end
		{16384, 2, 128, 1 << 20, false},
		{1024, 4, 64, 0, true},
		{16384, 2, 128, 1 << 20, true},
	}
	for si, sh := range shapes {
		t.Run(fmt.Sprint(si), func(t *testing.T) {
			a, _ := tempArena(t, 16<<20)
			opts := []RegionOption{WithSlots(sh.slots), WithStripes(sh.stripes), WithSlotSize(sh.slotSize)}
			if sh.bytes != 0 {
				opts = append(opts, WithBytes(sh.bytes))
			}
			if sh.evict {
				opts = append(opts, WithEviction())
			}
			m, err := a.Map("m", opts...)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(uint64(si), 7))
			var keys []string
			for i := range sh.slots * 2 {
				keys = append(keys, fmt.Sprintf("key-%d-%s", i, strings.Repeat("x", i%40)))
			}
			near, nearLapsed := 0, 0
			for round := range max(2, min(40, 40*1024/sh.slots)) {
				for range sh.slots {
					k := keys[rng.IntN(len(keys))]
					switch rng.IntN(9) {
					case 0, 1:
						_ = m.Store(k, []byte(strings.Repeat("v", rng.IntN(200))))
					case 2:
						m.Delete(k)
					case 3:
						_, _ = m.Add(k, 3)
					case 4:
						_ = m.Store(k, []byte("t"), WithTTL(time.Hour))
					case 5:
						if m.Exists(k) {
							lapseNow(t, m, k)
						}
					case 6:
						_, _, _ = m.Swap(k, []byte("swapped"))
					case 7:
						_, _ = m.CompareAndSwap(k, []byte("swapped"), []byte("cas"))
					case 8:
						m.Expire(k, time.Hour)
					}
				}
				n, l := compareSeeks(t, m, keys, fmt.Sprint("round ", round))
				near, nearLapsed = near+n, nearLapsed+l
				found, err := a.Check()
				require.NoError(t, err)
				require.Empty(t, found)
			}
			t.Logf("near decided %d, %d of them lapsed hits", near, nearLapsed)
			if sh.slots >= 1024 {
				require.Positive(t, near, "the near read decided no seek: the comparison tested nothing")
			}
		})
	}
}

func benchSeek(b *testing.B, ttl bool, general bool) {
	path := b.TempDir() + "/a"
	a, err := Open(path, WithSize(64<<20))
	require.NoError(b, err)
	defer a.Close()
	m, err := a.Map("m", WithSlots(65536), WithSlotSize(128))
	require.NoError(b, err)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-key-%06d", i)
		var opts []WriteOption
		if ttl {
			opts = append(opts, WithTTL(time.Hour))
		}
		require.NoError(b, m.Store(keys[i], make([]byte, 64), opts...))
	}
	hs := make([]uint64, len(keys))
	for i, k := range keys {
		hs[i] = m.hashKey(k)
	}
	require.True(b, m.lock(0))
	defer m.unlock(0)
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		k := i % len(keys)
		var v view
		var f bool
		if general {
			v, f = m.seekProbe(keys[k], hs[k])
		} else {
			v, f = m.seek(keys[k], hs[k])
		}
		if f && !lapsed(v.deadline) {
			n++
		}
	}
	if n != b.N {
		b.Fatal(n)
	}
}

func BenchmarkSeekNear(b *testing.B) {
	for _, ttl := range []bool{false, true} {
		for _, g := range []string{"seek", "general"} {
			b.Run(fmt.Sprintf("ttl=%v/%s", ttl, g), func(b *testing.B) {
				benchSeek(b, ttl, g == "general")
			})
		}
	}
}
