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
- One round trip per decision: one Lua script per behavior, called with EVALSHA (on
  NOSCRIPT the script is sent once with EVAL), written on the connection's socket and its
  reply read here for a client of a redis-py release this was tested on (_fast.py), else
  through the client's public API (evalsha). Keys expire once idle.
- Decisions use the client's own connection pool (a BlockingConnectionPool is waited on;
  never more connections than its max_connections); a connect made for a decision is tried
  once (the pool's retry policy skips its retries during slidewin's calls only).
- ``on_error="allow"`` (default) | ``"deny"`` | ``"raise"``: what a decision gives when
  Redis is unreachable, times out, answers an error (OOM, READONLY, a key of another type:
  RedisStateError) or nonsense (RedisReplyError); counted in ``.errors`` and logged, named
  for what it is, at most once a minute per limiter. A call that timed out is never retried
  (it may have applied, even after its caller gave up: a stalled server runs it when it
  resumes).
- A keyed limiter's key is at most MAX_KEY_BYTES (1024) bytes once encoded.
- In-flight counts (concurrency limiters, and ``entry()`` on every limiter) are leases that
  expire ``lease_ms`` (default 5 s) after they were taken or last renewed; this process
  renews the leases it holds (a daemon thread per client, or a task on the event loop;
  ``lease_ms`` is at least 100), so a crashed
  client's slots, and those of a decision that ran after its caller timed out, come back.
- Constructing contacts no server; the first decision does.
- ``lease=True`` (RedisLimiter, RedisKeyedLimiter; qps= or rate=, behavior "reject"):
  ``try_acquire`` decides locally on a slice of the current bucket's quota leased from
  Redis ahead of need (counted there when leased, valid only in its bucket, unused permits
  given back); see docs/redis.md, "Leased quotas".

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
