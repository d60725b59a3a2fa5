"""The Redis limiters' decorator is Limiter's (tests/test_decorators.py): the wrapper keeps the
function's kind, a generator holds its entry for the whole iteration, an async on_block on
sync code is refused at decoration, a sync on_block returning an awaitable raises. Sync
types decorate sync functions and generators, async types coroutine functions and async
generators; a keyed limiter decorates no generator (as KeyedLimiter)."""

import asyncio
import functools
import gc
import inspect

import pytest

from slidewin import BlockedError

from redis_servers import need_server, r, redis_server  # noqa: F401 (fixtures)


def in_flight(lim):
    return lim.stats().concurrency


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


def test_generator_holds_the_entry_across_the_iteration(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "dgen", concurrency=1, interval_ms=60_000, sample_count=60)

    @lim
    def numbers(k):
        yield from range(k)

    first = numbers(3)
    second = numbers(3)
    assert in_flight(lim) == 0  # creating a generator takes nothing
    assert next(first) == 0
    assert in_flight(lim) == 1  # held while the items are produced
    with pytest.raises(BlockedError):
        next(second)
    assert list(first) == [1, 2]
    assert in_flight(lim) == 0
    assert list(numbers(3)) == [0, 1, 2]
    s = lim.stats()
    assert (s.success_qps * 60, s.block_qps * 60) == (2, 1)


def test_generator_released_on_close_collection_and_exception(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "dgen2", concurrency=1, interval_ms=60_000, sample_count=60)
    closed = []

    @lim
    def numbers():
        try:
            yield 1
            yield 2
        finally:
            closed.append(True)

    g = numbers()
    assert next(g) == 1 and in_flight(lim) == 1
    g.close()
    assert closed == [True] and in_flight(lim) == 0
    g = numbers()
    for x in g:
        break
    assert in_flight(lim) == 1
    del g, x
    gc.collect()
    assert closed == [True, True] and in_flight(lim) == 0

    @lim
    def failing():
        yield 1
        raise KeyError("k")

    g = failing()
    assert next(g) == 1
    with pytest.raises(KeyError):
        next(g)
    assert in_flight(lim) == 0
    assert lim.stats().exception_qps * 60 == 1


def test_generator_send_and_return_value_pass_through(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "dgen3", concurrency=1)

    @lim
    def echo():
        got = []
        while True:
            x = yield len(got)
            if x is None:
                return got
            got.append(x)

    g = echo()
    assert next(g) == 0 and g.send("a") == 1
    with pytest.raises(StopIteration) as stop:
        g.send(None)
    assert stop.value.value == ["a"]
    assert in_flight(lim) == 0


def test_generator_on_block_yields_its_result(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "dgen4", concurrency=1, on_block=lambda err, k: ["fallback", k])
    lim.try_acquire()  # the one slot taken

    @lim
    def numbers(k):
        yield from range(k)

    assert list(numbers(3)) == ["fallback", 3]


async def _async_handler(err, *args, **kwargs):
    return "busy"


class _AsyncCallable:
    async def __call__(self, err, *args, **kwargs):
        return "busy"


@pytest.mark.parametrize(
    "handler",
    [_async_handler, functools.partial(_async_handler), _AsyncCallable()],
    ids=["coroutine function", "partial", "async __call__"],
)
@pytest.mark.parametrize("kind", ["function", "generator"])
def test_async_on_block_on_sync_code_is_refused_at_decoration(r, handler, kind):
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    def f():
        return 1

    def gen():
        yield 1

    func = f if kind == "function" else gen
    with pytest.raises(TypeError, match=r"on_block.*async.*%s" % func.__name__):
        RedisLimiter(r, "dob", concurrency=0)(on_block=handler)(func)
    with pytest.raises(TypeError, match=r"on_block"):
        RedisLimiter(r, "dob", concurrency=0, on_block=handler)(func)
    if kind == "function":
        with pytest.raises(TypeError, match=r"on_block"):
            RedisKeyedLimiter(r, "dobk", concurrency=0, on_block=handler)(key=lambda: 1)(func)


def test_sync_on_block_returning_a_coroutine_raises_without_a_warning(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "dcoro", qps=0, on_block=lambda err: _async_handler(err))

    @lim
    def f():
        return 1

    with pytest.raises(TypeError, match=r"on_block.*awaitable"):
        f()
    gc.collect()


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

        @lim
        async def running_total():
            total = 0
            while True:
                x = yield total
                total += x

        g = running_total()
        assert await g.asend(None) == 0 and await g.asend(5) == 5
        await g.aclose()
        assert (await lim.stats()).concurrency == 0

        async def fallback(err, k):
            return ["cached", k]

        async def fallback_stream(err, k):
            yield "stream"
            yield k

        full = AsyncRedisLimiter(c, "dagen0", concurrency=0)

        @full(on_block=fallback)
        async def a(k):
            yield k

        @full(on_block=lambda err, k: ("sync", k))
        async def b(k):
            yield k

        @full(on_block=fallback_stream)
        async def d(k):
            yield k

        @full(on_block=fallback)
        async def co(k):
            return k

        got = ([x async for x in a(1)], [x async for x in b(2)], [x async for x in d(3)],
               await co(4))
        assert got == (["cached", 1], ["sync", 2], ["stream", 3], ["cached", 4])
        s = await lim.stats()
        # the exhausted generator succeeded; the closed one counts nothing (as Limiter)
        assert (s.success_qps * 60, s.block_qps * 60) == (1, 1)
        await lim.aclose()
        await c.aclose()

    asyncio.run(main())
