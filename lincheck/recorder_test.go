package lincheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shmarena/shmarena"
	"golang.org/x/sys/unix"
)

// The recorder: a worker process runs random operations on a few keys of
// two maps and on one ring until a deadline, logging each one (see logRec).

// mono reads CLOCK_MONOTONIC directly. Go's own monotonic readings count
// from each process's start and are not comparable across processes; this
// clock is one for the whole host (PID namespaces share it).
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// The shared regions. Two maps, so both ways Add works are exercised: in
// "m" (128-byte slots, 16-aligned) an Add to a live counter is one
// lock-free 16-byte compare-and-swap; in "m8" (136-byte slots) every other
// slot is not 16-aligned and its counters are added to under the stripe
// lock, and compared by beginning the slot. Two stripes and five keys per
// map make writers meet on the locks all the time.
var mapShapes = []struct {
	name     string
	slotSize int
}{{"m", 128}, {"m8", 136}}

const (
	keysPerMap = 5
	mapSlots   = 64
	mapStripes = 2
	ringName   = "r"
	groupName  = "g"
	// ringSlots is far more records than a round publishes, so nothing
	// laps (the model does not cover lapping; the supervisor checks).
	ringSlots    = 1 << 16
	ringSlotSize = 64
	maxPayload   = 40 // ringSlotSize - 24

	// The acking group's ring: more records than a round publishes (a
	// round on a quiet machine makes about 58,000 operations, and 16,384
	// slots filled), so it never fills (the model does not cover a full
	// ring; the core's tests do), with a small pending table so the window
	// limits claims, and a lease short enough to run out between a
	// worker's operations.
	ackRingName  = "ra"
	ackGroupName = "ga"
	ackSlots     = 1 << 16
	ackInFlight  = 8
	ackLease     = 30 * time.Millisecond
	ackMaxDeliv  = 3
)

func ackRingOpts() []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(ackSlots), shmarena.WithSlotSize(ringSlotSize), shmarena.WithMaxInFlight(ackInFlight)}
}

func ackGroupOpts() []shmarena.ReaderOption {
	return []shmarena.ReaderOption{shmarena.WithTopic("job"), shmarena.WithAck(ackLease), shmarena.WithMaxDeliveries(ackMaxDeliv), shmarena.WithDeadLetter("dl")}
}

type regions struct {
	a        *shmarena.Arena
	maps     []*shmarena.Map
	ring     *shmarena.Ring
	group    *shmarena.Group
	ackRing  *shmarena.Ring
	ackGroup *shmarena.Group
}

func mapOpts(slotSize int) []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(mapSlots), shmarena.WithSlotSize(slotSize), shmarena.WithStripes(mapStripes)}
}

func ringOpts() []shmarena.RegionOption {
	return []shmarena.RegionOption{shmarena.WithSlots(ringSlots), shmarena.WithSlotSize(ringSlotSize)}
}

// openRegions creates (create true) or attaches to the arena at path and
// its regions. The creator joins the group before any worker runs, so the
// group starts at sequence 1 and every record is the group's.
func openRegions(path string, create bool) (*regions, error) {
	var opts []shmarena.OpenOption
	if create {
		size := int64(shmarena.MinSize)
		for _, s := range mapShapes {
			n, err := shmarena.MapBytes(mapOpts(s.slotSize)...)
			if err != nil {
				return nil, err
			}
			size += n
		}
		n, err := shmarena.RingBytes(ringOpts()...)
		if err != nil {
			return nil, err
		}
		na, err := shmarena.RingBytes(ackRingOpts()...)
		if err != nil {
			return nil, err
		}
		opts = append(opts, shmarena.WithSize(size+n+na))
	}
	a, err := shmarena.Open(path, opts...)
	if err != nil {
		return nil, err
	}
	r := &regions{a: a}
	for _, s := range mapShapes {
		m, err := a.Map(s.name, mapOpts(s.slotSize)...)
		if err != nil {
			_ = a.Close()
			return nil, err
		}
		r.maps = append(r.maps, m)
	}
	if r.ring, err = a.Ring(ringName, ringOpts()...); err == nil {
		r.group, err = r.ring.Group(groupName)
	}
	if err == nil {
		r.ackRing, err = a.Ring(ackRingName, ackRingOpts()...)
	}
	if err == nil {
		r.ackGroup, err = r.ackRing.Group(ackGroupName, ackGroupOpts()...)
	}
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	return r, nil
}

// A recorder runs operations and logs them to its file.
type recorder struct {
	*regions
	client int
	rng    *rand.Rand
	log    *os.File
	id     int
	seen   map[string]string // per key, the last value this worker saw there
	line   []byte
	held   []shmarena.Record // leases from the acking group, not yet settled
	picked []shmarena.Record // those an Ack, Nack or Extend settles now
}

func newRecorder(r *regions, client int, seed uint64, logPath string) (*recorder, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &recorder{regions: r, client: client, rng: rand.New(rand.NewPCG(seed, uint64(client))), log: f, seen: map[string]string{}}, nil
}

// write logs one record with one write(2), so a kill never leaves half a
// record but possibly a line cut short at the end, which the reader drops.
func (w *recorder) write(r *logRec) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	w.line = append(append(w.line[:0], b...), '\n')
	_, err = w.log.Write(w.line)
	return err
}

// The operation mix, in relative weights.
var opWeights = []struct {
	op string
	w  int
}{
	{opLoad, 18}, {opCounter, 6}, {opStore, 9}, {opDelete, 4}, {opLoadOrStore, 5},
	{opLoadAndDelete, 4}, {opSwap, 6}, {opCAS, 13}, {opCAD, 5}, {opAdd, 12},
	{opPublish, 6}, {opBatch, 3}, {opClaim, 12},
	{opAPublish, 8}, {opAClaim, 8}, {opAAck, 6}, {opANack, 2}, {opAExtend, 1},
}

func (w *recorder) pickOp() string {
	total := 0
	for _, o := range opWeights {
		total += o.w
	}
	n := w.rng.IntN(total)
	for _, o := range opWeights {
		if n < o.w {
			return o.op
		}
		n -= o.w
	}
	panic("unreachable")
}

// value returns a value to store: mostly one never stored before (so a
// read names the write it saw), sometimes 8 bytes that read like a small
// counter, sometimes empty.
func (w *recorder) value() []byte {
	switch r := w.rng.IntN(10); {
	case r < 2:
		return []byte(le64(int64(w.rng.IntN(6))))
	case r < 3:
		return []byte{}
	}
	v := fmt.Sprintf("c%d.%d", w.client, w.id)
	return []byte(v + strings.Repeat("x", w.rng.IntN(24)))
}

// expect returns an old value for CompareAndSwap or CompareAndDelete:
// mostly the last one seen at the key, so that many succeed.
func (w *recorder) expect(key string) []byte {
	r := w.rng.IntN(10)
	if v, ok := w.seen[key]; ok && r < 7 {
		return []byte(v)
	}
	if r < 9 {
		return []byte(le64(int64(w.rng.IntN(6))))
	}
	return []byte("never stored")
}

func errText(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, shmarena.ErrNotCounter):
		return errNotCounter
	}
	return err.Error()
}

// step runs one random operation and logs it.
func (w *recorder) step() error {
	w.id++
	op := w.pickOp()
	c := logRec{Ev: "call", ID: w.id, Op: op}
	var m *shmarena.Map
	var key string
	switch op {
	case opPublish:
		p := fmt.Sprintf("p%d.%d", w.client, w.id)
		c.Val = []byte(p + strings.Repeat("y", w.rng.IntN(maxPayload-len(p)+1)))
	case opBatch:
		for i := range 1 + w.rng.IntN(3) {
			p := fmt.Sprintf("b%d.%d.%d", w.client, w.id, i)
			c.Vals = append(c.Vals, []byte(p+strings.Repeat("y", w.rng.IntN(maxPayload-len(p)+1))))
		}
	case opClaim:
	case opAPublish:
		p := fmt.Sprintf("a%d.%d", w.client, w.id)
		c.Val = []byte(p + strings.Repeat("z", w.rng.IntN(maxPayload-len("job")-len(p)+1)))
	case opAClaim:
		c.Max = w.rng.IntN(4)
	case opAAck, opANack, opAExtend:
		if len(w.held) == 0 {
			c.Op, c.Max = opAClaim, w.rng.IntN(4)
			break
		}
		if w.rng.IntN(20) == 0 { // let the leases run out now and then
			time.Sleep(time.Duration(w.rng.Int64N(int64(2 * ackLease))))
		}
		n := 1
		if c.Op == opAAck {
			n = 1 + w.rng.IntN(min(2, len(w.held)))
		}
		for range n {
			k := w.rng.IntN(len(w.held))
			c.Recs = append(c.Recs, ackRec{Seq: w.held[k].Seq, Deliv: w.held[k].Deliveries})
			w.picked = append(w.picked, w.held[k])
			if c.Op != opAExtend {
				w.held = slices.Delete(w.held, k, k+1)
			} else {
				break
			}
		}
		switch c.Op {
		case opANack:
			c.Dur = w.rng.Int64N(int64(20 * time.Millisecond))
		case opAExtend:
			c.Dur = int64(ackLease) + w.rng.Int64N(int64(ackLease))
		}
	default:
		i := w.rng.IntN(len(w.maps))
		m, key = w.maps[i], "k"+strconv.Itoa(w.rng.IntN(keysPerMap))
		c.Key = mapShapes[i].name + "/" + key
		switch op {
		case opStore, opLoadOrStore, opSwap:
			c.Val = w.value()
		case opCAS:
			c.Old, c.Val = w.expect(c.Key), w.value()
		case opCAD:
			c.Old = w.expect(c.Key)
		case opAdd:
			c.D = int64(w.rng.IntN(9)) - 3
		}
	}
	return w.do(&c, m, key)
}

// do logs c, runs it and logs the response.
func (w *recorder) do(c *logRec, m *shmarena.Map, key string) error {
	c.T = mono()
	if err := w.write(c); err != nil {
		return err
	}
	r := logRec{Ev: "ret", ID: c.ID}
	var err error
	switch c.Op {
	case opLoad, opCounter:
		busy := m.Stats().Busy
		if c.Op == opLoad {
			r.Out, r.OK = m.Load(key)
		} else {
			r.N, r.OK = m.Counter(key)
		}
		r.Busy = !r.OK && m.Stats().Busy != busy
	case opStore:
		err = m.Store(key, c.Val)
	case opDelete:
		r.OK = m.Delete(key)
	case opLoadOrStore:
		r.Out, r.OK, err = m.LoadOrStore(key, c.Val)
	case opLoadAndDelete:
		r.Out, r.OK = m.LoadAndDelete(key)
	case opSwap:
		r.Out, r.OK, err = m.Swap(key, c.Val)
	case opCAS:
		r.OK, err = m.CompareAndSwap(key, c.Old, c.Val)
	case opCAD:
		r.OK = m.CompareAndDelete(key, c.Old)
	case opAdd:
		r.N, err = m.Add(key, c.D)
	case opPublish:
		r.Seq, err = w.ring.Publish("", c.Val)
	case opBatch:
		r.Seq, err = w.ring.PublishBatch("", c.Vals)
	case opAPublish:
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		r.Seq, err = w.ackRing.PublishWait(ctx, "job", c.Val)
		cancel()
	case opAClaim:
		for _, rec := range w.ackGroup.Claim(c.Max) {
			r.Recs = append(r.Recs, ackRec{Seq: rec.Seq, Deliv: rec.Deliveries})
			r.Outs = append(r.Outs, rec.Payload)
			w.held = append(w.held, rec)
		}
		if len(w.held) > 6 { // left to run out
			w.held = slices.Delete(w.held, 0, len(w.held)-6)
		}
	case opAAck, opANack, opAExtend:
		switch c.Op {
		case opAAck:
			err = w.ackGroup.Ack(w.picked...)
		case opANack:
			err = w.ackGroup.Nack(w.picked[0], time.Duration(c.Dur))
		default:
			err = w.ackGroup.Extend(w.picked[0], time.Duration(c.Dur))
		}
		w.picked = w.picked[:0]
		if errors.Is(err, shmarena.ErrLeaseLost) {
			r.Lost, err = true, nil
		}
	case opClaim:
		switch recs := w.group.Claim(1); len(recs) {
		case 0:
		case 1:
			r.Seq, r.Out = recs[0].Seq, recs[0].Payload
		default:
			return fmt.Errorf("Claim(1) returned %d records", len(recs))
		}
	}
	r.T = mono()
	r.Err = errText(err)
	if err := w.write(&r); err != nil {
		return err
	}
	w.note(c, &r)
	return nil
}

// note remembers what the operation says the key holds now.
func (w *recorder) note(c, r *logRec) {
	if c.Key == "" || r.Err != "" {
		return
	}
	switch c.Op {
	case opLoad, opLoadOrStore:
		if r.OK {
			w.seen[c.Key] = string(r.Out)
		}
	case opCounter, opAdd:
		if r.OK || c.Op == opAdd {
			w.seen[c.Key] = le64(r.N)
		}
	case opStore, opSwap:
		w.seen[c.Key] = string(c.Val)
	case opCAS:
		if r.OK {
			w.seen[c.Key] = string(c.Val)
		}
	}
}

// Environment of a worker process.
const (
	envRole     = "LINCHECK_ROLE"
	envArena    = "LINCHECK_ARENA"
	envLog      = "LINCHECK_LOG"
	envClient   = "LINCHECK_CLIENT"
	envDeadline = "LINCHECK_DEADLINE" // CLOCK_MONOTONIC nanoseconds
	envSeed     = "LINCHECK_SEED"
)

// workerMain is a worker process: it attaches to the arena and runs
// operations until the deadline.
func workerMain() error {
	client, err1 := strconv.Atoi(os.Getenv(envClient))
	deadline, err2 := strconv.ParseInt(os.Getenv(envDeadline), 10, 64)
	seed, err3 := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	r, err := openRegions(os.Getenv(envArena), false)
	if err != nil {
		return err
	}
	defer r.a.Close()
	w, err := newRecorder(r, client, seed, os.Getenv(envLog))
	if err != nil {
		return err
	}
	for mono() < deadline {
		if err := w.step(); err != nil {
			return err
		}
	}
	return w.log.Close()
}
