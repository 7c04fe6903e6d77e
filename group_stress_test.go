package shmarena

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Six members of one group claim runs (Claim of 0, 1, 3, 64 and 100) while
// a producer laps them, bound to a topic or not: no record goes to two
// members, none is torn or capped past its length, no Claim returns more
// than asked, and the group's counts add up to how far it moved.
func TestGroupClaimStress(t *testing.T) {
	for _, slots := range []int{64, 128, 8192} {
		for _, topic := range []string{"", "a"} {
			a, _ := openTestArena(t, 8<<20)
			r, err := a.Ring("stress"+topic, WithSlots(slots), WithSlotSize(64))
			require.NoError(t, err)
			var opts []ReaderOption
			if topic != "" {
				opts = append(opts, WithTopic(topic))
			}
			g0, err := r.Group("g", opts...)
			require.NoError(t, err)
			start := g0.Position()
			N := raceScaled(200000)
			var seen sync.Map
			var got, dups, bad, over atomic.Int64
			var done atomic.Bool
			var wg sync.WaitGroup
			for w := 0; w < 6; w++ {
				g, err := r.Group("g", opts...) // separate handles, like members
				require.NoError(t, err)
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for {
						fin := done.Load()
						max := []int{0, 1, 3, 64, 100}[w%5]
						recs := g.Claim(max)
						if max > 0 && len(recs) > max {
							over.Add(1)
						}
						for _, rec := range recs {
							if _, dup := seen.LoadOrStore(rec.Seq, true); dup {
								dups.Add(1)
							}
							if len(rec.Payload) != 16 || cap(rec.Payload) != 16 ||
								binary.LittleEndian.Uint64(rec.Payload) != rec.Seq ||
								binary.LittleEndian.Uint64(rec.Payload[8:]) != ^rec.Seq ||
								(topic != "" && rec.Topic != topic) {
								bad.Add(1)
							}
							got.Add(1)
						}
						if fin && len(recs) == 0 {
							return
						}
						if len(recs) == 0 {
							runtime.Gosched()
						}
					}
				}(w)
			}
			buf := make([]byte, 16)
			for i := 0; i < N; i++ {
				seq := r.Head()
				binary.LittleEndian.PutUint64(buf, seq)
				binary.LittleEndian.PutUint64(buf[8:], ^seq)
				tp := "a"
				if i%3 == 0 {
					tp = "b"
				}
				s, err := r.Publish(tp, buf)
				require.NoError(t, err)
				require.Equal(t, seq, s)
			}
			done.Store(true)
			wg.Wait()
			st := g0.Stats()
			t.Logf("slots=%d topic=%q %+v got=%d dups=%d bad=%d over=%d", slots, topic, st, got.Load(), dups.Load(), bad.Load(), over.Load())
			assert.Zero(t, dups.Load(), "records claimed twice")
			assert.Zero(t, bad.Load(), "torn or mis-capped payloads")
			assert.Zero(t, over.Load(), "Claims past their max")
			assert.Equal(t, uint64(got.Load()), st.Delivered)
			assert.Equal(t, st.Delivered, st.Mine)
			assert.Equal(t, st.Position-start, st.Delivered+st.Lapped+st.Skipped+st.Abandoned, "counts add up to the distance moved")
		}
	}
}
