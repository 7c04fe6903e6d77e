package ratelimit

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv names the arena a child process of the multi-process test
// hammers; TestMain runs the child instead of the tests when it is set.
const childEnv = "RATELIMIT_TEST_CHILD_ARENA"

// childPathEnv is "KeyValue" to make the child's limiter take the
// interface path instead of calling the Map directly.
const childPathEnv = "RATELIMIT_TEST_CHILD_PATH"

// exactLimit refills one event a day: during the test no refill lands, so
// exactly Burst events may pass, whoever asks.
var exactLimit = Limit{Rate: 1, Burst: 2000, Period: 24 * time.Hour}

const childAttempts = 1000

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runChild(path))
	}
	os.Exit(m.Run())
}

// runChild makes childAttempts decisions on one key and prints the
// Remaining of each allowed one.
func runChild(path string) int {
	a, err := shmarena.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer a.Close()
	m, err := a.Map("rate", shmarena.WithSlots(4096), shmarena.WithSlotSize(64))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var store shmarena.KeyValue = shmarena.NewKeyValue(m)
	if os.Getenv(childPathEnv) == "KeyValue" {
		store = kvOnly{store}
	}
	l := NewLimiter(store)
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for range childAttempts {
		res, err := l.Allow(context.Background(), "hot", exactLimit)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if res.Allowed == 1 {
			fmt.Fprintln(w, res.Remaining)
		}
	}
	return 0
}

// Four processes race for one key's burst: exactly Burst decisions pass,
// and each Remaining from Burst-1 down to 0 is handed out exactly once
// (a lost or doubled compare-and-swap would repeat one or skip one).
func TestLimiterExactAcrossProcesses(t *testing.T) {
	for _, via := range []string{"map", "KeyValue"} {
		t.Run(via, func(t *testing.T) { exactAcrossProcesses(t, via) })
	}
}

func exactAcrossProcesses(t *testing.T, via string) {
	_, path := testStore(t)
	const procs = 4
	var outs [procs]bytes.Buffer
	var cmds [procs]*exec.Cmd
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+path, childPathEnv+"="+via)
		cmd.Stdout, cmd.Stderr = &outs[i], os.Stderr
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	seen := make(map[int]int)
	total := 0
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d", i)
		sc := bufio.NewScanner(&outs[i])
		for sc.Scan() {
			n, err := strconv.Atoi(sc.Text())
			require.NoError(t, err)
			seen[n]++
			total++
		}
	}
	assert.Equal(t, exactLimit.Burst, total, "allowed decisions")
	for r := range exactLimit.Burst {
		assert.Equal(t, 1, seen[r], "remaining %d handed out", r)
	}
}
