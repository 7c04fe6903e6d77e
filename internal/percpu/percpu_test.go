package percpu

import (
	"runtime"
	"testing"
)

func TestPinIsInRange(t *testing.T) {
	id := Pin()
	Unpin()
	if id < 0 || id >= runtime.GOMAXPROCS(0) {
		t.Fatalf("P id %d outside [0, %d)", id, runtime.GOMAXPROCS(0))
	}
}
