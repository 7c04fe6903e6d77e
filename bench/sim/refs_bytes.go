package sim

import (
	"github.com/dgraph-io/ristretto/v2"
	"github.com/maypok86/otter/v2"
)

// Ristretto is github.com/dgraph-io/ristretto/v2 (TinyLFU admission,
// sampled LFU eviction) as a SizedCache: a hit is a Get that finds the
// key; on a miss the key is Set with cost = its entry's bytes, MaxCost =
// the budget, NumCounters 10x the entries the budget holds at the mix's
// mean entry (ristretto's advice), IgnoreInternalCost (so that the budget
// counts entries' bytes alone, as for every other cache here), and
// BufferItems 64. Ristretto applies Sets asynchronously and may drop them
// under contention; after each Set the driver calls Wait, which returns
// once the Set buffer is applied, so that a single-threaded replay
// measures ristretto's policy, not its buffering (without Wait, a Set
// still in the buffer when its key is next requested counts a miss).
// Gets record accesses in lossy striped buffers, as in production. The
// value stored is the entry's size: the references hold no payload.
type Ristretto struct {
	c *ristretto.Cache[uint32, int32]
}

// NewRistretto returns an empty Ristretto of budget bytes sized for
// entries of meanEntry bytes on average. Close releases it.
func NewRistretto(budget int64, meanEntry int) (*Ristretto, error) {
	c, err := ristretto.NewCache(&ristretto.Config[uint32, int32]{
		NumCounters:        max(1000, 10*budget/int64(max(1, meanEntry))),
		MaxCost:            budget,
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, err
	}
	return &Ristretto{c: c}, nil
}

// Access implements SizedCache; it never fails.
func (r *Ristretto) Access(k uint32, _, entry int) (bool, error) {
	if _, ok := r.c.Get(k); ok {
		return true, nil
	}
	if r.c.Set(k, int32(entry), int64(entry)) {
		r.c.Wait()
	}
	return false, nil
}

// Close stops ristretto's goroutines.
func (r *Ristretto) Close() { r.c.Close() }

// Otter is github.com/maypok86/otter/v2 (W-TinyLFU with an adaptive
// window) as a SizedCache: a hit is a GetIfPresent that finds the key; on
// a miss the key is Set; MaximumWeight = the budget, Weigher = the entry's
// bytes. Otter applies writes to its policy in batches that its Executor
// runs, by default on a new goroutine; here the Executor runs them on the
// writing goroutine (Executor: func(fn func()) { fn() }), so that a
// single-threaded replay measures otter's policy with the budget held at
// every request, as Wait does for ristretto. The value stored is the
// entry's size: the references hold no payload.
type Otter struct {
	c *otter.Cache[uint32, int32]
}

// NewOtter returns an empty Otter of budget bytes.
func NewOtter(budget int64) (*Otter, error) {
	c, err := otter.New(&otter.Options[uint32, int32]{
		MaximumWeight: uint64(budget),
		Weigher:       func(_ uint32, v int32) uint32 { return uint32(v) },
		Executor:      func(fn func()) { fn() },
	})
	if err != nil {
		return nil, err
	}
	return &Otter{c: c}, nil
}

// Access implements SizedCache; it never fails.
func (o *Otter) Access(k uint32, _, entry int) (bool, error) {
	if _, ok := o.c.GetIfPresent(k); ok {
		return true, nil
	}
	o.c.Set(k, int32(entry))
	return false, nil
}

// Close stops otter's goroutines, if any.
func (o *Otter) Close() { o.c.StopAllGoroutines() }
