// Package conformance is one test suite for every backend of
// shmarena.KeyValue and shmarena.Queue: shared memory (SharedMemory, in
// this package), a Redis server and a Redis Cluster (module
// github.com/shmarena/shmarena/redis). A backend passes the suite when
// code written against the interfaces behaves the same on it; where a
// backend lacks a guarantee, the check is skipped by the Capabilities the
// backend declares, never by its name (the idea of Watermill's universal
// Pub/Sub tests).
//
// Concurrency checks run several clients at once through Backend.Run:
// processes for shared memory, connections of their own for Redis.
package conformance

import (
	"context"
	"testing"

	"github.com/shmarena/shmarena"
)

// A Backend makes fresh, empty stores for one test, and runs jobs as
// independent clients of the store it made last.
type Backend interface {
	// KeyValue returns an empty key-value store of the test's own.
	KeyValue(t *testing.T) shmarena.KeyValue
	// Queue returns an empty queue of the test's own that holds at most
	// capacity records no group has finished (0: the backend's default,
	// at least 4096).
	Queue(t *testing.T, capacity int) shmarena.Queue
	// Run runs jobs at once, each as a separate client (a process of its
	// own for shared memory) of the store KeyValue or Queue last
	// returned, and returns each job's output lines, in jobs' order. A
	// job that fails fails t.
	Run(t *testing.T, jobs ...Job) [][]string
}

// Run runs the whole suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("KeyValue", func(t *testing.T) { RunKeyValue(t, b) })
	t.Run("Queue", func(t *testing.T) { RunQueue(t, b) })
}

// ctxFor is a context that ends with the test.
func ctxFor(t *testing.T) context.Context { return t.Context() }

// skipUnless skips t when kv or q lacks want.
func skipUnless(t *testing.T, have, want shmarena.Capabilities) {
	t.Helper()
	if !have.Has(want) {
		t.Skipf("backend lacks capability %v (has %v)", want, have)
	}
}
