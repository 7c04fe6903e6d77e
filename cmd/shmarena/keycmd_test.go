package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyArena makes an arena with a byte map "cache" (evicting) holding a key
// that is not UTF-8, and a typed map "users".
func keyArena(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "arena")
	a, err := shmarena.Open(path, shmarena.WithSize(1<<20))
	require.NoError(t, err)
	m, err := a.Map("cache", shmarena.WithSlots(64), shmarena.WithStripes(2), shmarena.WithEviction())
	require.NoError(t, err)
	require.NoError(t, m.Store("\xff\xfe", []byte("binary key")))
	_, err = shmarena.OpenTypedMap[struct{ Name string }](a, "users", shmarena.WithSlots(64))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	return path
}

// Golden output of the subcommands that read and write one key, with
// their exit status and stderr: set, get (--json, --base64), ttl, incr,
// del (with and without --json), keys --json.
func TestGoldenKeyCommands(t *testing.T) {
	path := keyArena(t)
	var out strings.Builder
	for _, c := range []struct {
		in   string
		args []string
	}{
		{"", []string{"set", path, "cache", "greeting", "hello"}},
		{"", []string{"set", path, "cache", "greeting", "hello", "--json"}},
		{"", []string{"get", path, "cache", "greeting"}},
		{"", []string{"get", path, "cache", "greeting", "--json"}},
		{"", []string{"ttl", path, "cache", "greeting"}},
		{"", []string{"ttl", path, "cache", "greeting", "--json"}},
		{"", []string{"ttl", path, "cache", "nope"}},
		{"", []string{"ttl", path, "cache", "nope", "--json"}},
		{"", []string{"set", path, "cache", "session", "ada", "--ttl", "0s"}},
		{"", []string{"set", path, "cache", "session", "ada", "--ttl", "-1m"}},
		{"", []string{"get", path, "cache", "session"}},
		{"", []string{"set", path, "users", "ada", "x"}},
		{"", []string{"incr", path, "cache", "hits"}},
		{"", []string{"incr", path, "cache", "hits", "41"}},
		{"", []string{"incr", path, "cache", "hits", "--json"}},
		{"", []string{"incr", path, "cache", "greeting"}},
		{"", []string{"keys", path, "cache", "--json", "--prefix", "\xff"}}, // one key: the walk's order depends on the file's hash seed
		{"", []string{"get", path, "cache", "//4=", "--base64"}},
		{"", []string{"get", path, "cache", "//4=", "--base64", "--json"}},
		{"", []string{"del", path, "cache", "nope"}},
		{"", []string{"del", path, "cache", "nope", "--json"}},
		{"", []string{"del", path, "cache", "//4=", "--base64"}},
		{"", []string{"del", path, "cache", "greeting", "--json"}},
	} {
		r := shm(t, c.in, c.args...)
		shown := append([]string{c.args[0], "FILE"}, c.args[2:]...)
		for i, a := range shown {
			if !utf8.ValidString(a) {
				shown[i] = strconv.Quote(a)
			}
		}
		fmt.Fprintf(&out, "$ shmarena %s\n[exit %d]\n%s", strings.Join(shown, " "), r.code, r.stdout)
		if r.stderr != "" {
			fmt.Fprintf(&out, "[stderr]\n%s", strings.ReplaceAll(r.stderr, path, "FILE"))
		}
		out.WriteString("\n")
	}
	golden := filepath.Join("testdata", "keys.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(out.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), out.String())
}

// What depends on the clock or the build, checked by hand: set --ttl, get's
// TTL on stderr, ttl, info's eviction, locks --recover's question, version.
func TestKeyCommandsWithDeadlinesAndTheRest(t *testing.T) {
	path := keyArena(t)
	ok(t, "set", path, "cache", "session", "ada", "--ttl", "1h")
	r := shm(t, "", "get", path, "cache", "session")
	assert.Equal(t, "ada\n", r.stdout, "stdout is the value alone")
	assert.Regexp(t, `^\(ttl (59m5\ds|1h0m0s)\)\n$`, r.stderr)
	assert.Regexp(t, `^(59m5\ds|1h0m0s)\n$`, ok(t, "ttl", path, "cache", "session"))
	tj := decode[struct {
		Exists bool
		TTL    time.Duration
	}](t, ok(t, "ttl", path, "cache", "session", "--json"))
	assert.True(t, tj.Exists)
	assert.InDelta(t, time.Hour, tj.TTL, float64(time.Minute))

	assert.Contains(t, ok(t, "info", path), "64 slots x 256 B, 1 stripes, evicting")
	info := ok(t, "info", path, "--json")
	assert.Contains(t, info, `"evicting": true`)
	assert.Contains(t, info, `"slot_size": 256`)
	assert.NotContains(t, info, `"SlotSize"`)

	no := shm(t, "n\n", "locks", path, "--recover")
	assert.Equal(t, 1, no.code)
	assert.Contains(t, no.stderr, "take over 0 lock(s) of dead owners")
	assert.Contains(t, no.stderr, "not confirmed")
	assert.Contains(t, ok(t, "locks", path, "--recover", "--yes"), "took over 0 lock(s)")
	y := shm(t, "y\n", "locks", path, "--recover")
	assert.Equal(t, 0, y.code, y.stderr)

	assert.Regexp(t, `^shmarena \S+, file layout version \d+\n$`, ok(t, "version"))
	v := decode[struct {
		Version       string
		LayoutVersion int
	}](t, ok(t, "version", "--json"))
	assert.NotEmpty(t, v.Version)
	assert.Positive(t, v.LayoutVersion)
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"SlotSize": "slot_size", "TTL": "ttl", "BootID": "boot_id", "KeyBase64": "key_base64",
		"MaxInFlight": "max_in_flight", "LoadFailures": "load_failures", "OK": "ok", "Pid": "pid",
	} {
		assert.Equal(t, want, snakeCase(in), in)
	}
}
