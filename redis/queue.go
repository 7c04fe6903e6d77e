package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
)

// Queue is a shmarena.Queue over Redis Streams: one stream per topic, and
// each group a stream consumer group (XREADGROUP, XACK, XAUTOCLAIM). All
// the keys of one queue share the hash tag {name}, so a queue lives on one
// master of a cluster and its scripts (dead-lettering with XACK, bounded
// publishing) stay atomic.
//
// Sequence numbers: a record's Seq is its stream ID ms-seq packed as
// ms<<22 | seq (ms for 2^42 milliseconds, past the year 2100; seq below
// 2^22 within one millisecond, far beyond what one stream takes), so it
// grows with each publish to a topic, as on a ring, and converts back to
// the ID exactly.
//
// What differs from a Ring (see Capabilities): a consumer that dies keeps
// its leases until they run out (Redis cannot tell that a client died);
// Nack's delay and Extend's duration are capped at the group's lease
// (Redis measures a lease as the idle time of a pending entry); Wait
// polls; a group binds to exactly one topic; a member of a group that was
// dropped and made again joins the new group.
type Queue struct {
	c        goredis.UniversalClient
	tag      string
	capacity int64
	consumer string
}

// A QueueOption configures NewQueue.
type QueueOption func(*Queue)

// WithCapacity bounds each topic's stream to n records that some group
// has not finished, as a ring's slots bound it: Publish refuses with
// ErrRingFull when n such records wait, and PublishWait waits. Records
// every group finished are trimmed at each publish. Topics without groups
// keep their newest n records (XADD MAXLEN). n <= 0 (the default): no
// bound, and PublishWait never waits.
func WithCapacity(n int) QueueOption { return func(q *Queue) { q.capacity = int64(max(n, 0)) } }

// NewQueue returns the queue called name on c. name must not hold '{' or
// '}' (it becomes the hash tag of the queue's keys).
func NewQueue(c goredis.UniversalClient, name string, opts ...QueueOption) (*Queue, error) {
	if name == "" || strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("shmarena/redis: %w: queue name %q must be non-empty without '{' or '}'", shmarena.ErrInvalid, name)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	host, _ := os.Hostname()
	q := &Queue{c: c, tag: "{" + name + "}",
		consumer: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(rnd[:]))}
	for _, o := range opts {
		o(q)
	}
	return q, nil
}

func (q *Queue) stream(topic string) string { return q.tag + ":s:" + topic }
func (q *Queue) registry() string           { return q.tag + ":groups" }
func (q *Queue) counts(group string) string { return q.tag + ":c:" + group }

// Capabilities: many hosts, replicated on a cluster; no process
// liveness, leases capped at the lease, Wait polls.
func (q *Queue) Capabilities() shmarena.Capabilities { return capabilities(q.c, 0) }

// Publish appends payload to topic's stream (XADD, in a script that
// enforces WithCapacity). ErrRingFull (wrapped) when the stream is full.
func (q *Queue) Publish(ctx context.Context, topic string, payload []byte) (uint64, error) {
	v, err := scriptPublish.Run(ctx, q.c, []string{q.stream(topic)}, payload, q.capacity).Result()
	if err != nil {
		return 0, wrap("XADD", topic, err)
	}
	id, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("shmarena/redis: publish to %q: %w (%d records wait)", topic, shmarena.ErrRingFull, q.capacity)
	}
	return idToSeq(id)
}

// PublishWait publishes like Publish, and while the stream is full it
// polls, backing off from 1 ms to 50 ms, until there is room or ctx ends
// (then an error wrapping ErrRingFull and ctx.Err()). Redis has no way to
// wake a producer when a group acks, so waiting costs a round trip per
// poll.
func (q *Queue) PublishWait(ctx context.Context, topic string, payload []byte) (uint64, error) {
	backoff := time.Millisecond
	for {
		seq, err := q.Publish(ctx, topic, payload)
		if !errors.Is(err, shmarena.ErrRingFull) {
			return seq, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("shmarena/redis: publish to %q: %w: %w", topic, shmarena.ErrRingFull, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// Group joins, or creates, the consumer group name on the stream of the
// topic WithTopic names (required). WithAck sets the lease (default
// shmarena.DefaultLease); WithMaxDeliveries and WithDeadLetter as on a
// ring (every member must ask for the same, else ErrShape); FromStart
// makes a new group start at the oldest record kept (else at the next
// record published).
func (q *Queue) Group(ctx context.Context, name string, opts ...shmarena.ReaderOption) (shmarena.QueueGroup, error) {
	s := shmarena.ResolveReaderOptions(opts...)
	switch {
	case name == "":
		return nil, fmt.Errorf("shmarena/redis: %w: empty group name", shmarena.ErrInvalid)
	case s.Topic == "":
		return nil, fmt.Errorf("shmarena/redis: %w: group %q needs WithTopic (a Redis queue group reads one topic's stream)", shmarena.ErrInvalid, name)
	case s.DeadLetter == s.Topic && s.DeadLetter != "":
		return nil, fmt.Errorf("shmarena/redis: %w: group %q dead-letters to its own topic", shmarena.ErrInvalid, name)
	case s.MaxDeliveries < 0:
		return nil, fmt.Errorf("shmarena/redis: %w: WithMaxDeliveries(%d)", shmarena.ErrInvalid, s.MaxDeliveries)
	}
	if s.Lease <= 0 {
		s.Lease = shmarena.DefaultLease
	}
	shape := s.Topic + "\x00" + strconv.Itoa(s.MaxDeliveries) + "\x00" + s.DeadLetter
	start := "$"
	if s.FromStart {
		start = "0"
	}
	had, err := scriptJoin.Run(ctx, q.c, []string{q.registry(), q.stream(s.Topic)}, name, shape, start).Text()
	if err != nil {
		return nil, wrap("XGROUP CREATE", name, err)
	}
	if had != "" {
		return nil, fmt.Errorf("shmarena/redis: group %q: %w: made as %q, asked for %q", name, shmarena.ErrShape, had, shape)
	}
	dead := q.stream(s.Topic) // a key of the same slot when there is none
	if s.DeadLetter != "" {
		dead = q.stream(s.DeadLetter)
	}
	return &group{q: q, name: name, topic: s.Topic, lease: s.Lease, maxDeliv: s.MaxDeliveries,
		hasDead: s.DeadLetter != "", keys: []string{q.stream(s.Topic), dead, q.counts(name)}}, nil
}

// DropGroup destroys the group (XGROUP DESTROY: its pending entries go
// with it) and its counts. ErrNoGroup when there is none.
func (q *Queue) DropGroup(ctx context.Context, name string) error {
	shape, err := q.c.HGet(ctx, q.registry(), name).Result()
	if errors.Is(err, goredis.Nil) {
		return fmt.Errorf("shmarena/redis: group %q: %w", name, shmarena.ErrNoGroup)
	}
	if err != nil {
		return wrap("HGET", name, err)
	}
	topic, _, _ := strings.Cut(shape, "\x00")
	n, err := scriptDrop.Run(ctx, q.c, []string{q.registry(), q.stream(topic), q.counts(name)}, name, shape).Int()
	if err != nil {
		return wrap("XGROUP DESTROY", name, err)
	}
	if n == 0 {
		return fmt.Errorf("shmarena/redis: group %q: %w", name, shmarena.ErrNoGroup)
	}
	return nil
}

// idToSeq packs a stream ID "ms-seq" into a Seq.
func idToSeq(id string) (uint64, error) {
	msStr, sqStr, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(msStr, 10, 64)
	sq, err2 := strconv.ParseUint(sqStr, 10, 64)
	if !ok || err1 != nil || err2 != nil || ms >= 1<<42 || sq >= 1<<22 {
		return 0, fmt.Errorf("shmarena/redis: stream ID %q does not fit a sequence number", id)
	}
	return ms<<22 | sq, nil
}

// seqToID is idToSeq's inverse.
func seqToID(seq uint64) string {
	return strconv.FormatUint(seq>>22, 10) + "-" + strconv.FormatUint(seq&(1<<22-1), 10)
}

var _ shmarena.Queue = (*Queue)(nil)
