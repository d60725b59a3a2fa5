"""The decorator on generator and async-generator functions, and async on_block on sync code.

A decorated generator holds its entry for the whole iteration: taken at the first
``next()``/``anext()``, given back when the generator finishes, raises, or is closed (also
by garbage collection). The wrapper keeps the function's kind. Concurrency limiters make the
entry visible: a second live generator under ``concurrency=1`` is refused.

One decorator serves Limiter and the Redis types (slidewin/_limiter.py): the tests of sync
code run on both (the `make` fixture: a Limiter, or a RedisLimiter on a redis-server of this
module's own); tests/test_redis_decorators.py holds only what is the Redis types' own.
"""

import asyncio
import gc
import inspect
import itertools
import threading

import pytest

from slidewin import BlockedError, Event, Limiter, limit

from redis_servers import Server, need_server
from limiter_helpers import (ASYNC_HANDLER_IDS, ASYNC_HANDLERS, async_handler,
                             blocked_async_generators, eight_second, long_window,
                             running_total)

_STATS = {Event.PASS: "pass_qps", Event.BLOCK: "block_qps", Event.SUCCESS: "success_qps",
          Event.EXCEPTION: "exception_qps"}


def counts(lim, *events):
    if isinstance(lim, Limiter):  # lifetime totals: a test slower than the window counts all
        t = lim.totals()
        return tuple(t[_STATS[ev].replace("_qps", "")] for ev in events)
    s = lim.stats()  # a Redis limiter: its window's rates, back to counts
    sec = lim.interval_ms / 1000
    return tuple(round(getattr(s, _STATS[ev]) * sec) for ev in events)


def in_flight(lim):
    return lim.in_flight if isinstance(lim, Limiter) else lim.stats().concurrency


@pytest.fixture(scope="module")
def _redis():
    need_server()
    server = Server().start()
    client = server.client()
    yield client
    client.close()
    server.stop()


_SEQ = itertools.count()


# (the RedisLimiter cases start a server: the `server` group, CONTRIBUTING.md)
@pytest.fixture(params=["Limiter", pytest.param("RedisLimiter", marks=pytest.mark.server)])
def make(request):
    """make(**kw): a Limiter, or a RedisLimiter (a fresh name), with these arguments and a
    minute's window (the counts read at the end are still in it on a slow build)."""
    if request.param == "Limiter":
        kind = Limiter
    else:
        from slidewin.redis import RedisLimiter

        client = request.getfixturevalue("_redis")
        client.flushall()

        def kind(**kw):
            return RedisLimiter(client, "dec%d" % next(_SEQ), **kw)

    def build(**kw):
        kw.setdefault("interval_ms", 60_000)
        kw.setdefault("sample_count", 60)
        return kind(**kw)

    build.kind = request.param
    return build


# -- kinds --------------------------------------------------------------------------------


def test_kinds_are_kept():
    lim = Limiter(concurrency=4)

    def f():
        return 1

    async def co():
        return 1

    def gen():
        yield 1

    async def agen():
        yield 1

    assert not inspect.iscoroutinefunction(lim(f))
    assert not inspect.isgeneratorfunction(lim(f))
    assert inspect.iscoroutinefunction(lim(co))
    assert inspect.isgeneratorfunction(lim(gen))
    assert not inspect.iscoroutinefunction(lim(gen))
    assert inspect.isasyncgenfunction(lim(agen))
    assert not inspect.iscoroutinefunction(lim(agen))
    for fn, orig in ((lim(gen), gen), (lim(agen), agen)):
        assert fn.__wrapped__ is orig
        assert fn.__name__ == orig.__name__
        assert fn.limiter is lim


# -- generators ---------------------------------------------------------------------------


def test_generator_holds_the_entry_across_the_iteration(make):
    lim = make(concurrency=1)

    @lim
    def numbers(k):
        yield from range(k)

    first = numbers(3)
    second = numbers(3)
    assert in_flight(lim) == 0  # creating a generator takes nothing
    assert next(first) == 0
    assert in_flight(lim) == 1
    with pytest.raises(BlockedError):
        next(second)  # the first is being iterated: the second is refused
    assert list(first) == [1, 2]
    assert in_flight(lim) == 0  # released after exhaustion
    assert list(numbers(3)) == [0, 1, 2]  # room again
    assert counts(lim, Event.SUCCESS, Event.EXCEPTION, Event.BLOCK) == (2, 0, 1)


def test_generator_released_on_close_and_on_collection(make):
    lim = make(concurrency=1)
    closed = []

    @lim
    def numbers():
        try:
            yield 1
            yield 2
        finally:
            closed.append(True)

    g = numbers()
    assert next(g) == 1
    assert in_flight(lim) == 1
    g.close()
    assert closed == [True]  # close() reached the decorated generator
    assert in_flight(lim) == 0

    g = numbers()
    for x in g:
        break
    assert in_flight(lim) == 1
    del g, x
    gc.collect()
    assert closed == [True, True]
    assert in_flight(lim) == 0
    # a close is a BaseException: nothing counted but the passes
    assert counts(lim, Event.PASS, Event.SUCCESS, Event.EXCEPTION) == (2, 0, 0)


def test_generator_released_after_an_exception(make):
    lim = make(concurrency=1)

    @lim
    def failing():
        yield 1
        raise KeyError("k")

    g = failing()
    assert next(g) == 1
    with pytest.raises(KeyError):
        next(g)
    assert in_flight(lim) == 0
    assert counts(lim, Event.EXCEPTION, Event.SUCCESS) == (1, 0)

    # an exception thrown in from outside reaches the generator, then is counted
    @lim
    def numbers():
        yield 1
        yield 2

    g = numbers()
    next(g)
    with pytest.raises(ValueError):
        g.throw(ValueError("from outside"))
    assert in_flight(lim) == 0
    assert counts(lim, Event.EXCEPTION) == (2,)


def test_generator_send_throw_and_return_value_pass_through(make):
    lim = make(concurrency=1)

    @lim
    def echo():
        got = []
        while True:
            try:
                x = yield len(got)
            except ValueError:
                x = "thrown"
            if x is None:
                return got
            got.append(x)

    g = echo()
    assert next(g) == 0
    assert g.send("a") == 1
    assert g.throw(ValueError) == 2
    with pytest.raises(StopIteration) as stop:
        g.send(None)
    assert stop.value.value == ["a", "thrown"]
    assert in_flight(lim) == 0
    assert counts(lim, Event.SUCCESS) == (1,)


def test_generator_on_block_yields_its_result(make):
    lim = make(concurrency=0, on_block=lambda err, k: ["fallback", k])

    @lim
    def numbers(k):
        yield from range(k)

    assert list(numbers(3)) == ["fallback", 3]

    @lim(on_block=lambda err, k: None)
    def quiet(k):
        yield k

    assert list(quiet(3)) == []


def test_decorator_and_entry_wait_up_to_their_timeout(make):
    """``@lim(timeout=5)`` and ``lim.entry(timeout=5)`` wait for admission (a release by
    another thread), as acquire(timeout=) does; past the timeout, BlockedError."""
    lim = make(concurrency=1)
    assert lim.try_acquire()  # the one slot, held until released

    @lim(timeout=30)
    def patient():
        return in_flight(lim)

    @lim(timeout=0.05)
    def hasty():
        return 1

    with pytest.raises(BlockedError):
        hasty()
    threading.Timer(0.2, lim.release).start()
    assert patient() == 1
    assert lim.try_acquire()
    threading.Timer(0.2, lim.release).start()
    with lim.entry(timeout=30):
        assert in_flight(lim) == 1
    assert in_flight(lim) == 0
    with pytest.raises(ValueError, match="timeout"):
        lim.entry(timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        lim(timeout="5")


# -- async generators ---------------------------------------------------------------------


def test_async_generator_holds_the_entry_across_the_iteration():
    lim = Limiter(concurrency=1)

    @lim
    async def numbers(k):
        for i in range(k):
            await asyncio.sleep(0)
            yield i

    async def main():
        first = numbers(3)
        second = numbers(3)
        assert lim.in_flight == 0
        assert await first.__anext__() == 0
        assert lim.in_flight == 1
        with pytest.raises(BlockedError):
            await second.__anext__()
        assert [x async for x in first] == [1, 2]
        assert lim.in_flight == 0
        assert [x async for x in numbers(2)] == [0, 1]

    asyncio.run(main())
    assert counts(lim, Event.SUCCESS, Event.EXCEPTION, Event.BLOCK) == (2, 0, 1)


def test_async_generator_released_on_aclose_and_on_exception():
    lim = Limiter(concurrency=1)
    closed = []

    @lim
    async def numbers():
        try:
            yield 1
            yield 2
        finally:
            closed.append(True)

    @lim
    async def failing():
        yield 1
        raise KeyError("k")

    async def main():
        g = numbers()
        assert await g.__anext__() == 1
        assert lim.in_flight == 1
        await g.aclose()
        assert closed == [True]
        assert lim.in_flight == 0

        g = failing()
        assert await g.__anext__() == 1
        with pytest.raises(KeyError):
            await g.__anext__()
        assert lim.in_flight == 0

        g = numbers()
        assert await g.__anext__() == 1
        with pytest.raises(ValueError):
            await g.athrow(ValueError("from outside"))
        assert lim.in_flight == 0

    asyncio.run(main())
    assert counts(lim, Event.SUCCESS, Event.EXCEPTION) == (0, 2)


def test_async_generator_released_when_abandoned():
    lim = Limiter(concurrency=1)

    @lim
    async def numbers():
        yield 1
        yield 2

    async def main():
        g = numbers()
        async for x in g:
            break
        assert lim.in_flight == 1
        del g
        gc.collect()  # asyncio's finaliser schedules aclose() on the loop
        for _ in range(3):
            await asyncio.sleep(0)
        assert lim.in_flight == 0

    asyncio.run(main())


def test_async_generator_asend_passes_through():
    lim = Limiter(concurrency=1)

    async def main():
        g = running_total(lim)()
        assert await g.asend(None) == 0
        assert await g.asend(5) == 5
        assert await g.asend(2) == 7
        await g.aclose()

    asyncio.run(main())
    assert lim.in_flight == 0


def test_async_generator_on_block_sync_and_async():
    assert asyncio.run(blocked_async_generators(Limiter(concurrency=0))) == (
        ["cached", 1], ["sync", 2], ["stream", 3], ["cached", 4])


# -- async on_block on sync code ------------------------------------------------------------


@pytest.mark.parametrize("handler", ASYNC_HANDLERS, ids=ASYNC_HANDLER_IDS)
@pytest.mark.parametrize("kind", ["function", "generator"])
def test_async_on_block_on_sync_code_is_refused_at_decoration(make, handler, kind):
    def f():
        return 1

    def gen():
        yield 1

    func = f if kind == "function" else gen
    with pytest.raises(TypeError, match=r"on_block.*async.*%s" % func.__name__):
        make(concurrency=0)(on_block=handler)(func)
    # the limiter's own on_block is checked the same way
    with pytest.raises(TypeError, match=r"on_block"):
        make(concurrency=0, on_block=handler)(func)
    if make.kind == "Limiter":
        with pytest.raises(TypeError, match=r"on_block"):
            limit(concurrency=0, on_block=handler)(func)


def test_async_on_block_on_async_code_is_accepted():
    lim = Limiter(concurrency=0, on_block=async_handler)

    @lim
    async def f():
        return 1

    assert asyncio.run(f()) == "busy"


def test_sync_on_block_returning_a_coroutine_raises_without_a_warning(make):
    # undetectable at decoration (a lambda); the call raises instead of returning an
    # un-awaited coroutine (filterwarnings=error would turn a "never awaited" into a failure)
    lim = make(concurrency=0, on_block=lambda err: async_handler(err))

    @lim
    def f():
        return 1

    with pytest.raises(TypeError, match=r"on_block.*awaitable"):
        f()
    gc.collect()


# -- functions and coroutine functions, limit() ----------------------------------------

def test_decorator_sync():
    lim = long_window(qps=1000)

    def handler(x, y=2):
        """Adds."""
        return x + y

    wrapped = lim(handler)
    assert wrapped(1) == 3
    assert wrapped(1, y=5) == 6
    assert wrapped.__name__ == "handler"
    assert wrapped.__doc__ == "Adds."
    assert wrapped.__qualname__ == handler.__qualname__
    assert wrapped.__module__ == handler.__module__
    assert wrapped.__wrapped__ is handler
    assert inspect.signature(wrapped) == inspect.signature(handler)
    assert counts(lim, Event.PASS, Event.SUCCESS) == (2, 2)


def test_decorator_sync_exception():
    lim = long_window(qps=1000)

    @lim
    def fail():
        raise KeyError("k")

    with pytest.raises(KeyError):
        fail()
    assert counts(lim, Event.PASS, Event.SUCCESS, Event.EXCEPTION) == (1, 0, 1)
    assert lim.stats().concurrency == 0


def test_decorator_sync_blocked():
    lim = eight_second(1)

    @lim
    def f():
        return 1

    assert f() == 1
    with pytest.raises(BlockedError):
        f()
    assert counts(lim, Event.PASS, Event.BLOCK, Event.SUCCESS) == (1, 1, 1)


def test_decorator_async():
    lim = long_window(qps=1000)

    async def call_api(x):
        """Doubles."""
        await asyncio.sleep(0)
        return 2 * x

    wrapped = lim(call_api)
    assert inspect.iscoroutinefunction(wrapped)
    assert wrapped.__name__ == "call_api"
    assert wrapped.__doc__ == "Doubles."
    assert wrapped.__wrapped__ is call_api
    assert asyncio.run(wrapped(21)) == 42
    assert counts(lim, Event.PASS, Event.SUCCESS) == (1, 1)


def test_decorator_async_exception():
    lim = long_window(qps=1000)

    @lim
    async def boom():
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        asyncio.run(boom())
    assert counts(lim, Event.PASS, Event.SUCCESS, Event.EXCEPTION) == (1, 0, 1)


def test_limit_returns_limiter_and_decorates():
    lim = limit(qps=10, behavior="throttle")
    assert isinstance(lim, Limiter)
    assert "throttle" in repr(lim)

    @limit(qps=1000, interval_ms=60_000, sample_count=60)
    async def call_api(x):
        return x

    assert asyncio.run(call_api(3)) == 3
    assert call_api.__name__ == "call_api"

    @limit(concurrency=2)
    def sync_fn():
        return "ok"

    assert sync_fn() == "ok"
    assert sync_fn.__name__ == "sync_fn"
    assert isinstance(sync_fn.__wrapped__, type(test_limit_returns_limiter_and_decorates))
