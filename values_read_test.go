package shmarena

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Stable keys with values in the value space, and stable counters with a
// deadline, in a dense segment whose churn keys are deleted and stored
// again (moving entries back) and whose churn values force compaction
// (moving records): a reader never misses a stable key nor reads a torn
// value.
func TestValuesReadNoFalseMissUnderChurn(t *testing.T) {
	for _, share := range []int{8 << 10, 64 << 10} {
		t.Run(fmt.Sprint(share), func(t *testing.T) {
			m := valueMap(t, WithSlots(1024), WithSlotSize(64), WithStripes(1), WithBytes(int64(share)))
			r := rand.New(rand.NewPCG(9, 9))
			var stable []string
			vals := map[string][]byte{}
			for i := range 200 {
				k := "stable" + strconv.Itoa(i)
				if i%4 == 0 {
					v := sealedValue(r, k, 60+r.IntN(share/200))
					require.NoError(t, m.Store(k, v))
					vals[k] = v
				} else if i%4 == 1 {
					_, err := m.Add(k, int64(i), WithTTL(time.Hour))
					require.NoError(t, err)
				} else {
					require.NoError(t, m.Store(k, []byte(k)))
				}
				stable = append(stable, k)
			}
			var churn []string
			for i := range 650 {
				k := "churn" + strconv.Itoa(i)
				require.NoError(t, m.Store(k, []byte(k)))
				churn = append(churn, k)
			}
			stop := churnUntilStopped(2, func(g, i int) {
				if g == 0 {
					deleteAndRestore(m, churn, i*7+g)
					return
				}
				rr := rand.New(rand.NewPCG(uint64(i), 3))
				k := "ext" + strconv.Itoa(i%20)
				if err := m.Store(k, sealedValue(rr, k, 60+rr.IntN(share/60))); err != nil {
					m.Delete(k)
				}
				if i%3 == 0 {
					m.Delete(k)
				}
			})
			var bad atomic.Value
			deadline := time.Now().Add(3 * time.Second)
			n := 0
			for time.Now().Before(deadline) && bad.Load() == nil {
				k := stable[n%len(stable)]
				n++
				v, ok := loadPatiently(m, k)
				if !ok {
					bad.Store("missed " + k)
					break
				}
				if w, ext := vals[k]; ext {
					if err := checkSealed(k, v); err != nil || string(v) != string(w) {
						bad.Store(fmt.Sprintf("%s torn: %v", k, err))
					}
				}
				if i, _ := strconv.Atoi(k[6:]); i%4 == 1 {
					c, ok := m.Counter(k)
					if !ok || c != int64(i) {
						bad.Store(fmt.Sprintf("counter %s: %d %v", k, c, ok))
					}
					if ttl, ok := m.TTL(k); !ok || ttl < 50*time.Minute {
						bad.Store(fmt.Sprintf("counter %s: ttl %v %v", k, ttl, ok))
					}
				}
			}
			stop()
			require.Nil(t, bad.Load())
			t.Logf("%d reads, moved %d", n, m.Stats().BytesMoved)
			checkMapAtRest(t, m, nil)
		})
	}
}
