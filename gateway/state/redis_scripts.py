"""The two Lua scripts of the Redis store: one push and one pull, each atomic, one round trip.

Layout under a prefix P: ``P gen`` the generation token (created by whichever script runs
first on an empty Redis), ``P seq`` the change sequence, ``P chg`` a sorted set key -> seq of
its last change, ``P exp`` a sorted set key -> expiry (ms) to prune ``chg``, ``P sig`` a hash
replica id -> encoded signal, ``P c:<key>`` one counter, ``P b:<origin>`` the highest batch
number applied for that origin. Counter keys are built inside the scripts, so this needs a
single Redis (or a primary with replicas), not Redis Cluster.
"""

from __future__ import annotations

# KEYS: gen, seq, chg, exp, sig, batch mark
# ARGV: gen token, prefix, batch number, mark ttl s, n counters, n signals,
#       then per counter: key, amount, expire at ms; per signal: id, epoch, stamp, origin, blob
PUSH = """
-- the epoch rule: (epoch, stamp, origin) compared in order; origins byte by byte, as Python does
local function bytes_greater(a, b)
  for k = 1, math.min(#a, #b) do
    local x, y = string.byte(a, k), string.byte(b, k)
    if x ~= y then return x > y end
  end
  return #a > #b
end
local function greater(e1, t1, o1, e2, t2, o2)
  if e1 ~= e2 then return e1 > e2 end
  if t1 ~= t2 then return t1 > t2 end
  return bytes_greater(o1, o2)
end
local gen = redis.call('GET', KEYS[1])
if not gen then
  gen = ARGV[1]
  redis.call('SET', KEYS[1], gen)
end
local number = tonumber(ARGV[3])
local last = tonumber(redis.call('GET', KEYS[6]) or '-1')
if number <= last then
  return {gen, 0, {}}
end
redis.call('SET', KEYS[6], ARGV[3], 'EX', ARGV[4])
local seq = redis.call('INCR', KEYS[2])
local n_counters, n_signals = tonumber(ARGV[5]), tonumber(ARGV[6])
local i = 7
for _ = 1, n_counters do
  local key, amount, expire_ms = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local counter = ARGV[2] .. 'c:' .. key
  redis.call('INCRBY', counter, amount)
  redis.call('PEXPIREAT', counter, expire_ms)
  redis.call('ZADD', KEYS[3], seq, key)
  redis.call('ZADD', KEYS[4], expire_ms, key)
  i = i + 3
end
local stale = {}
for _ = 1, n_signals do
  local id, origin = ARGV[i], ARGV[i + 3]
  local epoch, stamp = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local write = true
  local stored = redis.call('HGET', KEYS[5], id)
  if stored then
    local s = cjson.decode(stored)  -- [id, breaker, ejected_until, epoch, origin, stamp]
    local s_epoch, s_stamp, s_origin = tonumber(s[4]), tonumber(s[6]), s[5]
    if greater(s_epoch, s_stamp, s_origin, epoch, stamp, origin) then
      table.insert(stale, id)
      write = false
    elseif not greater(epoch, stamp, origin, s_epoch, s_stamp, s_origin) then
      write = false  -- the same signal again
    end
  end
  if write then
    redis.call('HSET', KEYS[5], id, ARGV[i + 4])
  end
  i = i + 5
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local old = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms, 'LIMIT', 0, 500)
if #old > 0 then
  redis.call('ZREM', KEYS[3], unpack(old))
  redis.call('ZREM', KEYS[4], unpack(old))
end
return {gen, 1, stale}
"""

# KEYS: gen, seq, chg, sig
# ARGV: gen token, prefix, cursor generation, cursor seq
PULL = """
local gen = redis.call('GET', KEYS[1])
if not gen then
  gen = ARGV[1]
  redis.call('SET', KEYS[1], gen)
end
local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
local after = tonumber(ARGV[4])
local full = 0
if gen ~= ARGV[3] or after > seq or after <= 0 then
  after = 0
  full = 1
end
local keys = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. after, '+inf')
local found, values = {}, {}
for first = 1, #keys, 1000 do
  local chunk, names = {}, {}
  for j = first, math.min(first + 999, #keys) do
    table.insert(names, keys[j])
    table.insert(chunk, ARGV[2] .. 'c:' .. keys[j])
  end
  local got = redis.call('MGET', unpack(chunk))
  for j = 1, #names do
    if got[j] then
      table.insert(found, names[j])
      table.insert(values, got[j])
    end
  end
end
return {gen, seq, full, found, values, redis.call('HGETALL', KEYS[4])}
"""
