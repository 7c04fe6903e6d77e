package lincheck

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// mapModel checks Map operations, one key at a time: operations on
// different keys are independent objects (each Map operation touches one
// key), so a history is linearizable exactly when every key's is
// (linearizability is compositional), and porcupine checks the keys in
// parallel.
var mapModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(mapIn).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return []keyState{absent} },
	Step: func(state, input, output any) (bool, any) {
		return mapStep(state.([]keyState), input.(mapIn), output.(mapOut))
	},
	Equal: func(a, b any) bool { return sameSet(a.([]keyState), b.([]keyState)) },
	Hash:  func(s any) uint64 { return hashSet(s.([]keyState)) },
	DescribeOperation: func(input, output any) string {
		return describeMapOp(input.(mapIn), output.(mapOut))
	},
	DescribeState: func(state any) string {
		set := state.([]keyState)
		if len(set) == 1 {
			return describeKey(set[0])
		}
		d := "one of:"
		for _, s := range set {
			d += " [" + describeKey(s) + "]"
		}
		return d
	},
}

// ringModel checks a ring's Publish and its group's Claim (see
// ringState). The ring is one object, so its history is one partition.
var ringModel = porcupine.Model{
	Init: func() any { return []ringState{{h: 1, p: 1}} },
	Step: func(state, input, output any) (bool, any) {
		return ringStep(state.([]ringState), input.(ringIn), output.(ringOut))
	},
	Equal: func(a, b any) bool { return sameSet(a.([]ringState), b.([]ringState)) },
	Hash:  func(s any) uint64 { return hashSet(s.([]ringState)) },
	DescribeOperation: func(input, output any) string {
		return describeRingOp(input.(ringIn), output.(ringOut))
	},
	DescribeState: func(state any) string {
		set := state.([]ringState)
		if len(set) == 1 {
			return describeRing(set[0])
		}
		d := "one of:"
		for _, s := range set {
			d += " [" + describeRing(s) + "]"
		}
		return d
	},
}

// checkTimeout bounds one porcupine check. A check that runs out is a
// failure (a history nobody checked proves nothing), so it is far above
// what the histories the recorder makes need (well under a second each).
const checkTimeout = 3 * time.Minute

// A verdict is the outcome of checking one model's history.
type verdict struct {
	ok       bool
	timedOut bool
	vis      string // the HTML visualization written for a failure
	bad      string // the first partition found not linearizable, and where
}

// check runs porcupine over history with model. On a failure it finds the
// first partition that is not linearizable, checks that one again with
// the information the visualization needs, and writes the visualization
// to dir/name.html.
func check(model porcupine.Model, history []porcupine.Operation, dir, name string) (verdict, error) {
	switch porcupine.CheckOperationsTimeout(model, history, checkTimeout) {
	case porcupine.Ok:
		return verdict{ok: true}, nil
	case porcupine.Unknown:
		return verdict{timedOut: true}, nil
	}
	parts := [][]porcupine.Operation{history}
	if model.Partition != nil {
		parts = model.Partition(history)
	}
	single := model
	single.Partition = nil
	for _, part := range parts {
		res, info := porcupine.CheckOperationsVerbose(single, part, checkTimeout)
		if res != porcupine.Illegal {
			continue
		}
		path := filepath.Join(dir, name+".html")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return verdict{}, err
		}
		if err := porcupine.VisualizePath(single, info, path); err != nil {
			return verdict{}, fmt.Errorf("visualize: %w", err)
		}
		return verdict{vis: path, bad: partName(part) + ": " + stuckAt(single, part, info)}, nil
	}
	return verdict{}, fmt.Errorf("the history is not linearizable but no partition of it alone fails")
}

func partName(part []porcupine.Operation) string {
	if len(part) == 0 {
		return "(empty)"
	}
	if in, ok := part[0].Input.(mapIn); ok {
		return "key " + in.key
	}
	if _, ok := part[0].Input.(ackIn); ok {
		return "the acking group"
	}
	return "the ring"
}

// stuckAt says how far the longest linearization of a failed partition got
// and names the operation it could not take next: of those it left out,
// the one that returned first, which had to be placed before every
// operation called after its return.
func stuckAt(model porcupine.Model, part []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []porcupine.Operation
	for _, parts := range info.PartialLinearizationsOperations() {
		for _, l := range parts {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	type id struct {
		client int
		call   int64
	}
	in := map[id]bool{}
	for _, op := range longest {
		in[id{op.ClientId, op.Call}] = true
	}
	var next *porcupine.Operation
	for i := range part {
		if op := &part[i]; !in[id{op.ClientId, op.Call}] && (next == nil || op.Return < next.Return) {
			next = op
		}
	}
	if next == nil {
		return fmt.Sprintf("%d operations", len(part))
	}
	return fmt.Sprintf("%d of %d operations linearize, then none can explain client %d's %s",
		len(longest), len(part), next.ClientId, model.DescribeOperation(next.Input, next.Output))
}
