"""rate= on the Redis types: the same exact edges as in process, day windows included."""
import asyncio

import pytest

from redis_servers import need_server, r, redis_server  # noqa: F401 (fixtures)

S = 10**9
MS = 10**6
T0 = 19_676 * 86_400 * S  # wall-clock ns (the Redis types' now_ns): a whole number of days


def _edges(try_at):
    assert all(try_at(T0) for _ in range(100))
    assert not try_at(T0)
    assert not try_at(T0 + 59_999 * MS)
    assert all(try_at(T0 + 60 * S) for _ in range(100))
    assert not try_at(T0 + 60 * S)


def test_redis_limiter_100_per_minute(r):  # noqa: F811
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "rate-min", rate="100/minute")
    assert (lim.interval_ms, lim.sample_count, lim.rate) == (60_000, 60, "100/minute")
    assert repr(lim).startswith("RedisLimiter('rate-min', rate='100/minute'")
    _edges(lambda t: lim.try_acquire(now_ns=t))


def test_redis_keyed_per_key_and_day(r):  # noqa: F811
    from slidewin.redis import RedisKeyedLimiter

    per_user = RedisKeyedLimiter(r, "rate-keyed", rate="100/minute")
    _edges(lambda t: per_user.try_acquire("alice", now_ns=t))
    assert per_user.try_acquire("bob", now_ns=T0)
    day = RedisKeyedLimiter(r, "rate-day", rate="11/day")  # 11/86400 * 86400 < 11 in doubles
    assert sum(day.try_acquire("k", now_ns=T0) for _ in range(12)) == 11
    assert not day.try_acquire("k", now_ns=T0 + 86_399 * S)
    assert day.try_acquire("k", now_ns=T0 + 86_400 * S)
    assert r.pttl(day._rkey("k")) > 86_400_000  # kept while its window is


def test_async_redis_types(redis_server):  # noqa: F811
    need_server()
    from slidewin.redis import AsyncRedisKeyedLimiter, AsyncRedisLimiter

    async def main():
        c = redis_server.async_client()
        await c.flushall()
        lim = AsyncRedisLimiter(c, "arate", rate="3/second")
        assert [await lim.try_acquire(now_ns=T0) for _ in range(4)] == [True] * 3 + [False]
        assert await lim.try_acquire(now_ns=T0 + S)
        keyed = AsyncRedisKeyedLimiter(c, "akrate", rate="2/hour")
        got = [await keyed.try_acquire("x", now_ns=T0 + k * 60 * S) for k in range(3)]
        assert got == [True, True, False]
        await c.aclose()

    asyncio.run(main())


def test_redis_bad_rate(r):  # noqa: F811
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    for kind in (RedisLimiter, RedisKeyedLimiter):
        with pytest.raises(ValueError, match="rate=.*qps=2"):
            kind(r, "bad", rate="1/minute", qps=2)
        with pytest.raises(ValueError, match="interval_ms=1000"):
            kind(r, "bad", rate="1/minute", interval_ms=1000)
        with pytest.raises(ValueError, match="rate must be"):
            kind(r, "bad", rate="1/week")
