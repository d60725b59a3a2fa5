"""Windows of up to 100 000 buckets against the reference model (tests/refmodel.py).

The C core keeps running totals (and a min_rt deque) instead of re-summing the ring, so
its reads must equal the plain O(n) definition after every kind of move: jumps of
sample_count - 1 / sample_count / sample_count + 1 buckets, far jumps, late times, reset.
No timing here: the cost per decision is measured in benchmarks/ (bench_decision.py).
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slidewin import Event, Limiter, Metric

from refmodel import LimiterModel, MetricModel

MS = 1_000_000
EVENTS = (Event.PASS, Event.BLOCK, Event.SUCCESS, Event.RT)


def same(real, model, now_ms):
    now = now_ms * MS
    for ev in EVENTS:
        assert real.sum(ev, now_ns=now) == model.sum(ev, now_ns=now), (ev, now_ms)
        assert real.current(ev, now_ns=now) == model.current(ev, now_ns=now), (ev, now_ms)
        assert real.previous(ev, now_ns=now) == model.previous(ev, now_ns=now), (ev, now_ms)
    assert real.min_rt(now_ns=now) == model.min_rt(now_ns=now), now_ms


def fill(real, model, first_ms, buckets, window_ms):
    """One bucket of data each: PASS = i + 1, an RT of 100 - i % 50."""
    for i in range(buckets):
        t = (first_ms + i * window_ms) * MS
        for x in (real, model):
            x.add(Event.PASS, i + 1, now_ns=t)
            x.add_rt(100 - i % 50, now_ns=t)


@pytest.mark.parametrize("jump", [1, 2, 99_998, 99_999, 100_000, 100_001, 10**9])
def test_largest_ring_jumps(jump):
    sc = 100_000
    real, model = Metric(sc, sc), MetricModel(sc, sc)  # 1 ms buckets
    fill(real, model, 5, 60, 1)
    head = 5 + 59
    same(real, model, head)
    t = head + jump
    same(real, model, t)
    # a late time lands in the newest bucket, once
    for x in (real, model):
        x.add(Event.BLOCK, 3, now_ns=(t - 40) * MS)
    same(real, model, t)
    same(real, model, t + sc - 1)
    same(real, model, t + sc)
    real.reset()
    model.reset()
    same(real, model, 0)
    fill(real, model, 0, 3, 1)
    same(real, model, 2)


def test_largest_ring_slides_bucket_by_bucket():
    sc = 100_000
    real, model = Metric(2 * sc, sc), MetricModel(2 * sc, sc)  # 2 ms buckets
    fill(real, model, 0, 200, 2)
    for t in range(2 * sc - 10, 2 * sc + 500, 37):  # until the window is empty
        same(real, model, t)
    assert real.min_rt(now_ns=(2 * sc + 500) * MS) == 5000


@pytest.mark.parametrize("sc", [4, 100_000])
def test_min_rt_when_the_front_bucket_leaves(sc):
    """The oldest bucket (the window's min_rt) slides out exactly as its slot restarts."""
    w = 100
    real, model = Metric(w * sc, sc), MetricModel(w * sc, sc)
    for x in (real, model):
        x.add_rt(10, now_ns=0)
        x.add_rt(20, now_ns=w * MS)
    same(real, model, w * sc - 1)
    assert real.min_rt(now_ns=(w * sc - 1) * MS) == 10
    same(real, model, w * sc)  # bucket 0 out, its slot restarted: 20
    assert real.min_rt(now_ns=w * sc * MS) == 20
    same(real, model, w * sc + w)
    assert real.min_rt(now_ns=(w * sc + w) * MS) == 5000


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sc=st.sampled_from([1, 3, 60, 1000, 5000]),
    moves=st.lists(st.tuples(st.sampled_from(["add", "rt", "jump", "jump", "late", "read"]),
                             st.one_of(st.integers(0, 8), st.integers(0, 12_000)),
                             st.integers(0, 9)),
                   min_size=1, max_size=40),
)
def test_moves_match_model(sc, moves):
    w = 2
    real, model = Metric(w * sc, sc), MetricModel(w * sc, sc)
    t = 0
    for kind, k, n in moves:
        if kind == "jump":  # k buckets ahead, anywhere in the bucket
            t += k * w + n % w
        elif kind == "late":
            t = max(0, t - k)
        for x in (real, model):
            if kind == "add":
                x.add(Event.PASS, n, now_ns=t * MS)
            elif kind == "rt":
                x.add_rt(k % 300, now_ns=t * MS)
        same(real, model, t)


@pytest.mark.parametrize("sc", [2, 60, 1000, 100_000])
def test_limiter_decisions_and_stats_match_model(sc):
    iv = 100_000 if sc == 100_000 else 60_000
    real = Limiter(qps=0.5, interval_ms=iv, sample_count=sc)  # 30 or 50 per window
    model = LimiterModel(qps=0.5, interval_ms=iv, sample_count=sc)
    w = iv // sc
    limit = iv // 2000
    t = 7
    steps = [0] * (limit + 3) + [w, sc - 1, 1, sc, 1, sc + 1, 3, 10**6] + [0] * 5
    admitted = 0
    for k in steps:
        t += k * w
        got = real.try_acquire(now_ns=t * MS)
        assert got == model.try_acquire(now_ns=t * MS), (k, t)
        admitted += got
        st_ = real.stats(now_ns=t * MS)
        assert round(st_.pass_qps * iv / 1000) == model.sec.sum(0, t * MS), (k, t)
    assert admitted > limit  # the window slid: more than one window's worth passed
