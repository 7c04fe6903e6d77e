//go:build shmarena_broken

package shmarena

// This file breaks a guarantee on purpose. It is built only with the tag
// shmarena_broken, by lincheck's TestBrokenBuildIsCaught, to prove that the
// linearizability checker catches a broken map: a checker that has never
// caught anything proves nothing. Never ship a build with this tag.

// brokenCompareAndSwap replaces CompareAndSwap in this build.
func brokenCompareAndSwap(m *Map, key string, old, new []byte) (swapped bool, err error, broken bool) {
	swapped, err = compareOutsideTheLock(m, key, old, new)
	return swapped, err, true
}

// compareOutsideTheLock is CompareAndSwap as it is often written by
// mistake: it compares with a lock-free read and then stores, taking the
// stripe lock only for the store, so a write that lands between the two
// is overwritten by a swap that should have failed.
func compareOutsideTheLock(m *Map, key string, old, new []byte) (bool, error) {
	cur, ok := m.Load(key)
	if !ok || string(cur) != string(old) {
		return false, nil
	}
	return true, m.Store(key, new, WithKeepTTL())
}
