package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// bin is the command, built once by TestMain (without the race detector,
// so each run starts fast whatever the test binary is).
var bin string

// The tests run the command as real processes: the binary TestMain
// builds. This test binary, re-run with SHMARENA_CMD_WRITER=path, is a
// process writing to the arena.
func TestMain(m *testing.M) {
	if path := os.Getenv("SHMARENA_CMD_WRITER"); path != "" {
		if err := writer(path, os.Getenv("SHMARENA_CMD_ID")); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "shmarena-cmd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "shmarena")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the command:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// writerWarmup is how many rounds a writer does before it says "ready":
// once each writer has said it, ring "events" holds at least this many of
// its records, however slowly a busy machine runs it afterwards.
const writerWarmup = 3

// writer stores keys, counts and publishes as fast as it can until killed
// (or for 60 s), touching only map "live" and ring "events".
func writer(path, id string) error {
	a, err := shmarena.Open(path)
	if err != nil {
		return err
	}
	m, err := a.Map("live", shmarena.WithSlots(256))
	if err != nil {
		return err
	}
	r, err := a.Ring("events", shmarena.WithSlots(64), shmarena.WithSlotSize(128), shmarena.WithMaxInFlight(8))
	if err != nil {
		return err
	}
	for i, end := 0, time.Now().Add(60*time.Second); time.Now().Before(end); i++ {
		if i == writerWarmup {
			fmt.Println("ready")
		}
		if err := m.Store(fmt.Sprintf("w%s-%d", id, i%100), []byte(strconv.Itoa(i))); err != nil {
			return err
		}
		if _, err := m.Add("hits", 1); err != nil {
			return err
		}
		if _, err := r.Publish("live", []byte(fmt.Sprintf("%s:%d", id, i))); err != nil {
			return err
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

type user struct {
	Name string
	Age  int
	Tags []string
}

// makeArena builds the arena the tests inspect: map "cache" with text,
// binary, counter and TTL entries, typed map "users", map "live", ring
// "events" (which the writers fill) with an at-most-once group "audit",
// and ring "jobs" with an acking group "workers" holding a lease.
func makeArena(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "arena")
	a, err := shmarena.Open(path, shmarena.WithSize(8<<20))
	require.NoError(t, err)
	defer a.Close()
	m, err := a.Map("cache", shmarena.WithSlots(128), shmarena.WithStripes(4))
	require.NoError(t, err)
	require.NoError(t, m.Store("k:text", []byte("hello world")))
	require.NoError(t, m.Store("k:bin", []byte{0, 1, 2, 0xff, 'x'}))
	require.NoError(t, m.Store("k:ttl", []byte("soon"), shmarena.WithTTL(time.Hour)))
	require.NoError(t, m.Store("k:empty", nil))
	require.NoError(t, m.Store("bad\xffkey", []byte("v")))
	_, err = m.Add("k:count", 42)
	require.NoError(t, err)
	_, err = m.Add("k:countttl", -3, shmarena.WithTTL(time.Hour))
	require.NoError(t, err)
	users, err := shmarena.OpenTypedMap[user](a, "users", shmarena.WithSlots(16))
	require.NoError(t, err)
	require.NoError(t, users.Store("ada", user{Name: "Ada", Age: 36, Tags: []string{"math"}}))
	_, err = a.Map("live", shmarena.WithSlots(256))
	require.NoError(t, err)
	r, err := a.Ring("events", shmarena.WithSlots(64), shmarena.WithSlotSize(128), shmarena.WithMaxInFlight(8))
	require.NoError(t, err)
	_, err = r.Group("audit")
	require.NoError(t, err)
	jobs, err := a.Ring("jobs", shmarena.WithSlots(16), shmarena.WithSlotSize(64), shmarena.WithMaxInFlight(8))
	require.NoError(t, err)
	g, err := jobs.Group("workers", shmarena.WithAck(time.Hour), shmarena.WithTopic("job"))
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := jobs.Publish("job", []byte(fmt.Sprintf("job %d", i)))
		require.NoError(t, err)
	}
	_, err = jobs.Publish("bin", []byte{0, 0xfe})
	require.NoError(t, err)
	require.Len(t, g.Claim(1), 1)
	return path
}

// startWriters starts n writer processes on path and waits until each
// has attached and done writerWarmup rounds; they are SIGKILLed when the
// test ends.
func startWriters(t *testing.T, path string, n int) []*exec.Cmd {
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "SHMARENA_CMD_WRITER="+path, "SHMARENA_CMD_ID="+strconv.Itoa(i))
		c.Stderr = os.Stderr
		out, err := c.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, c.Start())
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		cmds = append(cmds, c)
	}
	return cmds
}

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// shm runs the command with args (stdin from in) and returns what it did.
func shm(t *testing.T, in string, args ...string) result {
	t.Helper()
	c := exec.Command(bin, args...)
	c.Stdin = strings.NewReader(in)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code, out.String(), errb.String()}
}

// ok runs the command, requires exit 0 and returns stdout.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := shm(t, "", args...)
	require.Equal(t, 0, r.code, "shmarena %v: %s%s", args, r.stdout, r.stderr)
	return r.stdout
}

// decode reads the command's JSON into T, a library type or one with Go
// field names: snake_case names lose their underscores (encoding/json
// matches the rest case-insensitively) and NAME_ms milliseconds become
// NAME, a time.Duration in nanoseconds.
func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var tree any
	require.NoError(t, json.Unmarshal([]byte(s), &tree), s)
	b, err := json.Marshal(unstyle(tree))
	require.NoError(t, err)
	var v T
	require.NoError(t, json.Unmarshal(b, &v), s)
	return v
}

func unstyle(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			if base, ok := strings.CutSuffix(k, "_ms"); ok {
				if n, ok := val.(float64); ok {
					k, val = base, n*1e6
				}
			}
			out[strings.ReplaceAll(k, "_", "")] = unstyle(val)
		}
		return out
	case []any:
		for i := range x {
			x[i] = unstyle(x[i])
		}
	}
	return v
}

func hashFile(t *testing.T, path string) [32]byte {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

// Every subcommand against an arena two other processes are writing.
func TestCommandsOnLiveArena(t *testing.T) {
	path := makeArena(t)
	writers := startWriters(t, path, 2)

	info := decode[shmarena.ArenaInfo](t, ok(t, "info", path, "--json"))
	var names []string
	for _, r := range info.Regions {
		if r.Kind != shmarena.KindSchema { // users' value type
			names = append(names, r.Name)
		}
	}
	assert.Equal(t, []string{"cache", "users", "live", "events", "jobs"}, names)
	assert.Equal(t, shmarena.KindSchema, info.Regions[1].Kind, "a typed map's record is carved before it")
	assert.True(t, info.Regions[2].Typed)
	alive := map[int]bool{}
	for _, p := range info.Processes {
		alive[p.Pid] = alive[p.Pid] || p.Alive
	}
	for _, w := range writers {
		assert.True(t, alive[w.Process.Pid], "writer %d listed alive", w.Process.Pid)
	}
	assert.Contains(t, ok(t, "info", path), "REGIONS"[0:0]+"regions (6 of 64)")

	st := decode[shmarena.ArenaStats](t, ok(t, "stats", path, "--json"))
	require.Len(t, st.Regions, 6)
	assert.Equal(t, 2, st.Processes)
	ev := st.Regions[4]
	require.NotNil(t, ev.Ring)
	assert.GreaterOrEqual(t, ev.Ring.Published, uint64(2*writerWarmup), "the writers publish")
	require.Len(t, ev.Groups, 1)
	assert.Equal(t, "audit", ev.Groups[0].Name)
	jg := st.Regions[5].Groups
	require.Len(t, jg, 1)
	assert.Equal(t, "workers", jg[0].Name)
	assert.Equal(t, 1, jg[0].Pending)
	assert.Positive(t, jg[0].OldestPending)
	one := decode[shmarena.ArenaStats](t, ok(t, "stats", path, "events", "--json"))
	require.Len(t, one.Regions, 1)
	r := shm(t, "", "stats", path, "nope")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "it has: cache, schema:")

	// A busy machine can leave both writers unscheduled for the 100 ms
	// between two screens, and the rate is then rightly 0: watch again
	// until one interval saw a publish (a hang bound, not a speed check).
	rateShown := regexp.MustCompile(`head\s+\d+\s+[1-9][0-9.]*/s`)
	var screen string
	for end := time.Now().Add(30 * time.Second); ; {
		screen = ok(t, "stats", path, "--watch", "100ms", "--count", "2")
		require.Equal(t, 2, strings.Count(screen, "\x1b[2J"), "two screens")
		if rateShown.MatchString(screen) || time.Now().After(end) {
			break
		}
	}
	assert.Regexp(t, rateShown, screen, "the second screen shows the publish rate")
	lines := strings.Split(strings.TrimSpace(ok(t, "stats", path, "live", "--watch", "100ms", "--count", "2", "--json")), "\n}\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[1], `"live.used"`)

	keys := decode[struct{ Keys []struct{ Key string } }](t, ok(t, "keys", path, "cache", "--prefix", "k:", "--json"))
	var listed []string
	for _, k := range keys.Keys {
		listed = append(listed, k.Key)
	}
	sort.Strings(listed)
	assert.Equal(t, []string{"k:bin", "k:count", "k:countttl", "k:empty", "k:text", "k:ttl"}, listed)
	lim := shm(t, "", "keys", path, "cache", "--limit", "2")
	assert.Equal(t, 0, lim.code)
	assert.Len(t, strings.Split(strings.TrimSpace(lim.stdout), "\n"), 2)
	assert.Contains(t, lim.stderr, "--limit 0")

	assert.Equal(t, "hello world\n", ok(t, "get", path, "cache", "k:text"))
	assert.Equal(t, "42\n", ok(t, "get", path, "cache", "k:count"))
	assert.Contains(t, ok(t, "get", path, "cache", "k:bin"), "00000000  00 01 02 ff 78")
	assert.Equal(t, `{"Age":36,"Name":"Ada","Tags":["math"]}`+"\n", ok(t, "get", path, "users", "ada"))
	g := decode[struct {
		Value []byte
		TTL   time.Duration
	}](t, ok(t, "get", path, "cache", "k:ttl", "--json"))
	assert.Equal(t, "soon", string(g.Value))
	assert.InDelta(t, time.Hour, g.TTL, float64(time.Minute))
	miss := shm(t, "", "get", path, "cache", "nope")
	assert.Equal(t, 1, miss.code)
	assert.Contains(t, miss.stderr, `has no key "nope"`)
	missMap := shm(t, "", "get", path, "nomap", "k")
	assert.Equal(t, 1, missMap.code)
	assert.Contains(t, missMap.stderr, "no such region")

	recs := shm(t, "", "tail", path, "jobs", "--topic", "job", "-n", "2", "--json")
	require.Equal(t, 0, recs.code, recs.stderr)
	tl := strings.Split(strings.TrimSpace(recs.stdout), "\n")
	require.Len(t, tl, 2)
	assert.Equal(t, "job 2", *decode[tailRecord](t, tl[1]).Text)
	assert.Contains(t, ok(t, "tail", path, "jobs", "--topic", "bin"), `"\x00\xfe"`)
	tailFollow(t, path)

	chk := shm(t, "", "check", path) // the writers still write: a segment may go unjudged (3)
	assert.Contains(t, []int{0, 3}, chk.code, chk.stdout+chk.stderr)
	if chk.code == 3 {
		assert.Contains(t, chk.stdout, "nothing wrong in 6 regions checked, but")
		assert.Contains(t, chk.stdout, "not judged")
	} else {
		assert.Contains(t, chk.stdout, "ok: 6 regions checked")
	}
	locks := decode[struct{ Locks []shmarena.LockInfo }](t, ok(t, "locks", path, "--json"))
	for _, l := range locks.Locks {
		assert.True(t, l.Alive, "a live writer's lock: %+v", l)
	}

	// Writes: del, clear (asked, refused, then --yes), drop-group.
	assert.Contains(t, ok(t, "del", path, "cache", "k:text"), "deleted k:text")
	assert.Equal(t, 1, shm(t, "", "get", path, "cache", "k:text").code)
	no := shm(t, "n\n", "clear", path, "live")
	assert.Equal(t, 1, no.code)
	assert.Contains(t, no.stderr, "not confirmed")
	assert.NotZero(t, decode[shmarena.ArenaStats](t, ok(t, "stats", path, "live", "--json")).Regions[0].Map.Used)
	for _, w := range writers { // clear while they write would race their stores
		require.NoError(t, w.Process.Kill())
		_ = w.Wait()
	}
	assert.Contains(t, ok(t, "clear", path, "live", "--yes"), "0 now")
	dg := shm(t, "y\n", "drop-group", path, "events", "audit")
	require.Equal(t, 0, dg.code, dg.stderr)
	st = decode[shmarena.ArenaStats](t, ok(t, "stats", path, "events", "--json"))
	assert.Empty(t, st.Regions[0].Groups)
	assert.Equal(t, 1, shm(t, "", "drop-group", path, "events", "audit", "--yes").code)
	chk = shm(t, "", "check", path, "--json")
	assert.True(t, decode[struct{ OK bool }](t, chk.stdout).OK, chk.stdout)
}

// tail -f prints records published after it started, and exits 0 on
// SIGINT.
func tailFollow(t *testing.T, path string) {
	c := exec.Command(bin, "tail", path, "events", "-n", "0", "-f", "--topic", "live")
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	c.Stderr = os.Stderr
	require.NoError(t, c.Start())
	defer time.AfterFunc(20*time.Second, func() { _ = c.Process.Kill() }).Stop()
	rd := bufio.NewReader(out)
	for i := 0; i < 5; i++ {
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		assert.Regexp(t, `^\d+ live [01]:\d+\n$`, line)
	}
	require.NoError(t, c.Process.Signal(syscall.SIGINT))
	_, _ = io.Copy(io.Discard, rd)
	require.NoError(t, c.Wait())
}

// dump | load into a fresh arena reproduces every key, value, counter and
// TTL (within a second); a typed map's too.
func TestDumpLoadRoundTrip(t *testing.T) {
	src := makeArena(t)
	dst := filepath.Join(t.TempDir(), "fresh")
	a, err := shmarena.Open(dst, shmarena.WithSize(4<<20))
	require.NoError(t, err)
	_, err = a.Map("copy", shmarena.WithSlots(128))
	require.NoError(t, err)
	_, err = shmarena.OpenTypedMap[user](a, "users", shmarena.WithSlots(16))
	require.NoError(t, err)
	require.NoError(t, a.Close())

	// dump writes each TTL as what is left of it, load sets it from its
	// own clock: the copies' TTLs can differ by at most the time from the
	// dump to the last read below, however long a busy machine took.
	start := time.Now()
	for _, m := range [][2]string{{"cache", "copy"}, {"users", "users"}} {
		d := shm(t, "", "dump", src, m[0])
		require.Equal(t, 0, d.code, d.stderr)
		l := shm(t, d.stdout, "load", dst, m[1])
		require.Equal(t, 0, l.code, l.stderr)
	}
	want := entries(t, src, "cache")
	got := entries(t, dst, "copy")
	// ttl_ms is whole milliseconds, and each process reads the wall clock
	// for itself: 10 ms more covers both.
	ttlSlack := time.Since(start) + 10*time.Millisecond
	require.Len(t, got, 7)
	require.Equal(t, len(want), len(got))
	for k, w := range want {
		g, ok := got[k]
		require.True(t, ok, "key %q lost", k)
		assert.Equal(t, w.value, g.value, k)
		assert.Equal(t, w.counter, g.counter, k)
		assert.InDelta(t, float64(w.ttl), float64(g.ttl), float64(ttlSlack), k)
		assert.Equal(t, w.ttl == 0, g.ttl == 0, k)
	}
	b, err := shmarena.Open(dst, shmarena.ReadOnly())
	require.NoError(t, err)
	defer b.Close()
	users, err := shmarena.OpenTypedMap[user](b, "users", shmarena.WithSlots(16))
	require.NoError(t, err)
	u, ok, err := users.Load("ada")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, user{Name: "Ada", Age: 36, Tags: []string{"math"}}, u)

	bad := shm(t, "{\"key\":\"a\"}\nnot json\n", "load", dst, "copy")
	assert.Equal(t, 1, bad.code)
	assert.Contains(t, bad.stderr, "line 2")
	assert.Contains(t, bad.stderr, "1 entries stored before it")
}

func entries(t *testing.T, path, name string) map[string]entry {
	a, err := shmarena.Open(path, shmarena.ReadOnly())
	require.NoError(t, err)
	defer a.Close()
	m, err := a.LookupMap(name)
	require.NoError(t, err)
	out := map[string]entry{}
	for k := range m.Keys() {
		e, ok := read(m, k)
		require.True(t, ok)
		out[k] = e
	}
	return out
}

// The read-only commands never write a byte of the file.
func TestReadOnlyCommandsWriteNothing(t *testing.T) {
	path := makeArena(t)
	before := hashFile(t, path)
	for _, args := range [][]string{
		{"info", path}, {"info", path, "--json"}, {"stats", path}, {"stats", path, "--json"},
		{"stats", path, "--watch", "10ms", "--count", "2"}, {"keys", path, "cache"},
		{"get", path, "cache", "k:text"}, {"get", path, "users", "ada", "--json"}, {"dump", path, "cache"},
		{"tail", path, "jobs", "-n", "-1"}, {"tail", path, "events"}, {"check", path}, {"locks", path}, {"locks", path, "--json"},
	} {
		ok(t, args...)
		require.Equal(t, before, hashFile(t, path), "shmarena %v changed the file", args)
	}
}

// Golden output where it is deterministic: stats, check, keys and locks
// on a file nobody holds.
func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "arena")
	a, err := shmarena.Open(path, shmarena.WithSize(1<<20))
	require.NoError(t, err)
	m, err := a.Map("sessions", shmarena.WithSlots(64), shmarena.WithStripes(2))
	require.NoError(t, err)
	require.NoError(t, m.Store("s1", []byte("ada")))
	for _, k := range []string{"s1", "s1", "s1", "s2"} { // a hit ratio of 75%
		m.Load(k)
	}
	r, err := a.Ring("events", shmarena.WithSlots(16), shmarena.WithSlotSize(64), shmarena.WithMaxInFlight(0))
	require.NoError(t, err)
	g, err := r.Group("audit", shmarena.FromStart())
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := r.Publish("login", []byte("s1"))
		require.NoError(t, err)
	}
	g.Claim(2)
	require.NoError(t, a.Close())

	var out strings.Builder
	for _, args := range [][]string{{"stats", path}, {"check", path}, {"keys", path, "sessions"}, {"locks", path}, {"tail", path, "events"}} {
		fmt.Fprintf(&out, "$ shmarena %s\n%s\n", strings.Join(append([]string{args[0], "FILE"}, args[2:]...), " "), ok(t, args...))
	}
	golden := filepath.Join("testdata", "golden.txt")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(out.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), out.String())
}

// check answers 0 for a clean arena, 1 for damage (whatever else it could
// not judge) and 3 for "nothing wrong, but part not judged": a busy
// arena's segments whose writers never paused are no damage, and before
// they answered 1, as damage does.
func TestCheckStatus(t *testing.T) {
	assert.NoError(t, checkStatus(0, 0))
	assert.ErrorIs(t, checkStatus(2, 0), errUnjudged)
	assert.ErrorIs(t, checkStatus(2, 1), errNo)
	assert.ErrorIs(t, checkStatus(1, 1), errNo)
}

func TestUsage(t *testing.T) {
	r := shm(t, "")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "drop-group")
	r = shm(t, "", "get", "onlyone")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "want FILE MAP KEY")
	r = shm(t, "", "frobnicate")
	assert.Equal(t, 2, r.code)
	r = shm(t, "", "info", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "never creates")
}
