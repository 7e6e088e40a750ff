"""The two Lua scripts of the Redis store: one push and one pull, each atomic, one round trip.

Layout under a namespace N, every key tagged ``{N}`` so that all of them hash to one slot and
each script runs on one Redis Cluster node: ``{N}:gen`` the generation token (created by
whichever script runs first on an empty Redis), ``{N}:seq`` the change sequence, ``{N}:chg`` a
sorted set key -> seq of its last change, ``{N}:exp`` a sorted set key -> expiry (ms),
``{N}:cnt`` a hash key -> counter total, ``{N}:sig`` a hash replica id -> encoded signal,
``{N}:sexp`` a sorted set replica id -> when its entry in ``{N}:sig`` expires (ms), and
``{N}:b:<origin>`` the highest batch number applied for that origin, and ``{N}:dec`` a hash
target -> encoded operator decision (`decisions.Decision`: no expiry, the winner by version
kept, as signals are ordered by epoch), ``{N}:hb`` a hash instance -> its newest encoded
heartbeat (`fleet.Heartbeat`) and ``{N}:hbexp`` a sorted set instance -> when that expires (ms),
pruned as signals are, and ``{N}:lease`` the leases and their fencing tokens
(`gateway.state.lease`: a push refuses a fenced decision under an older token). Every key a
script touches
comes in KEYS (none is built inside a script), so the same scripts run on one Redis, a
Sentinel-managed primary and a Cluster. Counters expire through ``{N}:exp`` and signals through
``{N}:sexp``: each script deletes up to `PRUNE` expired ones of each, so they are gone from the
next pull. Time is Redis's own (``TIME``), one reading per call.

A signal's entry lives until the last expiry of any signal offered for that replica, winner or
loser (`base.SIGNAL_TTL_S`); an entry past it counts as absent even before it is pruned, and a
signal offered already expired is dropped. So expiry cannot let an older signal win: any signal
offered before the entry went is expired by then and dropped if offered again.

A fleet mid-upgrade: gateways on the previous scripts write ``{N}:sig`` and never touch
``{N}:sexp``. That stays correct: a push treats an entry without an expiry as live (its expiry
read from the signal itself) and orders against it as always, and a pull that finds more
signals than expiries gives the missing ones theirs (the signal's own, one pass over the hash),
which also clears the signals left from before the upgrade. What old scripts cannot do is prune,
nor extend an entry's expiry when they overwrite it, so such a signal may be pruned as early as
the expiry recorded for the one it replaced: early, never reordered (every gateway keeps what it
applied). Old gateways keep pulling whatever is still stored, as before.

Whatever is stored is data, not trusted: each script first runs the guards of `redis_guards`
(keys of the wrong type, a corrupt sequence, oversized values, non-integer counters) and names
what they dropped as the last element of its reply.

The trade-off: one namespace lives on one cluster node (the price of atomic scripts); a
cluster spreads several namespaces (fleets), not one.
"""

from __future__ import annotations

from gateway.state.fleet import HELD_AHEAD_S
from gateway.state.lease import FENCE_CHECK
from gateway.state.limits import MAX_INT64
from gateway.state.redis_guards import DECISION_LIMIT, GUARDS, HEARTBEAT_LIMIT, SIGNAL_LIMIT

# expired counters, and expired signals, deleted per script call, at most
PRUNE = 1000

_COMMON = (
    GUARDS
    + f"""
local SIGNAL_LIMIT, DECISION_LIMIT = {SIGNAL_LIMIT}, {DECISION_LIMIT}
local HEARTBEAT_LIMIT, MAX_VERSION = {HEARTBEAT_LIMIT}, {MAX_INT64}
local HELD_AHEAD_MS = {int(HELD_AHEAD_S * 1000)}
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
local function prune(now, chg, exp, cnt, sexp, sig)
  local old = redis.call('ZRANGEBYSCORE', exp, '-inf', now, 'LIMIT', 0, {PRUNE})
  if #old > 0 then
    redis.call('ZREM', chg, unpack(old))
    redis.call('ZREM', exp, unpack(old))
    redis.call('HDEL', cnt, unpack(old))
  end
  old = redis.call('ZRANGEBYSCORE', sexp, '-inf', now, 'LIMIT', 0, {PRUNE})
  if #old > 0 then
    redis.call('ZREM', sexp, unpack(old))
    redis.call('HDEL', sig, unpack(old))
  end
end
-- a stored signal [id, breaker, ejected_until, epoch, origin, stamp], or nil if malformed
local function decode(blob)
  if #blob > SIGNAL_LIMIT then
    return nil
  end
  local ok, s = pcall(cjson.decode, blob)
  if ok and type(s) == 'table' and tonumber(s[3]) and tonumber(s[4]) and tonumber(s[6])
      and type(s[5]) == 'string' then
    return s
  end
  return nil
end
local function prune_beats(now, hb, hbexp)
  local old = redis.call('ZRANGEBYSCORE', hbexp, '-inf', now, 'LIMIT', 0, {PRUNE})
  if #old > 0 then
    redis.call('ZREM', hbexp, unpack(old))
    redis.call('HDEL', hb, unpack(old))
  end
end
-- when a signal expires (ms): the later of its stamp and its ejection's end, plus the ttl
local function expiry(s, ttl_ms)
  return math.floor(math.max(tonumber(s[3]), tonumber(s[6])) * 1000) + ttl_ms
end
"""
)
# KEYS: gen, seq, chg, exp, sig, cnt, sexp, batch mark, dec, hb, hbexp, lease
# ARGV: gen token, batch number, mark ttl s, n counters, n signals, signal ttl ms, n decisions,
#       n heartbeats (0 or 1), then per counter: key, amount, expire at ms;
#       per signal: id, epoch, stamp, origin, blob, expire at ms;
#       per decision: target, version, at, origin, blob;
#       per heartbeat: instance, seen (s), expire at ms, blob
PUSH = (
    _COMMON
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
local now = now_ms()
local dropped = {}
check_types({KEYS[1], 'string', KEYS[2], 'string', KEYS[3], 'zset', KEYS[4], 'zset',
             KEYS[5], 'hash', KEYS[6], 'hash', KEYS[7], 'zset', KEYS[8], 'string',
             KEYS[9], 'hash', KEYS[10], 'hash', KEYS[11], 'zset', KEYS[12], 'hash'}, dropped)
check_seq(KEYS[2], KEYS[3], dropped)
local gen = generation(KEYS[1], ARGV[1], dropped)
local number = tonumber(ARGV[2])
local last = tonumber(redis.call('GET', KEYS[8]) or '-1') or -1
if number <= last then
  return {gen, 0, {}, dropped}
end
redis.call('SET', KEYS[8], ARGV[2], 'EX', ARGV[3])
local seq = redis.call('INCR', KEYS[2])
local n_counters, n_signals = tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl_ms = tonumber(ARGV[6])
local n_decisions = tonumber(ARGV[7])
local n_beats = tonumber(ARGV[8])
local i = 9
for _ = 1, n_counters do
  local key, amount, expire_ms = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  add_counter(KEYS[6], key, amount, dropped)
  redis.call('ZADD', KEYS[3], seq, key)
  redis.call('ZADD', KEYS[4], expire_ms, key)
  i = i + 3
end
local stale = {}
for _ = 1, n_signals do
  local id, origin = ARGV[i], ARGV[i + 3]
  local epoch, stamp = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local expire_ms = tonumber(ARGV[i + 5])
  if expire_ms > now then  -- one offered already expired has nothing to tell: dropped
    local s = nil
    local kept = 0
    local stored = redis.call('HGET', KEYS[5], id)
    if stored then
      s = decode(stored)  -- a malformed one counts as absent (pulls skip it too)
    end
    if s then
      -- no expiry: written by a gateway on the previous scripts; the signal's own then
      kept = tonumber(redis.call('ZSCORE', KEYS[7], id)) or expiry(s, ttl_ms)
      if kept <= now then  -- expired, not pruned yet: gone
        s = nil
        kept = 0
      end
    end
    local write = true
    if s then
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
    -- the entry outlives every signal offered for it, so none of them can come back later
    redis.call('ZADD', KEYS[7], math.max(kept, expire_ms), id)
  end
  i = i + 6
end
for _ = 1, n_decisions do
  local key, origin = ARGV[i], ARGV[i + 3]
  local version, at = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local write = true
  local stored = redis.call('HGET', KEYS[9], key)
  if stored and fits(KEYS[9], key, DECISION_LIMIT) then
    -- [key, action, until, by, reason, at, version, origin]; a malformed one loses, as does
    -- one whose version is not an integer within int64
    local ok, d = pcall(cjson.decode, stored)
    local v = ok and type(d) == 'table' and tonumber(d[7])
    if v and v >= 0 and v <= MAX_VERSION and v == math.floor(v) and tonumber(d[6])
        and type(d[8]) == 'string' then
      write = greater(version, at, origin, tonumber(d[7]), tonumber(d[6]), d[8])
    end
  end
"""
    + FENCE_CHECK
    + """
  if write then
    redis.call('HSET', KEYS[9], key, ARGV[i + 4])
  end
  i = i + 5
end
for _ = 1, n_beats do
  local instance, seen, expire_ms = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if expire_ms > now then
    local write = true
    local stored = redis.call('HGET', KEYS[10], instance)
    -- [instance, version, started, seen, ...]; the newest one stays (an oversized one loses),
    -- unless it is stamped more than HELD_AHEAD past this clock (a forged stamp: fleet.py)
    if stored and fits(KEYS[10], instance, HEARTBEAT_LIMIT) then
      local ok, b = pcall(cjson.decode, stored)
      if ok and type(b) == 'table' and tonumber(b[4]) then
        write = seen > tonumber(b[4]) or tonumber(b[4]) * 1000 > now + HELD_AHEAD_MS
      end
    end
    if write then
      redis.call('HSET', KEYS[10], instance, ARGV[i + 3])
      redis.call('ZADD', KEYS[11], expire_ms, instance)
    end
  end
  i = i + 4
end
prune(now, KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[5])
prune_beats(now, KEYS[10], KEYS[11])
return {gen, 1, stale, dropped}
"""
)

# KEYS: gen, seq, chg, exp, sig, cnt, sexp, dec, hb, hbexp
# ARGV: gen token, cursor generation, cursor seq, signal ttl ms
PULL = (
    _COMMON
    + """
local now = now_ms()
local dropped = {}
check_types({KEYS[1], 'string', KEYS[2], 'string', KEYS[3], 'zset', KEYS[4], 'zset',
             KEYS[5], 'hash', KEYS[6], 'hash', KEYS[7], 'zset', KEYS[8], 'hash',
             KEYS[9], 'hash', KEYS[10], 'zset'}, dropped)
check_seq(KEYS[2], KEYS[3], dropped)
local gen = generation(KEYS[1], ARGV[1], dropped)
if redis.call('HLEN', KEYS[5]) > redis.call('ZCARD', KEYS[7]) then
  -- signals without an expiry (written by the previous scripts) get their own
  local ttl_ms = tonumber(ARGV[4])
  local all = redis.call('HGETALL', KEYS[5])
  for j = 1, #all, 2 do
    if not redis.call('ZSCORE', KEYS[7], all[j]) then
      local s = decode(all[j + 1])
      redis.call('ZADD', KEYS[7], s and expiry(s, ttl_ms) or now + ttl_ms, all[j])
    end
  end
end
prune(now, KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[5])
prune_beats(now, KEYS[9], KEYS[10])
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
return {gen, seq, full, found, values, bounded_hash(KEYS[5], SIGNAL_LIMIT, dropped),
        bounded_hash(KEYS[8], DECISION_LIMIT, dropped),
        bounded_hash(KEYS[9], HEARTBEAT_LIMIT, dropped), dropped}
"""
)
