package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
)

// group is one member's handle on a Queue's consumer group; the member is
// the queue's consumer name (one per Queue value).
type group struct {
	q        *Queue
	name     string
	topic    string
	lease    time.Duration
	maxDeliv int
	hasDead  bool
	keys     []string // stream, dead-letter stream, counts
}

func (g *group) Name() string { return g.name }

// isNoGroup reports Redis's NOGROUP error: the group was dropped.
func isNoGroup(err error) bool { return err != nil && strings.Contains(err.Error(), "NOGROUP") }

// Claim runs one script: expired leases first (XAUTOCLAIM with min-idle
// the lease; dead letters at the delivery limit), then new records.
// A dropped group's handle claims nothing.
func (g *group) Claim(ctx context.Context, max int) ([]shmarena.Record, error) {
	if max < 1 {
		max = 1
	}
	dead := "0"
	if g.hasDead {
		dead = "1"
	}
	v, err := scriptClaim.Run(ctx, g.q.c, g.keys, g.name, g.q.consumer, max,
		g.lease.Milliseconds(), g.maxDeliv, dead, g.topic).Slice()
	if isNoGroup(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("XREADGROUP", g.name, err)
	}
	if len(v) == 0 {
		return nil, nil
	}
	recs := make([]shmarena.Record, 0, len(v))
	for _, e := range v {
		rec, err := g.record(e)
		if err != nil {
			return recs, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// record parses one {id, fields, deliveries} of scriptClaim's reply.
func (g *group) record(e any) (shmarena.Record, error) {
	t, ok := e.([]any)
	if !ok || len(t) != 3 {
		return shmarena.Record{}, wrap("XREADGROUP", g.name, errShortReply)
	}
	id, _ := t[0].(string)
	seq, err := idToSeq(id)
	if err != nil {
		return shmarena.Record{}, err
	}
	rec := shmarena.Record{Topic: g.topic, Seq: seq, Payload: []byte{}}
	if n, ok := t[2].(int64); ok {
		rec.Deliveries = int(n)
	}
	fields, _ := t[1].([]any)
	for i := 0; i+1 < len(fields); i += 2 {
		if f, _ := fields[i].(string); f == "p" {
			p, _ := fields[i+1].(string)
			rec.Payload = []byte(p)
		}
	}
	return rec, nil
}

// Wait polls, backing off from 1 ms to 50 ms, until a Claim may find
// something (a record not yet delivered, or a lease idle for the lease).
func (g *group) Wait(ctx context.Context) error {
	backoff := time.Millisecond
	for {
		n, err := scriptDue.Run(ctx, g.q.c, g.keys[:1], g.name, g.lease.Milliseconds()).Int()
		if err != nil {
			return wrap("XINFO GROUPS", g.name, err)
		}
		if n == 1 {
			return nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// Ack XACKs the records still leased to this member at the delivery
// Claim returned; the others are left as they are and reported by an
// error wrapping ErrLeaseLost.
func (g *group) Ack(ctx context.Context, recs ...shmarena.Record) error {
	if len(recs) == 0 {
		return nil
	}
	args := make([]any, 0, 2+2*len(recs))
	args = append(args, g.name, g.q.consumer)
	for _, r := range recs {
		args = append(args, seqToID(r.Seq), r.Deliveries)
	}
	v, err := scriptAck.Run(ctx, g.q.c, g.keys[:1], args...).Slice()
	if isNoGroup(err) {
		return fmt.Errorf("shmarena/redis: ack in group %q: %w: the group was dropped", g.name, shmarena.ErrLeaseLost)
	}
	if err != nil {
		return wrap("XACK", g.name, err)
	}
	if len(v) != 2 {
		return wrap("XACK", g.name, errShortReply)
	}
	if lost, _ := v[0].(int64); lost > 0 {
		return fmt.Errorf("shmarena/redis: ack in group %q: %w: %d records, the first %v", g.name, shmarena.ErrLeaseLost, lost, v[1])
	}
	return nil
}

// Nack makes the record due for redelivery delay from now by setting its
// idle time to lease - delay (XCLAIM IDLE JUSTID): a delay longer than the
// lease counts as the lease.
func (g *group) Nack(ctx context.Context, rec shmarena.Record, delay time.Duration) error {
	return g.setIdle(ctx, "nack", rec, g.lease-max(delay, 0))
}

// Extend makes the lease end d from now, at most the group's lease from
// now (see Nack).
func (g *group) Extend(ctx context.Context, rec shmarena.Record, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("shmarena/redis: extend: %w: duration %v", shmarena.ErrInvalid, d)
	}
	return g.setIdle(ctx, "extend", rec, g.lease-d)
}

func (g *group) setIdle(ctx context.Context, op string, rec shmarena.Record, idle time.Duration) error {
	idle = max(idle, 0)
	n, err := scriptIdle.Run(ctx, g.q.c, g.keys[:1], g.name, g.q.consumer,
		seqToID(rec.Seq), rec.Deliveries, idle.Milliseconds()).Int()
	if isNoGroup(err) {
		n, err = 0, nil
	}
	if err != nil {
		return wrap("XCLAIM", g.name, err)
	}
	if n == 0 {
		return fmt.Errorf("shmarena/redis: %s %d in group %q: %w", op, rec.Seq, g.name, shmarena.ErrLeaseLost)
	}
	return nil
}

// Stats reads XINFO GROUPS (pending, lag) and the group's counts.
func (g *group) Stats(ctx context.Context) (shmarena.QueueStats, error) {
	st := shmarena.QueueStats{Name: g.name, Topic: g.topic}
	infos, err := g.q.c.XInfoGroups(ctx, g.keys[0]).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return st, wrap("XINFO GROUPS", g.name, err)
	}
	for _, in := range infos {
		if in.Name != g.name {
			continue
		}
		st.Pending = int(in.Pending)
		if in.Lag >= 0 {
			st.Lag = uint64(in.Lag)
		} else { // Redis cannot tell: count the records after the last delivered
			n, err := g.q.c.XRange(ctx, g.keys[0], "("+in.LastDeliveredID, "+").Result()
			if err != nil {
				return st, wrap("XRANGE", g.name, err)
			}
			st.Lag = uint64(len(n))
		}
	}
	counts, err := g.q.c.HGetAll(ctx, g.keys[2]).Result()
	if err != nil {
		return st, wrap("HGETALL", g.name, err)
	}
	st.Redelivered, _ = strconv.ParseUint(counts["redelivered"], 10, 64)
	st.DeadLettered, _ = strconv.ParseUint(counts["deadlettered"], 10, 64)
	return st, nil
}
