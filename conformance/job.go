package conformance

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/ratelimit"
)

// A Job is what one client does in a concurrency check. Backends run it
// with RunJob on stores of their own making, in the process (or on the
// connection) they give the client.
type Job struct {
	// Kind is JobAdd, JobCAS, JobConsume or JobConsumeDie.
	Kind string `json:"kind"`
	// Key is the key of JobAdd and JobCAS.
	Key string `json:"key,omitempty"`
	// N is how many Adds or compare-and-swap increments to make, or how
	// many records JobConsumeDie claims before it dies.
	N int `json:"n,omitempty"`
	// Group, Topic and Lease name the consumer group of the consume jobs.
	Group string        `json:"group,omitempty"`
	Topic string        `json:"topic,omitempty"`
	Lease time.Duration `json:"lease,omitempty"`
}

// The kinds of Job.
const (
	// JobAdd makes N Add(Key, 1) calls.
	JobAdd = "add"
	// JobCAS increments the 8-byte value at Key N times by load and
	// compare-and-swap, retrying lost races, and prints how many swaps
	// it won ("swaps N").
	JobCAS = "cas"
	// JobConsume claims, prints ("acked SEQ") and acks records of the
	// group until the group has nothing pending and nothing left to
	// deliver.
	JobConsume = "consume"
	// JobAllow makes N ratelimit decisions on Key under AllowLimit and
	// prints the Remaining of each allowed one ("remaining R").
	JobAllow = "allow"
	// JobConsumeDie claims N records, prints them ("held SEQ") and dies
	// holding their leases: a process of its own is killed with SIGKILL
	// right after RunJob returns ErrDie; a connection stops.
	JobConsumeDie = "consume-die"
)

// AllowLimit is the limit of JobAllow: a burst of 400 and one more a day,
// so no refill lands during a test and exactly 400 decisions pass.
var AllowLimit = ratelimit.Limit{Rate: 1, Burst: 400, Period: 24 * time.Hour}

// ErrDie is what RunJob returns when a JobConsumeDie job reaches the
// point where its client must die.
var ErrDie = errors.New("conformance: this client dies now")

// GroupOptions are the reader options every member of a Job's group
// passes.
func (j Job) GroupOptions() []shmarena.ReaderOption {
	return []shmarena.ReaderOption{shmarena.WithTopic(j.Topic), shmarena.WithAck(j.Lease)}
}

// RunJob runs j against kv or q (whichever the kind needs; the other may
// be nil), writing its output lines to out.
func RunJob(ctx context.Context, kv shmarena.KeyValue, q shmarena.Queue, j Job, out io.Writer) error {
	switch j.Kind {
	case JobAdd:
		for range j.N {
			if _, err := kv.Add(ctx, j.Key, 1); err != nil {
				return err
			}
		}
		return nil
	case JobCAS:
		swaps, err := casIncrements(ctx, kv, j.Key, j.N)
		fmt.Fprintln(out, "swaps", swaps)
		return err
	case JobConsume:
		return consume(ctx, q, j, out)
	case JobAllow:
		l := ratelimit.NewLimiter(kv)
		for range j.N {
			res, err := l.Allow(ctx, j.Key, AllowLimit)
			if err != nil {
				return err
			}
			if res.Allowed == 1 {
				fmt.Fprintln(out, "remaining", res.Remaining)
			}
		}
		return nil
	case JobConsumeDie:
		g, err := q.Group(ctx, j.Group, j.GroupOptions()...)
		if err != nil {
			return err
		}
		held := 0
		for held < j.N {
			recs, err := g.Claim(ctx, j.N-held)
			if err != nil {
				return err
			}
			for _, r := range recs {
				fmt.Fprintln(out, "held", r.Seq)
			}
			held += len(recs)
			if len(recs) == 0 {
				if err := g.Wait(ctx); err != nil {
					return err
				}
			}
		}
		return ErrDie
	}
	return fmt.Errorf("conformance: unknown job kind %q", j.Kind)
}

// casIncrements adds one to the 8-byte counter at key n times by
// compare-and-swap and returns the swaps won (n, unless an error).
func casIncrements(ctx context.Context, kv shmarena.KeyValue, key string, n int) (int, error) {
	swaps := 0
	var cur, next [8]byte
	for swaps < n {
		old, ok, err := kv.AppendLoad(ctx, cur[:0], key)
		if err != nil {
			return swaps, err
		}
		if !ok || len(old) != 8 {
			return swaps, fmt.Errorf("conformance: %q holds %q, not an 8-byte count", key, old)
		}
		binary.LittleEndian.PutUint64(next[:], binary.LittleEndian.Uint64(old)+1)
		swapped, err := kv.CompareAndSwap(ctx, key, old, next[:])
		if err != nil {
			return swaps, err
		}
		if swapped {
			swaps++
		}
	}
	return swaps, nil
}

// consume acks records until the group has none pending and none to
// deliver (so the last member to finish sees every record finished).
func consume(ctx context.Context, q shmarena.Queue, j Job, out io.Writer) error {
	g, err := q.Group(ctx, j.Group, j.GroupOptions()...)
	if err != nil {
		return err
	}
	for {
		recs, err := g.Claim(ctx, 8)
		if err != nil {
			return err
		}
		for _, r := range recs {
			fmt.Fprintln(out, "acked", r.Seq)
		}
		if len(recs) > 0 {
			if err := g.Ack(ctx, recs...); err != nil && !errors.Is(err, shmarena.ErrLeaseLost) {
				return err
			}
			continue
		}
		st, err := g.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Pending == 0 && st.Lag == 0 {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err = g.Wait(wctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return err
		}
	}
}

// parseLines picks the numbers after prefix in lines.
func parseLines(lines []string, prefix string) []uint64 {
	var out []uint64
	for _, l := range lines {
		if len(l) > len(prefix) && l[:len(prefix)] == prefix {
			if n, err := strconv.ParseUint(l[len(prefix):], 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
