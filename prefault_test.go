package shmarena

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// bothPrefaultPaths runs fn with MADV_POPULATE_WRITE and with the
// atomic-add fallback of kernels that lack it.
func bothPrefaultPaths(t *testing.T, fn func(t *testing.T)) {
	for _, populate := range []bool{true, false} {
		t.Run(fmt.Sprintf("populate=%v", populate), func(t *testing.T) {
			old := prefaultPopulate
			prefaultPopulate = populate
			t.Cleanup(func() { prefaultPopulate = old })
			fn(t)
		})
	}
}

func TestPrefaultLeavesBytesUnchanged(t *testing.T) {
	bothPrefaultPaths(t, func(t *testing.T) {
		a, path := tempArena(t, 4<<20)
		m, err := a.Map("m", WithSlots(4096), WithSlotSize(128))
		require.NoError(t, err)
		for i := range 3000 {
			require.NoError(t, m.Store(fmt.Sprintf("key-%d", i), bytes.Repeat([]byte{byte(i)}, 1+i%60)))
		}
		before := bytes.Clone(a.mem)
		d, err := a.Prefault()
		require.NoError(t, err)
		assert.Positive(t, d)
		assert.True(t, bytes.Equal(before, a.mem), "Prefault changed the mapping's bytes")
		onDisk, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(before, onDisk), "Prefault changed the file")
		for i := range 3000 {
			v, ok := m.Load(fmt.Sprintf("key-%d", i))
			require.True(t, ok)
			require.Equal(t, bytes.Repeat([]byte{byte(i)}, 1+i%60), v)
		}
	})
}

// TestPrefaultWithLiveWriters runs Prefault over and over while
// goroutines add to counters and overwrite values: no update may be lost
// and no value torn.
func TestPrefaultWithLiveWriters(t *testing.T) {
	bothPrefaultPaths(t, func(t *testing.T) {
		a, _ := tempArena(t, 2<<20)
		m, err := a.Map("m", WithSlots(8192), WithSlotSize(64))
		require.NoError(t, err)
		const workers, adds, keys = 4, 3000, 512
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var prefaults atomic.Int64
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := a.Prefault()
				assert.NoError(t, err)
				prefaults.Add(1)
			}
		})
		// Each writer goes on until Prefault has run 20 times over its
		// writes, and counts what it added.
		var writers sync.WaitGroup
		var added atomic.Int64
		for w := range workers {
			writers.Go(func() {
				for i := 0; i < adds || prefaults.Load() < 20; i++ {
					_, err := m.Add(fmt.Sprintf("c%d", i%keys), 1)
					assert.NoError(t, err)
					added.Add(1)
					v := bytes.Repeat([]byte{byte(w)}, 16)
					assert.NoError(t, m.Store(fmt.Sprintf("v%d-%d", w, i%keys), v))
				}
			})
		}
		writers.Wait()
		close(stop)
		wg.Wait()
		require.GreaterOrEqual(t, prefaults.Load(), int64(20))
		var total int64
		for i := range keys {
			n, err := m.Add(fmt.Sprintf("c%d", i), 0)
			require.NoError(t, err)
			total += n
		}
		assert.Equal(t, added.Load(), total, "updates lost while Prefault ran %d times", prefaults.Load())
		for w := range workers {
			for i := range keys {
				v, ok := m.Load(fmt.Sprintf("v%d-%d", w, i))
				require.True(t, ok)
				require.Equal(t, bytes.Repeat([]byte{byte(w)}, 16), v)
			}
		}
	})
}

func TestPrefaultClosed(t *testing.T) {
	a, _ := tempArena(t, 1<<20)
	require.NoError(t, a.Close())
	d, err := a.Prefault()
	assert.ErrorIs(t, err, ErrClosed)
	assert.Zero(t, d)
}

// TestPrefaultMapsEveryPage opens a second handle (a fresh mapping, with
// no page of it in this process's page tables) and counts the page faults
// that writing one word of every page takes: one per page without
// Prefault, next to none after it.
func TestPrefaultMapsEveryPage(t *testing.T) {
	bothPrefaultPaths(t, func(t *testing.T) {
		const size = 8 << 20
		a, path := tempArena(t, size)
		_, err := a.Prefault() // the file's pages exist, in the page cache
		require.NoError(t, err)
		pages := size / os.Getpagesize()
		faults := func(prefault bool) int64 {
			b, err := Open(path)
			require.NoError(t, err)
			defer b.Close()
			if prefault {
				_, err := b.Prefault()
				require.NoError(t, err)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var r0, r1 unix.Rusage
			require.NoError(t, unix.Getrusage(unix.RUSAGE_THREAD, &r0))
			for off := 0; off < size; off += os.Getpagesize() {
				mem.Add32(b.mem, off, 0) // a write that changes nothing
			}
			require.NoError(t, unix.Getrusage(unix.RUSAGE_THREAD, &r1))
			return int64(r1.Minflt + r1.Majflt - r0.Minflt - r0.Majflt)
		}
		cold, warm := faults(false), faults(true)
		t.Logf("%d pages: %d faults without Prefault, %d after it", pages, cold, warm)
		if cold < int64(pages/2) {
			// One fault maps many pages: a filesystem of huge pages
			// (tmpfs huge=always as TMPDIR). Nothing to tell apart.
			t.Skipf("writing a fresh mapping took %d faults for %d pages: huge pages?", cold, pages)
		}
		assert.Less(t, warm, int64(pages/20), "Prefault left pages unmapped")
	})
}
