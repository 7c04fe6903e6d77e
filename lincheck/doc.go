// Package lincheck checks that shmarena's Map and Ring are linearizable
// across processes, crashes included, the way etcd's robustness tests
// check etcd: worker processes (this test binary, re-executed, some in PID
// namespaces of their own) run random operations on a few shared keys, a
// ring with an at-most-once group (Publish, PublishBatch of one to three
// records, Claim), and a ring with an acking group
// (PublishWait, Claim of several, Ack, Nack with a delay, Extend, leases
// that run out or whose holder is killed, dead letters; the model knows
// each lease's holder, delivery count and when it ends), logging when
// each was invoked and when it returned by
// CLOCK_MONOTONIC, with its inputs and outputs; a supervisor SIGKILLs
// workers at random moments and starts them again; and porcupine
// (github.com/anishathalye/porcupine) decides whether some order of the
// operations, each taking effect at one instant inside its interval,
// explains every result. An operation whose worker died has no response
// and may or may not have taken effect.
//
// It is a module of its own so that the core keeps its dependencies.
// go test runs a short check (under a minute: four rounds with kills, and
// two builds with a guarantee broken on purpose that the checker must
// catch: tag shmarena_broken, a CompareAndSwap that compares outside the
// lock, and tag shmarena_broken_ack, an Ack that ignores who holds the
// lease);
// go test . -args -long runs for minutes (-round, -rounds and -kills set
// the shape). A failure writes porcupine's HTML visualization of the
// offending history, and keeps the round's logs, under $LINCHECK_OUT or a
// new directory in the system's temporary directory, and names both.
package lincheck
