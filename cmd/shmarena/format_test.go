package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A row without a rate (a map's capacity) kept the rows around it in one
// column: tabwriter ends a column at a line with fewer cells, and `stats
// --watch` printed the used row's rate right after its value.
func TestTableKeepsColumnsAcrossEmptyCells(t *testing.T) {
	var out strings.Builder
	tb := newTable(&out)
	tb.row("  used", "780 (38.1% full)", "-13.0/s")
	tb.row("  capacity", 2048, "")
	tb.row("  bytes used", "926416 (88.3% of the value space)", "26369.3/s")
	tb.flush()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	assert.Len(t, lines, 3)
	assert.Equal(t, strings.Index(lines[0], "-13.0/s"), strings.Index(lines[2], "26369.3/s"), out.String())
	for _, l := range lines {
		assert.Equal(t, strings.TrimRight(l, " "), l, "no padding at a line's end")
	}
}
