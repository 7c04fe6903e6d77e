//go:build !shmarena_broken

package shmarena

// brokenCompareAndSwap reports broken false: only a build with the
// shmarena_broken tag (lincheck_broken.go) replaces CompareAndSwap with
// one that is not atomic, so that lincheck can show its checker catches
// it. A function, not a variable holding one: a call through a variable
// makes CompareAndSwap's arguments escape, an allocation per call for a
// caller whose slices live on its stack.
func brokenCompareAndSwap(*Map, string, []byte, []byte) (swapped bool, err error, broken bool) {
	return false, nil, false
}
