package redis

import goredis "github.com/redis/go-redis/v9"

// The Map's scripts. Each is loaded once per server (SCRIPT LOAD on the
// first NOSCRIPT) and run by its hash: go-redis's Script.Run.
var (
	// KEYS[1] key; ARGV[1] old, ARGV[2] new. An absent key (GET's false)
	// never equals a string.
	scriptCAS = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0`)

	// KEYS[1] key; ARGV[1] old.
	scriptCAD = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

	// KEYS[1] key; ARGV[1] delta, ARGV[2] deadline in ms for a key this
	// creates (0: none). The new value is returned as Redis's decimal
	// string: a Lua number (a double) would round counters past 2^53.
	scriptAdd = goredis.NewScript(`
local existed = redis.call('EXISTS', KEYS[1])
redis.call('INCRBY', KEYS[1], ARGV[1])
if existed == 0 and tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('GET', KEYS[1])`)
)
