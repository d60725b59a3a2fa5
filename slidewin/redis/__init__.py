"""One limit across hosts: slidewin's limiters with their state in Redis.

    import redis
    from slidewin.redis import RedisLimiter, RedisKeyedLimiter

    r = redis.Redis(host="localhost", port=6379)        # or redis.RedisCluster(...)
    lim = RedisLimiter(r, "api", qps=1000)              # client, name, then Limiter's arguments
    per_user = RedisKeyedLimiter(r, "per-user", qps=10)

``AsyncRedisLimiter`` / ``AsyncRedisKeyedLimiter`` take a ``redis.asyncio`` client; their
methods are coroutines.

- The same decisions as the in-process Limiter for the same ``now_ns``; here ``now_ns`` is
  wall-clock time (ns since the epoch, as ``time.time_ns()``). Omitted, the Redis server's
  clock (``TIME``) is used, so hosts with skewed clocks share one window.
- Redis holds the counts and the controllers' state (one string per limiter, one per key of a
  keyed limiter); the settings belong to each client. A name used with another
  ``interval_ms``/``sample_count`` raises ValueError at its first decision.
- One round trip per decision (a Lua script by EVALSHA, EVAL on NOSCRIPT) over the client's
  own connection pool; a connect made for a decision is tried once. Keys expire once idle.
- ``on_error="allow"`` (default) | ``"deny"`` | ``"raise"``: what a decision gives when
  Redis is unreachable, times out, answers an error (a key of another type:
  RedisStateError) or nonsense (RedisReplyError); counted in ``.errors`` and logged at most
  once a minute per limiter. A call that timed out is never retried (it may have applied).
- A keyed limiter's key is at most MAX_KEY_BYTES (1024) bytes once encoded.
- In-flight counts (concurrency limiters, and ``entry()``) are leases that expire
  ``lease_ms`` (default 5 s, at least 100) after they were taken or last renewed; this
  process renews those it holds, so a crashed client's slots come back.
- Constructing contacts no server; the first decision does.
- ``lease=True`` (qps= or rate=, behavior "reject"): ``try_acquire`` decides locally on a
  slice of the current bucket's quota leased from Redis ahead of need; see docs/redis.md,
  "Leased quotas".

See the README, "Across hosts: slidewin.redis".
"""
from __future__ import annotations

from ._async import AsyncRedisKeyedLimiter, AsyncRedisLimiter
from ._group import AsyncRedisGroup, RedisGroup, all_of
from ._sync import RedisKeyedLimiter, RedisLimiter
from ._wire import MAX_KEY_BYTES, RedisReplyError, RedisStateError

__all__ = [
    "RedisLimiter",
    "RedisKeyedLimiter",
    "AsyncRedisLimiter",
    "AsyncRedisKeyedLimiter",
    "RedisReplyError",
    "RedisStateError",
    "MAX_KEY_BYTES",
    "all_of",
    "RedisGroup",
    "AsyncRedisGroup",
]
