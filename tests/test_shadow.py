"""Shadow mode: ``shadow=True`` decides and counts exactly as an enforcing twin fed the same
calls would, but admits every call: ``try_acquire`` is True, ``reserve`` is 0, nothing
raises, nothing waits, and a would-be refusal counts BLOCK and holds no slot."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slidewin import BlockedError, KeyedLimiter, Limiter, limit

S = 10**9
MS = 10**6

CONFIGS = [
    {"qps": 5},
    {"qps": 3, "interval_ms": 2000, "sample_count": 4},
    {"qps": 20, "behavior": "warm_up", "warm_up_s": 2},
    {"qps": 10, "behavior": "throttle", "max_queueing_ms": 200},
    {"qps": 30, "behavior": "warm_up_throttle", "warm_up_s": 2, "max_queueing_ms": 100},
    {"concurrency": 2},
    {"qps": 0},
]

op = st.tuples(
    st.sampled_from(["try", "reserve", "prio", "release", "tick"]),
    st.integers(1, 3),
    st.integers(0, 400),
)


def as_enforcing(totals):
    """A shadow's totals as its enforcing twin's: every block of the shadow is a would-be
    refusal (shadow_block), which the twin counts as a plain block."""
    totals = dict(totals)
    assert totals.pop("shadow_block") == totals["block"]
    return {**totals, "shadow_block": 0}


def snapshot(lim, now):
    s = lim.stats(now_ns=now)
    totals = as_enforcing(lim.totals()) if lim.shadow else lim.totals()
    return (tuple(s), totals, lim.in_flight, lim.metric.buckets(now_ns=now))


@settings(max_examples=60, deadline=None)
@given(cfg=st.sampled_from(CONFIGS), ops=st.lists(op, max_size=120))
def test_shadow_counts_equal_an_enforcing_twin(cfg, ops):
    twin, shadow = Limiter(**cfg), Limiter(**cfg, shadow=True)
    now = 5 * S
    held = 0  # in flight that the twin admitted (a concurrency limiter's callers release it)
    for kind, n, dt in ops:
        now += dt * MS
        if kind == "tick":
            continue
        if kind == "release":
            if held:
                twin.release(1)
                shadow.release(1)
                held -= 1
            continue
        if kind == "try":
            a = twin.try_acquire(n, now_ns=now)
            assert shadow.try_acquire(n, now_ns=now) is True
        else:
            a = twin.reserve(n, now_ns=now, prioritized=kind == "prio")
            assert shadow.reserve(n, now_ns=now, prioritized=kind == "prio") == 0
            a = a is not None
        if a and "concurrency" in cfg:
            held += n
        assert snapshot(shadow, now) == snapshot(twin, now)
    assert as_enforcing(shadow.totals()) == twin.totals()


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 2), st.integers(0, 300)),
                    max_size=80),
       behavior=st.sampled_from(["reject", "throttle"]))
def test_keyed_shadow_counts_equal_an_enforcing_twin(ops, behavior):
    twin = KeyedLimiter(qps=3, behavior=behavior, max_keys=3)
    shadow = KeyedLimiter(qps=3, behavior=behavior, max_keys=3, shadow=True)
    now = S
    for key, n, dt in ops:
        now += dt * MS
        a = twin.try_acquire(key, n, now_ns=now)
        assert shadow.try_acquire(key, n, now_ns=now) is True
        assert tuple(shadow.stats(now_ns=now)) == tuple(twin.stats(now_ns=now)), a
    assert as_enforcing(shadow.totals()) == twin.totals()
    assert len(shadow) == len(twin)


def test_never_raises_never_waits():
    lim = Limiter(qps=0, shadow=True)  # a kill switch in shadow: counts, admits
    t = time.monotonic()
    lim.acquire()
    lim.acquire(timeout=60)  # an enforcing twin would wait all of it
    lim.acquire(3, timeout=0)
    assert time.monotonic() - t < 30
    assert lim.totals()["block"] == 1 + 1 + 3 and lim.totals()["pass"] == 0
    thr = Limiter(qps=0.2, behavior="throttle", max_queueing_ms=100_000, shadow=True)
    t = time.monotonic()
    for _ in range(5):
        thr.acquire()  # an enforcing twin would sleep 5 s per call after the first
        assert thr.reserve() == 0
    assert time.monotonic() - t < 15
    assert thr.totals()["pass"] == 10


def test_would_be_refused_entry_holds_nothing_and_counts_only_its_block():
    lim = Limiter(concurrency=1, shadow=True)
    ran = []
    with lim.entry():
        assert lim.in_flight == 1
        with lim.entry():  # an enforcing twin would raise BlockedError here
            ran.append(1)
            assert lim.in_flight == 1  # no slot for the would-be refusal
        assert lim.in_flight == 1
    assert lim.in_flight == 0 and ran == [1]
    t = lim.totals()
    assert (t["pass"], t["block"], t["success"]) == (1, 1, 1)

    @lim
    def body():
        with lim.entry():
            return "ran"

    assert body() == "ran"  # the inner entry is the would-be refusal
    assert lim.totals()["block"] == 2 and lim.in_flight == 0


def test_would_be_refused_entry_that_raises_counts_no_exception():
    lim = Limiter(concurrency=1, shadow=True)
    with lim.entry():
        with pytest.raises(ValueError):
            with lim.entry():
                raise ValueError
    t = lim.totals()
    assert (t["block"], t["exception"], t["success"]) == (1, 0, 1)


def test_async_entries_and_decorator():
    lim = limit(concurrency=1, shadow=True)

    @lim
    async def work():
        seen = lim.in_flight  # every body runs while the one admitted entry is held
        await asyncio.sleep(0.05)
        return seen

    async def main():
        return await asyncio.gather(*(work() for _ in range(4)))

    assert asyncio.run(main()) == [1, 1, 1, 1]
    t = lim.totals()
    assert (t["pass"], t["block"], t["success"]) == (1, 3, 1)
    assert lim.in_flight == 0

    per = KeyedLimiter(concurrency=1, shadow=True)

    async def keyed():
        async with per.entry("k"):
            async with per.entry("k"):
                return per.in_flight("k")

    assert asyncio.run(keyed()) == 1
    assert per.in_flight("k") == 0 and per.totals()["block"] == 1


def test_release_in_shadow_never_raises():
    lim = Limiter(concurrency=1, shadow=True)
    assert lim.try_acquire() and lim.try_acquire()  # the second would be refused
    lim.release()
    lim.release()  # its caller releases too: nothing left, no error
    assert lim.in_flight == 0
    enforcing = Limiter(concurrency=1)
    with pytest.raises(ValueError):
        enforcing.release()


def test_switching_shadow_on_and_off_with_update():
    lim = Limiter(qps=1)
    assert lim.try_acquire(now_ns=S)
    assert not lim.try_acquire(now_ns=S)
    lim.update(shadow=True)
    assert lim.shadow is True and "shadow=True" in repr(lim)
    assert lim.try_acquire(now_ns=S)
    lim.update(shadow=False)
    assert not lim.try_acquire(now_ns=S)
    assert lim.totals()["block"] == 3
    with pytest.raises(BlockedError):
        Limiter(qps=0).acquire()
