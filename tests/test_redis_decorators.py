"""What is the Redis types' own in their decorator, which is Limiter's (slidewin/_limiter.py):
sync types decorate sync functions and generators, async types coroutine functions and async
generators; a keyed limiter decorates no generator (as KeyedLimiter). What they share with
Limiter (generators holding their entry, on_block checks, timeout=) runs on RedisLimiter and
Limiter alike in tests/test_decorators.py."""

import asyncio
import inspect

import pytest

from slidewin import BlockedError

from limiter_helpers import (ASYNC_HANDLER_IDS, ASYNC_HANDLERS, blocked_async_generators,
                             running_total)
from redis_servers import need_server, r, redis_server  # noqa: F401 (fixtures)


def test_sync_kinds_are_kept(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "dk", concurrency=4)

    def f():
        return 1

    def gen():
        yield 1

    assert not inspect.isgeneratorfunction(lim(f))
    assert inspect.isgeneratorfunction(lim(gen))
    assert lim(gen).__wrapped__ is gen and lim(gen).limiter is lim

    async def co():
        return 1

    async def agen():
        yield 1

    for fn in (co, agen):
        with pytest.raises(TypeError, match="async"):
            lim(fn)


@pytest.mark.parametrize("handler", ASYNC_HANDLERS, ids=ASYNC_HANDLER_IDS)
def test_async_on_block_on_a_keyed_sync_function_is_refused_at_decoration(r, handler):
    """(RedisLimiter's own case runs in tests/test_decorators.py, with Limiter's.)"""
    from slidewin.redis import RedisKeyedLimiter

    def f():
        return 1

    with pytest.raises(TypeError, match=r"on_block.*async.*f"):
        RedisKeyedLimiter(r, "dobk", concurrency=0)(key=lambda: 1, on_block=handler)(f)
    with pytest.raises(TypeError, match=r"on_block"):
        RedisKeyedLimiter(r, "dobk", concurrency=0, on_block=handler)(key=lambda: 1)(f)


def test_keyed_decorates_no_generator(r):
    from slidewin.redis import AsyncRedisKeyedLimiter, RedisKeyedLimiter

    def gen():
        yield 1

    async def agen():
        yield 1

    with pytest.raises(TypeError, match="generator"):
        RedisKeyedLimiter(r, "dkg", qps=5)(key=lambda: 1)(gen)
    with pytest.raises(TypeError, match="generator"):
        AsyncRedisKeyedLimiter(r, "dkg", qps=5)(key=lambda: 1)(agen)


def test_async_kinds_generators_and_on_block(redis_server):
    from slidewin.redis import AsyncRedisLimiter

    async def main():
        c = redis_server.async_client()
        await c.flushall()
        lim = AsyncRedisLimiter(c, "dagen", concurrency=1, interval_ms=60_000,
                                sample_count=60)

        def f():
            return 1

        def gen():
            yield 1

        for fn in (f, gen):
            with pytest.raises(TypeError):
                lim(fn)

        @lim
        async def numbers(k):
            for i in range(k):
                await asyncio.sleep(0)
                yield i

        assert inspect.isasyncgenfunction(numbers)
        first, second = numbers(3), numbers(3)
        assert (await lim.stats()).concurrency == 0
        assert await first.__anext__() == 0
        assert (await lim.stats()).concurrency == 1  # held while the items are produced
        with pytest.raises(BlockedError):
            await second.__anext__()
        assert [x async for x in first] == [1, 2]
        assert (await lim.stats()).concurrency == 0

        g = running_total(lim)()
        assert await g.asend(None) == 0 and await g.asend(5) == 5
        await g.aclose()
        assert (await lim.stats()).concurrency == 0

        got = await blocked_async_generators(AsyncRedisLimiter(c, "dagen0", concurrency=0))
        assert got == (["cached", 1], ["sync", 2], ["stream", 3], ["cached", 4])
        s = await lim.stats()
        # the exhausted generator succeeded; the closed one counts nothing (as Limiter)
        assert (s.success_qps * 60, s.block_qps * 60) == (1, 1)
        # timeout=, as Limiter's: waits for a release (here: by another task)
        assert await lim.try_acquire()

        @lim(timeout=30)
        async def patient():
            return (await lim.stats()).concurrency

        async def later():
            await asyncio.sleep(0.2)
            await lim.release()

        task = asyncio.ensure_future(later())
        assert await patient() == 1
        await task
        assert await lim.try_acquire()
        with pytest.raises(BlockedError):
            async with lim.entry(timeout=0.05):
                pass
        await lim.release()
        await lim.aclose()
        await c.aclose()

    asyncio.run(main())


def test_keyed_decorator_and_entry_wait_up_to_their_timeout(r):
    """timeout= on a keyed limiter's decorator and entry(key, n, timeout=), as KeyedLimiter:
    waits for the key's slot (released by another thread), BlockedError past it."""
    import threading

    from slidewin.redis import RedisKeyedLimiter

    per = RedisKeyedLimiter(r, "dkt", concurrency=1)
    assert per.try_acquire("u")

    @per(key=lambda user: user, timeout=30)
    def patient(user):
        return per.stats(user).concurrency

    @per(key=lambda user: user, timeout=0.05)
    def hasty(user):
        return 1

    with pytest.raises(BlockedError):
        hasty("u")
    assert hasty("v") == 1  # another key: its own slot
    threading.Timer(0.2, per.release, args=("u",)).start()
    assert patient("u") == 1
    assert per.try_acquire("u")
    threading.Timer(0.2, per.release, args=("u",)).start()
    with per.entry("u", timeout=30):
        assert per.stats("u").concurrency == 1
    with pytest.raises(ValueError, match="timeout"):
        per.entry("u", timeout=-1)
