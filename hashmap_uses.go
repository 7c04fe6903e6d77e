package shmarena

import (
	"runtime"
	"sync"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/shmarena/shmarena/internal/owner"
	"github.com/shmarena/shmarena/internal/percpu"
)

// This file: the map's use counts (hits, misses, loads, load failures).
//
// A count that every read bumped in one shared word would make each read
// write a cache line that every core and process also writes, which costs
// more than the read. So the counts are kept where only one writer is:
//
//   - in this process, one shard per P (the runtime's processor), written
//     only by the goroutine running on that P while it is pinned there,
//     with plain stores;
//   - in the file, one 32-byte line per process-table entry at the map's
//     tail, to which this process adds its shards' counts (64 at a time,
//     when it reads Stats, and when it closes).
//
// Stats sums the lines of every entry. A line is never reset: a handle
// that takes an entry adds to what the entry's earlier holders counted,
// so the totals of handles that closed or died stay in, and the sums
// never go back. A process killed loses what it had not yet added (under
// 64 per P and count); another process's counts show in Stats within 64
// of its uses per P, and exactly once it closes.

// The counts, as word indexes in a line.
const (
	useHits = iota
	useMisses
	useLoads
	useLoadFailures
	useKinds

	useLine       = 32 // written only when a process adds its shards: two may share a cache line
	useTableBytes = owner.Entries * useLine
	useFlushEvery = 64 // a shard adds its counts to the file every 64 of one kind
)

// useShardBytes is one P's counts in this process: 128 bytes, so that no
// two Ps' counts share a cache line whatever the buffer's alignment.
const useShardBytes = 128

// uses are one map's counts in this process: one per region and arena
// handle, shared by every Map value of the region (see Arena.usesOf).
type uses struct {
	mem   []byte
	line  int // this handle's line in the file; -1: counts nothing
	table int // the first line

	// shards holds one P's counts per useShardBytes, each written only
	// by the goroutine running on that P while pinned there: a plain
	// store (mem.Put64), no locked instruction.
	shards  []byte
	nshards int
	mu      sync.Mutex
	pub     []uint64 // per shard and kind, what flush has added to the file (under mu)
}

// noUses counts nothing: a read-only handle's, which holds no entry of the
// process table and writes nothing.
var noUses = &uses{line: -1}

// usesOf returns the counts of the map whose use table is at table.
func (a *Arena) usesOf(table int) *uses {
	if a.readOnly || a.own == nil || a.own.Index() < 0 {
		return noUses
	}
	a.usesMu.Lock()
	defer a.usesMu.Unlock()
	if u := a.usesBy[table]; u != nil {
		return u
	}
	if a.usesBy == nil {
		a.usesBy = map[int]*uses{}
	}
	n := runtime.GOMAXPROCS(0)
	u := &uses{mem: a.mem, table: table, line: table + a.own.Index()*useLine,
		shards: make([]byte, n*useShardBytes), nshards: n, pub: make([]uint64, n*useKinds)}
	a.usesBy[table] = u
	return u
}

// add counts one use of kind k. It writes no shared cache line: the shard
// of the P it runs on, and every 64th time the handle's own line.
func (u *uses) add(k int) {
	p := percpu.Pin()
	if p < u.nshards {
		// Only this P writes its shard, and the goroutine is pinned.
		c := mem.Inc64(u.shards, p*useShardBytes+8*k)
		percpu.Unpin()
		if c%useFlushEvery == 0 {
			u.flushShardOf(p)
		}
		return
	}
	percpu.Unpin()
	u.addUnsharded(k)
}

// flushShardOf adds shard p's counts to the file, unless a flush runs
// already. The caller must not be pinned: the flush writes the mapping,
// and a fault there (a file truncated under it) must reach the caller's
// fault guard as a panic, which the runtime refuses a pinned goroutine
// ("unexpected signal during runtime execution" ends the process). The
// shard is read as flush reads every shard: atomically, under mu, while
// its P may go on counting.
func (u *uses) flushShardOf(p int) {
	if u.mu.TryLock() {
		// Unlocked also when the flush faults: the fault unwinds to the
		// caller's guard, and Stats and Close, which take mu, would wait
		// for ever.
		defer u.mu.Unlock()
		u.flushShard(p)
	}
}

// addUnsharded counts a use of a P past the shards (GOMAXPROCS raised
// since the handle was made) straight into the file; a read-only
// handle's uses (no shards, no line) are not counted.
func (u *uses) addUnsharded(k int) {
	if u.line >= 0 {
		mem.Add64(u.mem, u.line+8*k, 1)
	}
}

// hit counts a read that found its key (true) or missed.
func (u *uses) hit(found bool) {
	k := useMisses
	if found {
		k = useHits
	}
	u.add(k)
}

// flush adds every shard's unflushed counts to the handle's line.
func (u *uses) flush() {
	if u.line < 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock() // also when the file faults (a truncated arena)
	for p := range u.nshards {
		u.flushShard(p)
	}
}

// flushShard adds shard p's unflushed counts to the line; the caller
// holds mu.
func (u *uses) flushShard(p int) {
	for k := range useKinds {
		c := mem.Load64(u.shards, p*useShardBytes+8*k)
		if d := c - u.pub[p*useKinds+k]; d != 0 {
			u.pub[p*useKinds+k] = c
			mem.Add64(u.mem, u.line+8*k, d)
		}
	}
}

// flushUses adds this handle's counts of every map to the file; Close
// calls it while the mapping is still the file's.
func (a *Arena) flushUses() {
	a.usesMu.Lock()
	defer a.usesMu.Unlock()
	for _, u := range a.usesBy {
		u.flush()
	}
}

// sumUses returns the counts of every process-table entry's line of the
// use table at table.
func sumUses(b []byte, table int) (c [useKinds]uint64) {
	for i := range owner.Entries {
		for k := range useKinds {
			c[k] += mem.Load64(b, table+i*useLine+8*k)
		}
	}
	return c
}
