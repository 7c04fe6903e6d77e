package shmarena

import (
	"runtime"

	"github.com/shmarena/shmarena/internal/mem"
	rl "github.com/shmarena/shmarena/internal/ringlayout"
)

// Groups returns the statistics of every consumer group of the ring, in
// table order, as their members' Group.Stats would report them (Mine is
// 0: it counts one process's claims). It reads only: it joins no group,
// so it works on a read-only handle and disturbs nobody. Nil after Close.
func (r *Ring) Groups() []GroupStats {
	defer catchFault(r.a, guard(), nil)
	if r.closed() {
		return nil
	}
	defer runtime.KeepAlive(r)
	b := r.b
	head := mem.Load64(b, r.off+rl.OffNext)
	var out []GroupStats
	for i := 0; i < rl.Groups; i++ {
		goff := r.off + rl.GroupOff(i)
		if mem.Load64(b, goff+rl.GState) != rl.GroupReady {
			continue
		}
		nl, tl := min(mem.Load32(b, goff+rl.GNameLen), rl.MaxGroupName), min(mem.Load32(b, goff+rl.GTopicLen), rl.MaxGroupTopic)
		st := GroupStats{
			Name:      string(mem.AppendBytes(nil, b, goff+rl.GName, int(nl))),
			Topic:     string(mem.AppendBytes(nil, b, goff+rl.GTopic, int(tl))),
			Position:  mem.Load64(b, goff+rl.GPosition),
			Delivered: mem.Load64(b, goff+rl.GDelivered),
			Lapped:    mem.Load64(b, goff+rl.GLapped),
			Skipped:   mem.Load64(b, goff+rl.GSkipped),
			Abandoned: mem.Load64(b, goff+rl.GAbandoned),
		}
		if head > st.Position {
			st.Lag = head - st.Position
		}
		if mem.Load64(b, goff+rl.GFlags)&rl.FlagAck != 0 && r.inFlight != 0 {
			g := &Group{r: r, goff: goff, table: r.tables + i*int(r.inFlight)*rl.PendSize}
			st.Redelivered = mem.Load64(b, goff+rl.GRedelivered)
			st.DeadLettered = mem.Load64(b, goff+rl.GDeadLettered)
			st.Pending, st.Floor, st.OldestPending = g.pending()
		}
		out = append(out, st)
	}
	return out
}
