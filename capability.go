package shmarena

import "strings"

// Capabilities are the guarantees a backend of KeyValue or Queue gives
// beyond the interface's contract, as a bit set. Code that depends on one
// asks Has; the conformance suite skips a check whose capability is missing,
// never by the backend's name. The idea is Watermill's Features
// (ThreeDotsLabs/watermill message/pubsub.go).
type Capabilities uint64

const (
	// CapLockFreeReads: Load, Counter and TTL take no lock and make no
	// round trip, so a reader never waits for a writer (shared memory).
	CapLockFreeReads Capabilities = 1 << iota
	// CapProcessLiveness: a queue consumer that dies is noticed at once
	// (the kernel says so), and its leases are redelivered at the next
	// Claim without waiting for them to run out. Without it, a dead
	// consumer's records wait for the lease (Redis XAUTOCLAIM min-idle).
	CapProcessLiveness
	// CapAtomicClear: Clear is one atomic step for each key: no key
	// stored before Clear began survives it. Redis Cluster visits its
	// masters one after another (SCAN + UNLINK), so it lacks this.
	CapAtomicClear
	// CapReplication: the data is copied to other hosts (Redis replicas,
	// Cluster); shared memory lives and dies with one host.
	CapReplication
	// CapMultiHost: processes on several hosts share the data.
	CapMultiHost
	// CapCounterWraps: Add wraps around on int64 overflow, where Redis
	// INCRBY refuses with an error.
	CapCounterWraps
	// CapLongLeases: Nack's delay and Extend's duration may exceed the
	// group's lease. Redis Streams measure a lease as idle time, so there
	// they are capped at the lease.
	CapLongLeases
	// CapWaitWakes: Group.Wait sleeps until a publish wakes it. Without
	// it, Wait polls.
	CapWaitWakes
)

var capNames = [...]string{
	"lock-free-reads", "process-liveness", "atomic-clear", "replication",
	"multi-host", "counter-wraps", "long-leases", "wait-wakes",
}

// Has reports whether every capability in want is in c.
func (c Capabilities) Has(want Capabilities) bool { return c&want == want }

// String lists the capabilities by name, separated by '|'.
func (c Capabilities) String() string {
	var names []string
	for i, n := range capNames {
		if c&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, "|")
}
