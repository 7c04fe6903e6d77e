package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/require"
)

// stats --watch on an arena whose file is removed meanwhile says so on
// every screen from then on.
func TestWatchReportsRemovedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "arena")
	a, err := shmarena.Open(path, shmarena.WithSize(1<<20))
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Map("m", shmarena.WithSlots(64))
	require.NoError(t, err)

	cmd := exec.Command(bin, "stats", path, "--watch", "50ms", "--count", "4")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	var seen strings.Builder
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "arena:") {
			break // the first screen: the file is still there
		}
	}
	require.NotContains(t, seen.String(), "REMOVED")
	require.NoError(t, os.Remove(path))
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
	}
	require.NoError(t, cmd.Wait())
	require.Contains(t, seen.String(), "REMOVED: the file was removed")
}
