"""What the Limiter tests share: times in ns and limiters whose windows suit real-clock tests."""

import asyncio
import functools

from slidewin import Limiter

MS = 1_000_000
S = 1_000_000_000


def ms(t):
    return t * MS


def eight_second(limit, **kw):
    """A qps limiter admitting ``limit`` per 8 s window of 1 s buckets (exact floats)."""
    return Limiter(qps=limit / 8, interval_ms=8000, sample_count=8, **kw)


def long_window(**kw):
    """A limiter whose window is long enough for real-clock counting to stay visible."""
    kw.setdefault("interval_ms", 60_000)
    kw.setdefault("sample_count", 60)
    return Limiter(**kw)


def counts(lim, *events, now_ns=None):
    kw = {} if now_ns is None else {"now_ns": now_ns}
    return tuple(lim.metric.sum(e, **kw) for e in events)


class LoopTicks:
    """``async with LoopTicks(period) as loop:`` counts the turns of the running asyncio loop
    while the block awaits (``loop.ticks``: a task ticking every `period` seconds): an event
    loop blocked by a wait would not turn."""

    def __init__(self, period):
        self.period = period
        self.ticks = 0
        self._stop = False
        self._task = None

    async def _run(self):
        while not self._stop:
            self.ticks += 1
            await asyncio.sleep(self.period)

    async def __aenter__(self):
        self._task = asyncio.ensure_future(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc):
        self._stop = True
        await self._task


async def async_handler(err, *args, **kwargs):
    """An async on_block handler (refused on sync code when decorating)."""
    return "busy"


class _AsyncCallable:
    async def __call__(self, err, *args, **kwargs):
        return "busy"


# every shape of an async on_block: pytest.mark.parametrize("handler", ASYNC_HANDLERS,
# ids=ASYNC_HANDLER_IDS)
ASYNC_HANDLERS = [async_handler, functools.partial(async_handler), _AsyncCallable()]
ASYNC_HANDLER_IDS = ["coroutine function", "partial", "async __call__"]


async def blocked_async_generators(lim):
    """Three async generators and a coroutine function decorated by `lim`, which refuses
    every call, with an async, a sync, an async-generator and an async on_block: what each
    gives."""

    async def fallback(err, k):
        return ["cached", k]

    async def fallback_stream(err, k):
        yield "stream"
        yield k

    @lim(on_block=fallback)
    async def a(k):
        yield k

    @lim(on_block=lambda err, k: ("sync", k))
    async def b(k):
        yield k

    @lim(on_block=fallback_stream)
    async def d(k):
        yield k

    @lim(on_block=fallback)
    async def co(k):
        return k

    return ([x async for x in a(1)], [x async for x in b(2)], [x async for x in d(3)],
            await co(4))


def running_total(lim):
    """An async generator function decorated by `lim`: it yields the sum of what it is sent."""

    @lim
    async def running_total():
        total = 0
        while True:
            x = yield total
            total += x

    return running_total
