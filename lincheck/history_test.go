package lincheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"runtime"
	"sync"

	"github.com/anishathalye/porcupine"
)

// A logRec is one line of a worker's log: the invocation of an operation
// (ev "call", written before the operation starts, with its inputs) or its
// response (ev "ret", written after it returns, with its outputs). t is
// CLOCK_MONOTONIC in nanoseconds, read before the call record is written
// and after the operation returns, so [call t, ret t] contains the
// operation. Each record is one write(2) of one line.
type logRec struct {
	Ev   string   `json:"e"`
	ID   int      `json:"id"`
	T    int64    `json:"t"`
	Op   string   `json:"op,omitempty"`
	Key  string   `json:"k,omitempty"`   // map name "/" key
	Val  []byte   `json:"v,omitempty"`   // value, new value, or payload
	Old  []byte   `json:"o,omitempty"`   // CompareAndSwap, CompareAndDelete
	D    int64    `json:"d,omitempty"`   // Add's delta
	OK   bool     `json:"ok,omitempty"`  // found, loaded, swapped, deleted
	Out  []byte   `json:"out,omitempty"` // value returned, or claimed payload
	Vals [][]byte `json:"vs,omitempty"`  // PublishBatch's payloads
	N    int64    `json:"n,omitempty"`   // Counter, Add
	Seq  uint64   `json:"seq,omitempty"` // Publish, Claim
	Busy bool     `json:"busy,omitempty"`
	Err  string   `json:"err,omitempty"`
	// The acking group's operations.
	Max  int      `json:"max,omitempty"`  // Claim's max
	Recs []ackRec `json:"rs,omitempty"`   // Ack, Nack, Extend: the records; Claim: those returned
	Outs [][]byte `json:"outs,omitempty"` // Claim: their payloads
	Dur  int64    `json:"du,omitempty"`   // Nack's delay, Extend's lease (ns)
	Lost bool     `json:"lost,omitempty"` // ErrLeaseLost
}

const (
	opPublish = "Publish"
	opBatch   = "PublishBatch"
	opClaim   = "Claim"
	// On the acking group's ring.
	opAPublish = "PublishWait"
	opAClaim   = "ClaimAck"
	opAAck     = "Ack"
	opANack    = "Nack"
	opAExtend  = "Extend"
)

func isAckOp(op string) bool {
	switch op {
	case opAPublish, opAClaim, opAAck, opANack, opAExtend:
		return true
	}
	return false
}

// A history is what one round's workers did, ready for the checker.
type history struct {
	mapOps, ringOps []porcupine.Operation
	ackOps          []porcupine.Operation
	lasts           []int64 // per client, the latest time in its log
	ops             int     // operations invoked
	unknown         int     // ... whose worker died before they returned
	droppedReads    int     // ... of which reads, left out: they changed nothing and returned nothing
	busyReads       int     // reads that reported a miss while Busy moved
}

// loadHistory reads the logs of a round, one per worker incarnation
// (logs[i] is client i), several at once. A final line cut short by a kill
// is ignored (the operation then has no response); any other bad line is
// an error.
func loadHistory(logs []string) (*history, error) {
	parts := make([]*history, len(logs))
	lasts := make([]int64, len(logs))
	errs := make([]error, len(logs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for client, path := range logs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			parts[client], lasts[client], errs[client] = readLog(path, client)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h := &history{}
	var last int64
	for i, p := range parts {
		h.mapOps = append(h.mapOps, p.mapOps...)
		h.ringOps = append(h.ringOps, p.ringOps...)
		h.ackOps = append(h.ackOps, p.ackOps...)
		h.ops += p.ops
		h.unknown += p.unknown
		h.droppedReads += p.droppedReads
		h.busyReads += p.busyReads
		last = max(last, lasts[i])
	}
	// An operation whose worker died has no response: it may take effect
	// at any time after its call (a recoverer may even finish its effect,
	// making a half-written slot absent, after the death), so it returns
	// after everything, as etcd's robustness tests do.
	h.lasts = lasts
	for _, ops := range [][]porcupine.Operation{h.mapOps, h.ringOps, h.ackOps} {
		for i := range ops {
			if unknownOut(ops[i].Output) {
				ops[i].Return = last + 1
			}
		}
	}
	return h, nil
}

// readLog reads one worker's log. A worker runs one operation at a time,
// so every call record is followed by its response, except perhaps the
// last. It returns the latest time in the log.
func readLog(path string, client int) (*history, int64, error) {
	h := &history{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, 0, nil // killed before it made its log: it did nothing
	}
	if err != nil {
		return nil, 0, err
	}
	// Every line ends in a newline but a last one cut short by a kill,
	// which is left out.
	lines := bytes.Split(data, []byte("\n"))
	lines = lines[:len(lines)-1]
	var last int64
	for i := 0; i < len(lines); i++ {
		var c, r logRec
		if err := json.Unmarshal(lines[i], &c); err != nil || c.Ev != "call" {
			return nil, 0, fmt.Errorf("%s:%d: not a call record (%v)", path, i+1, err)
		}
		last = max(last, c.T)
		returned := i+1 < len(lines)
		if returned {
			i++
			if err := json.Unmarshal(lines[i], &r); err != nil || r.Ev != "ret" || r.ID != c.ID {
				return nil, 0, fmt.Errorf("%s:%d: not the response to operation %d (%v)", path, i+1, c.ID, err)
			}
			last = max(last, r.T)
		}
		h.ops++
		op := porcupine.Operation{ClientId: client, Call: c.T, Return: r.T}
		switch {
		case isAckOp(c.Op):
			op.Input = ackIn{op: c.Op, max: c.Max, recs: encRecs(c.Recs), dur: c.Dur, call: c.T, till: r.T, client: client, payload: string(c.Val)}
			if !returned {
				op.Input = ackIn{op: c.Op, max: c.Max, recs: encRecs(c.Recs), dur: c.Dur, call: c.T, till: math.MaxInt64, client: client, payload: string(c.Val)}
			}
			out := ackOut{unknown: !returned, seq: r.Seq, recs: encRecs(r.Recs), lost: r.Lost, err: r.Err}
			for _, p := range r.Outs {
				out.pays = append(out.pays, string(p))
			}
			op.Output = out
		case c.Op == opBatch:
			in := ringIn{publish: true, n: len(c.Vals)}
			for _, v := range c.Vals {
				in.batch = append(in.batch, string(v))
			}
			op.Input = in
			op.Output = ringOut{unknown: !returned, seq: r.Seq, err: r.Err}
		case c.Op == opPublish || c.Op == opClaim:
			op.Input = ringIn{publish: c.Op == opPublish, payload: string(c.Val), n: 1}
			op.Output = ringOut{unknown: !returned, seq: r.Seq, payload: string(r.Out), err: r.Err}
		default:
			op.Input = mapIn{op: c.Op, key: c.Key, val: string(c.Val), old: string(c.Old), delta: c.D}
			op.Output = mapOut{unknown: !returned, busy: r.Busy, ok: r.OK, val: string(r.Out), n: r.N, err: r.Err}
			if r.Busy {
				h.busyReads++
			}
		}
		if !returned {
			h.unknown++
			if c.Op == opLoad || c.Op == opCounter {
				h.droppedReads++
				continue
			}
		}
		if isAckOp(c.Op) {
			h.ackOps = append(h.ackOps, op)
		} else if c.Op == opPublish || c.Op == opBatch || c.Op == opClaim {
			h.ringOps = append(h.ringOps, op)
		} else {
			h.mapOps = append(h.mapOps, op)
		}
	}
	return h, last, nil
}

func unknownOut(out any) bool {
	switch o := out.(type) {
	case mapOut:
		return o.unknown
	case ringOut:
		return o.unknown
	case ackOut:
		return o.unknown
	}
	return false
}

// checkPayloads checks what the ring model leaves out, which record a
// sequence number carries: every claimed record was published, with the
// sequence its Publish returned (if it returned), by a Publish called
// before the claim returned, and no record or sequence is claimed twice.
// It returns the problems found.
func checkPayloads(ops []porcupine.Operation) []string {
	type pub struct {
		op  porcupine.Operation
		seq uint64 // 0 when its worker died
	}
	pubs := map[string]pub{}
	seqOwner := map[uint64]string{}
	var problems []string
	for _, op := range ops {
		in, out := op.Input.(ringIn), op.Output.(ringOut)
		if !in.publish {
			continue
		}
		// A batch's i-th payload has the sequence after the first's
		// plus i: no other record comes between them.
		for i, payload := range in.payloads() {
			if _, dup := pubs[payload]; dup {
				problems = append(problems, fmt.Sprintf("payload %s published twice (a recorder bug)", showBytes(payload)))
			}
			seq := out.seq
			if seq != 0 {
				seq += uint64(i)
			}
			pubs[payload] = pub{op: op, seq: seq}
			if seq != 0 {
				if other, dup := seqOwner[seq]; dup {
					problems = append(problems, fmt.Sprintf("sequence %d returned to two Publish calls, of %s and %s", seq, showBytes(other), showBytes(payload)))
				}
				seqOwner[seq] = payload
			}
		}
	}
	claimedSeq := map[uint64]bool{}
	claimedPayload := map[string]bool{}
	for _, op := range ops {
		in, out := op.Input.(ringIn), op.Output.(ringOut)
		if in.publish || out.unknown || out.seq == 0 {
			continue
		}
		p, ok := pubs[out.payload]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("claimed #%d %s, which nobody published", out.seq, showBytes(out.payload)))
			continue
		case p.op.Call > op.Return:
			problems = append(problems, fmt.Sprintf("claimed #%d %s before its Publish was called", out.seq, showBytes(out.payload)))
		case p.seq != 0 && p.seq != out.seq:
			problems = append(problems, fmt.Sprintf("claimed %s as #%d; its Publish returned %d", showBytes(out.payload), out.seq, p.seq))
		case p.seq == 0 && seqOwner[out.seq] != "":
			problems = append(problems, fmt.Sprintf("claimed %s as #%d, which Publish returned for %s", showBytes(out.payload), out.seq, showBytes(seqOwner[out.seq])))
		}
		if claimedSeq[out.seq] || claimedPayload[out.payload] {
			problems = append(problems, fmt.Sprintf("#%d %s claimed twice", out.seq, showBytes(out.payload)))
		}
		claimedSeq[out.seq], claimedPayload[out.payload] = true, true
	}
	return problems
}
