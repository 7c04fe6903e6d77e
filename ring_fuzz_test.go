package shmarena

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// FuzzRingCorrupt writes arbitrary bytes at an arbitrary offset of a live
// ring region (header, group table or slots), then publishes, reads and
// claims through handles made before the damage, and again after
// reattaching (which validates the file). Nothing may panic or hang; errors
// and misses are fine.
func FuzzRingCorrupt(f *testing.F) {
	slot0 := uint32(rl.HeaderSize)
	g0 := uint32(rl.GroupOff(0))
	f.Add(uint32(rl.OffNext), le64(0))
	f.Add(uint32(rl.OffNext), le64(^uint64(0)))
	f.Add(uint32(rl.OffNext), le64(1<<40))
	f.Add(uint32(rl.OffNext), le64(2))
	f.Add(uint32(rl.OffSlots), le64(1<<40))
	f.Add(uint32(rl.OffLock), le64(0x0123456789abcdef))
	f.Add(uint32(rl.OffGroupLock), le64(7))
	f.Add(uint32(rl.OffFutex), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint32(rl.OffAbandoned), le64(1<<63))
	f.Add(g0+rl.GPosition, le64(0))
	f.Add(g0+rl.GPosition, le64(^uint64(0)))
	f.Add(g0+rl.GState, le64(5))
	f.Add(g0+rl.GNameLen, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint32(rl.GroupOff(1)+rl.GState), le64(rl.GroupReady))
	f.Add(slot0+64+rl.SLens, le64(0x7fffffff_7fffffff))
	f.Add(slot0+64+rl.SLens, le64(^uint64(0)))
	f.Add(slot0+64+rl.SBegin, le64(1))
	f.Add(slot0+64+rl.SEnd, le64(99))
	f.Add(slot0+2*64+rl.SBegin, le64(1<<62))
	f.Add(slot0+3*64, make([]byte, 64))
	f.Add(uint32(0), make([]byte, 300))

	f.Fuzz(func(t *testing.T, at uint32, data []byte) {
		watchdog := time.AfterFunc(10*time.Second, func() {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			panic(fmt.Sprintf("FuzzRingCorrupt: no progress in 10s at %d with %x\n%s", at, data, buf[:n]))
		})
		defer watchdog.Stop()
		path := filepath.Join(t.TempDir(), "arena")
		a, err := Open(path, WithSize(128<<10)) // the ring's pending tables need more than 64 KiB
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		r, err := a.Ring("r", WithSlots(8), WithSlotSize(64))
		if err != nil {
			t.Fatal(err)
		}
		g, _ := r.Group("g", WithTopic("t"))
		all, _ := r.Group("all")
		c := r.Cursor(FromStart())
		for i := 0; i < 5; i++ {
			_, _ = r.Publish("t", []byte("payload"))
			_, _ = r.Publish("", nil)
		}
		c.Next()

		// Damage the region.
		length := rl.HeaderSize + 8*64
		off := int(at % uint32(length))
		if len(data) > length-off {
			data = data[:length-off]
		}
		mem.Write(r.b, r.off+off, data)

		inspect(a) // on damage Open never validated
		exerciseRing(r, c, g, all)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		a2, err := Open(path)
		if err != nil {
			return // refused at attach: fine
		}
		defer a2.Close()
		r2, err := a2.Ring("r", WithSlots(8), WithSlotSize(64))
		if err != nil {
			return
		}
		g2, _ := r2.Group("g", WithTopic("t"))
		all2, _ := r2.Group("all")
		exerciseRing(r2, r2.Cursor(FromStart()), g2, all2)
	})
}

func exerciseRing(r *Ring, c *Cursor, groups ...*Group) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	for i := 0; i < 3; i++ {
		_, _ = r.Publish("t", []byte("more"))
		_, _ = r.Publish("u", nil)
	}
	_, _ = r.PublishBatch("t", [][]byte{[]byte("batch"), nil, []byte("of three")})
	_, _ = r.PublishBatchWait(ctx, "u", [][]byte{nil, []byte("two")})
	c.Read(0)
	c.Next()
	_ = c.Wait(ctx)
	_ = c.Stats()
	_ = r.Stats()
	_ = r.Head()
	r.Cursor(FromStart()).Read(0)
	for _, g := range groups {
		if g == nil {
			continue
		}
		g.Claim(0)
		g.Claim(2)
		_ = g.Wait(ctx)
		_ = g.Stats()
	}
	if g, err := r.Group("fresh", FromStart()); err == nil {
		g.Claim(0)
	}
}
