//go:build !race

package shmarena

// raceSlowdown is 1 outside the race detector: see race_on_test.go.
const raceSlowdown = 1

// raceEnabled is false outside the race detector: see race_on_test.go.
const raceEnabled = false
