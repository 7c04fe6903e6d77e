package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shmarena/shmarena/ratelimit"
)

// scriptGCRA is go-redis/redis_rate's GCRA script in integer-valued
// microseconds since 2017 (a Lua number holds them exactly), on the
// server's clock (TIME), so hosts with skewed clocks still share one
// limit. KEYS[1] key; ARGV[1] burst, ARGV[2] rate, ARGV[3] period in µs,
// ARGV[4] cost. The key holds the TAT and lapses when it is reached.
// Returns {allowed, remaining, retry after µs (-1 when allowed), reset
// after µs}.
var scriptGCRA = goredis.NewScript(`
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local emission = period / rate
local burst_offset = emission * burst
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1483228800) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now) or now
if tat < now then tat = now end
local new_tat = tat + emission * cost
local diff = now - (new_tat - burst_offset)
if diff < 0 then
  local room = now - (tat - burst_offset)
  local left = 0
  if room > 0 then left = math.floor(room / emission) end
  return {0, left, math.ceil(-diff), math.ceil(tat - now)}
end
local reset_after = new_tat - now
if cost > 0 and reset_after > 0 then
  redis.call('SET', KEYS[1], string.format('%.17g', new_tat), 'PX', math.ceil(reset_after / 1000))
end
return {cost, math.floor(diff / emission), -1, math.ceil(reset_after)}`)

// AllowGCRA makes a ratelimit decision in one script on the server: it
// implements ratelimit.Evaluator, so ratelimit.NewLimiter(m) uses it.
func (m *Map) AllowGCRA(ctx context.Context, key string, limit ratelimit.Limit, n int) (ratelimit.Result, error) {
	vals, err := scriptGCRA.Run(ctx, m.c, []string{m.key(key)},
		limit.Burst, limit.Rate, limit.Period.Microseconds(), n).Int64Slice()
	if err != nil {
		return ratelimit.Result{}, wrap("GCRA", key, err)
	}
	if len(vals) != 4 {
		return ratelimit.Result{}, wrap("GCRA", key, errShortReply)
	}
	res := ratelimit.Result{
		Limit:      limit,
		Allowed:    int(vals[0]),
		Remaining:  int(vals[1]),
		RetryAfter: -1,
		ResetAfter: time.Duration(vals[3]) * time.Microsecond,
	}
	if vals[2] >= 0 {
		res.RetryAfter = time.Duration(vals[2]) * time.Microsecond
	}
	return res, nil
}

// ResetGCRA forgets key's history (DEL).
func (m *Map) ResetGCRA(ctx context.Context, key string) error {
	_, err := m.Delete(ctx, key)
	return err
}

var _ ratelimit.Evaluator = (*Map)(nil)
