package shmarena

// DropGroup: what a group made in a dropped group's entry inherits.

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mine is kept per arena handle and group entry, not per group: a group
// made in the entry a dropped group left (any name) starts with the
// dropped group's Mine, though this process claimed nothing from it.
func TestMineStartsAtZeroAfterDropGroup(t *testing.T) {
	a, _ := openTestArena(t, 1<<20)
	r := smallRing(t, a)
	old, err := r.Group("old")
	require.NoError(t, err)
	publishN(t, r, "t", 3)
	require.Len(t, old.Claim(0), 3)
	require.NoError(t, r.DropGroup("old"))
	fresh, err := r.Group("fresh")
	require.NoError(t, err)
	assert.Zero(t, fresh.Stats().Mine, "this process claimed nothing from the new group")
}
