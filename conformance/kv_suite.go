package conformance

import (
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RunKeyValue checks every verb of shmarena.KeyValue, its deadline and
// counter rules, and exactness under concurrent clients.
func RunKeyValue(t *testing.T, b Backend) {
	for _, c := range []struct {
		name string
		f    func(*testing.T, Backend)
	}{
		{"LoadStore", kvLoadStore},
		{"Deadlines", kvDeadlines},
		{"LoadOrStoreSwap", kvLoadOrStoreSwap},
		{"CompareAndSwap", kvCompareAndSwap},
		{"Delete", kvDelete},
		{"Counters", kvCounters},
		{"CounterOverflow", kvCounterOverflow},
		{"Clear", kvClear},
		{"ConcurrentAdds", kvConcurrentAdds},
		{"ConcurrentCAS", kvConcurrentCAS},
		{"RateLimitExact", kvRateLimitExact},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, b) })
	}
}

func kvLoadStore(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	_, ok, err := kv.Load(ctx, "absent")
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, kv.Store(ctx, "k", []byte("v1")))
	v, ok, err := kv.Load(ctx, "k")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "v1", string(v))
	require.NoError(t, kv.Store(ctx, "k", []byte{}))
	v, ok, err = kv.Load(ctx, "k")
	require.NoError(t, err)
	assert.True(t, ok, "an empty value is present")
	assert.Empty(t, v)
	bin := []byte{0, 1, 2, 255, 0}
	require.NoError(t, kv.Store(ctx, "bin\x00key", bin))
	buf := make([]byte, 2, 16)
	out, ok, err := kv.AppendLoad(ctx, buf, "bin\x00key")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, append([]byte{0, 0}, bin...), out, "AppendLoad appends")
	out, ok, err = kv.AppendLoad(ctx, buf, "absent")
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, buf, out, "a miss returns dst unchanged")
	assert.ErrorIs(t, kv.Store(ctx, "", []byte("x")), shmarena.ErrEmptyKey)
}

// eventuallyAbsent waits (a bounded while, not a speed judgment) for key
// to lapse.
func eventuallyAbsent(t *testing.T, kv shmarena.KeyValue, key string) {
	t.Helper()
	assert.Eventually(t, func() bool {
		_, ok, err := kv.Load(t.Context(), key)
		return err == nil && !ok
	}, 10*time.Second, 10*time.Millisecond, "%q should lapse", key)
}

func kvDeadlines(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	require.NoError(t, kv.Store(ctx, "k", []byte("v"), shmarena.WithTTL(time.Hour)))
	d, ok, err := kv.TTL(ctx, "k")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.True(t, d > 59*time.Minute && d <= time.Hour, "TTL %v", d)

	require.NoError(t, kv.Store(ctx, "k", []byte("v2"), shmarena.WithKeepTTL()))
	d, _, _ = kv.TTL(ctx, "k")
	assert.Greater(t, d, 59*time.Minute, "KEEPTTL keeps the deadline")
	require.NoError(t, kv.Store(ctx, "k", []byte("v3")))
	d, ok, _ = kv.TTL(ctx, "k")
	assert.True(t, ok)
	assert.Zero(t, d, "a plain store drops the deadline")

	_, ok, err = kv.TTL(ctx, "absent")
	require.NoError(t, err)
	assert.False(t, ok)

	ok, err = kv.Expire(ctx, "k", time.Hour)
	require.NoError(t, err)
	assert.True(t, ok)
	d, _, _ = kv.TTL(ctx, "k")
	assert.Greater(t, d, 59*time.Minute)
	ok, err = kv.Expire(ctx, "k", 0)
	require.NoError(t, err)
	assert.True(t, ok, "EXPIRE k 0 of a present key deletes it (docs/ttl.md)")
	_, ok, _ = kv.TTL(ctx, "k")
	assert.False(t, ok, "deleted")
	ok, err = kv.Expire(ctx, "k", 0)
	require.NoError(t, err)
	assert.False(t, ok, "EXPIRE k 0 of an absent key")
	require.NoError(t, kv.Store(ctx, "k", []byte("v"), shmarena.WithTTL(time.Hour)))
	ok, err = kv.Expire(ctx, "absent", time.Hour)
	require.NoError(t, err)
	assert.False(t, ok)

	require.NoError(t, kv.Store(ctx, "short", []byte("v"), shmarena.WithTTL(30*time.Millisecond)))
	eventuallyAbsent(t, kv, "short")
	ok, err = kv.Expire(ctx, "short", time.Hour)
	require.NoError(t, err)
	assert.False(t, ok, "a lapsed key is absent to Expire")
}

func kvLoadOrStoreSwap(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	actual, loaded, err := kv.LoadOrStore(ctx, "k", []byte("first"), shmarena.WithTTL(time.Hour))
	require.NoError(t, err)
	assert.False(t, loaded)
	assert.Equal(t, "first", string(actual))
	d, _, _ := kv.TTL(ctx, "k")
	assert.Greater(t, d, 59*time.Minute, "LoadOrStore applies its TTL to what it stores")
	actual, loaded, err = kv.LoadOrStore(ctx, "k", []byte("second"))
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.Equal(t, "first", string(actual))

	prev, loaded, err := kv.Swap(ctx, "k", []byte("third"))
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.Equal(t, "first", string(prev))
	prev, loaded, err = kv.Swap(ctx, "new", []byte("x"), shmarena.WithTTL(time.Hour))
	require.NoError(t, err)
	assert.False(t, loaded)
	assert.Nil(t, prev)
	d, _, _ = kv.TTL(ctx, "new")
	assert.Greater(t, d, 59*time.Minute)
}

func kvCompareAndSwap(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	swapped, err := kv.CompareAndSwap(ctx, "k", []byte{}, []byte("x"))
	require.NoError(t, err)
	assert.False(t, swapped, "an absent key never matches, not even the empty value")
	require.NoError(t, kv.Store(ctx, "k", []byte("a"), shmarena.WithTTL(time.Hour)))
	swapped, err = kv.CompareAndSwap(ctx, "k", []byte("b"), []byte("c"))
	require.NoError(t, err)
	assert.False(t, swapped)
	swapped, err = kv.CompareAndSwap(ctx, "k", []byte("a"), []byte("c"))
	require.NoError(t, err)
	assert.True(t, swapped)
	v, _, _ := kv.Load(ctx, "k")
	assert.Equal(t, "c", string(v))
	d, _, _ := kv.TTL(ctx, "k")
	assert.Greater(t, d, 59*time.Minute, "compare-and-swap keeps the deadline")

	deleted, err := kv.CompareAndDelete(ctx, "k", []byte("a"))
	require.NoError(t, err)
	assert.False(t, deleted)
	deleted, err = kv.CompareAndDelete(ctx, "k", []byte("c"))
	require.NoError(t, err)
	assert.True(t, deleted)
	_, ok, _ := kv.Load(ctx, "k")
	assert.False(t, ok)
	deleted, err = kv.CompareAndDelete(ctx, "k", []byte("c"))
	require.NoError(t, err)
	assert.False(t, deleted)
}

func kvDelete(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	deleted, err := kv.Delete(ctx, "k")
	require.NoError(t, err)
	assert.False(t, deleted)
	require.NoError(t, kv.Store(ctx, "k", []byte("v")))
	deleted, err = kv.Delete(ctx, "k")
	require.NoError(t, err)
	assert.True(t, deleted)
	require.NoError(t, kv.Store(ctx, "k", []byte("v")))
	v, loaded, err := kv.LoadAndDelete(ctx, "k")
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.Equal(t, "v", string(v))
	_, loaded, err = kv.LoadAndDelete(ctx, "k")
	require.NoError(t, err)
	assert.False(t, loaded)
}

func kvCounters(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	_, ok, err := kv.Counter(ctx, "n")
	require.NoError(t, err)
	assert.False(t, ok)
	n, err := kv.Add(ctx, "n", 5, shmarena.WithTTL(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, int64(5), n, "an absent counter starts at delta")
	d, _, _ := kv.TTL(ctx, "n")
	assert.Greater(t, d, 59*time.Minute, "a new counter takes the TTL")
	n, err = kv.Add(ctx, "n", -7, shmarena.WithTTL(time.Second))
	require.NoError(t, err)
	assert.Equal(t, int64(-2), n)
	d, _, _ = kv.TTL(ctx, "n")
	assert.Greater(t, d, 59*time.Minute, "a live counter keeps its deadline")
	c, ok, err := kv.Counter(ctx, "n")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, int64(-2), c)

	_, err = kv.Add(ctx, "short", 100, shmarena.WithTTL(30*time.Millisecond))
	require.NoError(t, err)
	eventuallyAbsent(t, kv, "short")
	n, err = kv.Add(ctx, "short", 3)
	require.NoError(t, err)
	assert.Equal(t, int64(3), n, "a lapsed counter restarts at delta")
	d, ok, _ = kv.TTL(ctx, "short")
	assert.True(t, ok)
	assert.Zero(t, d, "and without a deadline when none is given")

	require.NoError(t, kv.Store(ctx, "text", []byte("not a number")))
	_, err = kv.Add(ctx, "text", 1)
	assert.ErrorIs(t, err, shmarena.ErrNotCounter)
	v, _, _ := kv.Load(ctx, "text")
	assert.Equal(t, "not a number", string(v), "a refused Add changes nothing")
	_, ok, err = kv.Counter(ctx, "text")
	require.NoError(t, err)
	assert.False(t, ok)
}

func kvCounterOverflow(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	_, err := kv.Add(ctx, "n", math.MaxInt64)
	require.NoError(t, err)
	n, err := kv.Add(ctx, "n", 1)
	if kv.Capabilities().Has(shmarena.CapCounterWraps) {
		require.NoError(t, err)
		assert.Equal(t, int64(math.MinInt64), n)
		return
	}
	assert.Error(t, err, "overflow is refused")
	c, _, _ := kv.Counter(ctx, "n")
	assert.Equal(t, int64(math.MaxInt64), c, "and changes nothing")
}

func kvClear(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	for i := range 200 {
		require.NoError(t, kv.Store(ctx, "k"+strconv.Itoa(i), []byte("v")))
	}
	require.NoError(t, kv.Clear(ctx))
	for i := range 200 {
		_, ok, err := kv.Load(ctx, "k"+strconv.Itoa(i))
		require.NoError(t, err)
		require.False(t, ok, "k%d survived Clear", i)
	}
	require.NoError(t, kv.Store(ctx, "after", []byte("v")))
	_, ok, _ := kv.Load(ctx, "after")
	assert.True(t, ok, "the store works after Clear")
}

// Four clients (processes in shared memory) add 10,000 each to one
// counter: every Add counts.
func kvConcurrentAdds(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	const clients, adds = 4, 10000
	jobs := make([]Job, clients)
	for i := range jobs {
		jobs[i] = Job{Kind: JobAdd, Key: "hot", N: adds}
	}
	b.Run(t, jobs...)
	n, ok, err := kv.Counter(ctx, "hot")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, int64(clients*adds), n)
}

// Four clients increment one 8-byte value by compare-and-swap: no swap is
// lost, and each client wins exactly the swaps it needed.
func kvConcurrentCAS(t *testing.T, b Backend) {
	kv, ctx := b.KeyValue(t), ctxFor(t)
	const clients, incs = 4, 500
	require.NoError(t, kv.Store(ctx, "cas", make([]byte, 8)))
	jobs := make([]Job, clients)
	for i := range jobs {
		jobs[i] = Job{Kind: JobCAS, Key: "cas", N: incs}
	}
	outs := b.Run(t, jobs...)
	total := uint64(0)
	for _, o := range outs {
		for _, s := range parseLines(o, "swaps ") {
			total += s
		}
	}
	assert.Equal(t, uint64(clients*incs), total)
	v, _, err := kv.Load(ctx, "cas")
	require.NoError(t, err)
	require.Len(t, v, 8)
	assert.Equal(t, uint64(clients*incs), binary.LittleEndian.Uint64(v))
}

// Four clients race for one key's rate-limit burst through
// ratelimit.Limiter (compare-and-swap in shared memory, a script on
// Redis): exactly Burst decisions pass, each Remaining handed out once.
func kvRateLimitExact(t *testing.T, b Backend) {
	b.KeyValue(t)
	jobs := make([]Job, 4)
	for i := range jobs {
		jobs[i] = Job{Kind: JobAllow, Key: "client", N: AllowLimit.Burst / 2}
	}
	seen := map[uint64]int{}
	total := 0
	for _, o := range b.Run(t, jobs...) {
		for _, r := range parseLines(o, "remaining ") {
			seen[r]++
			total++
		}
	}
	assert.Equal(t, AllowLimit.Burst, total, "allowed decisions")
	for r := range uint64(AllowLimit.Burst) {
		assert.Equal(t, 1, seen[r], "remaining %d", r)
	}
}
