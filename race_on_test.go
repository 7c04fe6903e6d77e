//go:build race

package shmarena

// raceSlowdown scales the wall-clock bounds of the crash and wake-up
// tests: the race detector runs this code several times slower and, on a
// 2-core CI machine with 16 child processes, also starves the scheduler.
// The bounds the issues set hold for the plain build, which CI also runs.
const raceSlowdown = 5
