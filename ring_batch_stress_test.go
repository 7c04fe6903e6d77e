package shmarena

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Producers publish batches of 1 to 8 records with PublishBatchWait into a
// small ring that an acking group and a back-pressured group hold full,
// while their members ack out of order and lag: every record reaches
// each group exactly once, whole, with the sequence the producer was
// told; no protected group loses a record to a batch (Lapped stays 0).
func TestPublishBatchWaitUnderAckingMembers(t *testing.T) {
	a, _ := openTestArena(t, 4<<20)
	r, err := a.Ring("bstress", WithSlots(16), WithSlotSize(64), WithMaxInFlight(16))
	require.NoError(t, err)
	acked, err := r.Group("acked", WithAck(time.Minute))
	require.NoError(t, err)
	bp, err := r.Group("bp", WithBackpressure())
	require.NoError(t, err)

	const producers = 2
	perProducer := raceScaled(3000)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var published atomic.Int64
	var firsts sync.Map // a batch's first id -> the sequence PublishBatchWait returned
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			for n := 0; n < perProducer; {
				k := min(1+rng.IntN(8), perProducer-n)
				ps := make([][]byte, k)
				for i := range ps { // the record's id, then its batch's first id
					ps[i] = make([]byte, 16)
					binary.LittleEndian.PutUint64(ps[i], uint64(p)<<32|uint64(n+i))
					binary.LittleEndian.PutUint64(ps[i][8:], uint64(p)<<32|uint64(n))
				}
				first, err := r.PublishBatchWait(ctx, "t", ps)
				if err != nil {
					t.Error(err)
					return
				}
				firsts.Store(uint64(p)<<32|uint64(n), first)
				n += k
				published.Add(int64(k))
			}
		}()
	}

	total := producers * perProducer
	type seen struct {
		sync.Mutex
		m     map[uint64]uint64 // producer<<32|index -> sequence
		batch map[uint64]uint64 // producer<<32|index -> its batch's first id
	}
	consume := func(claim func() []Record, settle func([]Record)) (*seen, *atomic.Int64) {
		s := &seen{m: map[uint64]uint64{}, batch: map[uint64]uint64{}}
		var dups atomic.Int64
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 2))
				for ctx.Err() == nil {
					s.Lock()
					n := len(s.m)
					s.Unlock()
					if n >= total {
						return
					}
					recs := claim()
					if len(recs) == 0 {
						time.Sleep(50 * time.Microsecond)
						continue
					}
					s.Lock()
					for _, rec := range recs {
						id := binary.LittleEndian.Uint64(rec.Payload)
						if _, dup := s.m[id]; dup {
							dups.Add(1)
						}
						s.m[id] = rec.Seq
						s.batch[id] = binary.LittleEndian.Uint64(rec.Payload[8:])
					}
					s.Unlock()
					if rng.IntN(4) == 0 {
						time.Sleep(100 * time.Microsecond) // lag, holding the records
					}
					rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
					settle(recs)
				}
			}()
		}
		t.Cleanup(wg.Wait)
		return s, &dups
	}
	ackedSeen, ackedDups := consume(func() []Record { return acked.Claim(3) }, func(recs []Record) {
		for _, rec := range recs {
			require.NoError(t, acked.Ack(rec))
		}
	})
	bpSeen, bpDups := consume(func() []Record { return bp.Claim(5) }, func([]Record) {})

	pwg.Wait()
	require.Equal(t, int64(total), published.Load())
	deadline := time.Now().Add(hangBound)
	for time.Now().Before(deadline) {
		ackedSeen.Lock()
		bpSeen.Lock()
		done := len(ackedSeen.m) >= total && len(bpSeen.m) >= total
		bpSeen.Unlock()
		ackedSeen.Unlock()
		if done {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for name, s := range map[string]*seen{"acked": ackedSeen, "bp": bpSeen} {
		s.Lock()
		assert.Len(t, s.m, total, "%s: every record delivered", name)
		wrong := 0
		for id, seq := range s.m {
			f, ok := firsts.Load(s.batch[id])
			if !ok || seq != f.(uint64)+(id-s.batch[id]) {
				wrong++
			}
		}
		assert.Zero(t, wrong, "%s: records off the sequence their batch was given", name)
		s.Unlock()
	}
	assert.Zero(t, ackedDups.Load())
	assert.Zero(t, bpDups.Load())
	assert.Zero(t, acked.Stats().Lapped, "%+v", acked.Stats())
	assert.Zero(t, bp.Stats().Lapped, "%+v", bp.Stats())
	assert.Zero(t, r.Stats().Abandoned)
	assert.Positive(t, r.Stats().Waited, "the groups held the ring full at times")
}
