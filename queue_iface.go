package shmarena

import (
	"context"
	"time"
)

// Queue is the work-queue interface that a Ring in shared memory and the
// Redis backend (Redis Streams consumer groups, module
// github.com/shmarena/shmarena/redis) both implement: producers publish
// records under topics, and the members of an at-least-once group share
// them, each record leased to one member until acked. See Ring and Group
// for the contract; differences between backends are Capabilities.
//
// Methods that can block or talk to a network take a context.Context;
// errors of a network backend wrap the client's error. Implementations are
// safe for concurrent use by goroutines.
type Queue interface {
	// Publish appends a record under topic and returns its sequence
	// number (increasing per topic). It refuses with an error wrapping
	// ErrRingFull when a group has not finished the oldest record the
	// queue must keep (the queue is bounded).
	Publish(ctx context.Context, topic string, payload []byte) (seq uint64, err error)
	// PublishWait publishes like Publish, but waits for room instead of
	// refusing, until ctx ends (then an error wrapping ErrRingFull and
	// ctx.Err()).
	PublishWait(ctx context.Context, topic string, payload []byte) (seq uint64, err error)
	// Group joins (creating if needed) the at-least-once consumer group
	// called name, bound to one topic with WithTopic. The group always
	// acks: WithAck sets the lease (default DefaultLease);
	// WithMaxDeliveries and WithDeadLetter give up on a record that keeps
	// failing; FromStart makes a new group start at the oldest record.
	Group(ctx context.Context, name string, opts ...ReaderOption) (QueueGroup, error)
	// DropGroup removes the group with its position and pending leases;
	// ErrNoGroup when there is none.
	DropGroup(ctx context.Context, name string) error
	// Capabilities says which guarantees beyond this contract hold.
	Capabilities() Capabilities
}

// QueueGroup is one member's handle on an at-least-once consumer group of
// a Queue. Ack, Nack and Extend take the Record Claim returned (its
// Deliveries is part of the lease) and return an error wrapping
// ErrLeaseLost when the lease is no longer this member's.
type QueueGroup interface {
	// Name is the group's name.
	Name() string
	// Claim takes up to max records (max >= 1), first those whose lease
	// ran out or that were Nacked and are due (dead-lettering those at
	// their WithMaxDeliveries limit), then new ones. It never waits: no
	// records is nil and a nil error.
	Claim(ctx context.Context, max int) ([]Record, error)
	// Wait returns when a Claim may find something, or with ctx.Err().
	Wait(ctx context.Context) error
	// Ack finishes records: they are never delivered again.
	Ack(ctx context.Context, recs ...Record) error
	// Nack gives a record back for redelivery delay from now.
	Nack(ctx context.Context, rec Record, delay time.Duration) error
	// Extend makes a record's lease end d from now.
	Extend(ctx context.Context, rec Record, d time.Duration) error
	// Stats returns the counts both backends keep.
	Stats(ctx context.Context) (QueueStats, error)
}

// QueueStats are the counts of a consumer group that every Queue backend
// gives (a Ring's Group gives more: see GroupStats).
type QueueStats struct {
	// Name and Topic are the group's.
	Name, Topic string
	// Pending counts records delivered and not yet finished.
	Pending int
	// Lag counts records published to the topic the group has not yet
	// delivered.
	Lag uint64
	// Redelivered counts deliveries after the first.
	Redelivered uint64
	// DeadLettered counts records given up after WithMaxDeliveries.
	DeadLettered uint64
}

// DefaultLease is a Queue group's lease when WithAck does not set one.
const DefaultLease = 30 * time.Second

// ReaderSettings are resolved ReaderOptions, for backends outside this
// package.
type ReaderSettings struct {
	// FromStart: a new group starts at the oldest record kept.
	FromStart bool
	// Topic is the bound topic ("" for every topic).
	Topic string
	// Lease is WithAck's lease; 0 without WithAck.
	Lease time.Duration
	// Backpressure is WithBackpressure.
	Backpressure bool
	// MaxDeliveries is WithMaxDeliveries' limit; 0 for none.
	MaxDeliveries int
	// DeadLetter is WithDeadLetter's topic; "" for none.
	DeadLetter string
}

// ResolveReaderOptions folds opts as Ring.Group does, without validating
// them. Backends of Queue use it.
func ResolveReaderOptions(opts ...ReaderOption) ReaderSettings {
	var c readerConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return ReaderSettings{
		FromStart: c.fromStart, Topic: c.topic, Lease: c.lease,
		Backpressure: c.backpressure, MaxDeliveries: c.maxDeliv, DeadLetter: c.dead,
	}
}

// RingQueue is the Queue of a Ring in shared memory. Its methods ignore
// ctx except PublishWait and Wait, which block (Publish, Claim, Ack, Nack
// and Extend never do).
type RingQueue struct{ r *Ring }

// NewQueue returns r as a Queue.
func NewQueue(r *Ring) RingQueue { return RingQueue{r: r} }

// Ring returns the adapted Ring.
func (q RingQueue) Ring() *Ring { return q.r }

// Publish is Ring.Publish.
func (q RingQueue) Publish(_ context.Context, topic string, payload []byte) (uint64, error) {
	return q.r.Publish(topic, payload)
}

// PublishWait is Ring.PublishWait.
func (q RingQueue) PublishWait(ctx context.Context, topic string, payload []byte) (uint64, error) {
	return q.r.PublishWait(ctx, topic, payload)
}

// Group is Ring.Group with WithAck(DefaultLease) added when opts do not
// ask for acking.
func (q RingQueue) Group(_ context.Context, name string, opts ...ReaderOption) (QueueGroup, error) {
	if ResolveReaderOptions(opts...).Lease <= 0 {
		opts = append(opts[:len(opts):len(opts)], WithAck(DefaultLease))
	}
	g, err := q.r.Group(name, opts...)
	if err != nil {
		return nil, err
	}
	return ringGroup{g: g}, nil
}

// DropGroup is Ring.DropGroup.
func (q RingQueue) DropGroup(_ context.Context, name string) error { return q.r.DropGroup(name) }

// Capabilities of a ring: dead members are noticed at once, leases of any
// length, Wait that sleeps until woken.
func (q RingQueue) Capabilities() Capabilities {
	return CapProcessLiveness | CapLongLeases | CapWaitWakes
}

// ringGroup is a Group as a QueueGroup.
type ringGroup struct{ g *Group }

func (rg ringGroup) Name() string { return rg.g.Name() }

func (rg ringGroup) Claim(_ context.Context, max int) ([]Record, error) {
	if max < 1 {
		max = 1
	}
	return rg.g.Claim(max), nil
}

func (rg ringGroup) Wait(ctx context.Context) error { return rg.g.Wait(ctx) }

func (rg ringGroup) Ack(_ context.Context, recs ...Record) error { return rg.g.Ack(recs...) }

func (rg ringGroup) Nack(_ context.Context, rec Record, delay time.Duration) error {
	return rg.g.Nack(rec, delay)
}

func (rg ringGroup) Extend(_ context.Context, rec Record, d time.Duration) error {
	return rg.g.Extend(rec, d)
}

func (rg ringGroup) Stats(context.Context) (QueueStats, error) {
	s := rg.g.Stats()
	return QueueStats{
		Name: s.Name, Topic: s.Topic, Pending: s.Pending, Lag: s.Lag,
		Redelivered: s.Redelivered, DeadLettered: s.DeadLettered,
	}, nil
}
