"""acquire() and acquire_async() on the real clock: refusals raise at once, a timeout retries
until admitted or expires (one BLOCK counted), waits are slept, the event loop keeps running."""

import asyncio
import threading
import time

import pytest

from slidewin import BlockedError, Event, Limiter

from limiter_helpers import MS, LoopTicks, counts, eight_second, long_window


def test_acquire_returns_none_when_admitted():
    lim = long_window(qps=10)
    assert lim.acquire() is None
    assert counts(lim, Event.PASS, Event.BLOCK) == (1, 0)


def test_acquire_refusal_raises_at_once_and_counts_one_block():
    lim = eight_second(1)
    lim.acquire()
    t0 = time.monotonic()
    with pytest.raises(BlockedError):
        lim.acquire()
    with pytest.raises(BlockedError):
        lim.acquire(timeout=0)
    assert time.monotonic() - t0 < 5
    assert counts(lim, Event.PASS, Event.BLOCK) == (1, 2)


def test_acquire_sleeps_the_throttle_wait():
    lim = long_window(qps=5, behavior="throttle")  # 200 ms apart
    lim.acquire()
    t0 = time.monotonic()
    lim.acquire()
    assert time.monotonic() - t0 >= 0.15
    assert counts(lim, Event.PASS, Event.BLOCK) == (2, 0)


def test_acquire_timeout_zero_still_honours_admitted_wait():
    lim = long_window(qps=5, behavior="throttle")
    lim.acquire()
    t0 = time.monotonic()
    lim.acquire(timeout=0)  # admitted with a wait of ~200 ms: the wait is honoured
    assert time.monotonic() - t0 >= 0.15


def test_acquire_timeout_retries_reject_until_admitted():
    lim = Limiter(qps=2, interval_ms=1000, sample_count=10)
    t = time.monotonic_ns()
    assert lim.try_acquire(2, now_ns=t)
    lim.acquire(timeout=10)  # retries until the bucket slides out (< 1 s)
    after = time.monotonic_ns()
    assert after - t >= 800 * MS  # the window must have slid (1 s minus a 100 ms bucket)
    assert lim.metric.sum(Event.BLOCK) == 0  # internal retries are not counted


def test_acquire_timeout_retries_throttle_until_queue_accepts():
    lim = long_window(qps=10, behavior="throttle", max_queueing_ms=100)
    t = time.monotonic_ns()
    assert lim.reserve(now_ns=t) == 0
    assert lim.reserve(now_ns=t) == 100 * MS
    lim.acquire(timeout=10)
    assert time.monotonic_ns() - t >= 150 * MS  # slot at t + 200 ms
    assert counts(lim, Event.PASS, Event.BLOCK) == (3, 0)


def test_acquire_timeout_waits_for_release():
    lim = long_window(concurrency=1)
    assert lim.try_acquire()
    timer = threading.Timer(0.2, lim.release)
    timer.start()
    try:
        t0 = time.monotonic()
        lim.acquire(timeout=10)
        assert time.monotonic() - t0 >= 0.1
    finally:
        timer.join(10)
    assert lim.stats().concurrency == 1
    assert counts(lim, Event.PASS, Event.BLOCK) == (2, 0)


def test_acquire_timeout_expires_and_counts_one_block():
    lim = long_window(concurrency=1)
    assert lim.try_acquire()
    t0 = time.monotonic()
    with pytest.raises(BlockedError) as info:
        lim.acquire(timeout=0.3)
    elapsed = time.monotonic() - t0
    assert 0.25 <= elapsed < 10
    assert info.value.limiter is lim
    assert counts(lim, Event.PASS, Event.BLOCK) == (1, 1)
    assert lim.stats().concurrency == 1


@pytest.mark.parametrize(
    ("kw", "n"),
    [(dict(qps=5 / 8, interval_ms=8000, sample_count=8), 6),
     (dict(qps=5, interval_ms=2000, sample_count=2), 11),
     (dict(concurrency=3), 4), (dict(qps=0), 1), (dict(concurrency=0), 1),
     (dict(qps=10 / 8, interval_ms=8000, sample_count=8, behavior="warm_up"), 11)],
)
def test_acquire_that_can_never_pass_raises_at_once(kw, n):
    lim = Limiter(**kw) if "interval_ms" in kw else long_window(**kw)
    t0 = time.monotonic()
    with pytest.raises(BlockedError):
        lim.acquire(n, timeout=30)
    assert time.monotonic() - t0 < 10
    assert lim.metric.sum(Event.BLOCK) == n


def test_acquire_async_timeout_waits_for_release():
    async def main():
        lim = long_window(concurrency=1)
        assert lim.try_acquire()
        asyncio.get_running_loop().call_later(0.2, lim.release)
        await lim.acquire_async(timeout=10)
        return lim

    lim = asyncio.run(main())
    assert lim.stats().concurrency == 1
    assert counts(lim, Event.PASS, Event.BLOCK) == (2, 0)


def test_acquire_async_timeout_expires():
    async def main():
        lim = long_window(concurrency=1)
        assert lim.try_acquire()
        t0 = time.monotonic()
        with pytest.raises(BlockedError):
            await lim.acquire_async(timeout=0.2)
        assert time.monotonic() - t0 >= 0.15
        return lim

    lim = asyncio.run(main())
    assert counts(lim, Event.PASS, Event.BLOCK) == (1, 1)


def test_acquire_async_refusal_raises():
    async def main():
        lim = eight_second(1)
        await lim.acquire_async()
        with pytest.raises(BlockedError):
            await lim.acquire_async()
        return lim

    lim = asyncio.run(main())
    assert counts(lim, Event.PASS, Event.BLOCK) == (1, 1)


def test_event_loop_keeps_running_while_acquire_async_waits():
    async def main():
        lim = long_window(qps=4, behavior="throttle")  # 250 ms apart
        await lim.acquire_async()
        async with LoopTicks(0.005) as loop:
            before = loop.ticks
            t0 = time.monotonic()
            await lim.acquire_async()
            waited = time.monotonic() - t0
            progress = loop.ticks - before
        return waited, progress

    waited, progress = asyncio.run(main())
    assert waited >= 0.15
    assert progress >= 3  # ~50 expected; 0 if acquire_async blocked the loop
