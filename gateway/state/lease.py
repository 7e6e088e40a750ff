"""Leases with fencing: one gateway of a fleet decides for a named thing (a model's rollout).

A lease on ``name`` is held by one instance until ``ttl`` after its last renewal; another
instance that takes it after it lapsed (or the first) gets the next *token*, a number that only
grows (the same instance taking it again keeps its token: a reload's new gateway is the same
instance, and one instance's decisions are ordered by its own book). Decisions taken
under a lease carry the token in their version (`fenced_version`: ``token << FENCE_BITS`` at
least), and the store refuses a decision on a fenced target whose token is below the lease's
current one, so a holder that lost its lease (paused, partitioned, slow) and wakes up cannot
overwrite what the new holder decided: its writes are refused by the store script itself,
not by its own belief about the lease. Operators' decisions on other gateways take the fence
they last saw, so they pass as well.

`LEASE` is the Redis script (one round trip, Redis's own clock); `MemoryLeases` is the same
rule for `MemoryStore` (one process: the contract tests).
"""

from __future__ import annotations

from typing import NamedTuple

# a holder may take about a million decisions per token
FENCE_BITS = 20
# decision targets the store fences
FENCED_PREFIX = "rollout:"


class Lease(NamedTuple):
    # by the instance that asked
    held: bool
    # the current fencing token (0: never taken)
    token: int
    # who holds it now ("" if nobody)
    holder: str


def fenced_version(token: int) -> int:
    return token << FENCE_BITS


def token_of(version: int) -> int:
    return version >> FENCE_BITS


def refused(key: str, version: int, fence: int) -> bool:
    """Whether the store refuses a decision on ``key`` at ``version`` under ``fence``."""
    return key.startswith(FENCED_PREFIX) and token_of(version) < fence


# KEYS: the lease hash ({N}:lease, fields <name>:holder, <name>:until (ms), <name>:token)
# ARGV: name, holder, ttl ms, release (1: give it up if held)
LEASE = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local name, holder, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local h = redis.call('HGET', KEYS[1], name .. ':holder')
local u = tonumber(redis.call('HGET', KEYS[1], name .. ':until') or '0')
local token = tonumber(redis.call('HGET', KEYS[1], name .. ':token') or '0')
if ARGV[4] == '1' then
  if h == holder then
    redis.call('HSET', KEYS[1], name .. ':until', 0)
  end
  return {0, token, ''}
end
if h and u > now and h ~= holder then
  return {0, token, h}
end
if h ~= holder then
  token = redis.call('HINCRBY', KEYS[1], name .. ':token', 1)
  redis.call('HSET', KEYS[1], name .. ':holder', holder)
end
redis.call('HSET', KEYS[1], name .. ':until', now + ttl)
return {1, token, holder}
"""

# the check the push script makes for each decision (KEYS[12]: the lease hash)
FENCE_CHECK = f"""
  if write and string.sub(key, 1, {len(FENCED_PREFIX)}) == '{FENCED_PREFIX}' then
    local fence = tonumber(redis.call('HGET', KEYS[12], key .. ':token') or '0') or 0
    if math.floor(version / {2**FENCE_BITS}) < fence then
      write = false  -- a stale lease holder's decision: refused
    end
  end
"""


class MemoryLeases:
    """`LEASE` for one process, on the store's wall clock."""

    def __init__(self) -> None:
        # name -> holder, until, token
        self._held: dict[str, tuple[str, float, int]] = {}

    def take(self, name: str, holder: str, ttl_s: float, wall: float, release: bool) -> Lease:
        current, until, token = self._held.get(name, ("", 0.0, 0))
        if release:
            if current == holder:
                self._held[name] = (current, 0.0, token)
            return Lease(False, token, "")
        if current and until > wall and current != holder:
            return Lease(False, token, current)
        if current != holder:
            token += 1
        self._held[name] = (holder, wall + ttl_s, token)
        return Lease(True, token, holder)

    def fence(self, name: str) -> int:
        return self._held.get(name, ("", 0.0, 0))[2]
