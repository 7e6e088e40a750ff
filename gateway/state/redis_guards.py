"""Lua guards both store scripts run first: whatever sits under a namespace's keys is data.

Someone with write access to the Redis may have put anything there. Before a script relies on
a key, the guards make sure of it, and name each thing they dropped in the script's reply (the
gateway counts and logs them, `gateway.state.rejects`):

- a key of the wrong type (``{N}:dec`` a string, ``{N}:cnt`` a list, ...) is deleted: it holds
  nothing this layout wrote, and every call would fail on it otherwise;
- a change sequence that is not a small integer is set back to the highest sequence the change
  log holds (cursors past it make their next pull a full one);
- a generation token longer than any the scripts write is replaced (every gateway resyncs);
- a stored value over its kind's size is never handed back (`bounded_hash`), so an oversized
  decision costs the store one length check per pull, not its size on every gateway's wire;
- a counter that is not an integer, or would leave int64, is replaced by the delta added to
  it (`add_counter`), where ``HINCRBY`` would fail the whole push.

Decoding and checking every value's fields is the gateway's part (`gateway.state.limits`).
"""

from __future__ import annotations

from gateway.state.limits import DECISION_BYTES, HEARTBEAT_BYTES, MAX_KEY_CHARS, SIGNAL_BYTES

MAX_SEQ_DIGITS = 17  # far from int64's end: INCR can never overflow it
MAX_GENERATION_CHARS = 64

GUARDS = (
    """
local function check_types(spec, dropped)
  for j = 1, #spec, 2 do
    local t = redis.call('TYPE', spec[j])['ok']
    if t ~= 'none' and t ~= spec[j + 1] then
      redis.call('DEL', spec[j])
      table.insert(dropped, 'key:' .. spec[j])
    end
  end
end
local function check_seq(seq, chg, dropped)
  local v = redis.call('GET', seq)
  if v and (#v > @SEQ_DIGITS@ or not string.match(v, '^%d+$')) then
    local top = redis.call('ZREVRANGE', chg, 0, 0, 'WITHSCORES')
    redis.call('SET', seq, string.format('%.0f', top[2] and tonumber(top[2]) or 0))
    table.insert(dropped, 'seq:' .. seq)
  end
end
local function generation(key, token, dropped)
  local gen = redis.call('GET', key)
  if gen and #gen > @GEN_CHARS@ then
    gen = nil
    table.insert(dropped, 'key:' .. key)
  end
  if not gen then
    gen = token
    redis.call('SET', key, gen)
  end
  return gen
end
-- field, value, field, value ... of a hash, leaving out values over limit bytes
local function bounded_hash(hash, limit, dropped)
  local out = {}
  for _, field in ipairs(redis.call('HKEYS', hash)) do
    if #field > @KEY_CHARS@ or redis.call('HSTRLEN', hash, field) > limit then
      table.insert(dropped, 'oversized:' .. hash .. ':' .. string.sub(field, 1, 100))
    else
      table.insert(out, field)
      table.insert(out, redis.call('HGET', hash, field))
    end
  end
  return out
end
local function fits(hash, field, limit)
  return redis.call('HSTRLEN', hash, field) <= limit
end
local function add_counter(cnt, key, amount, dropped)
  local done = redis.pcall('HINCRBY', cnt, key, amount)
  if type(done) == 'table' and done['err'] then
    redis.call('HSET', cnt, key, amount)
    table.insert(dropped, 'counter:' .. string.sub(key, 1, 100))
  end
end
""".replace("@SEQ_DIGITS@", str(MAX_SEQ_DIGITS))
    .replace("@GEN_CHARS@", str(MAX_GENERATION_CHARS))
    .replace("@KEY_CHARS@", str(MAX_KEY_CHARS))
)

SIGNAL_LIMIT = str(SIGNAL_BYTES)
DECISION_LIMIT = str(DECISION_BYTES)
HEARTBEAT_LIMIT = str(HEARTBEAT_BYTES)
