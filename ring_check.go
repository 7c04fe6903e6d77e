package shmarena

import (
	"fmt"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

// This file: a ring's deep validation, for Arena.Check (shmarena check).
// It only reads.

// checkInvariants returns what is wrong with the ring's slots, group
// positions and pending tables, each as one line (nil for a healthy
// ring). The header and group entries are validateRing's (run by Check
// first). Producers may publish meanwhile: a scan during which the head
// moved is tried again, up to 3 times, and then only the slots the head
// did not reach are judged.
func (r *Ring) checkInvariants() []string {
	var out []string
	for try := 0; try < 3; try++ {
		var stable bool
		out, stable = r.checkOnce()
		if stable {
			break
		}
	}
	return out
}

func (r *Ring) checkOnce() (out []string, stable bool) {
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	b := r.b
	next := mem.Load64(b, r.off+rl.OffNext)
	if next == 0 || next >= rl.MaxSeq {
		return []string{fmt.Sprintf("next sequence %d out of range", next)}, true
	}
	locked := mem.Load64(b, r.off+rl.OffLock) != 0
	for i := uint64(0); i < r.slots; i++ {
		o := r.off + rl.HeaderSize + int(i)*r.slotSize
		begin, end, lens := mem.Load64(b, o+rl.SBegin), mem.Load64(b, o+rl.SEnd), mem.Load64(b, o+rl.SLens)
		// The newest sequence below next that lives in slot i.
		var want uint64
		if last := next - 1; last >= 1 {
			want = last - (last%r.slots+r.slots-i)%r.slots
			if want > last || want == 0 {
				want = 0
			}
		}
		switch {
		case begin == 0 && want == 0:
			continue // never written
		case locked && begin >= next && begin-next < r.slots && begin%r.slots == i:
			continue // being published now: the head's slot, or a batch's later ones
		case begin != want:
			add("slot %d: holds sequence %d, the ring's head %d puts sequence %d there", i, begin, next, want)
			continue
		case end != begin:
			if !locked {
				add("slot %d: record %d begun but ended %d, and nobody publishes", i, begin, end)
			}
			continue
		case lens != rl.AbandonedLens && uint64(uint32(lens))+lens>>32 > uint64(r.maxBody):
			add("slot %d: record %d has topic %d + payload %d bytes, a slot holds %d", i, begin, uint32(lens), lens>>32, r.maxBody)
		}
	}
	for g := 0; g < rl.Groups; g++ {
		goff := r.off + rl.GroupOff(g)
		if mem.Load64(b, goff+rl.GState) != rl.GroupReady || mem.Load64(b, goff+rl.GFlags)&rl.FlagAck == 0 || r.inFlight == 0 {
			continue
		}
		floor, pos := mem.Load64(b, goff+rl.GFloor), mem.Load64(b, goff+rl.GPosition)
		if floor > pos || pos-floor > r.inFlight {
			continue // validateRing reports it
		}
		table := r.tables + g*int(r.inFlight)*rl.PendSize
		for seq := floor; seq < pos; seq++ {
			e := table + int(seq%r.inFlight)*rl.PendSize
			es, st := mem.Load64(b, e+rl.PSeq), mem.Load64(b, e+rl.PState)>>32
			if es != seq && es != 0 {
				add("group entry %d: pending entry for sequence %d holds sequence %d", g, seq, es)
			} else if es == seq && st != rl.StPending && st != rl.StDone {
				add("group entry %d: pending entry for sequence %d has state %d", g, seq, st)
			}
		}
	}
	return out, mem.Load64(b, r.off+rl.OffNext) == next
}
