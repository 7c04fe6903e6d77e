package shmarena

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const benchRecord = 64 // payload bytes per record in the transport benchmarks

var benchShape = []RegionOption{WithSlots(4096), WithSlotSize(128)}

// BenchmarkPublish measures Publish alone: one goroutine, 64-byte payload,
// nobody reading or sleeping.
func BenchmarkPublish(b *testing.B) {
	a, _ := openTestArena(b, 4<<20)
	r, err := a.Ring("bench", benchShape...)
	require.NoError(b, err)
	p := make([]byte, benchRecord)
	b.SetBytes(benchRecord)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Publish("t", p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishBatch is BenchmarkPublish through PublishBatch, per
// record: batches of 1, 16 and 64 records of 64 bytes (b.N records in
// all), nobody reading or sleeping.
func BenchmarkPublishBatch(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("batch%d", n), func(b *testing.B) {
			a, _ := openTestArena(b, 4<<20)
			r, err := a.Ring("bench", benchShape...)
			require.NoError(b, err)
			batch := make([][]byte, n)
			for i := range batch {
				batch[i] = make([]byte, benchRecord)
			}
			b.SetBytes(benchRecord)
			b.ReportAllocs()
			for i := 0; i < b.N; i += n {
				if _, err := r.PublishBatch("t", batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchChild starts this benchmark's binary as a child playing role.
func benchChild(b *testing.B, bench, role, path string, n int, files ...*os.File) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^"+bench+"$", "-test.benchtime=1x")
	cmd.Env = append(os.Environ(), envRole+"="+role, envPath+"="+path, envArg+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = files
	require.NoError(b, cmd.Start())
	return cmd
}

func ringConsumerRole(path, arg string) error {
	n, _ := strconv.Atoi(arg)
	a, err := Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.Ring("bench", benchShape...)
	if err != nil {
		return err
	}
	g, err := r.Group("consumers")
	if err != nil {
		return err
	}
	ctl, err := a.Ring("ctl", WithSlots(64), WithSlotSize(64))
	if err != nil {
		return err
	}
	if _, err := ctl.Publish("ready", nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got := 0
	for got < n {
		recs := g.Claim(0)
		for _, rec := range recs {
			if len(rec.Payload) != benchRecord {
				return fmt.Errorf("record %d has %d bytes", rec.Seq, len(rec.Payload))
			}
		}
		got += len(recs)
		if len(recs) == 0 {
			if err := g.Wait(ctx); err != nil {
				return err
			}
		}
	}
	if st := g.Stats(); st.Lapped != 0 {
		return fmt.Errorf("lapped %d", st.Lapped)
	}
	return nil
}

func streamConsumerRole(_, arg string) error {
	n, _ := strconv.Atoi(arg)
	data, ready := os.NewFile(3, "data"), os.NewFile(4, "ready")
	if _, err := ready.Write([]byte{1}); err != nil {
		return err
	}
	br := bufio.NewReaderSize(data, 64<<10)
	rec := make([]byte, benchRecord)
	for i := 0; i < n; i++ {
		if _, err := io.ReadFull(br, rec); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
	}
	return nil
}

// BenchmarkTransport sends 64-byte records from this process to a
// consumer process: through a ring Group (with flow control: the producer
// never gets a lap ahead), over a Unix domain stream socket and over a
// pipe, one write per record in each case. ns/op is per record, from the
// first send to the consumer having read the last. The ratios to the
// ring are logged.
func BenchmarkTransport(b *testing.B) {
	asChild(map[string]func(string, string) error{"ring": ringConsumerRole, "stream": streamConsumerRole})
	per := map[string]float64{}
	record := func(name string, b *testing.B, d time.Duration) {
		per[name] = float64(d.Nanoseconds()) / float64(b.N)
	}
	b.Run("ring-group", func(b *testing.B) {
		a, path := openTestArena(b, 4<<20)
		r, err := a.Ring("bench", benchShape...)
		require.NoError(b, err)
		g, err := r.Group("consumers")
		require.NoError(b, err)
		ctl, err := a.Ring("ctl", WithSlots(64), WithSlotSize(64))
		require.NoError(b, err)
		ready := ctl.Cursor()
		cmd := benchChild(b, "BenchmarkTransport", "ring", path, b.N)
		awaitRecords(b, ready, 1)
		p := make([]byte, benchRecord)
		slots := uint64(r.Stats().Slots)
		b.SetBytes(benchRecord)
		start := time.Now()
		b.ResetTimer()
		var pos uint64 // the group position as last read: re-read only when it may be a lap behind
		for i := 0; i < b.N; i++ {
			for r.Head()-pos >= slots-1 {
				if pos = g.Position(); r.Head()-pos >= slots-1 {
					runtime.Gosched()
				}
			}
			if _, err := r.Publish("t", p); err != nil {
				b.Fatal(err)
			}
		}
		require.NoError(b, cmd.Wait())
		b.StopTimer()
		record("ring", b, time.Since(start))
	})
	stream := func(name string, mk func() (w *os.File, childData, childReady, ready *os.File)) {
		b.Run(name, func(b *testing.B) {
			w, cd, cr, ready := mk()
			cmd := benchChild(b, "BenchmarkTransport", "stream", "", b.N, cd, cr)
			cd.Close()
			cr.Close()
			one := make([]byte, 1)
			_, err := ready.Read(one)
			require.NoError(b, err)
			p := make([]byte, benchRecord)
			b.SetBytes(benchRecord)
			start := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := w.Write(p); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, cmd.Wait())
			b.StopTimer()
			record(name, b, time.Since(start))
			w.Close()
			ready.Close()
		})
	}
	stream("unix", func() (*os.File, *os.File, *os.File, *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		require.NoError(b, err)
		s0, s1 := os.NewFile(uintptr(fds[0]), "parent"), os.NewFile(uintptr(fds[1]), "child")
		s1dup, err := unix.Dup(fds[1])
		require.NoError(b, err)
		return s0, s1, os.NewFile(uintptr(s1dup), "child-ready"), s0
	})
	stream("pipe", func() (*os.File, *os.File, *os.File, *os.File) {
		dr, dw, err := os.Pipe()
		require.NoError(b, err)
		rr, rw, err := os.Pipe()
		require.NoError(b, err)
		return dw, dr, rw, rr
	})
	if ring := per["ring"]; ring > 0 && per["unix"] > 0 && per["pipe"] > 0 {
		b.Logf("per record: ring %.0f ns, unix socket %.0f ns (%.1fx the ring), pipe %.0f ns (%.1fx the ring)",
			ring, per["unix"], per["unix"]/ring, per["pipe"], per["pipe"]/ring)
	}
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func wakeConsumerRole(path, arg string) error {
	n, _ := strconv.Atoi(arg)
	a, err := Open(path)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.Ring("wake", WithSlots(64), WithSlotSize(64))
	if err != nil {
		return err
	}
	g, err := r.Group("sleepers")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lat := make([]int64, 0, n)
	for len(lat) < n {
		if err := g.Wait(ctx); err != nil {
			return err
		}
		now := monoNow()
		for _, rec := range g.Claim(0) {
			sent, _ := strconv.ParseInt(string(rec.Payload), 10, 64)
			lat = append(lat, now-sent)
		}
	}
	slices.Sort(lat)
	fmt.Println("RESULT", lat[len(lat)/2], lat[len(lat)*99/100])
	return nil
}

// BenchmarkWakeLatency measures how long a consumer process asleep in
// Group.Wait takes to return after a record is published: the producer
// publishes only once the consumer has announced itself as a sleeper, and
// the consumer timestamps its wake-up (CLOCK_MONOTONIC, shared by
// processes). Reported: median and 99th percentile in ns.
func BenchmarkWakeLatency(b *testing.B) {
	asChild(map[string]func(string, string) error{"wake": wakeConsumerRole})
	// "asleep" first lets the consumer sleep 200 µs, as
	// BenchmarkPublishWaitWake/asleep does its producer: the difference
	// from "armed" is what waking a thread that has gone idle costs on
	// the machine, whoever wakes it.
	for _, asleep := range []time.Duration{0, 200 * time.Microsecond} {
		name := "armed"
		if asleep > 0 {
			name = "asleep"
		}
		b.Run(name, func(b *testing.B) { wakeLatency(b, asleep) })
	}
}

func wakeLatency(b *testing.B, asleep time.Duration) {
	a, path := openTestArena(b, 1<<20)
	r, err := a.Ring("wake", WithSlots(64), WithSlotSize(64))
	require.NoError(b, err)
	g, err := r.Group("sleepers")
	require.NoError(b, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkWakeLatency$", "-test.benchtime=1x")
	cmd.Env = append(os.Environ(), envRole+"=wake", envPath+"="+path, envArg+"="+strconv.Itoa(b.N))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Publish only to a consumer that has taken everything and sleeps.
		for r.sleepers() == 0 || g.Position() != r.Head() {
			runtime.Gosched()
		}
		if asleep > 0 {
			time.Sleep(asleep)
		}
		if _, err := r.Publish("t", []byte(strconv.FormatInt(monoNow(), 10))); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var median, p99 int64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "RESULT %d %d", &median, &p99); err == nil {
			break
		}
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok && ee.Sys().(syscall.WaitStatus).Signaled() {
		b.Fatalf("consumer died: %v", err)
	}
	require.NoError(b, err)
	b.ReportMetric(float64(median), "wake-ns-median")
	b.ReportMetric(float64(p99), "wake-ns-p99")
}

// BenchmarkClaim measures the consumer's side alone: Claim of runs of
// records already published (64-byte payloads), one goroutine, no producer
// running. ns/op is per record.
func BenchmarkClaim(b *testing.B) {
	a, _ := openTestArena(b, 4<<20)
	r, err := a.Ring("claim", benchShape...)
	require.NoError(b, err)
	g, err := r.Group("g")
	require.NoError(b, err)
	p := make([]byte, benchRecord)
	b.ReportAllocs()
	b.SetBytes(benchRecord)
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("max%d", batch), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; {
				b.StopTimer()
				n := min(b.N-i, 2048)
				for range n {
					_, err := r.Publish("t", p)
					require.NoError(b, err)
				}
				b.StartTimer()
				for got := 0; got < n; {
					got += len(g.Claim(batch))
				}
				i += n
			}
		})
	}
	// AppendClaim into one reused slice: the form that allocates nothing.
	var recs []Record
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("append%d", batch), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; {
				b.StopTimer()
				n := min(b.N-i, 2048)
				for range n {
					_, err := r.Publish("t", p)
					require.NoError(b, err)
				}
				b.StartTimer()
				for got := 0; got < n; {
					recs = g.AppendClaim(recs[:0], batch)
					got += len(recs)
				}
				i += n
			}
		})
	}
}

// BenchmarkRoundTrip is the harness's ring pipeline in one goroutine, for
// instruction counts (bench/irperop.sh): PublishWait of a batch of 64-byte
// records, then the consumer's claims of that batch, per record. The two
// groups compared by the harness: at-most-once WithBackpressure with
// AppendClaim into a reused slice, and at-least-once WithAck with
// AckAndClaim. Both producers use PublishWait, as in bench/cmd/shmbench.
func BenchmarkRoundTrip(b *testing.B) {
	p := make([]byte, benchRecord)
	ctx := context.Background()
	for _, acked := range []bool{false, true} {
		for _, batch := range []int{1, 64} {
			name := fmt.Sprintf("backpressure/append%d", batch)
			if acked {
				name = fmt.Sprintf("acked/ackandclaim%d", batch)
			}
			b.Run(name, func(b *testing.B) {
				a, _ := openTestArena(b, 4<<20)
				r, err := a.Ring("rt", ackBenchShape...)
				require.NoError(b, err)
				opt := WithBackpressure()
				if acked {
					opt = WithAck(time.Minute)
				}
				g, err := r.Group("g", opt)
				require.NoError(b, err)
				var recs []Record
				b.ReportAllocs()
				b.SetBytes(benchRecord)
				for i := 0; i < b.N; i += batch {
					for range batch {
						if _, err := r.PublishWait(ctx, "t", p); err != nil {
							b.Fatal(err)
						}
					}
					for got := 0; got < batch; got += len(recs) {
						if acked {
							if recs, err = g.AckAndClaim(recs, batch); err != nil {
								b.Fatal(err)
							}
						} else {
							recs = g.AppendClaim(recs[:0], batch)
						}
					}
				}
				if acked {
					require.NoError(b, g.Ack(recs...))
				}
			})
		}
	}
}

// BenchmarkPublishPolled is Publish while another goroutine polls the
// ring's head in a loop, as a reader waiting for records does: what the
// reader's loads of the next-sequence word cost the producer (its line
// moves between the cores on every poll that sees a new record).
func BenchmarkPublishPolled(b *testing.B) {
	a, _ := openTestArena(b, 4<<20)
	r, err := a.Ring("bench", benchShape...)
	require.NoError(b, err)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seen := uint64(0); ; {
			select {
			case <-stop:
				return
			default:
			}
			for range 64 {
				if h := r.Head(); h != seen {
					seen = h
				}
			}
		}
	}()
	p := make([]byte, benchRecord)
	b.SetBytes(benchRecord)
	for b.Loop() {
		if _, err := r.Publish("t", p); err != nil {
			b.Fatal(err)
		}
	}
	close(stop)
	<-done
}
