package main

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// valuesArena creates an arena whose map "pages" holds values of 10 B to
// 20 KiB in a value space, and whose typed map "docs" does too.
func valuesArena(t *testing.T, name string, fill bool) string {
	path := filepath.Join(t.TempDir(), name)
	a, err := shmarena.Open(path, shmarena.WithSize(16<<20))
	require.NoError(t, err)
	defer a.Close()
	m, err := a.Map("pages", shmarena.WithSlots(512), shmarena.WithSlotSize(128), shmarena.WithBytes(2<<20), shmarena.WithEviction())
	require.NoError(t, err)
	docs, err := shmarena.OpenTypedMap[user](a, "docs", shmarena.WithSlots(64), shmarena.WithBytes(256<<10))
	require.NoError(t, err)
	if fill {
		for i := range 200 {
			k := "p" + strconv.Itoa(i)
			require.NoError(t, m.Store(k, bytes.Repeat([]byte{byte(i)}, 10+i*100)))
		}
		for i := range 20 {
			require.NoError(t, docs.Store("d"+strconv.Itoa(i), user{Name: strings.Repeat("n", 1000*i), Age: i}))
		}
	}
	return path
}

// stats shows the value space, check validates it, and dump | load moves
// large values, typed ones included.
func TestCommandsOnValueSpace(t *testing.T) {
	src := valuesArena(t, "src", true)
	st := ok(t, "stats", src)
	assert.Contains(t, st, "bytes used")
	assert.Contains(t, st, "of the value space")
	assert.Contains(t, ok(t, "info", src), "2.0 MiB of values")
	js := decode[shmarena.ArenaStats](t, ok(t, "stats", src, "--json"))
	var used int64
	for _, r := range js.Regions {
		if r.Map != nil {
			used += r.Map.BytesUsed
		}
	}
	assert.Positive(t, used)
	assert.Contains(t, ok(t, "check", src), "nothing wrong")

	dst := valuesArena(t, "dst", false)
	for _, m := range []string{"pages", "docs"} {
		d := shm(t, "", "dump", src, m)
		require.Equal(t, 0, d.code, d.stderr)
		l := shm(t, d.stdout, "load", dst, m)
		require.Equal(t, 0, l.code, l.stderr)
		assert.Equal(t, entries(t, src, m), entries(t, dst, m), m)
	}
	assert.Contains(t, ok(t, "check", dst), "nothing wrong")
}
