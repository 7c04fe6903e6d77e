package redis

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/conformance"
	"github.com/shmarena/shmarena/redis/redistest"
)

// backend is the conformance.Backend of one Redis deployment: each test
// gets a prefix (a map) or a queue name of its own; Run gives each job a
// client of its own.
type backend struct {
	newClient func() goredis.UniversalClient
	n         atomic.Int64
	prefix    string // of the last KeyValue
	queue     string // of the last Queue
	capacity  int
}

func (b *backend) client(t *testing.T) goredis.UniversalClient {
	c := b.newClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (b *backend) KeyValue(t *testing.T) shmarena.KeyValue {
	b.prefix, b.queue = "kv"+strconv.FormatInt(b.n.Add(1), 10)+":", ""
	return NewMap(b.client(t), b.prefix)
}

func (b *backend) Queue(t *testing.T, capacity int) shmarena.Queue {
	b.queue, b.prefix, b.capacity = "q"+strconv.FormatInt(b.n.Add(1), 10), "", capacity
	q, err := NewQueue(b.client(t), b.queue, WithCapacity(capacity))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func (b *backend) Run(t *testing.T, jobs ...conformance.Job) [][]string {
	t.Helper()
	outs := make([]bytes.Buffer, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		c := b.newClient()
		var kv shmarena.KeyValue
		var q shmarena.Queue
		if b.prefix != "" {
			kv = NewMap(c, b.prefix)
		}
		if b.queue != "" {
			q, _ = NewQueue(c, b.queue, WithCapacity(b.capacity))
		}
		wg.Go(func() {
			defer c.Close() // a dying job's client goes away holding its leases
			errs[i] = conformance.RunJob(t.Context(), kv, q, j, &outs[i])
		})
	}
	wg.Wait()
	lines := make([][]string, len(jobs))
	for i := range jobs {
		if errs[i] != nil && !errors.Is(errs[i], conformance.ErrDie) {
			t.Errorf("job %d (%s): %v", i, jobs[i].Kind, errs[i])
		}
		lines[i] = strings.Split(strings.TrimSpace(outs[i].String()), "\n")
	}
	return lines
}

func TestConformanceRedis(t *testing.T) {
	s := redistest.StartServer(t)
	conformance.Run(t, &backend{newClient: func() goredis.UniversalClient {
		return goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	}})
}

func TestConformanceRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	conformance.Run(t, &backend{newClient: func() goredis.UniversalClient {
		return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
	}})
}
