package shmarena

import (
	"encoding/binary"
	"os"
	"testing"
)

// fixedSeed makes every arena the test creates hash with seed 1, so that
// which keys collide is the same in every run (fuzz targets replay their
// inputs); it is undone when the test ends.
func fixedSeed(t testing.TB) {
	s := uint64(1)
	seedForTest = &s
	t.Cleanup(func() { seedForTest = nil })
}

// patch64 replaces the little-endian word at off in the file at path and
// returns the old value.
func patch64(path string, off int, v uint64) (uint64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var w [8]byte
	if _, err := f.ReadAt(w[:], int64(off)); err != nil {
		return 0, err
	}
	old := binary.LittleEndian.Uint64(w[:])
	binary.LittleEndian.PutUint64(w[:], v)
	_, err = f.WriteAt(w[:], int64(off))
	return old, err
}
