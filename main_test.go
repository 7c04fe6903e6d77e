package shmarena

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Multi-process tests re-execute this test binary: TestMain runs the role
// named by SHMARENA_ROLE instead of the tests, and the child's exit status
// is its verdict (0 = every check passed; messages go to stderr).
var childRoles = map[string]func() error{}

func TestMain(m *testing.M) {
	if role := os.Getenv("SHMARENA_ROLE"); role != "" {
		fn, ok := childRoles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
			os.Exit(3)
		}
		if err := fn(); err != nil {
			fmt.Fprintf(os.Stderr, "role %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child returns a command that runs role in a new process of this binary.
func child(t testing.TB, role string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"SHMARENA_ROLE=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// runChildren runs n copies of role at once (SHMARENA_ID=0..n-1) and
// requires every one to exit 0.
func runChildren(t testing.TB, role string, n int, env ...string) {
	t.Helper()
	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = child(t, role, append(env, "SHMARENA_ID="+strconv.Itoa(i))...)
		require.NoError(t, cmds[i].Start())
	}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), "child %d of role %s", i, role)
	}
}

func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	return n
}

// tempArena creates an arena of size bytes in a fresh temporary directory.
func tempArena(t testing.TB, size int64) (*Arena, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "arena")
	a, err := Open(path, WithSize(size))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return a, path
}
