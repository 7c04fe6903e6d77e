package shmarena

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkMapChurn measures hit, miss and insert on a table filled to a
// load, fresh and after 100 capacities of churn, for the three ways a
// table turns over: deletes of the oldest key (plain), keys expiring
// (plain with TTLs; expiry is lazy, so lapsed entries wait on probe paths
// until an insert or read collects them) and eviction (an evicting map at
// its capacity, 7/8 of its slots). The RWMutex rows are the same
// operations on a Go map behind a sync.RWMutex, in the same run, for the
// ratio. Compare churned/* with fresh/* of the same kind and load: the
// target is within 1.5x.
//
//	go test -run '^$' -bench 'MapChurn' -mapslots 65536 .
func BenchmarkMapChurn(b *testing.B) {
	setBenchShape()
	n := benchSlots
	keys := make([]string, 4*n)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	absent := make([]string, 4096)
	for i := range absent {
		absent[i] = benchKey(1<<30 + i)
	}
	val := make([]byte, 64)
	type kind struct {
		name string
		opts []RegionOption
		pcts []int
	}
	for _, k := range []kind{
		{"plain", nil, []int{50, 75, 90}},
		{"ttl", nil, []int{50, 75, 90}},
		{"evicting", []RegionOption{WithEviction()}, []int{100}}, // held at capacity: 7/8 live
	} {
		for _, pct := range k.pcts {
			opts := append([]RegionOption{WithSlots(n), WithSlotSize(128)}, k.opts...)
			size, err := MapBytes(opts...)
			require.NoError(b, err)
			a, err := Open(filepath.Join(b.TempDir(), "churn"), WithSize(MinSize+size))
			require.NoError(b, err)
			m, err := a.Map("churn", opts...)
			require.NoError(b, err)
			live := n * pct / 100
			next, refused := 0, 0
			// A plain map refuses a key whose segment's share of the live
			// keys has drifted to its probe bound (at 90% live, now and
			// then over 100 capacities): counted and reported, not fatal.
			store := func(key string, opts ...WriteOption) {
				if err := m.Store(key, val, opts...); k.name != "evicting" && errors.Is(err, ErrFull) {
					refused++
				} else {
					require.NoError(b, err)
				}
			}
			turn := func() { // one new key in, one old key out
				key := keys[next%len(keys)]
				switch k.name {
				case "plain":
					store(key)
					if next >= live {
						m.Delete(keys[(next-live)%len(keys)])
					}
				case "ttl":
					store(key, WithTTL(time.Hour))
					if next >= live {
						m.Expire(keys[(next-live)%len(keys)], time.Nanosecond)
					}
				case "evicting":
					store(key)
				}
				next++
			}
			for next < live {
				turn()
			}
			rw := &rwMap{m: make(map[string][]byte, n)}
			for i := range min(live, n*7/8) {
				rw.store(strings.Clone(keys[i]), make([]byte, 64))
			}
			rwNext, rwLive := min(live, n*7/8), min(live, n*7/8)
			run := func(state string) {
				name := fmt.Sprintf("%s/%d%%/%s", k.name, pct, state)
				var present []string
				for key := range m.Keys() {
					if present = append(present, key); len(present) == 4096 {
						break
					}
				}
				b.Run(name+"/Hit", func(b *testing.B) {
					buf := make([]byte, 0, 128)
					for i := 0; b.Loop(); i++ {
						buf, _ = m.AppendLoad(buf[:0], present[i%len(present)])
					}
				})
				b.Run(name+"/Miss", func(b *testing.B) {
					buf := make([]byte, 0, 128)
					for i := 0; b.Loop(); i++ {
						buf, _ = m.AppendLoad(buf[:0], absent[i%len(absent)])
					}
				})
				b.Run(name+"/Insert", func(b *testing.B) {
					for b.Loop() {
						turn()
					}
				})
			}
			b.Run(fmt.Sprintf("rwmutex/%d%%/Hit", pct), func(b *testing.B) {
				buf := make([]byte, 0, 128)
				for i := 0; b.Loop(); i++ {
					buf, _ = rw.appendLoad(buf[:0], keys[(rwNext-1-i%(rwLive/2))%len(keys)])
				}
			})
			b.Run(fmt.Sprintf("rwmutex/%d%%/Miss", pct), func(b *testing.B) {
				buf := make([]byte, 0, 128)
				for i := 0; b.Loop(); i++ {
					buf, _ = rw.appendLoad(buf[:0], absent[i%len(absent)])
				}
			})
			b.Run(fmt.Sprintf("rwmutex/%d%%/Insert", pct), func(b *testing.B) {
				for b.Loop() {
					rw.store(keys[rwNext%len(keys)], val)
					rw.mu.Lock()
					delete(rw.m, keys[(rwNext-rwLive)%len(keys)])
					rw.mu.Unlock()
					rwNext++
				}
			})
			run("fresh")
			for end := next + 100*n; next < end; {
				turn()
			}
			run("churned")
			b.Logf("%s at %d%%: %d of %d inserts refused with ErrFull", k.name, pct, refused, next)
			require.NoError(b, a.Close())
		}
	}
}
