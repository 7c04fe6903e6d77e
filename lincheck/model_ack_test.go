package lincheck

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
)

// The sequential specification of an acking group (WithAck, with
// WithMaxDeliveries and WithDeadLetter) bound to topic "job" on a ring
// that never fills, for porcupine, over sequence numbers (the payloads are
// checked apart, by checkAckPayloads).
//
// State: h, the head as far as the history has shown it; pos, the group's
// position; gaps, the sequences in [pos, h) that are not jobs (dead
// letters, holes); and the pending table: per record delivered and not
// finished, its holder (a worker incarnation, or none once Nacked), its
// delivery count, and when its lease ends (or, Nacked, when it is due):
// an interval [lo, hi] of CLOCK_MONOTONIC, since the model knows only that
// the Claim, Nack or Extend that set it took effect inside its own call
// and return.
//
//   - Publish (PublishWait) returns a sequence >= h; the ones it passes
//     were taken by dead letters or holes (a dead letter takes the head
//     when a Claim gives up, under its own publish, so other producers'
//     records may fall between one Claim's letters).
//   - Claim(max) first takes again, oldest first, the pending records that
//     are due: the lease ran out (its end before the Claim's instant), or
//     its holder was dead (another incarnation that had ended by then). A
//     record at its delivery limit is dead-lettered (finished) instead of
//     delivered. Whether a record is due is free where the intervals leave
//     it open, forced where they do not: a record due for sure must be
//     taken while the claim has room. Then new records from pos, up to
//     floor + max in flight: every job there must be taken while the claim
//     has room, in order, with one delivery.
//   - Ack, Nack and Extend of a record succeed exactly when its lease is
//     the caller's: same holder and delivery count, not finished. Ack
//     finishes it; Nack makes it due after the delay, held by nobody;
//     Extend moves its end. A lost one reports ErrLeaseLost (the rest of
//     an Ack's records are still acked).
//   - An operation whose worker died took any prefix of its effects: a
//     Claim updates one entry at a time, and commits new records with one
//     store of the position per round; Ack finishes one record at a time;
//     a Nack stores the due time before it clears the holder.
type ackEnt struct {
	seq    uint64
	holder int // worker incarnation (client); -1: nobody (Nacked)
	deliv  int
	lo, hi int64
}

type ackState struct {
	h, pos uint64
	gaps   string // sorted sequences in [pos, h) that are not jobs, 8 bytes each
	ents   string // pending entries sorted by sequence, 40 bytes each
}

type ackRec struct {
	Seq   uint64 `json:"s"`
	Deliv int    `json:"d"`
}

type ackIn struct {
	op         string
	max        int    // Claim
	recs       string // Ack, Nack, Extend: the records, as (seq, deliveries) pairs of 8+8 bytes
	dur        int64  // Nack's delay, Extend's lease (ns)
	call, till int64  // the operation's call, and its return (or its worker's death)
	client     int    // the worker incarnation
	payload    string // Publish
}

type ackOut struct {
	unknown bool
	seq     uint64   // Publish
	recs    string   // Claim: the records, as in ackIn.recs
	lost    bool     // Ack, Nack, Extend: ErrLeaseLost
	err     string   // any other error
	pays    []string // Claim: the payloads (not compared by the model)
}

// ackParams are a round's constants: the group's settings and, per worker
// incarnation, when it may have died (its last logged time) and when it
// was dead for sure (the supervisor saw it end).
type ackParams struct {
	lease, slack int64 // slack: clock and alive-cache allowance, ns
	maxDeliv     int
	inFlight     uint64
	deathLo      map[int]int64
	deathHi      map[int]int64
}

func encRecs(recs []ackRec) string {
	b := make([]byte, 0, 16*len(recs))
	for _, r := range recs {
		b = binary.LittleEndian.AppendUint64(b, r.Seq)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Deliv))
	}
	return string(b)
}

func decRecs(s string) []ackRec {
	out := make([]ackRec, 0, len(s)/16)
	for i := 0; i+16 <= len(s); i += 16 {
		out = append(out, ackRec{Seq: binary.LittleEndian.Uint64([]byte(s[i:])), Deliv: int(binary.LittleEndian.Uint64([]byte(s[i+8:])))})
	}
	return out
}

func encEnts(es []ackEnt) string {
	b := make([]byte, 0, 40*len(es))
	for _, e := range es {
		b = binary.LittleEndian.AppendUint64(b, e.seq)
		b = binary.LittleEndian.AppendUint64(b, uint64(int64(e.holder)))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.deliv))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.lo))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.hi))
	}
	return string(b)
}

func decEnts(s string) []ackEnt {
	out := make([]ackEnt, 0, len(s)/40)
	for i := 0; i+40 <= len(s); i += 40 {
		w := func(k int) uint64 { return binary.LittleEndian.Uint64([]byte(s[i+8*k:])) }
		out = append(out, ackEnt{seq: w(0), holder: int(int64(w(1))), deliv: int(w(2)), lo: int64(w(3)), hi: int64(w(4))})
	}
	return out
}

// work is a decoded state being changed.
type work struct {
	h, pos uint64
	gaps   []uint64
	ents   []ackEnt
}

func (s ackState) work() work {
	return work{h: s.h, pos: s.pos, gaps: holeList(s.gaps), ents: decEnts(s.ents)}
}

func (w work) state() ackState {
	return ackState{h: w.h, pos: w.pos, gaps: holeString(w.gaps), ents: encEnts(w.ents)}
}

func (w work) clone() work {
	return work{h: w.h, pos: w.pos, gaps: slices.Clone(w.gaps), ents: slices.Clone(w.ents)}
}

func (w work) floor() uint64 {
	if len(w.ents) > 0 {
		return w.ents[0].seq
	}
	return w.pos
}

func (w work) find(seq uint64) int {
	for i, e := range w.ents {
		if e.seq == seq {
			return i
		}
	}
	return -1
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// dueness says whether entry e may be, and must be, due at some instant
// of [in.call, in.till] for a Claim by in.client.
func (p *ackParams) dueness(e ackEnt, in ackIn) (may, must bool) {
	may = addSat(in.till, p.slack) >= e.lo
	must = in.call-p.slack >= e.hi
	if e.holder >= 0 && e.holder != in.client {
		lo, ok := p.deathLo[e.holder]
		hi := p.deathHi[e.holder]
		if !ok { // never dies
			lo, hi = math.MaxInt64, math.MaxInt64
		}
		may = may || in.till >= lo
		must = must || in.call >= addSat(hi, p.slack)
	}
	return may, must
}

// claims returns the states a Claim may leave, with the records it
// returns: all of them for a returned Claim (want is its output), any
// prefix of its effects for one whose worker died.
func (p *ackParams) claims(s work, in ackIn, out ackOut) []ackState {
	max := in.max
	if max <= 0 {
		max = int(p.inFlight)
	}
	want := decRecs(out.recs)
	var next []ackState
	var walk func(w work, i int, got []ackRec)
	walk = func(w work, i int, got []ackRec) {
		if out.unknown {
			next = addStates(next, w.state()) // killed here
		}
		if i == len(w.ents) || len(got) == max {
			p.claimNew(w, in, max, got, want, out.unknown, &next)
			return
		}
		e := w.ents[i]
		may, must := p.dueness(e, in)
		if !must {
			walk(w, i+1, got) // not due
		}
		if !may {
			return
		}
		v := w.clone()
		if e.deliv >= p.maxDeliv { // dead-lettered: its letter takes the head, seen by a later Publish
			v.ents = slices.Delete(v.ents, i, i+1)
			walk(v, i, got)
			return
		}
		r := ackRec{Seq: e.seq, Deliv: e.deliv + 1}
		if !out.unknown && (len(got) >= len(want) || want[len(got)] != r) {
			return
		}
		v.ents[i] = ackEnt{seq: e.seq, holder: in.client, deliv: e.deliv + 1, lo: in.call + p.lease, hi: addSat(in.till, p.lease)}
		walk(v, i+1, append(slices.Clone(got), r))
	}
	walk(s, 0, nil)
	return next
}

// claimNew leases new records after the redeliveries, as Group.claimAck's
// rounds do.
func (p *ackParams) claimNew(w work, in ackIn, max int, got, want []ackRec, unknown bool, next *[]ackState) {
	w = w.clone()
	for round := 0; len(got) < max && round < 4; round++ {
		end := min(w.h, w.floor()+p.inFlight)
		if w.pos >= end {
			break
		}
		seq := w.pos
		for ; seq < end && len(got) < max; seq++ {
			if len(w.gaps) > 0 && w.gaps[0] == seq {
				w.gaps = w.gaps[1:]
				continue
			}
			w.ents = append(w.ents, ackEnt{seq: seq, holder: in.client, deliv: 1, lo: in.call + p.lease, hi: addSat(in.till, p.lease)})
			got = append(got, ackRec{Seq: seq, Deliv: 1})
		}
		w.pos = seq
		if unknown {
			*next = addStates(*next, w.state())
		}
		// Finished entries before the first pending one do not exist in
		// the model (the floor is the first pending entry), so nothing to
		// advance.
	}
	if !unknown && slices.Equal(got, want) {
		*next = addStates(*next, w.state())
	}
}

// settle returns the states an Ack, Nack or Extend may leave.
func (p *ackParams) settle(s work, in ackIn, out ackOut) []ackState {
	recs := decRecs(in.recs)
	var next []ackState
	w := s.clone()
	lost := false
	if out.unknown {
		next = addStates(next, w.state())
	}
	for _, r := range recs {
		i := w.find(r.Seq)
		if i < 0 || w.ents[i].holder != in.client || w.ents[i].deliv != r.Deliv {
			lost = true
			continue
		}
		switch in.op {
		case opAAck:
			w.ents = slices.Delete(w.ents, i, i+1)
		case opANack:
			if out.unknown { // the due time stored, the holder not yet cleared
				v := w.clone()
				v.ents[i].lo, v.ents[i].hi = in.call+in.dur, addSat(in.till, in.dur)
				next = addStates(next, v.state())
			}
			w.ents[i] = ackEnt{seq: r.Seq, holder: -1, deliv: r.Deliv, lo: in.call + in.dur, hi: addSat(in.till, in.dur)}
		case opAExtend:
			w.ents[i].lo, w.ents[i].hi = in.call+in.dur, addSat(in.till, in.dur)
		}
		if out.unknown {
			next = addStates(next, w.state())
		}
	}
	if !out.unknown && out.err == "" && lost == out.lost {
		next = addStates(next, w.state())
	}
	return next
}

func (p *ackParams) successors(s ackState, in ackIn, out ackOut) []ackState {
	w := s.work()
	switch in.op {
	case opAPublish:
		switch {
		case out.unknown:
			v := w.clone()
			v.h++
			return []ackState{s, v.state()}
		case out.err != "" || out.seq < w.h:
			return nil
		}
		for q := w.h; q < out.seq; q++ {
			w.gaps = append(w.gaps, q)
		}
		w.h = out.seq + 1
		return []ackState{w.state()}
	case opAClaim:
		if out.err != "" {
			return nil
		}
		return p.claims(w, in, out)
	}
	if out.err != "" {
		return nil
	}
	return p.settle(w, in, out)
}

func (p *ackParams) model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return []ackState{{h: 1, pos: 1}} },
		Step: func(state, input, output any) (bool, any) {
			var next []ackState
			for _, s := range state.([]ackState) {
				next = addStates(next, p.successors(s, input.(ackIn), output.(ackOut))...)
			}
			return len(next) > 0, next
		},
		Equal: func(a, b any) bool { return sameSet(a.([]ackState), b.([]ackState)) },
		Hash:  func(s any) uint64 { return hashSet(s.([]ackState)) },
		DescribeOperation: func(input, output any) string {
			return describeAckOp(input.(ackIn), output.(ackOut))
		},
		DescribeState: func(state any) string {
			var d []string
			for _, s := range state.([]ackState) {
				d = append(d, "["+describeAck(s)+"]")
			}
			return strings.Join(d, " or ")
		},
	}
}

func describeAck(s ackState) string {
	w := s.work()
	d := fmt.Sprintf("head %d, group at %d", w.h, w.pos)
	if len(w.gaps) > 0 {
		d += fmt.Sprintf(", not jobs %v", w.gaps)
	}
	for _, e := range w.ents {
		who := fmt.Sprint("client ", e.holder)
		if e.holder < 0 {
			who = "nobody"
		}
		d += fmt.Sprintf("; #%d held by %s, %d deliveries, due %.1f-%.1f ms", e.seq, who, e.deliv, float64(e.lo%1e9)/1e6, float64(e.hi%1e9)/1e6)
	}
	return d
}

func describeAckOp(in ackIn, out ackOut) string {
	var call string
	switch in.op {
	case opAPublish:
		call = fmt.Sprintf("PublishWait(%s)", showBytes(in.payload))
	case opAClaim:
		call = fmt.Sprintf("Claim(%d)", in.max)
	default:
		call = fmt.Sprintf("%s(%v, %v)", in.op, decRecs(in.recs), in.dur)
	}
	switch {
	case out.unknown:
		return call + " -> ? (worker killed)"
	case out.err != "":
		return call + " -> " + out.err
	case in.op == opAPublish:
		return fmt.Sprintf("%s -> %d", call, out.seq)
	case in.op == opAClaim:
		return fmt.Sprintf("%s -> %v", call, decRecs(out.recs))
	case out.lost:
		return call + " -> ErrLeaseLost"
	}
	return call + " -> ok"
}

// ackParamsFor returns the acking group's model for a round: the group's
// settings, and when each worker incarnation may have died (its log's last
// time) and was dead for sure (the supervisor saw it end). It also sets
// the unknown operations' end to their worker's death.
func ackParamsFor(rd *round, h *history) *ackParams {
	p := &ackParams{
		lease: int64(ackLease), slack: int64(10 * time.Millisecond), maxDeliv: ackMaxDeliv, inFlight: ackInFlight,
		deathLo: map[int]int64{}, deathHi: map[int]int64{},
	}
	for client := range rd.logs {
		p.deathLo[client], p.deathHi[client] = math.MaxInt64, math.MaxInt64 // the supervisor's own reads
		if end, ok := rd.ended[client]; ok {
			p.deathLo[client], p.deathHi[client] = h.lasts[client], end
		}
	}
	for i := range h.ackOps {
		if in := h.ackOps[i].Input.(ackIn); in.till == math.MaxInt64 {
			in.till = p.deathHi[in.client]
			h.ackOps[i].Input = in
		}
	}
	return p
}

// checkAckPayloads checks what the acking group's model leaves out: every
// record a Claim returned carries the payload its Publish was given (the
// one that returned that sequence, or a Publish whose worker died), and
// every delivery of a sequence the same one.
func checkAckPayloads(ops []porcupine.Operation) []string {
	bySeq := map[uint64]string{}
	unknown := map[string]bool{}
	for _, op := range ops {
		in, out := op.Input.(ackIn), op.Output.(ackOut)
		if in.op != opAPublish {
			continue
		}
		if out.unknown {
			unknown[in.payload] = true
		} else if out.err == "" {
			bySeq[out.seq] = in.payload
		}
	}
	var problems []string
	for _, op := range ops {
		in, out := op.Input.(ackIn), op.Output.(ackOut)
		if in.op != opAClaim || out.unknown {
			continue
		}
		for i, r := range decRecs(out.recs) {
			got := out.pays[i]
			want, ok := bySeq[r.Seq]
			switch {
			case !ok && unknown[got]:
				bySeq[r.Seq] = got
			case !ok:
				problems = append(problems, fmt.Sprintf("claimed #%d %s, which nobody published", r.Seq, showBytes(got)))
			case got != want:
				problems = append(problems, fmt.Sprintf("claimed #%d %s; its Publish had %s", r.Seq, showBytes(got), showBytes(want)))
			}
		}
	}
	return problems
}

func TestAckModel(t *testing.T) {
	p := &ackParams{lease: 100, maxDeliv: 2, inFlight: 4,
		deathLo: map[int]int64{9: 50}, deathHi: map[int]int64{9: 60}}
	model := p.model()
	op := func(client int, call, ret int64, in ackIn, out ackOut) porcupine.Operation {
		in.call, in.till, in.client = call, ret, client
		if ret == never {
			in.till, out.unknown = p.deathHi[client], true
		}
		return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
	}
	pub := func(c int, call, ret int64, seq uint64) porcupine.Operation {
		return op(c, call, ret, ackIn{op: opAPublish}, ackOut{seq: seq})
	}
	claim := func(c int, call, ret int64, max int, got ...ackRec) porcupine.Operation {
		return op(c, call, ret, ackIn{op: opAClaim, max: max}, ackOut{recs: encRecs(got)})
	}
	settle := func(c int, call, ret int64, what string, dur int64, lost bool, recs ...ackRec) porcupine.Operation {
		return op(c, call, ret, ackIn{op: what, recs: encRecs(recs), dur: dur}, ackOut{lost: lost})
	}
	r := func(seq uint64, d int) ackRec { return ackRec{Seq: seq, Deliv: d} }
	cases := []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"claim then ack", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(1, 5, 6, opAAck, 0, false, r(1, 1))}},
		{"an Ack by a member that does not hold the lease succeeds", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(2, 5, 6, opAAck, 0, false, r(1, 1))}},
		{"the lease runs out, another member takes it, the first one's Ack is lost", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), claim(2, 200, 201, 1, r(1, 2)), settle(1, 202, 203, opAAck, 0, true, r(1, 1))}},
		{"... and the first one's Ack succeeds", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), claim(2, 200, 201, 1, r(1, 2)), settle(1, 202, 203, opAAck, 0, false, r(1, 1))}},
		{"an Ack after the lease ran out but before anyone took it succeeds", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(1, 300, 301, opAAck, 0, false, r(1, 1)), claim(2, 302, 303, 1)}},
		{"a lease that has not run out is taken again", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), claim(2, 50, 51, 1, r(1, 2))}},
		{"a lease that ran out for sure is not taken again", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), claim(2, 300, 301, 1)}},
		{"a Nacked record is due after its delay", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(1, 10, 11, opANack, 50, false, r(1, 1)),
			claim(2, 20, 21, 0), claim(2, 70, 71, 0, r(1, 2))}},
		{"a Nacked record is delivered before its delay", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(1, 10, 11, opANack, 50, false, r(1, 1)), claim(2, 20, 21, 0, r(1, 2))}},
		{"a record at its limit is dead-lettered, not delivered again", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(1, 5, 6, opANack, 0, false, r(1, 1)),
			claim(1, 7, 8, 1, r(1, 2)), settle(1, 9, 10, opANack, 0, false, r(1, 2)), claim(2, 11, 12, 1, r(1, 3))}},
		{"after the dead letter, the next publish is past its sequence", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(1, 5, 6, opANack, 0, false, r(1, 1)),
			claim(1, 7, 8, 1, r(1, 2)), settle(1, 9, 10, opANack, 0, false, r(1, 2)), claim(2, 11, 12, 1),
			pub(0, 13, 14, 3), claim(2, 15, 16, 0, r(3, 1))}},
		{"a dead member's lease is taken at once", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(9, 3, 4, 1, r(1, 1)), claim(2, 70, 71, 1, r(1, 2))}},
		{"a live member's lease is taken before it runs out", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(9, 3, 4, 1, r(1, 1)), claim(2, 20, 21, 1, r(1, 2))}},
		{"Extend keeps the lease", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(1, 50, 51, opAExtend, 200, false, r(1, 1)), claim(2, 150, 151, 1, r(1, 2))}},
		{"an extended lease runs out", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 1, r(1, 1)), settle(1, 50, 51, opAExtend, 200, false, r(1, 1)), claim(2, 300, 301, 1, r(1, 2))}},
		{"a claim stops at max in flight", true, []porcupine.Operation{
			pub(0, 1, 2, 1), pub(0, 3, 4, 2), pub(0, 5, 6, 3), pub(0, 7, 8, 4), pub(0, 9, 10, 5),
			claim(1, 11, 12, 0, r(1, 1), r(2, 1), r(3, 1), r(4, 1)), claim(1, 13, 14, 0)}},
		{"a claim passes max in flight", false, []porcupine.Operation{
			pub(0, 1, 2, 1), pub(0, 3, 4, 2), pub(0, 5, 6, 3), pub(0, 7, 8, 4), pub(0, 9, 10, 5),
			claim(1, 11, 12, 0, r(1, 1), r(2, 1), r(3, 1), r(4, 1), r(5, 1))}},
		{"a claim skips an available record", false, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(1, 3, 4, 2)}},
		{"a killed claim may have taken the record", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(9, 3, never, 1), claim(2, 70, 71, 1, r(1, 2))}},
		{"... or not", true, []porcupine.Operation{
			pub(0, 1, 2, 1), claim(9, 3, never, 1), claim(2, 70, 71, 1, r(1, 1))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.ok, porcupine.CheckOperations(model, c.ops), "linearizable")
		})
	}
}
