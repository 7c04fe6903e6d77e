package lincheck

import (
	"fmt"
	"strings"
)

// The sequential specification of a ring with one consumer group (no
// topic binding) that is never lapped, for porcupine, over sequence
// numbers only: which payload a sequence number carries is checked apart
// (see checkPayloads), which keeps this state two integers and a rare set.
//
// State: h, the sequence the next Publish gets (the ring's head); p, the
// group's position; holes, the sequence numbers in [p, h) whose producer
// died after taking them, which no member can ever claim. A sequence in
// [p, h) that is not a hole holds a published record no member has
// claimed yet.
//
//   - Publish returns h and moves it on; PublishBatch of n records
//     returns h and moves it on by n (its records are h, ..., h+n-1).
//   - Claim(1) returns the oldest unclaimed record, p's, and moves p past
//     it; or nothing, and then there is none: p == h. Holes are stepped
//     over as the group does (and as it counts them abandoned), so p is
//     kept past them (normalize).
//   - A Publish whose worker died took effect or not, and if it did, its
//     sequence may be a hole (it died before committing) or a record (it
//     died after). A PublishBatch whose worker died published all its
//     records (it died after the commit), or left holes at h, ...,
//     h+j-1 for the 1 <= j <= n records it had begun (before: the repair
//     makes a hole of each slot it began), or nothing.
//   - A Claim whose worker died took the record at p, or nothing. (It
//     may also have stepped the position over holes, which changes
//     nothing observable.)
//
// This is exact for what the recorder does: Claim(1) is one
// compare-and-swap of the position past one record (and others past
// holes), so it is atomic; Claim of more than one record may take them in
// more than one swap and is not one atomic step, so the recorder does not
// ask for it. It checks that no record is claimed twice, none is claimed
// before its Publish was called, records are claimed in publish order,
// and an empty claim skipped nothing claimable. Whether a Claim loses a
// record to lapping is not modelled: the ring is sized so nothing laps,
// and the supervisor requires the group's Lapped count to be zero.
type ringState struct {
	h, p  uint64
	holes string // sorted sequence numbers >= p, 8 bytes each (comparable)
}

type ringIn struct {
	publish bool     // else Claim(1)
	payload string   // Publish: the record's payload
	n       int      // records published: 1, or PublishBatch's count
	batch   []string // PublishBatch: the records' payloads
}

// payloads returns what a publish published, in order.
func (in ringIn) payloads() []string {
	if in.batch != nil {
		return in.batch
	}
	return []string{in.payload}
}

type ringOut struct {
	unknown bool
	seq     uint64 // Publish: the sequence returned; Claim: the record's (0: nothing)
	payload string // Claim: the record's payload
	err     string
}

func holeList(s string) []uint64 {
	out := make([]uint64, 0, len(s)/8)
	for i := 0; i+8 <= len(s); i += 8 {
		var n uint64
		for j := 7; j >= 0; j-- {
			n = n<<8 | uint64(s[i+j])
		}
		out = append(out, n)
	}
	return out
}

func holeString(l []uint64) string {
	var b strings.Builder
	for _, n := range l {
		for j := 0; j < 8; j++ {
			b.WriteByte(byte(n >> (8 * j)))
		}
	}
	return b.String()
}

// normalize moves p past the holes at it.
func normalize(s ringState) ringState {
	l := holeList(s.holes)
	for len(l) > 0 && l[0] == s.p && s.p < s.h {
		l, s.p = l[1:], s.p+1
	}
	s.holes = holeString(l)
	return s
}

func ringSuccessors(s ringState, in ringIn, out ringOut) []ringState {
	switch {
	case in.publish && out.unknown:
		pub := ringState{h: s.h + uint64(max(in.n, 1)), p: s.p, holes: s.holes}
		out := []ringState{s, pub}
		var holes []uint64
		for j := range uint64(max(in.n, 1)) {
			holes = append(holes, s.h+j)
			out = append(out, normalize(ringState{h: s.h + j + 1, p: s.p, holes: s.holes + holeString(holes)}))
		}
		return out
	case in.publish:
		if out.err != "" || out.seq != s.h {
			return nil
		}
		return []ringState{{h: s.h + uint64(max(in.n, 1)), p: s.p, holes: s.holes}}
	case out.unknown:
		if s.p < s.h {
			return []ringState{s, normalize(ringState{h: s.h, p: s.p + 1, holes: s.holes})}
		}
		return []ringState{s}
	case out.seq == 0:
		if s.p != s.h {
			return nil
		}
		return []ringState{s}
	}
	if out.seq != s.p || s.p >= s.h {
		return nil
	}
	return []ringState{normalize(ringState{h: s.h, p: s.p + 1, holes: s.holes})}
}

func ringStep(states []ringState, in ringIn, out ringOut) (bool, []ringState) {
	var next []ringState
	for _, s := range states {
		next = addStates(next, ringSuccessors(s, in, out)...)
	}
	return len(next) > 0, next
}

func describeRing(s ringState) string {
	d := fmt.Sprintf("head %d, group at %d", s.h, s.p)
	if l := holeList(s.holes); len(l) > 0 {
		d += fmt.Sprintf(", holes %v", l)
	}
	return d
}

func describeRingOp(in ringIn, out ringOut) string {
	var call string
	switch {
	case in.batch != nil:
		ps := make([]string, len(in.batch))
		for i, p := range in.batch {
			ps[i] = showBytes(p)
		}
		call = fmt.Sprintf("PublishBatch(%s)", strings.Join(ps, ", "))
	case in.publish:
		call = fmt.Sprintf("Publish(%s)", showBytes(in.payload))
	default:
		call = "Claim(1)"
	}
	switch {
	case out.unknown:
		return call + " -> ? (worker killed)"
	case out.err != "":
		return call + " -> " + out.err
	case in.publish:
		return fmt.Sprintf("%s -> %d", call, out.seq)
	case out.seq == 0:
		return call + " -> nothing"
	}
	return fmt.Sprintf("%s -> #%d %s", call, out.seq, showBytes(out.payload))
}
