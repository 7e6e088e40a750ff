"""The two Lua scripts of the Redis store: one push and one pull, each atomic, one round trip.

Layout under a namespace N, every key tagged ``{N}`` so that all of them hash to one slot and
each script runs on one Redis Cluster node: ``{N}:gen`` the generation token (created by
whichever script runs first on an empty Redis), ``{N}:seq`` the change sequence, ``{N}:chg`` a
sorted set key -> seq of its last change, ``{N}:exp`` a sorted set key -> expiry (ms),
``{N}:cnt`` a hash key -> counter total, ``{N}:sig`` a hash replica id -> encoded signal, and
``{N}:b:<origin>`` the highest batch number applied for that origin. Every key a script touches
comes in KEYS (none is built inside a script), so the same scripts run on one Redis, a
Sentinel-managed primary and a Cluster. Counters expire through ``{N}:exp``: each script
deletes up to `PRUNE` expired ones, so an expired counter is gone from the next pull.

The trade-off: one namespace lives on one cluster node (the price of atomic scripts); a
cluster spreads several namespaces (fleets), not one.
"""

from __future__ import annotations

PRUNE = 1000  # expired counters deleted per script call, at most

_PRUNE = f"""
local function prune(chg, exp, cnt)
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local old = redis.call('ZRANGEBYSCORE', exp, '-inf', now_ms, 'LIMIT', 0, {PRUNE})
  if #old > 0 then
    redis.call('ZREM', chg, unpack(old))
    redis.call('ZREM', exp, unpack(old))
    redis.call('HDEL', cnt, unpack(old))
  end
end
"""

# KEYS: gen, seq, chg, exp, sig, cnt, batch mark
# ARGV: gen token, batch number, mark ttl s, n counters, n signals,
#       then per counter: key, amount, expire at ms; per signal: id, epoch, stamp, origin, blob
PUSH = (
    _PRUNE
    + """
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
local number = tonumber(ARGV[2])
local last = tonumber(redis.call('GET', KEYS[7]) or '-1')
if number <= last then
  return {gen, 0, {}}
end
redis.call('SET', KEYS[7], ARGV[2], 'EX', ARGV[3])
local seq = redis.call('INCR', KEYS[2])
local n_counters, n_signals = tonumber(ARGV[4]), tonumber(ARGV[5])
local i = 6
for _ = 1, n_counters do
  local key, amount, expire_ms = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('HINCRBY', KEYS[6], key, amount)
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
prune(KEYS[3], KEYS[4], KEYS[6])
return {gen, 1, stale}
"""
)

# KEYS: gen, seq, chg, exp, sig, cnt
# ARGV: gen token, cursor generation, cursor seq
PULL = (
    _PRUNE
    + """
local gen = redis.call('GET', KEYS[1])
if not gen then
  gen = ARGV[1]
  redis.call('SET', KEYS[1], gen)
end
prune(KEYS[3], KEYS[4], KEYS[6])
local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
local after = tonumber(ARGV[3])
local full = 0
if gen ~= ARGV[2] or after > seq or after <= 0 then
  after = 0
  full = 1
end
local keys = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. after, '+inf')
local found, values = {}, {}
for first = 1, #keys, 1000 do
  local names = {}
  for j = first, math.min(first + 999, #keys) do
    table.insert(names, keys[j])
  end
  local got = redis.call('HMGET', KEYS[6], unpack(names))
  for j = 1, #names do
    if got[j] then
      table.insert(found, names[j])
      table.insert(values, got[j])
    end
  end
end
return {gen, seq, full, found, values, redis.call('HGETALL', KEYS[5])}
"""
)
