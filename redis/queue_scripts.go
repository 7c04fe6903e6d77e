package redis

import goredis "github.com/redis/go-redis/v9"

// The Queue's scripts. Every key a script touches is one of a queue's
// keys, which share the queue's hash tag, so each runs on one node of a
// cluster, atomically.

// luaIDs are helpers for stream IDs ("ms-seq") shared by the scripts.
const luaIDs = `
local function parse_id(id)
  local ms, sq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(sq)
end
local function id_less(a, b)
  local am, as = parse_id(a)
  local bm, bs = parse_id(b)
  return am < bm or (am == bm and as < bs)
end
local function field(flat, name)
  for i = 1, #flat, 2 do
    if flat[i] == name then return flat[i + 1] end
  end
  return nil
end
`

// scriptPublish: KEYS[1] stream; ARGV[1] payload, ARGV[2] capacity (0:
// unbounded). A bounded stream keeps every record some group has not
// finished: it first trims what every group finished (MINID: the oldest
// pending record of each group, or the one after its last delivered),
// then refuses (returns 0) when capacity records remain. With no group,
// the oldest records are trimmed (MAXLEN), as a ring overwrites.
var scriptPublish = goredis.NewScript(luaIDs + `
local cap = tonumber(ARGV[2])
if cap <= 0 then
  return redis.call('XADD', KEYS[1], '*', 'p', ARGV[1])
end
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok or #groups == 0 then
  return redis.call('XADD', KEYS[1], 'MAXLEN', cap, '*', 'p', ARGV[1])
end
local floor = nil
for _, g in ipairs(groups) do
  local f
  if field(g, 'pending') > 0 then
    f = redis.call('XPENDING', KEYS[1], field(g, 'name'))[2]
  else
    local ms, sq = parse_id(field(g, 'last-delivered-id'))
    f = ms .. '-' .. (sq + 1)
  end
  if floor == nil or id_less(f, floor) then floor = f end
end
redis.call('XTRIM', KEYS[1], 'MINID', floor)
if redis.call('XLEN', KEYS[1]) >= cap then
  return 0
end
return redis.call('XADD', KEYS[1], '*', 'p', ARGV[1])`)

// scriptClaim: KEYS[1] stream, KEYS[2] dead-letter stream, KEYS[3] the
// group's counts; ARGV[1] group, ARGV[2] consumer, ARGV[3] count, ARGV[4]
// lease in ms, ARGV[5] max deliveries (0: none), ARGV[6] 1 to publish dead
// letters, ARGV[7] the topic. First leases idle for a lease or more
// (XAUTOCLAIM), dead-lettering those already delivered max times (a dead
// letter in shmarena's format, and XACK, in this one script), then new
// records (XREADGROUP '>'). Returns {id, fields, deliveries} per record.
var scriptClaim = goredis.NewScript(luaIDs + `
local want = tonumber(ARGV[3])
local maxd = tonumber(ARGV[5])
local out = {}
local start = '0-0'
for _ = 1, 16 do
  if #out >= want then break end
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], start, 'COUNT', want - #out)
  for _, e in ipairs(r[2]) do
    local id = e[1]
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
    local count = p[1][4]
    if maxd > 0 and count > maxd then
      if ARGV[6] == '1' then
        local ms, sq = parse_id(id)
        local lo = (ms % 1024) * 4194304 + sq
        local hi = math.floor(ms / 1024)
        local payload = field(e[2], 'p') or ''
        local dl = struct.pack('<I4I4I4I2I2', lo, hi, count - 1, #ARGV[7], 0) .. ARGV[7] .. payload
        redis.call('XADD', KEYS[2], '*', 'p', dl)
      end
      redis.call('XACK', KEYS[1], ARGV[1], id)
      redis.call('HINCRBY', KEYS[3], 'deadlettered', 1)
    else
      redis.call('HINCRBY', KEYS[3], 'redelivered', 1)
      out[#out + 1] = {id, e[2], count}
    end
  end
  start = r[1]
  if start == '0-0' then break end
end
if #out < want then
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', want - #out, 'STREAMS', KEYS[1], '>')
  if r then
    for _, e in ipairs(r[1][2]) do out[#out + 1] = {e[1], e[2], 1} end
  end
end
return out`)

// scriptAck: KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, then pairs
// of id and deliveries. Acks each record still leased to this consumer at
// that delivery; returns {lost, first lost id}.
var scriptAck = goredis.NewScript(`
local lost, first = 0, ''
for i = 3, #ARGV, 2 do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] and p[1][4] == tonumber(ARGV[i + 1]) then
    redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  else
    lost = lost + 1
    if first == '' then first = ARGV[i] end
  end
end
return {lost, first}`)

// scriptIdle: KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, ARGV[3]
// id, ARGV[4] deliveries, ARGV[5] idle ms. Sets the idle time of a record
// still leased to this consumer at that delivery (XCLAIM IDLE JUSTID,
// which counts no delivery): its lease then ends lease - idle from now.
// Nack and Extend. Returns 1, or 0 when the lease is lost.
var scriptIdle = goredis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p ~= 1 or p[1][2] ~= ARGV[2] or p[1][4] ~= tonumber(ARGV[4]) then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[5], 'JUSTID')
return 1`)

// scriptJoin: KEYS[1] group registry, KEYS[2] stream; ARGV[1] group,
// ARGV[2] shape (topic, max deliveries, dead letter), ARGV[3] start id.
// Records the group's shape (or finds it differs: returns the recorded
// one) and creates the stream group if needed. Returns ” on success.
var scriptJoin = goredis.NewScript(`
local had = redis.call('HGET', KEYS[1], ARGV[1])
if had and had ~= ARGV[2] then return had end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[2], ARGV[1], ARGV[3], 'MKSTREAM')
if not ok and not string.find(tostring(err), 'BUSYGROUP') then
  return redis.error_reply(tostring(err))
end
return ''`)

// scriptDrop: KEYS[1] group registry, KEYS[2] stream, KEYS[3] counts;
// ARGV[1] group, ARGV[2] the shape read before. Destroys the stream
// group (its pending entries go with it) and forgets the group. Returns 0
// when there was no such group.
var scriptDrop = goredis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3])
pcall(redis.call, 'XGROUP', 'DESTROY', KEYS[2], ARGV[1])
return 1`)

// scriptDue: KEYS[1] stream; ARGV[1] group, ARGV[2] lease ms. Returns 1
// when a Claim may find something: a record after the group's last
// delivered one, or a pending record idle for a lease.
var scriptDue = goredis.NewScript(luaIDs + `
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok then return 1 end
for _, g in ipairs(groups) do
  if field(g, 'name') == ARGV[1] then
    local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
    if #last == 1 and id_less(field(g, 'last-delivered-id'), last[1][1]) then return 1 end
    if #redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[2], '-', '+', 1) > 0 then return 1 end
    return 0
  end
end
return 1`)
