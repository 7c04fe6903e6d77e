package shmarena

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

func TestMapCounterFillsSlot(t *testing.T) {
	for _, ss := range []int{64, 72, 256} {
		m := testMap(t, WithSlots(1024), WithSlotSize(ss))
		k := nearKey(t, m, "c", m.MaxPair()-8)
		n, err := m.Add(k, 41, WithTTL(time.Hour))
		require.NoError(t, err)
		require.EqualValues(t, 41, n)
		n, err = m.Add(k, 1)
		require.NoError(t, err)
		require.EqualValues(t, 42, n)
		out, r := m.readNear(k, m.hashKey(k), nil, true, new(view))
		require.Equal(t, nearHit, r, "slot %d", ss)
		require.EqualValues(t, 42, binary.LittleEndian.Uint64(out))
		v, ok := m.Load(k)
		require.True(t, ok)
		require.EqualValues(t, 42, binary.LittleEndian.Uint64(v))
		b, ok := m.AppendLoad([]byte("pre"), k)
		require.True(t, ok)
		require.Equal(t, "pre", string(b[:3]))
		require.EqualValues(t, 42, binary.LittleEndian.Uint64(b[3:]))
		c, ok := m.Counter(k)
		require.True(t, ok)
		require.EqualValues(t, 42, c)
		require.True(t, m.Exists(k))
		d, ok := m.TTL(k)
		require.True(t, ok)
		require.Greater(t, d, 59*time.Minute)
		_, err = m.Add(k+"x", 1)
		require.ErrorIs(t, err, ErrTooLarge)
		// a plain value of the same bytes is not a counter
		p := nearKey(t, m, "p", m.MaxPair()-8)
		require.NoError(t, m.Store(p, make([]byte, 8)))
		_, ok = m.Counter(p)
		require.False(t, ok)
		_, err = m.Add(p, 1)
		require.ErrorIs(t, err, ErrNotCounter)
	}
}

func TestMapCounterReadsUnderAdd(t *testing.T) {
	for _, ss := range []int{64, 72} {
		for _, ttl := range []time.Duration{0, time.Hour} {
			m := testMap(t, WithSlots(256), WithSlotSize(ss))
			var keys []string
			for i := 0; i < 4; i++ {
				keys = append(keys, nearKey(t, m, fmt.Sprintf("k%d-", i), m.MaxPair()-8))
			}
			for _, k := range keys {
				var opts []WriteOption
				if ttl > 0 {
					opts = append(opts, WithTTL(ttl))
				}
				_, err := m.Add(k, 0, opts...)
				require.NoError(t, err)
			}
			const adders, per = 2, 10000
			start := make(chan struct{})
			var stop atomic.Bool
			var okReads, distinct atomic.Int64
			var wg, rg sync.WaitGroup
			errc := make(chan error, 100)
			for _, k := range keys {
				for a := 0; a < adders; a++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						for i := 0; i < per; i++ {
							if i%4096 == 0 {
								runtime.Gosched()
							}
							if _, err := m.Add(k, 1); err != nil {
								errc <- err
								return
							}
						}
					}()
				}
				for r := 0; r < 2; r++ {
					rg.Add(1)
					go func() {
						defer rg.Done()
						var last int64
						buf := make([]byte, 0, 16)
						for i := 0; !stop.Load(); i++ {
							var v int64
							var ok bool
							switch i % 5 {
							case 0:
								var b []byte
								b, ok = m.Load(k)
								if ok && len(b) != 8 {
									errc <- fmt.Errorf("len %d", len(b))
									return
								}
								if ok {
									v = int64(binary.LittleEndian.Uint64(b))
								}
							case 1:
								var b []byte
								b, ok = m.AppendLoad(buf[:0], k)
								if ok {
									v = int64(binary.LittleEndian.Uint64(b))
								}
							case 2:
								v, ok = m.Counter(k)
							case 3:
								ok, v = m.Exists(k), last
							case 4:
								var d time.Duration
								d, ok = m.TTL(k)
								v = last
								if ok && (ttl == 0) != (d == 0) {
									errc <- fmt.Errorf("TTL %v with ttl %v", d, ttl)
									return
								}
							}
							if !ok {
								continue // busy is allowed
							}
							if v < last || v > adders*per {
								errc <- fmt.Errorf("%s: read %d after %d", k, v, last)
								return
							}
							okReads.Add(1)
							if v != last {
								distinct.Add(1)
							}
							last = v
						}
					}()
				}
			}
			time.Sleep(10 * time.Millisecond)
			close(start)
			wg.Wait()
			stop.Store(true)
			rg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			t.Logf("slot %d ttl %v: %d ok reads, %d changes seen, busy %d", ss, ttl, okReads.Load(), distinct.Load(), m.Stats().Busy)
			for _, k := range keys {
				c, ok := m.Counter(k)
				require.True(t, ok)
				require.EqualValues(t, adders*per, c)
			}
		}
	}
}

func TestMapCounterTTLLapses(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64))
	k := nearKey(t, m, "t", 24)
	_, err := m.Add(k, 5, WithTTL(time.Hour))
	require.NoError(t, err)
	n, err := m.Add(k, 5) // keeps its deadline
	require.NoError(t, err)
	require.EqualValues(t, 10, n)
	left, ok := m.TTL(k)
	require.True(t, ok)
	require.Greater(t, left, 59*time.Minute, "Add kept the deadline")
	lapseNow(t, m, k)
	_, r := m.readNear(k, m.hashKey(k), nil, true, new(view))
	require.Equal(t, nearUnsure, r)
	_, ok = m.Load(k)
	require.False(t, ok)
	_, ok = m.Counter(k)
	require.False(t, ok)
	require.False(t, m.Exists(k))
	_, ok = m.TTL(k)
	require.False(t, ok)
	n, err = m.Add(k, 3)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	d, ok := m.TTL(k)
	require.True(t, ok)
	require.Zero(t, d)
}

func TestMapCorruptCounterMeta(t *testing.T) {
	m := testMap(t, WithSlots(1024), WithSlotSize(64))
	k := nearKey(t, m, "c", 24)
	_, err := m.Add(k, 7)
	require.NoError(t, err)
	v, _, ok := m.readKey(k, m.hashKey(k), nil, false)
	require.True(t, ok)
	long := nearKey(t, m, "L", 30) // plain: 30 + 2 fills the slot
	require.NoError(t, m.Store(long, []byte("ab")))
	lv, _, ok := m.readKey(long, m.hashKey(long), nil, false)
	require.True(t, ok)
	cases := []struct {
		off  int
		key  string
		meta uint64
	}{}
	for _, vl := range []uint64{0, 1, 7, 9, 24, 25, 32, 1 << 31, 1<<32 - 1} {
		cases = append(cases, struct {
			off  int
			key  string
			meta uint64
		}{v.off, k, metaOf(stateLive, flagCounter, len(k), 0) | vl<<32})
	}
	for _, vl := range []uint64{8, 2, 0} {
		cases = append(cases, struct {
			off  int
			key  string
			meta uint64
		}{lv.off, long, metaOf(stateLive, flagCounter, len(long), 0) | vl<<32})
	}
	for _, c := range cases {
		cur, _, ok := m.readKey(c.key, m.hashKey(c.key), nil, false)
		require.True(t, ok)
		mem.Store64(m.mem, cur.off+sMeta, c.meta)
		require.NotPanics(t, func() {
			_, r := m.readNear(c.key, m.hashKey(c.key), nil, true, new(view))
			require.NotEqual(t, nearHit, r, "meta %#x", c.meta)
			_, ok := m.Load(c.key)
			require.False(t, ok, "meta %#x", c.meta)
			_, ok = m.AppendLoad(nil, c.key)
			require.False(t, ok)
			_, ok = m.Counter(c.key)
			require.False(t, ok)
			require.False(t, m.Exists(c.key))
			_, ok = m.TTL(c.key)
			require.False(t, ok)
			for range m.All() {
			}
		}, "meta %#x", c.meta)
		require.NotPanics(t, func() { m.Add(c.key, 1); m.Delete(c.key); m.Store(c.key, nil) })
		m.Delete(c.key)
		m.Delete(k)
		m.Delete(long)
		_, err := m.Add(k, 7)
		require.NoError(t, err)
		require.NoError(t, m.Store(long, []byte("ab")))
	}
}

// A counter deleted, replaced by a plain 8-byte value and recreated while
// it is read: Counter never reports the plain value, Load returns one of
// the stored values.
func TestMapCounterReplacedWhileRead(t *testing.T) {
	for _, ss := range []int{64, 72} {
		m := testMap(t, WithSlots(256), WithSlotSize(ss))
		k := nearKey(t, m, "r", m.MaxPair()-8)
		plain := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}
		var stop atomic.Bool
		var wg sync.WaitGroup
		errc := make(chan error, 10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000; i++ {
				switch i % 4 {
				case 0:
					m.Delete(k)
				case 1:
					m.Store(k, plain)
				case 2:
					m.Delete(k)
					m.Add(k, 1, WithTTL(time.Hour))
				case 3:
					m.Add(k, 1)
				}
			}
			stop.Store(true)
		}()
		for r := 0; r < 2; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if c, ok := m.Counter(k); ok && (c < 1 || c > 2) {
						errc <- fmt.Errorf("Counter %d", c)
						return
					}
					if b, ok := m.Load(k); ok {
						v := binary.LittleEndian.Uint64(b)
						if len(b) != 8 || (v != 1 && v != 2 && v != 1<<63-1) {
							errc <- fmt.Errorf("Load %x", b)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
	}
}
