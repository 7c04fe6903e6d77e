package shmarena

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	// ring-recoverer publishes to the crash ring, whose publish lock a dead
	// producer holds, and parks at crash point SHMARENA_POINT inside the
	// repair until the parent kills it.
	childRoles["ring-recoverer"] = func() error {
		a, err := Open(os.Getenv("SHMARENA_PATH"))
		if err != nil {
			return err
		}
		r, err := a.Ring("crash", WithSlots(16), WithSlotSize(64))
		if err != nil {
			return err
		}
		point := os.Getenv("SHMARENA_POINT")
		parkAt(point)
		_, err = r.Publish("late", []byte("after the hole"))
		return fmt.Errorf("publish returned (%v) without reaching crash point %s", err, point)
	}
}

// A recoverer killed at any point of a hole's repair leaves a state the
// next recoverer completes to the same result: the hole is marked and
// counted exactly once, and published + abandoned == head - 1. The hole is
// the ring's first record or follows a committed one.
func TestCrashMidRepair(t *testing.T) {
	for _, point := range []string{"hole-prepared", "hole-counted", "hole-marked"} {
		for before := 0; before <= 1; before++ {
			t.Run(fmt.Sprintf("%s/after-%d", point, before), func(t *testing.T) {
				a, path := openTestArena(t, 1<<20)
				r, err := a.Ring("crash", WithSlots(16), WithSlotSize(64))
				require.NoError(t, err)
				c := r.Cursor()
				var want []uint64
				for i := 0; i < before; i++ {
					seq, err := r.Publish("ok", []byte("early"))
					require.NoError(t, err)
					want = append(want, seq)
				}
				hole := uint64(before + 1)

				crashPublisher(t, path) // dies holding the lock with record hole half-written
				killParked(t, child(t, "ring-recoverer", "SHMARENA_PATH="+path, "SHMARENA_POINT="+point), point)

				// The half-repaired ring is no corruption to an attacher.
				b, err := Open(path)
				require.NoError(t, err, "attach after a recoverer died at %s", point)
				require.NoError(t, b.Close())

				seq, err := r.Publish("ok", []byte("late")) // takes the lock over and repairs again
				require.NoError(t, err)
				require.Equal(t, hole+1, seq)
				want = append(want, seq)
				st := r.Stats()
				assert.Equal(t, uint64(1), st.Abandoned, "the hole is counted once")
				assert.Equal(t, uint64(before+1), st.Published)
				assert.Equal(t, r.Head()-1, st.Published+st.Abandoned)
				var got []uint64
				for _, rec := range c.Read(0) {
					got = append(got, rec.Seq)
				}
				assert.Equal(t, want, got)
				assert.Equal(t, uint64(1), c.Stats().Abandoned)
			})
		}
	}
}
