package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/ratelimit"
	shmredis "github.com/shmarena/shmarena/redis"
	"github.com/shmarena/shmarena/redis/redistest"
)

// What moving from one host to several costs, the same code through the
// shmarena.KeyValue and shmarena.Queue interfaces on shared memory, a Redis
// server and a 3-master Redis Cluster, all on this machine (loopback):
//
//	go test -run '^$' -bench 'RateLimit|Backend' -benchtime 1s .
//
// ns/op is wall time over all clients' operations, so 1e9/(ns/op) is the
// operations per second of the whole pool; cpu-ns/op is the CPU time this
// process and the Redis servers spent per operation, the fairer figure on
// a machine busy with other work. Compare backends within one run.

// backendSet is one store of each kind for a benchmark.
type backendSet struct {
	names []string
	kv    map[string]shmarena.KeyValue
	queue map[string]shmarena.Queue
	cpu   map[string]func() time.Duration // the servers' CPU time (nil for shm)
	redis goredis.UniversalClient // the single server's client, for redis_rate
}

func newBackends(b *testing.B, withCluster bool) *backendSet {
	b.Helper()
	s := &backendSet{kv: map[string]shmarena.KeyValue{}, queue: map[string]shmarena.Queue{},
		cpu: map[string]func() time.Duration{}}
	a, err := shmarena.Open(filepath.Join(b.TempDir(), "arena"), shmarena.WithSize(64<<20))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	m, err := a.Map("bench", shmarena.WithSlots(1<<16), shmarena.WithSlotSize(128))
	if err != nil {
		b.Fatal(err)
	}
	r, err := a.Ring("bench-queue", shmarena.WithSlots(1<<14), shmarena.WithSlotSize(128))
	if err != nil {
		b.Fatal(err)
	}
	s.names = append(s.names, "shm")
	s.kv["shm"], s.queue["shm"] = shmarena.NewKeyValue(m), shmarena.NewQueue(r)

	srv := redistest.StartServer(b)
	single := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 16})
	b.Cleanup(func() { _ = single.Close() })
	s.redis = single
	s.add(b, "redis", single)
	if withCluster {
		cl := redistest.StartCluster(b, 3)
		cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 16})
		b.Cleanup(func() { _ = cc.Close() })
		s.add(b, "cluster", cc)
	}
	return s
}

func (s *backendSet) add(b *testing.B, name string, c goredis.UniversalClient) {
	q, err := shmredis.NewQueue(c, "bench", shmredis.WithCapacity(1<<14))
	if err != nil {
		b.Fatal(err)
	}
	s.names = append(s.names, name)
	s.kv[name], s.queue[name] = shmredis.NewMap(c, "bench:"), q
	s.cpu[name] = redisCPU(c)
}

// clients runs b.N calls of op split over n goroutines, op(i) in the
// goroutine's own loop i. Besides wall time it reports cpu-ns/op: the CPU
// time this process and the servers (serverCPU, nil for none) spent per
// operation, which a machine busy with other work inflates far less than
// wall time.
func clients(b *testing.B, n int, serverCPU func() time.Duration, op func(client, i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	per := b.N / n
	cpu0, srv0 := processCPU(), cpuOf(serverCPU)
	b.ResetTimer()
	for c := range n {
		wg.Go(func() {
			for i := range per + boolInt(c < b.N%n) {
				if err := op(c, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := processCPU() - cpu0 + cpuOf(serverCPU) - srv0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func cpuOf(f func() time.Duration) time.Duration {
	if f == nil {
		return 0
	}
	return f()
}

// redisCPU reads the servers' used_cpu_user + used_cpu_sys (INFO cpu),
// summed over every master of a cluster.
func redisCPU(c goredis.UniversalClient) func() time.Duration {
	one := func(ctx context.Context, node *goredis.Client) (time.Duration, error) {
		info, err := node.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, err
		}
		var total float64
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
		return time.Duration(total * float64(time.Second)), nil
	}
	return func() time.Duration {
		ctx := context.Background()
		if cc, ok := c.(*goredis.ClusterClient); ok {
			var mu sync.Mutex
			var sum time.Duration
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
				d, err := one(ctx, node)
				mu.Lock()
				sum += d
				mu.Unlock()
				return err
			})
			return sum
		}
		d, _ := one(ctx, c.(*goredis.Client))
		return d
	}
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

var keys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = "key:" + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkRateLimit: decisions per second of ratelimit.Limiter on shared
// memory (compare-and-swap), the same Limiter on Redis (one script per
// decision), and go-redis/redis_rate on the same Redis, for 1 and 4
// clients over 1,024 keys. The limit is high enough that decisions are
// mostly allowed (an allowed decision is the one that writes).
func BenchmarkRateLimit(b *testing.B) {
	s := newBackends(b, false)
	ctx := context.Background()
	limit := ratelimit.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	shm := ratelimit.NewLimiter(s.kv["shm"])
	onRedis := ratelimit.NewLimiter(s.kv["redis"])
	rr := redis_rate.NewLimiter(s.redis)
	rrLimit := redis_rate.Limit{Rate: limit.Rate, Burst: limit.Burst, Period: limit.Period}
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("shm/clients=%d", n), func(b *testing.B) {
			clients(b, n, nil, func(c, i int) error {
				_, err := shm.Allow(ctx, keys[(i*4+c)&1023], limit)
				return err
			})
		})
		b.Run(fmt.Sprintf("redis/clients=%d", n), func(b *testing.B) {
			clients(b, n, s.cpu["redis"], func(c, i int) error {
				_, err := onRedis.Allow(ctx, keys[(i*4+c)&1023], limit)
				return err
			})
		})
		b.Run(fmt.Sprintf("redis_rate/clients=%d", n), func(b *testing.B) {
			clients(b, n, s.cpu["redis"], func(c, i int) error {
				_, err := rr.Allow(ctx, keys[(i*4+c)&1023], rrLimit)
				return err
			})
		})
	}
}

// BenchmarkBackendMap: each KeyValue verb, one client, on every backend.
func BenchmarkBackendMap(b *testing.B) {
	s := newBackends(b, true)
	ctx := context.Background()
	val := make([]byte, 64)
	for _, name := range s.names {
		kv := s.kv[name]
		for _, k := range keys {
			if err := kv.Store(ctx, k, val); err != nil {
				b.Fatal(err)
			}
		}
		buf := make([]byte, 0, 128)
		verbs := []struct {
			verb string
			op   func(i int) error
		}{
			{"Load", func(i int) error {
				var err error
				buf, _, err = kv.AppendLoad(ctx, buf[:0], keys[i&1023])
				return err
			}},
			{"Store", func(i int) error { return kv.Store(ctx, keys[i&1023], val) }},
			{"Add", func(i int) error { _, err := kv.Add(ctx, "n:"+keys[i&15], 1); return err }},
			{"CompareAndSwap", func(i int) error { _, err := kv.CompareAndSwap(ctx, keys[i&1023], val, val); return err }},
			{"Delete+Store", func(i int) error {
				if _, err := kv.Delete(ctx, keys[i&1023]); err != nil {
					return err
				}
				return kv.Store(ctx, keys[i&1023], val)
			}},
		}
		for _, v := range verbs {
			b.Run(v.verb+"/"+name, func(b *testing.B) {
				clients(b, 1, s.cpu[name], func(_, i int) error { return v.op(i) })
			})
		}
	}
}

// BenchmarkBackendQueue: Publish to a topic no group reads (the ring
// overwrites, the stream is trimmed), and one job's whole cycle through
// an at-least-once group (Publish, Claim, Ack), one client, on every
// backend.
func BenchmarkBackendQueue(b *testing.B) {
	s := newBackends(b, true)
	ctx := context.Background()
	payload := make([]byte, 64)
	for _, name := range s.names {
		q := s.queue[name]
		b.Run("Publish/"+name, func(b *testing.B) {
			clients(b, 1, s.cpu[name], func(_, i int) error {
				_, err := q.Publish(ctx, "unread", payload)
				return err
			})
		})
	}
	for _, name := range s.names {
		q := s.queue[name]
		b.Run("Publish+Claim+Ack/"+name, func(b *testing.B) {
			g, err := q.Group(ctx, "workers", shmarena.WithTopic("jobs"), shmarena.WithAck(time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			clients(b, 1, s.cpu[name], func(_, i int) error {
				if _, err := q.Publish(ctx, "jobs", payload); err != nil {
					return err
				}
				recs, err := g.Claim(ctx, 1)
				if err != nil {
					return err
				}
				if len(recs) != 1 {
					return fmt.Errorf("claimed %d records", len(recs))
				}
				return g.Ack(ctx, recs...)
			})
		})
	}
}
