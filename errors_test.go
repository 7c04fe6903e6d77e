package shmarena

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxErrLen bounds the message of an error that quotes a huge input.
const maxErrLen = 300

// requireShortErr checks that err wraps want, stays short although it
// quotes a huge input, and still says what was wrong (contains each of
// says) and how long the input was.
func requireShortErr(t *testing.T, err, want error, inputLen int, says ...string) {
	t.Helper()
	require.ErrorIs(t, err, want)
	msg := err.Error()
	assert.Less(t, len(msg), maxErrLen, "error message is %d bytes: %.200s…", len(msg), msg)
	for _, s := range says {
		assert.True(t, strings.Contains(msg, s), "%q missing from %.300s", s, msg)
	}
	assert.Equal(t, 1, strings.Count(msg, "shmarena: "), "%.300s", msg)
	assert.True(t, strings.Contains(msg, fmt.Sprintf("%d bytes", inputLen)),
		"the message says how long the input was: %.300s", msg)
	t.Logf("%.300s", msg)
}

// Errors quote bad input briefly: a huge name, topic or key makes an error
// of a few hundred bytes that still names the mistake.
func TestErrorsQuoteHugeInputBriefly(t *testing.T) {
	huge := strings.Repeat("a", 1<<20)
	a, _ := tempArena(t, 8<<20)

	_, err := a.Map(huge)
	requireShortErr(t, err, ErrInvalid, len(huge), "region name is 1048576 bytes")
	_, err = a.Map(huge, WithSlots(-1))
	requireShortErr(t, err, ErrInvalid, len(huge), "slots")
	_, err = OpenTypedMap[int](a, huge)
	requireShortErr(t, err, ErrInvalid, len(huge), "region name")
	_, err = a.Ring(huge)
	requireShortErr(t, err, ErrInvalid, len(huge), "region name")
	_, err = a.Ring(huge, WithStripes(2))
	requireShortErr(t, err, ErrInvalid, len(huge), "map options")
	_, err = OpenMemfd(huge)
	requireShortErr(t, err, ErrInvalid, len(huge), "WithSize is required")

	r, err := a.Ring("r", WithSlots(8), WithSlotSize(64))
	require.NoError(t, err)
	_, err = r.Group(huge)
	requireShortErr(t, err, ErrInvalid, len(huge), "name must be 1 to 64 bytes")
	_, err = r.Group("g", WithTopic(huge))
	requireShortErr(t, err, ErrInvalid, len(huge), "topic is 1048576 bytes")

	// The longest key a slot can hold, holding a value that is no counter.
	m, err := a.Map("big", WithSlots(4), WithSlotSize(96<<10))
	require.NoError(t, err)
	key := strings.Repeat("k", maxKeyLen)
	require.NoError(t, m.Store(key, []byte("text")))
	_, err = m.Add(key, 1)
	requireShortErr(t, err, ErrNotCounter, len(key), "value is not a counter")

	tm, err := OpenTypedMap[int](a, "bigtyped", WithSlots(4), WithSlotSize(96<<10))
	require.NoError(t, err)
	require.NoError(t, tm.Bytes().Store(key, []byte{0xc1})) // never a msgpack value
	_, _, err = tm.Load(key)
	requireShortErr(t, err, ErrCorrupt, len(key))
}
func TestQuote(t *testing.T) {
	assert.Equal(t, `"short"`, quote("short"))
	assert.Equal(t, `"a\x00b"`, quote("a\x00b"))
	s := strings.Repeat("a", quoteMax)
	assert.Equal(t, `"`+s+`"`, quote(s), "up to quoteMax bytes are quoted whole")
	assert.Equal(t, `"`+s+`…" (65 bytes)`, quote(s+"b"))
	// A cut never splits a rune: the é straddling the limit goes whole.
	u := strings.Repeat("a", quoteMax-1) + "é" + "zz"
	assert.Equal(t, `"`+strings.Repeat("a", quoteMax-1)+`…" (67 bytes)`, quote(u))
}
