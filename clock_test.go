package shmarena

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// now, the deadline clock, reads the wall clock: between two time.Now
// readings, within a millisecond of slew, across its resyncs.
func TestNowIsTheWallClock(t *testing.T) {
	const slack = int64(time.Millisecond)
	end := time.Now().Add(3 * clockResync)
	for n := 0; n < 1000 || time.Now().Before(end); n++ {
		before := time.Now().UnixNano()
		got := now()
		after := time.Now().UnixNano()
		if !assert.True(t, got >= before-slack && got <= after+slack, "now() %d outside [%d, %d]", got, before, after) {
			return
		}
	}
}
