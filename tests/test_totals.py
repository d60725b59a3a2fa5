"""Lifetime totals: ``lim.totals()`` counts since creation, monotonic, never reset.

Each total equals the sum of the window's counts taken window after window (explicit
``now_ns``): private, shared across processes, and a KeyedLimiter's whole table.
"""

from __future__ import annotations

import multiprocessing as mp
import random

import pytest

import slidewin
from slidewin import Event, KeyedLimiter, Limiter

KEYS = {"pass", "block", "exception", "success", "occupied_pass", "rt", "shadow_block"}
S = 10**9
MS = 10**6


def window_walk(lim, windows, calls, seed):
    """Random try_acquire traffic, window after window (1 s each); return the sums of the
    window's PASS and BLOCK read at the end of each window."""
    rnd = random.Random(seed)
    passes = blocks = 0
    for w in range(1, windows + 1):
        times = sorted(w * S + rnd.randrange(S) for _ in range(calls))
        for t in times:
            lim.try_acquire(rnd.choice((1, 1, 2, 3)), now_ns=t)
        end = w * S + 999 * MS
        passes += lim.metric.sum(Event.PASS, now_ns=end)
        blocks += lim.metric.sum(Event.BLOCK, now_ns=end)
    return passes, blocks


def test_fresh_totals_are_zero_and_have_the_six_keys():
    for lim in (Limiter(qps=5), Limiter(concurrency=2), KeyedLimiter(qps=5)):
        t = lim.totals()
        assert set(t) == KEYS
        assert all(type(v) is int and v == 0 for v in t.values())


@pytest.mark.parametrize("kwargs", [
    {"qps": 7}, {"qps": 20, "behavior": "warm_up", "warm_up_s": 3},
    {"qps": 5, "behavior": "throttle"}, {"concurrency": 4},
], ids=["reject", "warm_up", "throttle", "concurrency"])
def test_private_totals_equal_the_windows_summed(kwargs):
    lim = Limiter(**kwargs)
    passes, blocks = window_walk(lim, 30, 25, seed=1)
    t = lim.totals()
    assert (t["pass"], t["block"]) == (passes, blocks)
    assert t["pass"] > 0 and t["block"] > 0


def test_entries_prioritized_and_counted_blocks():
    lim = Limiter(qps=2)
    with lim.entry():
        pass
    with pytest.raises(KeyError):
        with lim.entry():
            raise KeyError
    with pytest.raises(slidewin.BlockedError):
        with lim.entry():
            pass
    t = lim.totals()
    assert (t["pass"], t["block"], t["success"], t["exception"]) == (2, 1, 1, 1)
    assert t["rt"] >= 0

    lim = Limiter(qps=1, sample_count=2)
    t0 = 10 * S
    assert lim.try_acquire(now_ns=t0)
    assert lim.reserve(now_ns=t0 + 600 * MS, prioritized=True) is not None  # borrows
    t = lim.totals()
    assert (t["pass"], t["occupied_pass"], t["block"]) == (2, 1, 0)
    # the borrowed PASS reaches the window in the bucket it was granted for (t0 + 1000 ms)
    assert lim.metric.sum(Event.PASS, now_ns=t0 + 999 * MS) == 1
    assert lim.metric.current(Event.PASS, now_ns=t0 + 1000 * MS) == 1


def test_totals_survive_a_reset_of_the_window_and_an_update():
    lim = Limiter(qps=3)
    for _ in range(5):
        lim.try_acquire(now_ns=S)
    lim.metric.reset()
    lim.update(qps=10)
    t = lim.totals()
    assert (t["pass"], t["block"]) == (3, 2)
    assert lim.stats(now_ns=S).pass_qps == 0.0


def test_keyed_totals_are_table_wide_and_keep_evicted_keys():
    per = KeyedLimiter(qps=3, max_keys=4)
    rnd = random.Random(5)
    passes = blocks = 0
    for w in range(1, 21):
        for t in sorted(w * S + rnd.randrange(S) for _ in range(30)):
            per.try_acquire(rnd.randrange(12), now_ns=t)  # 12 keys, 4 held: evictions
        st = per.stats(now_ns=w * S + 999 * MS)
        passes += round(st.pass_qps)
        blocks += round(st.block_qps)
    t = per.totals()
    assert (t["pass"], t["block"]) == (passes, blocks)
    assert per.stats().evicted > 0


def _hammer(name, tries, seed):
    lim = Limiter(qps=50, shared=name)
    rnd = random.Random(seed)
    got = 0
    for _ in range(tries):
        got += lim.try_acquire(now_ns=(1 + rnd.randrange(3)) * S + rnd.randrange(S))
    return got


@pytest.mark.procs
def test_shared_totals_across_processes(name):
    Limiter(qps=50, shared=name)  # create it
    with mp.get_context("fork").Pool(3) as p:
        admitted = p.starmap(_hammer, [(name, 400, s) for s in range(3)])
    t = Limiter(qps=50, shared=name).totals()
    assert t["pass"] == sum(admitted)
    assert t["pass"] + t["block"] == 1200
    assert slidewin._core.read_region(name)["totals"] == t


def test_totals_are_monotonic_under_random_traffic():
    lim = Limiter(qps=4, behavior="throttle", max_queueing_ms=300)
    rnd = random.Random(3)
    now = S
    last = lim.totals()
    for _ in range(500):
        now += rnd.randrange(50 * MS)
        if rnd.random() < 0.5:
            lim.try_acquire(now_ns=now)
        else:
            lim.reserve(now_ns=now)
        t = lim.totals()
        assert all(t[k] >= last[k] for k in KEYS)
        last = t
