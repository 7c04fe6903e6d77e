// Package shmarena lets several processes on one host share data
// structures through one memory-mapped file, an arena:
//
//   - Map: a fixed-capacity hash map. Reads take no lock (every slot is a
//     seqlock); writes take one of a stripe of robust locks; a delete
//     moves the entries after it back, so deleted keys leave nothing
//     behind; entries may carry a wall-clock deadline (TTL, rules in
//     docs/ttl.md); a value may be an atomic 64-bit counter; WithEviction
//     makes it a cache, whose hits and misses Stats counts, and
//     LoadOrCompute computes a missing key once for every process on the
//     host. TypedMap stores Go values encoded with msgpack.
//   - Ring: a fixed ring of records. A Cursor reads every record (a
//     broadcast); a Group shares one position among its members, so each
//     record goes to one of them (a work queue), at most once by default,
//     at least once with WithAck (leases, Ack, Nack, Extend, dead
//     letters); producers wait for room with PublishWait rather than
//     overwrite what a protected group has not finished.
//
// It is for Go services that run as several worker processes (pre-forked
// HTTP servers, job runners) and want a shared cache, rate limiter or job
// queue without a network hop to Redis on localhost.
//
// # Processes and crashes
//
// Any number of processes open the same arena with Open (a path, usually
// under /dev/shm) or share one with no path through OpenMemfd and
// OpenFile. Every lock word records its owner: an entry of the file's
// process table and that entry's generation. A waiter that has waited a
// few milliseconds asks the kernel whether the owner is still attached; if
// not, it takes the lock over, repairs the one slot the owner was writing
// (it becomes absent, never a mix of old and new) and recounts. A process
// that dies loses at most the operation it was doing; one that is alive,
// however long it is stopped, loses nothing.
//
// # How liveness is proven
//
// Each attached handle takes a process-table entry by taking an
// open-file-description write lock (fcntl F_OFD_SETLK) on one of the
// entry's bytes of the arena file (past its end), on a file description of
// its own, and bumps the entry's generation. The kernel holds that lock
// exactly while the description is open, and releases it when the last
// process holding the description exits, however it exits. A handle is
// dead when its entry holds another generation (the entry was taken
// again, which needed the lock) or when F_OFD_GETLK finds no write lock on
// its byte; alive otherwise. Only a write lock counts: a process that may
// only read the file (another user, the arena made WithMode(0o644)) can
// read-lock bytes, but that never keeps a dead handle alive, and a new
// handle passes over a read-locked byte to another of the entry's. A
// reader that read-locks every byte no live handle holds does block new
// handles (OFD locks offer nothing it cannot lock): Open then fails with
// an error wrapping syscall.EAGAIN that says so, and recovery of the
// attached handles' locks goes on.
//
// A process that forks without exec after Open (rare in Go) shares its
// handles' file descriptions with the child, so a handle stays alive
// until both have exited or closed it: its locks and a group's leases are
// not taken over while the child lives. Processes and Locks then show the
// pid that opened the handle. Open arenas after forking, or exec. No pid and no /proc are involved, so the
// verdict is the same in every PID namespace, container and /proc view
// sharing the file on one host, and pid reuse and reboots need no special
// case. Releasing a lock and committing a ring record are compare-and-swaps
// from the owner's own value, so an owner that was ever judged dead finds
// out (ErrLockLost) instead of overwriting its recoverer's work.
//
// # Files
//
// Open never follows a symbolic link, never truncates or extends a file,
// reserves every block when it creates one (a full tmpfs is an error from
// Open, never a SIGBUS later), and validates every header, directory and
// region field before use. Data read from the file never makes a method
// panic: a corrupt field is ErrCorrupt, a miss, or a skipped entry.
//
// # Operating an arena
//
// Open(path, ReadOnly()) attaches a handle that reads and never writes
// (the file is mapped read-only), for inspectors and monitoring. Arena.Info
// describes the file, its regions and attached processes; Arena.Stats
// returns every region's counters in one JSON-ready value (for expvar);
// Ring.Groups every group's without joining; Arena.Check validates every
// region against its invariants; Arena.Locks lists held locks and
// Arena.RecoverLocks takes over dead owners'. The shmarena command
// (cmd/shmarena) does all this from a shell, and the module
// github.com/shmarena/shmarena/prometheus exports the counters to
// Prometheus.
//
// # Semantics borrowed from elsewhere
//
// Map's verbs and their meaning follow sync.Map (Load, Store, LoadOrStore,
// LoadAndDelete, Swap, CompareAndSwap, CompareAndDelete, All). Store
// replaces an entry's deadline as Redis SET does, WithKeepTTL keeps it as
// SET KEEPTTL does, and Add is Redis INCRBY on a raw 64-bit word. Groups
// deliver at most once by default, like a Redis Streams consumer group
// whose entries are acknowledged on read; WithAck groups follow Redis
// Streams' pending entries list and SQS's visibility timeout (a lease per
// claim, XACK / DeleteMessage as Ack, XCLAIM of an idle entry as the
// redelivery of an expired or orphaned lease, ChangeMessageVisibility as
// Extend, a redrive policy as WithMaxDeliveries and WithDeadLetter).
package shmarena
