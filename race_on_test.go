//go:build race

package shmarena

// raceSlowdown scales the wall-clock bounds of the crash and wake-up
// tests: the race detector runs this code several times slower and, on a
// 2-core CI machine with 16 child processes, also starves the scheduler.
// The bounds the issues set hold for the plain build, which CI also runs.
const raceSlowdown = 5

// raceEnabled reports a race-detector build. Under it sync/atomic runs in
// the race runtime, where a memory fault (SIGBUS on a truncated file)
// cannot become a panic: the runtime throws instead.
const raceEnabled = true
