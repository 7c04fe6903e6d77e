package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
	"golang.org/x/sys/unix"
)

// The ring comparison: a producer process sends fixed-size records to a
// consumer (this process) through each transport.
//
//   - throughput: the producer sends as fast as the transport takes them
//     (shmarena's groups are WithBackpressure or WithAck, and the producer
//     uses PublishWait: every record is delivered, as with the socket and
//     pipe);
//   - wake latency: the consumer sleeps in its blocking call; the producer
//     stamps CLOCK_MONOTONIC into a record every millisecond; the consumer
//     takes the difference on receipt.
const (
	ringPayload  = 64
	ringSlots    = 4096
	ringSlotSize = 256
)

// "shmarena ring+spin" is the same ring with a consumer that polls Claim
// for up to spinFor before it sleeps in Wait: it shows what the ring gives
// when the producer's Publish need not make a futex wake-up system call.
//
// "shmarena ring acked" is an at-least-once group (WithAck): the producer
// uses PublishWait, the consumer AckAndClaim(64) (the batch it worked
// acked and the next claimed under one lock acquisition), the
// counterpart of Redis Streams' XREADGROUP + XACK.
//
// The "batched" pair sends ringBatch records per call on both sides:
// shmarena's producer PublishBatchWait, the socket's a bufio.Writer that
// writes ringBatch frames per write(2). Their ratio is the batched
// comparison; the one-record-per-call pair above stays the headline.
var ringPeers = []string{"shmarena ring", "shmarena ring+spin", "shmarena ring acked", "shmarena ring batched", "Unix socket", "Unix socket batched", "pipe", "Redis Streams"}

// ringBatch is how many records a batched producer sends per call.
const ringBatch = 64

// batcher gathers a batched producer's records: send copies a record in,
// and hands the batch on when it is full, or at once for latency rounds
// (whose records are stamped one at a time); flush hands on the rest.
type batcher struct {
	bufs [][]byte
	n    int
	lat  bool
	out  func([][]byte) error
}

func newBatcher(lat bool, out func([][]byte) error) *batcher {
	bt := &batcher{bufs: make([][]byte, ringBatch), lat: lat, out: out}
	for i := range bt.bufs {
		bt.bufs[i] = make([]byte, ringPayload)
	}
	return bt
}

func (bt *batcher) send(p []byte) error {
	bt.bufs[bt.n] = append(bt.bufs[bt.n][:0], p...)
	if bt.n++; bt.n == len(bt.bufs) || bt.lat {
		return bt.flush()
	}
	return nil
}

func (bt *batcher) flush() error {
	if bt.n == 0 {
		return nil
	}
	err := bt.out(bt.bufs[:bt.n])
	bt.n = 0
	return err
}

// ackedInFlight is the acked ring's pending-table capacity per group.
const ackedInFlight = 256

func ackedRingOptions() []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(ringSlots), shmarena.WithSlotSize(ringSlotSize), shmarena.WithMaxInFlight(ackedInFlight)}
}

const spinFor = 20 * time.Microsecond

type ringResult struct {
	peer       string
	throughput float64   // records/s, the median of rounds
	rounds     []float64 // records/s in each round, peers alternating
	p50, p99   time.Duration
}

func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// ringArg is what the producer is told: mode "tput" or "lat", a count and
// a time limit.
type ringArg struct {
	mode  string
	n     int
	limit time.Duration
	gap   time.Duration
}

func (a ringArg) String() string { return fmt.Sprintf("%s:%d:%d:%d", a.mode, a.n, a.limit, a.gap) }

func parseRingArg(s string) (ringArg, error) {
	f := strings.Split(s, ":")
	if len(f) != 4 {
		return ringArg{}, fmt.Errorf("bad ring arg %q", s)
	}
	n, _ := strconv.Atoi(f[1])
	l, _ := strconv.ParseInt(f[2], 10, 64)
	g, _ := strconv.ParseInt(f[3], 10, 64)
	return ringArg{mode: f[0], n: n, limit: time.Duration(l), gap: time.Duration(g)}, nil
}

// producer is the send loop shared by every transport: send(p, last)
// sends one record; for latency the first 8 bytes carry the send time.
func producer(arg ringArg, send func(p []byte) error, flush func() error) error {
	p := make([]byte, ringPayload)
	for i := range p {
		p[i] = byte(i)
	}
	start := time.Now()
	for i := 0; i < arg.n; i++ {
		if arg.mode == "lat" {
			time.Sleep(arg.gap)
			binary.LittleEndian.PutUint64(p, uint64(monoNow()))
		} else if i&255 == 0 && time.Since(start) > arg.limit {
			break
		}
		if err := send(p); err != nil {
			return err
		}
	}
	if flush != nil {
		return flush()
	}
	return nil
}

// consumer statistics
type recv struct {
	n    int
	lats []time.Duration
	mode string
}

func (r *recv) got(p []byte) {
	r.n++
	if r.mode == "lat" && len(p) >= 8 {
		r.lats = append(r.lats, time.Duration(monoNow()-int64(binary.LittleEndian.Uint64(p))))
	}
}

func ringWorker(peerName, dir, addr, argStr string) error {
	arg, err := parseRingArg(argStr)
	if err != nil {
		return err
	}
	switch peerName {
	case "shmarena ring acked":
		a, err := shmarena.Open(filepath.Join(dir, "ring-arena"))
		if err != nil {
			return err
		}
		defer a.Close()
		r, err := a.Ring("work", ackedRingOptions()...)
		if err != nil {
			return err
		}
		if err := awaitGo(); err != nil {
			return err
		}
		ctx := context.Background()
		err = producer(arg, func(p []byte) error {
			_, err := r.PublishWait(ctx, "jobs", p)
			return err
		}, nil)
		if err != nil {
			return err
		}
		_, err = r.PublishWait(ctx, "end", nil)
		return err
	case "shmarena ring", "shmarena ring+spin", "shmarena ring batched":
		a, err := shmarena.Open(filepath.Join(dir, "ring-arena"))
		if err != nil {
			return err
		}
		defer a.Close()
		r, err := a.Ring("work", shmarena.WithSlots(ringSlots), shmarena.WithSlotSize(ringSlotSize))
		if err != nil {
			return err
		}
		if err := awaitGo(); err != nil {
			return err
		}
		// Backpressure: the group is WithBackpressure, so PublishWait
		// waits (spinning 50 µs, then asleep on a futex) rather than lap
		// it, as a bounded queue's producer blocks. (A producer spinning
		// on the group's position starves the consumer of CPU on a busy
		// 2-core machine.)
		ctx := context.Background()
		if peerName == "shmarena ring batched" {
			bt := newBatcher(arg.mode == "lat", func(ps [][]byte) error {
				_, err := r.PublishBatchWait(ctx, "jobs", ps)
				return err
			})
			err = producer(arg, bt.send, bt.flush)
		} else {
			err = producer(arg, func(p []byte) error {
				_, err := r.PublishWait(ctx, "jobs", p)
				return err
			}, nil)
		}
		if err != nil {
			return err
		}
		_, err = r.PublishWait(ctx, "end", nil)
		return err
	case "Unix socket batched":
		c, err := net.Dial("unix", filepath.Join(dir, "sock"))
		if err != nil {
			return err
		}
		defer c.Close()
		if err := awaitGo(); err != nil {
			return err
		}
		// ringBatch frames per write(2), as the ring's PublishBatchWait
		// publishes ringBatch records per call.
		bw := bufio.NewWriterSize(c, ringBatch*(4+ringPayload))
		bt := newBatcher(arg.mode == "lat", func(ps [][]byte) error {
			var hdr [4]byte
			for _, p := range ps {
				binary.LittleEndian.PutUint32(hdr[:], uint32(len(p)))
				bw.Write(hdr[:])
				bw.Write(p)
			}
			return bw.Flush()
		})
		if err := producer(arg, bt.send, bt.flush); err != nil {
			return err
		}
		if _, err := bw.Write([]byte{0, 0, 0, 0}); err != nil {
			return err
		}
		return bw.Flush()
	case "Unix socket", "pipe":
		var w io.WriteCloser
		if peerName == "pipe" {
			w = os.NewFile(3, "pipe")
		} else {
			c, err := net.Dial("unix", filepath.Join(dir, "sock"))
			if err != nil {
				return err
			}
			w = c
		}
		defer w.Close()
		if err := awaitGo(); err != nil {
			return err
		}
		frame := make([]byte, 4+ringPayload)
		err := producer(arg, func(p []byte) error {
			binary.LittleEndian.PutUint32(frame, uint32(len(p)))
			copy(frame[4:], p)
			_, err := w.Write(frame) // one write per record, as one Publish
			return err
		}, nil)
		if err != nil {
			return err
		}
		_, err = w.Write([]byte{0, 0, 0, 0})
		return err
	case "Redis Streams":
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
		defer c.Close()
		ctx := context.Background()
		if err := awaitGo(); err != nil {
			return err
		}
		var pipe redis.Pipeliner
		pending := 0
		flush := func() error {
			if pending == 0 {
				return nil
			}
			_, err := pipe.Exec(ctx)
			pipe, pending = nil, 0
			return err
		}
		err := producer(arg, func(p []byte) error {
			a := &redis.XAddArgs{Stream: "work", Values: []any{"p", p}}
			if arg.mode == "lat" {
				return c.XAdd(ctx, a).Err()
			}
			if pipe == nil {
				pipe = c.Pipeline()
			}
			pipe.XAdd(ctx, a)
			if pending++; pending == batch {
				return flush()
			}
			return nil
		}, flush)
		if err != nil {
			return err
		}
		return c.XAdd(ctx, &redis.XAddArgs{Stream: "work", Values: []any{"end", "1"}}).Err()
	}
	return fmt.Errorf("no ring peer %q", peerName)
}

// ringRun runs one producer process against this process's consumer.
func ringRun(peerName, dir, addr string, arg ringArg) (recv, time.Duration, error) {
	rc := recv{mode: arg.mode}
	args := []string{"-worker=ring", "-w.peer=" + peerName, "-w.dir=" + dir, "-w.redis=" + addr, "-w.arg=" + arg.String()}
	ctx, cancel := context.WithTimeout(context.Background(), arg.limit+time.Duration(arg.n)*arg.gap+30*time.Second)
	defer cancel()
	var c *child
	var err error
	var consume func() error
	switch peerName {
	case "shmarena ring acked":
		path := filepath.Join(dir, "ring-arena")
		os.Remove(path)
		size, _ := shmarena.RingBytes(ackedRingOptions()...)
		a, err := shmarena.Open(path, shmarena.WithSize(shmarena.MinSize+size))
		if err != nil {
			return rc, 0, err
		}
		defer os.Remove(path)
		defer a.Close()
		r, err := a.Ring("work", ackedRingOptions()...)
		if err != nil {
			return rc, 0, err
		}
		g, err := r.Group("workers", shmarena.WithAck(30*time.Second))
		if err != nil {
			return rc, 0, err
		}
		consume = func() error {
			var recs []shmarena.Record
			var err error
			for {
				// Ack the batch just worked and claim the next in one
				// lock round trip, into the same memory.
				recs, err = g.AckAndClaim(recs, 64)
				if err != nil {
					return err
				}
				end := false
				for _, rec := range recs {
					if rec.Topic == "end" {
						end = true
						continue
					}
					rc.got(rec.Payload)
				}
				if end {
					if err := g.Ack(recs...); err != nil {
						return err
					}
					if st := g.Stats(); st.Lapped+st.Abandoned+st.Redelivered != 0 {
						return fmt.Errorf("acked ring lost or redelivered records: %+v", st)
					}
					return nil
				}
				if len(recs) == 0 {
					if err := g.Wait(ctx); err != nil {
						return err
					}
				}
			}
		}
		if c, err = spawn(args...); err != nil {
			return rc, 0, err
		}
	case "shmarena ring", "shmarena ring+spin", "shmarena ring batched":
		spin := peerName == "shmarena ring+spin"
		path := filepath.Join(dir, "ring-arena")
		os.Remove(path)
		a, err := shmarena.Open(path, shmarena.WithSize(1<<20+ringSlots*ringSlotSize*2))
		if err != nil {
			return rc, 0, err
		}
		defer os.Remove(path)
		defer a.Close()
		r, err := a.Ring("work", shmarena.WithSlots(ringSlots), shmarena.WithSlotSize(ringSlotSize))
		if err != nil {
			return rc, 0, err
		}
		g, err := r.Group("workers", shmarena.WithBackpressure())
		if err != nil {
			return rc, 0, err
		}
		consume = func() error {
			var recs []shmarena.Record
			for {
				recs = g.AppendClaim(recs[:0], 64) // into the same memory each time
				for _, rec := range recs {
					if rec.Topic == "end" {
						if st := g.Stats(); st.Lapped+st.Abandoned != 0 {
							return fmt.Errorf("ring lost records: %+v", st)
						}
						return nil
					}
					rc.got(rec.Payload)
				}
				if len(recs) == 0 {
					if spin {
						for t := time.Now(); time.Since(t) < spinFor && g.Position() >= r.Head(); {
							runtime.Gosched()
						}
					}
					if err := g.Wait(ctx); err != nil {
						return err
					}
				}
			}
		}
		if c, err = spawn(args...); err != nil {
			return rc, 0, err
		}
	case "Unix socket", "Unix socket batched", "pipe":
		var rd io.Reader
		if peerName == "pipe" {
			pr, pw, err := os.Pipe()
			if err != nil {
				return rc, 0, err
			}
			defer pr.Close()
			c, err = spawnFiles([]*os.File{pw}, args...)
			pw.Close()
			if err != nil {
				return rc, 0, err
			}
			rd = pr
		} else {
			sock := filepath.Join(dir, "sock")
			os.Remove(sock)
			l, err := net.Listen("unix", sock)
			if err != nil {
				return rc, 0, err
			}
			defer l.Close()
			type acc struct {
				c   net.Conn
				err error
			}
			ch := make(chan acc, 1)
			go func() { cn, err := l.Accept(); ch <- acc{cn, err} }()
			if c, err = spawn(args...); err != nil {
				return rc, 0, err
			}
			a := <-ch
			if a.err != nil {
				return rc, 0, a.err
			}
			defer a.c.Close()
			rd = a.c
		}
		br := bufio.NewReaderSize(rd, 64<<10)
		consume = func() error {
			var hdr [4]byte
			buf := make([]byte, 1<<16)
			for {
				if _, err := io.ReadFull(br, hdr[:]); err != nil {
					return err
				}
				n := binary.LittleEndian.Uint32(hdr[:])
				if n == 0 {
					return nil
				}
				if _, err := io.ReadFull(br, buf[:n]); err != nil {
					return err
				}
				rc.got(buf[:n])
			}
		}
	case "Redis Streams":
		cl := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, ReadTimeout: -1})
		defer cl.Close()
		if err := cl.Del(ctx, "work").Err(); err != nil {
			return rc, 0, err
		}
		if err := cl.XGroupCreateMkStream(ctx, "work", "workers", "$").Err(); err != nil {
			return rc, 0, err
		}
		consume = func() error {
			for {
				res, err := cl.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "c1",
					Streams: []string{"work", ">"}, Count: 64, Block: 0}).Result()
				if err != nil {
					return err
				}
				var ids []string
				done := false
				for _, s := range res {
					for _, m := range s.Messages {
						ids = append(ids, m.ID)
						if _, ok := m.Values["end"]; ok {
							done = true
							continue
						}
						p, _ := m.Values["p"].(string)
						rc.got([]byte(p))
					}
				}
				if len(ids) > 0 {
					if err := cl.XAck(ctx, "work", "workers", ids...).Err(); err != nil {
						return err
					}
				}
				if done {
					return nil
				}
			}
		}
		if c, err = spawn(args...); err != nil {
			return rc, 0, err
		}
	}
	if err := c.start(); err != nil {
		return rc, 0, err
	}
	start := time.Now()
	err = consume()
	el := time.Since(start)
	if _, werr := c.wait(); werr != nil && err == nil {
		err = werr
	}
	return rc, el, err
}

// Ring rounds: ringRounds rounds of ringRound each by default (-reps
// sets the rounds, -ringdur the round's length, -ringpeers the peers).
// Half-second rounds rather than seconds: on a shared 2-core machine the
// load moves within seconds, and a ratio of two peers is only as good as
// the closeness in time of the runs it divides. Nine rather than five:
// a round where another tenant takes the consumer's core makes the
// consumer the bottleneck, and an acking consumer does about 1.5x the
// at-most-once one's work per record (BenchmarkRoundTrip, 680 against 450
// instructions on the consumer's side), so such a round moves their
// ratio from about 1.0x toward 0.7x; with five rounds one of them moved
// the range and, with two, the median.
const (
	ringRounds = 9
	ringRound  = 500 * time.Millisecond
)

// ringRunOrder is the order peers run in within a round (reversed on
// alternate rounds): each ratio the report states divides runs that are
// neighbours in it (acked and at-most-once; at-most-once and the socket;
// the batched pair), so the two runs it divides are half a second apart.
var ringRunOrder = []string{"shmarena ring acked", "shmarena ring", "Unix socket", "shmarena ring batched", "Unix socket batched", "shmarena ring+spin", "pipe", "Redis Streams"}

func ringBench(dir, addr string, short bool) ([]ringResult, []string, error) {
	round := ringRound
	if *flagRingDur > 0 {
		round = *flagRingDur
	}
	tput := ringArg{mode: "tput", n: 1 << 26, limit: round}
	lat := ringArg{mode: "lat", n: 1000, gap: time.Millisecond}
	if short {
		tput = ringArg{mode: "tput", n: 1 << 16, limit: 100 * time.Millisecond}
		lat.n = 50
	}
	var out []ringResult
	var notes []string
	var peers []string
	want := map[string]bool{}
	for _, p := range strings.Split(*flagRingPeers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			want[p] = true
		}
	}
	for _, p := range ringPeers {
		if len(want) > 0 && !want[p] {
			continue
		}
		if p == "Redis Streams" && addr == "" {
			notes = append(notes, "Redis Streams skipped: no Redis.")
			continue
		}
		peers = append(peers, p)
		out = append(out, ringResult{peer: p})
	}
	// Throughput in rounds, every peer once per round, in turn and in
	// reverse turn on alternate rounds (so a peer is not always run just
	// after the same one, and a drift of the load over a round pair
	// cancels), so the ratios compare runs seconds apart on this shared
	// machine; the report gives medians with the rounds' ranges.
	rounds := ringRounds
	if *flagReps > 0 {
		rounds = max(*flagReps, 3)
	}
	if short {
		rounds = 1
	}
	order := make([]int, 0, len(peers))
	for _, p := range ringRunOrder {
		if i := slices.Index(peers, p); i >= 0 {
			order = append(order, i)
		}
	}
	for k := range rounds {
		for j := range order {
			i := order[j]
			if k%2 == 1 {
				i = order[len(order)-1-j]
			}
			p := peers[i]
			rc, el, err := ringRun(p, dir, addr, tput)
			if err != nil {
				return nil, nil, fmt.Errorf("%s throughput: %w", p, err)
			}
			out[i].rounds = append(out[i].rounds, float64(rc.n)/el.Seconds())
		}
	}
	for i, p := range peers {
		res := &out[i]
		res.throughput = median(res.rounds)
		rc, _, err := ringRun(p, dir, addr, lat)
		if err != nil {
			return nil, nil, fmt.Errorf("%s latency: %w", p, err)
		}
		if len(rc.lats) != lat.n {
			return nil, nil, errors.New(p + ": latency records lost")
		}
		slices.Sort(rc.lats)
		res.p50 = rc.lats[len(rc.lats)/2]
		res.p99 = rc.lats[len(rc.lats)*99/100]
		logf("  %-14s %12.0f rec/s (%.0f-%.0f)   wake p50 %v p99 %v   rounds %.3g", p, res.throughput,
			slices.Min(res.rounds), slices.Max(res.rounds), res.p50, res.p99, res.rounds)
	}
	notes = append(notes, fmt.Sprintf("Ring: %d-byte payloads, producer in a separate process, consumer group of one member "+
		"(shmarena: a WithBackpressure group, PublishWait, Group.AppendClaim(64) into one reused slice, then Wait; acked: WithAck, PublishWait, AckAndClaim(64) acking each batch as it claims the next; Redis: XREADGROUP COUNT 64 BLOCK 0 + XACK, producer XADD pipelined %d deep for throughput, one per round trip for latency); "+
		"socket and pipe: one write(2) per record, consumer reads through a 64 KiB bufio.Reader. "+
		"Batched pair: %d records per call on both sides, shmarena's producer Ring.PublishBatchWait (one lock round trip, commit and wake per batch), "+
		"the socket's a bufio.Writer flushed every %d frames (one write(2) per batch); consumers as above. Latency rounds send one record per call on every peer.", ringPayload, batch, ringBatch, ringBatch))
	return out, notes, nil
}
