"""lim.entry(), sync and async: what it counts (pass, success, exception, rt), the slot it
holds while the body runs, and what a refusal, a BaseException or a cancellation leave."""

import asyncio
import time

import pytest

from slidewin import BlockedError, Event

from limiter_helpers import counts, long_window


def test_entry_success_counts_and_rt():
    lim = long_window(qps=1000)
    with lim.entry(2):
        assert lim.stats().concurrency >= 1
        time.sleep(0.02)
    p, s, e, rt = counts(lim, Event.PASS, Event.SUCCESS, Event.EXCEPTION, Event.RT)
    assert (p, s, e) == (2, 2, 0)
    assert 15 <= rt < 10_000
    assert lim.stats().concurrency == 0
    assert lim.metric.min_rt() >= 15


def test_entry_holds_in_flight_while_body_runs():
    lim = long_window(qps=1000)
    with lim.entry():
        assert lim.stats().concurrency == 1
        with lim.entry():
            assert lim.stats().concurrency == 2
    assert lim.stats().concurrency == 0


def test_entry_on_concurrency_limiter_holds_the_slot():
    lim = long_window(concurrency=1)
    with lim.entry():
        assert lim.try_acquire() is False
        assert lim.stats().concurrency == 1
    assert lim.stats().concurrency == 0
    assert lim.try_acquire() is True


def test_entry_exception_counts_exception_and_propagates():
    lim = long_window(qps=1000)
    with pytest.raises(ZeroDivisionError):
        with lim.entry():
            1 / 0
    assert counts(lim, Event.PASS, Event.SUCCESS, Event.EXCEPTION, Event.RT) == (1, 0, 1, 0)
    assert lim.stats().concurrency == 0


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_entry_base_exception_counts_nothing(exc):
    lim = long_window(qps=1000)
    with pytest.raises(exc):
        with lim.entry():
            raise exc()
    assert counts(lim, Event.PASS, Event.SUCCESS, Event.EXCEPTION, Event.RT) == (1, 0, 0, 0)
    assert lim.stats().concurrency == 0


def test_entry_blocked_raises_and_runs_nothing():
    lim = long_window(qps=0)
    ran = []
    with pytest.raises(BlockedError):
        with lim.entry():
            ran.append(1)
    assert ran == []
    assert counts(lim, Event.PASS, Event.BLOCK) == (0, 1)
    assert lim.stats().concurrency == 0


def test_entry_async_counts():
    async def main():
        lim = long_window(qps=1000)
        async with lim.entry():
            assert lim.stats().concurrency == 1
            await asyncio.sleep(0.02)
        with pytest.raises(ValueError):
            async with lim.entry():
                raise ValueError("boom")
        return lim

    lim = asyncio.run(main())
    p, s, e, rt = counts(lim, Event.PASS, Event.SUCCESS, Event.EXCEPTION, Event.RT)
    assert (p, s, e) == (2, 1, 1)
    assert 15 <= rt < 10_000
    assert lim.stats().concurrency == 0


def test_entry_async_cancelled_counts_nothing():
    lim = long_window(qps=1000)
    entered = []

    async def body():
        async with lim.entry():
            entered.append(1)
            await asyncio.sleep(30)

    async def main():
        task = asyncio.create_task(body())
        while not entered:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert counts(lim, Event.PASS, Event.SUCCESS, Event.EXCEPTION, Event.RT) == (1, 0, 0, 0)
    assert lim.stats().concurrency == 0


def test_entry_async_throttle_waits_without_blocking_loop():
    async def main():
        lim = long_window(qps=5, behavior="throttle")
        ticks = 0

        async def ticker():
            nonlocal ticks
            for _ in range(1000):
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        async with lim.entry():
            pass
        before = ticks
        async with lim.entry():  # waits ~200 ms
            pass
        progress = ticks - before
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return progress

    assert asyncio.run(main()) >= 3
