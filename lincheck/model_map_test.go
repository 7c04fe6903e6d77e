package lincheck

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"strconv"
)

// The sequential specification of one key of a Map, for porcupine. A key
// is (present, bytes, counter): a counter's bytes are its value as 8 bytes
// little-endian, which is what Load returns for it and what CompareAndSwap
// and CompareAndDelete compare with.
type keyState struct {
	present bool
	counter bool
	val     string
}

var absent = keyState{}

// What a worker asked of a map (porcupine's Input).
type mapIn struct {
	op    string // opLoad, opStore, ...
	key   string // map name, "/", key: the partition
	val   string // Store, LoadOrStore, Swap: the value; CompareAndSwap: new
	old   string // CompareAndSwap, CompareAndDelete
	delta int64  // Add
}

// What it got back (porcupine's Output). unknown: the worker died before
// the operation returned, so it may or may not have taken effect. busy: a
// read that reported the key absent while the map's Busy count moved, so
// it may have given up on a slot being written rather than found the key
// absent (the README's documented exception): it says nothing about the
// key.
type mapOut struct {
	unknown bool
	busy    bool
	ok      bool   // Load, Counter: found; Delete, CompareAndSwap, CompareAndDelete: done; LoadOrStore, LoadAndDelete, Swap: loaded
	val     string // Load, LoadOrStore, LoadAndDelete, Swap
	n       int64  // Counter, Add
	err     string // "", errNotCounter, or another error's text
}

const (
	opLoad          = "Load"
	opCounter       = "Counter"
	opStore         = "Store"
	opDelete        = "Delete"
	opLoadOrStore   = "LoadOrStore"
	opLoadAndDelete = "LoadAndDelete"
	opSwap          = "Swap"
	opCAS           = "CompareAndSwap"
	opCAD           = "CompareAndDelete"
	opAdd           = "Add"

	errNotCounter = "ErrNotCounter"
)

func le64(n int64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	return string(b[:])
}

func counterOf(s keyState) int64 { return int64(binary.LittleEndian.Uint64([]byte(s.val))) }

// apply runs in on s as the README and the methods' documentation say,
// and returns the output a correct map gives and the state after.
func apply(s keyState, in mapIn) (mapOut, keyState) {
	switch in.op {
	case opLoad:
		return mapOut{ok: s.present, val: s.val}, s
	case opCounter:
		if s.present && s.counter {
			return mapOut{ok: true, n: counterOf(s)}, s
		}
		return mapOut{}, s
	case opStore:
		return mapOut{}, keyState{present: true, val: in.val}
	case opDelete:
		return mapOut{ok: s.present}, absent
	case opLoadOrStore:
		if s.present {
			return mapOut{ok: true, val: s.val}, s
		}
		return mapOut{val: in.val}, keyState{present: true, val: in.val}
	case opLoadAndDelete:
		return mapOut{ok: s.present, val: s.val}, absent
	case opSwap:
		return mapOut{ok: s.present, val: s.val}, keyState{present: true, val: in.val}
	case opCAS:
		if s.present && s.val == in.old {
			return mapOut{ok: true}, keyState{present: true, val: in.val} // a counter swapped is no counter
		}
		return mapOut{}, s
	case opCAD:
		if s.present && s.val == in.old {
			return mapOut{ok: true}, absent
		}
		return mapOut{}, s
	case opAdd:
		switch {
		case !s.present:
			return mapOut{n: in.delta}, keyState{present: true, counter: true, val: le64(in.delta)}
		case !s.counter:
			return mapOut{err: errNotCounter}, s // changes nothing
		}
		n := counterOf(s) + in.delta
		return mapOut{n: n}, keyState{present: true, counter: true, val: le64(n)}
	}
	panic("lincheck: unknown map operation " + in.op)
}

// sameOut compares the fields of out that op returns.
func sameOut(op string, want, got mapOut) bool {
	switch op {
	case opLoad, opLoadAndDelete, opSwap, opLoadOrStore:
		return want.ok == got.ok && (!want.ok && op != opLoadOrStore || want.val == got.val) && got.err == ""
	case opCounter:
		return want.ok == got.ok && want.n == got.n
	case opStore:
		return got.err == ""
	case opDelete, opCAS, opCAD:
		return want.ok == got.ok && got.err == ""
	case opAdd:
		return want.err == got.err && (want.err != "" || want.n == got.n)
	}
	return false
}

// crashed returns the states an operation whose worker died may have left:
// none of its effect, all of it, and, where it begins a slot holding the
// key (an overwrite; a counter pinned for a compare), the key absent,
// which is how a recoverer leaves a slot its dead writer had begun
// ("never a mix of old and new"). Reads change nothing, so they never get
// here (readLog drops a read whose worker died).
func crashed(s keyState, in mapIn) []keyState {
	_, done := apply(s, in)
	out := []keyState{s, done}
	switch in.op {
	case opStore, opSwap:
		out = append(out, absent) // absent already when s was
	case opCAS, opCAD:
		if s.present && (s.counter || s.val == in.old) {
			out = append(out, absent)
		}
	}
	return out
}

// mapStep is the model's Step over a set of possible states (a key whose
// history holds a crashed write may be in more than one).
func mapStep(states []keyState, in mapIn, out mapOut) (bool, []keyState) {
	var next []keyState
	for _, s := range states {
		switch {
		case out.unknown:
			next = addStates(next, crashed(s, in)...)
		case out.busy:
			next = addStates(next, s)
		default:
			if want, after := apply(s, in); sameOut(in.op, want, out) {
				next = addStates(next, after)
			}
		}
	}
	return len(next) > 0, next
}

// addStates adds to set the states it lacks.
func addStates[S comparable](set []S, states ...S) []S {
	for _, s := range states {
		dup := false
		for _, have := range set {
			if have == s {
				dup = true
				break
			}
		}
		if !dup {
			set = append(set, s)
		}
	}
	return set
}

// sameSet reports whether a and b, each without duplicates, hold the same
// states.
func sameSet[S comparable](a, b []S) bool {
	if len(a) != len(b) {
		return false
	}
	for _, s := range a {
		found := false
		for _, t := range b {
			if s == t {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

var hashSeed = maphash.MakeSeed()

// hashSet is order-independent, so equal sets hash alike.
func hashSet[S comparable](set []S) uint64 {
	var h uint64
	for _, s := range set {
		h ^= maphash.Comparable(hashSeed, s)
	}
	return h
}

func describeKey(s keyState) string {
	switch {
	case !s.present:
		return "absent"
	case s.counter:
		return "counter " + strconv.FormatInt(counterOf(s), 10)
	}
	return showBytes(s.val)
}

// showBytes prints a value: as text when it is printable, else in hex.
func showBytes(v string) string {
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] > '~' {
			return fmt.Sprintf("0x%x", v)
		}
	}
	return strconv.Quote(v)
}

func describeMapOp(in mapIn, out mapOut) string {
	var call string
	switch in.op {
	case opStore, opLoadOrStore, opSwap:
		call = fmt.Sprintf("%s(%s, %s)", in.op, in.key, showBytes(in.val))
	case opCAS:
		call = fmt.Sprintf("%s(%s, %s, %s)", in.op, in.key, showBytes(in.old), showBytes(in.val))
	case opCAD:
		call = fmt.Sprintf("%s(%s, %s)", in.op, in.key, showBytes(in.old))
	case opAdd:
		call = fmt.Sprintf("%s(%s, %d)", in.op, in.key, in.delta)
	default:
		call = fmt.Sprintf("%s(%s)", in.op, in.key)
	}
	var res string
	switch {
	case out.unknown:
		res = "? (worker killed)"
	case out.busy:
		res = "absent, busy (says nothing)"
	case out.err != "":
		res = out.err
	case in.op == opStore:
		res = "ok"
	case in.op == opCounter:
		res = fmt.Sprintf("%d, %t", out.n, out.ok)
	case in.op == opAdd:
		res = strconv.FormatInt(out.n, 10)
	case in.op == opDelete || in.op == opCAS || in.op == opCAD:
		res = strconv.FormatBool(out.ok)
	default:
		res = fmt.Sprintf("%s, %t", showBytes(out.val), out.ok)
	}
	return call + " -> " + res
}
