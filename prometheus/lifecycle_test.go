package prometheus

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// A scrape says when the arena's file was removed or truncated: an alert
// can fire on it.
func TestCollectorReportsRemovedAndTruncatedFile(t *testing.T) {
	w, ro, _, _, _ := live(t)
	c := NewCollector(ro, WithArenaLabel(""))
	const metrics = `
# HELP shmarena_file_removed 1 when the arena's file was removed, or its path names another file now: processes still attached share no data with those that open the path (Stats.Removed).
# TYPE shmarena_file_removed gauge
shmarena_file_removed %s
# HELP shmarena_file_truncated 1 when another process shrank the arena's file: its regions are gone (Stats.Truncated).
# TYPE shmarena_file_truncated gauge
shmarena_file_truncated %s
`
	expect := func(removed, truncated string) {
		t.Helper()
		require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(strings.Replace(strings.Replace(metrics, "%s", removed, 1), "%s", truncated, 1)),
			"shmarena_file_removed", "shmarena_file_truncated"))
	}
	expect("0", "0")
	require.NoError(t, os.Remove(w.Path()))
	expect("1", "0")
	require.NoError(t, w.File().Truncate(16384), "shrink the file under the arena")
	expect("1", "1")
}
