package lincheck

import (
	"fmt"
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The models on hand-made histories: each must accept what a correct map
// or ring may do and reject what it may not, or the checker's verdicts on
// recorded histories mean nothing.

const never = math.MaxInt64 // the response time of an operation whose worker died

func mop(client int, call, ret int64, in mapIn, out mapOut) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

func TestMapModel(t *testing.T) {
	const k = "m/k0"
	store := func(v string) mapIn { return mapIn{op: opStore, key: k, val: v} }
	load := mapIn{op: opLoad, key: k}
	add := func(d int64) mapIn { return mapIn{op: opAdd, key: k, delta: d} }
	cas := func(old, new string) mapIn { return mapIn{op: opCAS, key: k, old: old, val: new} }
	found := func(v string) mapOut { return mapOut{ok: true, val: v} }
	cases := []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"load sees the store before it", true, []porcupine.Operation{
			mop(0, 1, 2, store("a"), mapOut{}), mop(1, 3, 4, load, found("a"))}},
		{"load sees a value never stored", false, []porcupine.Operation{
			mop(0, 1, 2, store("a"), mapOut{}), mop(1, 3, 4, load, found("b"))}},
		{"load misses a store that returned before it", false, []porcupine.Operation{
			mop(0, 1, 2, store("a"), mapOut{}), mop(1, 3, 4, load, mapOut{})}},
		{"load concurrent with a store sees either", true, []porcupine.Operation{
			mop(0, 1, 4, store("a"), mapOut{}), mop(1, 2, 3, load, mapOut{}), mop(2, 2, 3, load, found("a"))}},
		{"a load sees the new value, a later one the old", false, []porcupine.Operation{
			mop(0, 1, 10, store("a"), mapOut{}), mop(1, 2, 3, load, found("a")), mop(2, 4, 5, load, mapOut{})}},
		{"a busy miss says nothing", true, []porcupine.Operation{
			mop(0, 1, 2, store("a"), mapOut{}), mop(1, 3, 4, load, mapOut{busy: true}), mop(1, 5, 6, load, found("a"))}},
		{"a counter loads as 8 bytes little-endian", true, []porcupine.Operation{
			mop(0, 1, 2, add(5), mapOut{n: 5}), mop(0, 3, 4, add(-2), mapOut{n: 3}), mop(1, 5, 6, load, found(le64(3))),
			mop(1, 7, 8, mapIn{op: opCounter, key: k}, mapOut{ok: true, n: 3})}},
		{"Add on a value is ErrNotCounter and changes nothing", true, []porcupine.Operation{
			mop(0, 1, 2, store(le64(3)), mapOut{}), mop(0, 3, 4, add(1), mapOut{err: errNotCounter}),
			mop(0, 5, 6, load, found(le64(3))), mop(0, 7, 8, mapIn{op: opCounter, key: k}, mapOut{})}},
		{"Add on a value that succeeds", false, []porcupine.Operation{
			mop(0, 1, 2, store(le64(3)), mapOut{}), mop(0, 3, 4, add(1), mapOut{n: 4})}},
		{"CompareAndSwap of a counter compares its bytes and ends it", true, []porcupine.Operation{
			mop(0, 1, 2, add(7), mapOut{n: 7}), mop(0, 3, 4, cas(le64(7), "x"), mapOut{ok: true}),
			mop(0, 5, 6, add(1), mapOut{err: errNotCounter})}},
		{"two CompareAndSwaps from one value both succeed", false, []porcupine.Operation{
			mop(0, 1, 2, store("a"), mapOut{}), mop(1, 3, 6, cas("a", "b"), mapOut{ok: true}),
			mop(2, 3, 6, cas("a", "c"), mapOut{ok: true})}},
		{"a killed Store may have taken effect", true, []porcupine.Operation{
			mop(0, 1, never, store("a"), mapOut{unknown: true}), mop(1, 3, 4, load, found("a")), mop(1, 5, 6, load, found("a"))}},
		{"a killed overwrite may leave the key absent", true, []porcupine.Operation{
			mop(0, 1, 2, store("a"), mapOut{}), mop(0, 3, never, store("b"), mapOut{unknown: true}), mop(1, 5, 6, load, mapOut{})}},
		{"a killed Store takes effect once", false, []porcupine.Operation{
			mop(0, 1, never, store("a"), mapOut{unknown: true}), mop(1, 3, 4, load, found("a")),
			mop(1, 5, 6, store("b"), mapOut{}), mop(1, 7, 8, load, found("a"))}},
		{"a killed Add never deletes", false, []porcupine.Operation{
			mop(0, 1, 2, add(1), mapOut{n: 1}), mop(0, 3, never, add(1), mapOut{unknown: true}), mop(1, 5, 6, load, mapOut{})}},
		{"LoadOrStore stores once", false, []porcupine.Operation{
			mop(0, 1, 4, mapIn{op: opLoadOrStore, key: k, val: "a"}, mapOut{val: "a"}),
			mop(1, 1, 4, mapIn{op: opLoadOrStore, key: k, val: "b"}, mapOut{val: "b"})}},
		{"Swap and LoadAndDelete return what was there", true, []porcupine.Operation{
			mop(0, 1, 2, mapIn{op: opSwap, key: k, val: "a"}, mapOut{}),
			mop(0, 3, 4, mapIn{op: opSwap, key: k, val: "b"}, found("a")),
			mop(0, 5, 6, mapIn{op: opLoadAndDelete, key: k}, found("b")),
			mop(0, 7, 8, mapIn{op: opDelete, key: k}, mapOut{})}},
		{"CompareAndDelete of a changed value", false, []porcupine.Operation{
			mop(0, 1, 2, store("a"), mapOut{}), mop(0, 3, 4, store("b"), mapOut{}),
			mop(0, 5, 6, mapIn{op: opCAD, key: k, old: "a"}, mapOut{ok: true})}},
		{"an unexpected error is a failure", false, []porcupine.Operation{
			mop(0, 1, 2, store("a"), mapOut{err: "lock was taken over by another process"})}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.ok, porcupine.CheckOperations(mapModel, c.ops))
		})
	}
}

func TestMapModelPartitionsByKey(t *testing.T) {
	a := mapIn{op: opStore, key: "m/k0", val: "a"}
	b := mapIn{op: opLoad, key: "m/k1"}
	ops := []porcupine.Operation{mop(0, 1, 2, a, mapOut{}), mop(1, 3, 4, b, mapOut{})}
	require.Len(t, mapModel.Partition(ops), 2)
	assert.True(t, porcupine.CheckOperations(mapModel, ops), "a store to k0 says nothing about k1")
}

func TestRingModel(t *testing.T) {
	pub := func(c int, call, ret int64, p string, seq uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: ringIn{publish: true, payload: p}, Output: ringOut{seq: seq}}
	}
	deadPub := func(c int, call int64, p string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Call: call, Return: never, Input: ringIn{publish: true, payload: p}, Output: ringOut{unknown: true}}
	}
	claim := func(c int, call, ret int64, seq uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: ringIn{}, Output: ringOut{seq: seq}}
	}
	deadClaim := func(c int, call int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Call: call, Return: never, Input: ringIn{}, Output: ringOut{unknown: true}}
	}
	cases := []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"publish then claim", true, []porcupine.Operation{pub(0, 1, 2, "a", 1), pub(0, 3, 4, "b", 2), claim(1, 5, 6, 1), claim(1, 7, 8, 2), claim(1, 9, 10, 0)}},
		{"sequence numbers start at 1 and go up by one", false, []porcupine.Operation{pub(0, 1, 2, "a", 1), pub(0, 3, 4, "b", 3)}},
		{"a record claimed twice", false, []porcupine.Operation{pub(0, 1, 2, "a", 1), claim(1, 3, 4, 1), claim(2, 5, 6, 1)}},
		{"a record claimed before it was published", false, []porcupine.Operation{claim(1, 1, 2, 1), pub(0, 3, 4, "a", 1)}},
		{"a claim concurrent with the publish", true, []porcupine.Operation{claim(1, 1, 4, 1), pub(0, 2, 3, "a", 1)}},
		{"claims out of publish order", false, []porcupine.Operation{pub(0, 1, 2, "a", 1), pub(0, 3, 4, "b", 2), claim(1, 5, 6, 2)}},
		{"an empty claim with a record waiting", false, []porcupine.Operation{pub(0, 1, 2, "a", 1), claim(1, 3, 4, 0)}},
		{"a killed publish leaves a hole or a record", true, []porcupine.Operation{deadPub(0, 1, "a"), pub(1, 3, 4, "b", 2), claim(1, 5, 6, 2), claim(1, 7, 8, 0)}},
		{"a killed publish's record may be delivered", true, []porcupine.Operation{deadPub(0, 1, "a"), pub(1, 3, 4, "b", 2), claim(1, 5, 6, 1), claim(1, 7, 8, 2)}},
		{"a killed publish takes one sequence at most", false, []porcupine.Operation{deadPub(0, 1, "a"), pub(1, 3, 4, "b", 3)}},
		{"a killed claim may take the record", true, []porcupine.Operation{pub(0, 1, 2, "a", 1), deadClaim(1, 3), claim(2, 5, 6, 0)}},
		{"a killed claim takes one record at most", false, []porcupine.Operation{pub(0, 1, 2, "a", 1), pub(0, 3, 4, "b", 2), deadClaim(1, 5), claim(2, 7, 8, 0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.ok, porcupine.CheckOperations(ringModel, c.ops))
		})
	}
}

func TestCheckPayloads(t *testing.T) {
	pub := func(call, ret int64, p string, seq uint64, dead bool) porcupine.Operation {
		return porcupine.Operation{Call: call, Return: ret, Input: ringIn{publish: true, payload: p}, Output: ringOut{seq: seq, unknown: dead}}
	}
	claim := func(call, ret int64, seq uint64, p string) porcupine.Operation {
		return porcupine.Operation{Call: call, Return: ret, Input: ringIn{}, Output: ringOut{seq: seq, payload: p}}
	}
	assert.Empty(t, checkPayloads([]porcupine.Operation{pub(1, 2, "a", 1, false), pub(1, never, "b", 0, true), claim(3, 4, 1, "a"), claim(3, 4, 2, "b")}))
	assert.Len(t, checkPayloads([]porcupine.Operation{pub(1, 2, "a", 1, false), claim(3, 4, 1, "z")}), 1, "a payload nobody published")
	assert.Len(t, checkPayloads([]porcupine.Operation{pub(1, 2, "a", 1, false), pub(3, 4, "b", 2, false), claim(5, 6, 1, "b")}), 1, "the wrong sequence")
	assert.Len(t, checkPayloads([]porcupine.Operation{pub(5, 6, "a", 1, false), claim(1, 2, 1, "a")}), 1, "claimed before published")
	assert.Len(t, checkPayloads([]porcupine.Operation{pub(1, 2, "a", 1, false), pub(1, never, "b", 0, true), claim(3, 4, 1, "b")}), 1, "a dead publish's record at a sequence another got")
	assert.Len(t, checkPayloads([]porcupine.Operation{pub(1, 2, "a", 1, false), claim(3, 4, 1, "a"), claim(3, 4, 1, "a")}), 1, "claimed twice")

	batch := func(call, ret int64, seq uint64, dead bool, ps ...string) porcupine.Operation {
		return porcupine.Operation{Call: call, Return: ret, Input: ringIn{publish: true, n: len(ps), batch: ps}, Output: ringOut{seq: seq, unknown: dead}}
	}
	assert.Empty(t, checkPayloads([]porcupine.Operation{batch(1, 2, 1, false, "a", "b"), pub(3, 4, "c", 3, false), claim(5, 6, 1, "a"), claim(5, 6, 2, "b"), claim(5, 6, 3, "c")}))
	assert.Len(t, checkPayloads([]porcupine.Operation{batch(1, 2, 1, false, "a", "b"), claim(5, 6, 3, "b")}), 1, "a batch's record off its place")
	assert.Len(t, checkPayloads([]porcupine.Operation{batch(1, 2, 1, false, "a", "b"), pub(1, 2, "c", 2, false)}), 1, "a sequence of a batch returned to a Publish")
}

func TestRingModelBatches(t *testing.T) {
	batch := func(c int, call, ret int64, seq uint64, n int) porcupine.Operation {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = fmt.Sprintf("c%d.%d.%d", c, call, i)
		}
		out := ringOut{seq: seq}
		if ret == never {
			out = ringOut{unknown: true}
		}
		return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: ringIn{publish: true, n: n, batch: ps}, Output: out}
	}
	pub := func(c int, call, ret int64, seq uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: ringIn{publish: true, payload: "p", n: 1}, Output: ringOut{seq: seq}}
	}
	claim := func(c int, call, ret int64, seq uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: ringIn{}, Output: ringOut{seq: seq}}
	}
	cases := []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"a batch takes consecutive sequences", true, []porcupine.Operation{batch(0, 1, 2, 1, 3), pub(0, 3, 4, 4), claim(1, 5, 6, 1), claim(1, 7, 8, 2), claim(1, 9, 10, 3), claim(1, 11, 12, 4), claim(1, 13, 14, 0)}},
		{"nothing between a batch's records", false, []porcupine.Operation{batch(0, 1, 2, 1, 3), pub(1, 1, 2, 2)}},
		{"a batch's records all come at once", false, []porcupine.Operation{batch(0, 1, 10, 1, 2), claim(1, 2, 3, 1), claim(1, 4, 5, 0)}},
		{"a killed batch published all", true, []porcupine.Operation{batch(0, 1, never, 0, 3), pub(1, 3, 4, 4), claim(1, 5, 6, 1), claim(1, 7, 8, 2), claim(1, 9, 10, 3), claim(1, 11, 12, 4)}},
		{"a killed batch leaves one hole", true, []porcupine.Operation{batch(0, 1, never, 0, 3), pub(1, 3, 4, 2), claim(1, 5, 6, 2), claim(1, 7, 8, 0)}},
		{"a killed batch leaves nothing", true, []porcupine.Operation{batch(0, 1, never, 0, 3), pub(1, 3, 4, 1), claim(1, 5, 6, 1), claim(1, 7, 8, 0)}},
		{"a killed batch leaves a hole for each record it began", true, []porcupine.Operation{batch(0, 1, never, 0, 3), pub(1, 3, 4, 3), claim(1, 5, 6, 3), claim(1, 7, 8, 0)}},
		{"a killed batch publishes no part of itself", false, []porcupine.Operation{batch(0, 1, never, 0, 3), pub(1, 3, 4, 3), claim(1, 5, 6, 1)}},
		{"a killed batch leaves no more holes than records", false, []porcupine.Operation{batch(0, 1, never, 0, 3), pub(1, 3, 4, 5)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.ok, porcupine.CheckOperations(ringModel, c.ops))
		})
	}
}
