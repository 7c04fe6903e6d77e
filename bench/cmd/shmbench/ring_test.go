package main

import (
	"slices"
	"testing"
)

// Every ring peer runs: one left out of the run order would be reported
// with no rounds.
func TestRingRunOrderHasEveryPeer(t *testing.T) {
	a, b := slices.Clone(ringPeers), slices.Clone(ringRunOrder)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Fatalf("ringRunOrder %q is not an order of ringPeers %q", ringRunOrder, ringPeers)
	}
}

// The batcher hands on full batches, and the rest on flush, each record
// a copy (the producer reuses its buffer).
func TestBatcher(t *testing.T) {
	var got [][]byte
	bt := newBatcher(false, func(ps [][]byte) error {
		for _, p := range ps {
			got = append(got, slices.Clone(p))
		}
		if len(ps) != ringBatch && len(got) < ringBatch+1 {
			t.Errorf("a batch of %d before the flush", len(ps))
		}
		return nil
	})
	p := make([]byte, ringPayload)
	for i := range ringBatch + 1 {
		p[0] = byte(i)
		if err := bt.send(p); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != ringBatch {
		t.Fatalf("%d records handed on before the flush, want %d", len(got), ringBatch)
	}
	if err := bt.flush(); err != nil {
		t.Fatal(err)
	}
	if len(got) != ringBatch+1 {
		t.Fatalf("%d records after the flush, want %d", len(got), ringBatch+1)
	}
	for i, p := range got {
		if p[0] != byte(i) {
			t.Fatalf("record %d holds %d", i, p[0])
		}
	}
}
