package shmarena

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

// FuzzPendingTable writes arbitrary bytes over an acking group's entry
// and pending table in a live file, then uses the group through the
// handle that was open and through a new one: nothing may panic or hang;
// a damaged file is refused with ErrCorrupt at attach or its entries are
// skipped or made due for redelivery.
func FuzzPendingTable(f *testing.F) {
	tab := uint32(rl.HeaderSize + 8*64) // group 0's table: after 8 slots of 64 bytes
	g0 := uint32(rl.GroupOff(0))
	f.Add(tab, le64(0))
	f.Add(tab+rl.PState, le64(^uint64(0)))
	f.Add(tab+rl.PSeq, le64(1<<62))
	f.Add(tab+rl.PHolder, le64(0xdeadbeef))
	f.Add(tab+rl.PDeadline, le64(1<<63))
	f.Add(tab+rl.PendSize+rl.PState, le64(uint64(rl.StDone)<<32))
	f.Add(g0+rl.GFloor, le64(0))
	f.Add(g0+rl.GFloor, le64(^uint64(0)))
	f.Add(g0+rl.GPosition, le64(1<<40))
	f.Add(g0+rl.GFlags, le64(7))
	f.Add(g0+rl.GLease, le64(0))
	f.Add(g0+rl.GMaxDeliv, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(g0+rl.GLock, le64(0x0123456789abcdef))
	f.Add(g0+rl.GJPos, le64(4))
	f.Add(g0+rl.GJDelivered, le64(^uint64(0)))
	f.Add(g0+rl.GLSeq, le64(2))
	f.Add(g0+rl.GLField, le64(rl.GRedelivered))
	f.Add(uint32(rl.OffProtected), le64(^uint64(0)))
	f.Add(uint32(rl.OffFloor), le64(^uint64(0)))
	f.Add(tab, make([]byte, 8*rl.PendSize))

	f.Fuzz(runPendingCase)
}

func runPendingCase(t *testing.T, at uint32, data []byte) {
	{
		watchdog := time.AfterFunc(10*time.Second, func() {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			panic(fmt.Sprintf("FuzzPendingTable: no progress in 10s at %d with %x\n%s", at, data, buf[:n]))
		})
		defer watchdog.Stop()
		path := filepath.Join(t.TempDir(), "arena")
		a, err := Open(path, WithSize(128<<10))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		r, g, err := fuzzAckRing(a)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			_, _ = r.Publish("jobs", []byte("payload"))
		}
		held := g.Claim(3)
		_ = g.Nack(held[0], 0)

		// Damage the group entry, the header or the table.
		length := rl.HeaderSize + 8*64 + 8*rl.PendSize
		off := int(at % uint32(length))
		if len(data) > length-off {
			data = data[:length-off]
		}
		mem.Write(r.b, r.off+off, data)

		exerciseAck(r, g, held)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		a2, err := Open(path)
		if err != nil {
			return // refused at attach: fine
		}
		defer a2.Close()
		r2, g2, err := fuzzAckRing(a2)
		if err != nil {
			return
		}
		exerciseAck(r2, g2, held)
	}
}

func fuzzAckRing(a *Arena) (*Ring, *Group, error) {
	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64), WithMaxInFlight(8))
	if err != nil {
		return nil, nil, err
	}
	g, err := r.Group("w", WithTopic("jobs"), WithAck(time.Hour), WithMaxDeliveries(2), WithDeadLetter("dead"))
	return r, g, err
}

func exerciseAck(r *Ring, g *Group, held []Record) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, _ = r.Publish("jobs", []byte("more"))
	_, _ = r.PublishWait(ctx, "jobs", nil)
	_, _ = r.PublishBatchWait(ctx, "jobs", [][]byte{[]byte("batch"), nil})
	if g != nil {
		for i := 0; i < 3; i++ {
			recs := g.Claim(0)
			if len(recs) > 0 {
				_ = g.Nack(recs[0], 0)
				_ = g.Ack(recs[1:]...)
			}
		}
		_ = g.Ack(held...)
		for _, rec := range held {
			_ = g.Extend(rec, time.Second)
		}
		_ = g.Wait(ctx)
		_ = g.Stats()
	}
	_ = r.Stats()
	_ = r.DropGroup("w")
	if g2, err := r.Group("w2", WithAck(time.Second), FromStart()); err == nil {
		g2.Claim(0)
	}
}
