"""Worked examples of docs/design.md §4-5 and the Limiter surface of the README's API."""

import asyncio
import inspect
import threading
import time

import pytest

from slidewin import BlockedError, Event, Limiter, Metric, limit

from refmodel import LimiterModel

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


# -- warm_up (docs/design.md §5) --------------------------------------------------------

WARM_UP_SEQUENCE = [3, 3, 3, 3, 3, 4, 4, 4, 5, 5, 6, 7, 10, 10, 10, 10]


def steady_demand(lim, seconds, t0_ms=0, step_ms=10):
    """try_acquire every step_ms from an aligned second; admitted per whole second."""
    per_second = []
    for sec in range(seconds):
        admitted = 0
        for k in range(1000 // step_ms):
            admitted += lim.try_acquire(now_ns=ms(t0_ms + sec * 1000 + k * step_ms))
        per_second.append(admitted)
    return per_second


def test_warm_up_model_reproduces_design_sequence():
    model = LimiterModel(10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    assert (model.warning, model.max_token) == (50, 100)
    assert model.slope == pytest.approx(0.004)
    assert model.warm_rate() == pytest.approx(10 / 3)
    assert steady_demand(model, 16) == WARM_UP_SEQUENCE


@pytest.mark.parametrize("t0_ms", [0, 1000, 7_000_000])
@pytest.mark.parametrize("step_ms", [10, 1, 50])
def test_warm_up_from_cold_under_steady_demand(t0_ms, step_ms):
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    assert steady_demand(lim, 16, t0_ms, step_ms) == WARM_UP_SEQUENCE


def test_warm_up_counts_pass_and_block():
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    results = [lim.try_acquire(now_ns=ms(100)) for _ in range(10)]
    assert results == [True] * 3 + [False] * 7
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=ms(100)) == (3, 7)


def test_warm_up_fresh_is_cold_whatever_the_clock():
    # (a): Sentinel would start warm with its clock near 0
    for t in (0, 1, 999):
        lim = Limiter(qps=10, behavior="warm_up")
        assert sum(lim.try_acquire(now_ns=ms(t)) for _ in range(10)) == 3


def test_warm_up_reserve_returns_zero_or_none():
    lim = Limiter(qps=10, behavior="warm_up")
    got = [lim.reserve(now_ns=ms(5)) for _ in range(4)]
    assert got == [0, 0, 0, None]
    # prioritized is ignored by warm_up
    assert lim.reserve(now_ns=ms(400), prioritized=True) is None
    assert lim.metric.sum(Event.OCCUPIED_PASS, now_ns=ms(400)) == 0


def test_warm_up_without_ramp_when_max_le_warning():
    # (b): q=1, W=1, cf=3: warning 0, max 0. Sentinel computes NaN and blocks all.
    lim = Limiter(qps=1, behavior="warm_up", warm_up_s=1, cold_factor=3)
    assert steady_demand(lim, 4) == [1, 1, 1, 1]


def test_warm_up_q_below_cold_factor_still_warms_up():
    # (c): q=2 < cf=3: cold rate 0.67/s < one per window; slidewin admits one per window
    lim = Limiter(qps=2, behavior="warm_up", warm_up_s=10, cold_factor=3)
    per = steady_demand(lim, 16)
    model = LimiterModel(2, behavior="warm_up", warm_up_s=10, cold_factor=3)
    assert per == steady_demand(model, 16)
    assert per[0] == 1 and per[-1] == 2


def test_warm_up_idle_cools_down_again():
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    model = LimiterModel(10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    assert steady_demand(lim, 20) == steady_demand(model, 20)
    # 200 idle seconds refill to max: cold again
    later = 220_000
    assert steady_demand(lim, 3, later) == steady_demand(model, 3, later) == [3, 3, 3]


# -- throttle (docs/design.md §5) ---------------------------------------------------------


def test_throttle_seven_at_one_instant():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=500)
    now = ms(123_456)
    waits = [lim.reserve(now_ns=now) for _ in range(7)]
    assert waits == [0, 100 * MS, 200 * MS, 300 * MS, 400 * MS, 500 * MS, None]
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=now) == (6, 1)


def test_throttle_try_acquire_only_admits_without_wait():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=500)
    now = ms(10_000)
    assert lim.try_acquire(now_ns=now) is True
    assert lim.try_acquire(now_ns=now) is False  # would wait 100 ms
    assert lim.try_acquire(now_ns=now + 100 * MS - 1) is False
    # a refusal moves nothing: the next slot is still exactly 100 ms after the first
    assert lim.try_acquire(now_ns=now + 100 * MS) is True
    assert lim.reserve(now_ns=now + 100 * MS) == 100 * MS
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=now + 100 * MS) == (3, 2)


def test_throttle_fresh_admits_at_once_at_time_zero():
    assert Limiter(qps=10, behavior="throttle").reserve(now_ns=0) == 0
    assert Limiter(qps=10, behavior="throttle").try_acquire(now_ns=0) is True
    assert Limiter(qps=0.01, behavior="throttle").try_acquire(now_ns=0) is True
    assert Limiter(qps=10, behavior="warm_up_throttle").reserve(now_ns=0) == 0


def test_throttle_paced_requests_pass_without_wait():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=0)
    for k in range(20):
        assert lim.reserve(now_ns=ms(1000 + 100 * k)) == 0
    assert lim.reserve(now_ns=ms(1000 + 100 * 19) + 1) is None  # queue 0: no wait allowed


def test_throttle_wait_exactly_max_queueing_passes():
    lim = Limiter(qps=2, behavior="throttle", max_queueing_ms=500)
    assert lim.reserve(now_ns=ms(0)) == 0
    assert lim.reserve(now_ns=ms(0)) == 500 * MS
    assert lim.reserve(now_ns=ms(0)) is None
    assert lim.reserve(now_ns=ms(500) - 1) is None  # wait 500 ms + 1 ns
    assert lim.reserve(now_ns=ms(500)) == 500 * MS


@pytest.mark.parametrize(
    ("qps", "cost_ns"),
    [(3000, 333_333), (1500, 666_667), (7000, 142_857), (2_000_000, 500), (10**9, 1),
     (4e8, 3),  # 2.5 ns rounds half up
     (3.0, 333_333_333), (0.3, 3_333_333_333)],
)
def test_throttle_cost_is_exact_in_ns(qps, cost_ns):
    lim = Limiter(qps=qps, behavior="throttle", max_queueing_ms=100_000)
    now = 5 * S
    assert lim.reserve(now_ns=now) == 0
    assert lim.reserve(now_ns=now) == cost_ns
    assert lim.reserve(now_ns=now) == 2 * cost_ns
    assert lim.reserve(now_ns=now + 3 * cost_ns) == 0
    assert lim.reserve(now_ns=now + 3 * cost_ns) == cost_ns


def test_throttle_above_1000_qps_sequence():
    lim = Limiter(qps=3000, behavior="throttle", max_queueing_ms=500)
    t = 7 * S
    waits = [lim.reserve(now_ns=t) for _ in range(10)]
    assert waits == [k * 333_333 for k in range(10)]
    lim2 = Limiter(qps=3000, behavior="throttle")
    assert lim2.reserve(now_ns=t) == 0
    assert lim2.reserve(now_ns=t + 333_333) == 0
    assert lim2.reserve(now_ns=t + 333_334) == 333_332


def test_throttle_cost_uses_n():
    lim = Limiter(qps=3, behavior="throttle", max_queueing_ms=2000)
    assert lim.reserve(2, now_ns=S) == 0
    assert lim.reserve(2, now_ns=S) == 666_666_667  # round(2e9 / 3), not 2 * 333333333


def test_throttle_qps_below_half_works():
    lim = Limiter(qps=0.25, behavior="throttle", max_queueing_ms=0)
    assert lim.try_acquire(now_ns=S) is True
    assert lim.try_acquire(now_ns=5 * S - 1) is False
    assert lim.try_acquire(now_ns=5 * S) is True


def test_throttle_n_scales_cost():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=500)
    assert lim.reserve(10, now_ns=S) == 0  # first: admitted at once whatever n
    assert lim.reserve(10, now_ns=S) is None  # cost of 10 is 1 s > 500 ms
    assert lim.reserve(5, now_ns=S) == 500 * MS
    assert lim.reserve(1, now_ns=S) is None
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=S) == (15, 11)


# -- warm_up_throttle -----------------------------------------------------------------------


def test_warm_up_throttle_cold_cost_300ms():
    lim = Limiter(qps=10, behavior="warm_up_throttle", warm_up_s=10, cold_factor=3,
                  max_queueing_ms=1000)
    now = ms(50_000)
    assert [lim.reserve(now_ns=now) for _ in range(5)] == [0, 300 * MS, 600 * MS, 900 * MS,
                                                            None]


def test_warm_up_throttle_warms_up():
    kw = dict(qps=10, behavior="warm_up_throttle", warm_up_s=1, cold_factor=3,
              max_queueing_ms=0)
    lim = Limiter(**kw)
    model = LimiterModel(**kw)
    got = steady_demand(lim, 12, 0, 5)
    assert got == steady_demand(model, 12, 0, 5)
    assert got[0] < got[-1] == 10


# -- reject, concurrency, kill switch --------------------------------------------------------


def test_reject_window_limit():
    lim = Limiter(qps=5)
    assert [lim.try_acquire(now_ns=ms(100)) for _ in range(6)] == [True] * 5 + [False]
    assert lim.try_acquire(now_ns=ms(999)) is False
    # at 1000 the window is buckets 500 and 1000: bucket 0 (5 passes) slid out
    assert lim.try_acquire(now_ns=ms(1000)) is True


def test_reject_window_limit_slides():
    lim = Limiter(qps=5)
    assert sum(lim.try_acquire(now_ns=ms(100)) for _ in range(3)) == 3
    assert sum(lim.try_acquire(now_ns=ms(600)) for _ in range(5)) == 2
    assert sum(lim.try_acquire(now_ns=ms(1000)) for _ in range(5)) == 3
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=ms(1000)) == (5, 5)
    # at 1500 only bucket 1000 (3 passes) remains: room for 2
    assert lim.try_acquire(3, now_ns=ms(1500)) is False
    assert lim.try_acquire(2, now_ns=ms(1500)) is True
    assert lim.try_acquire(now_ns=ms(1500)) is False


def test_reject_n_above_limit_and_counts_n():
    lim = Limiter(qps=5)
    assert lim.try_acquire(6, now_ns=ms(1)) is False
    assert lim.try_acquire(5, now_ns=ms(1)) is True
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=ms(1)) == (5, 6)


def test_reject_interval_scales_limit():
    lim = Limiter(qps=10, interval_ms=500, sample_count=1)  # 5 per 500 ms
    assert sum(lim.try_acquire(now_ns=ms(10)) for _ in range(9)) == 5
    lim = Limiter(qps=2.5, interval_ms=2000, sample_count=4)  # 5 per 2 s
    assert sum(lim.try_acquire(now_ns=ms(10)) for _ in range(9)) == 5
    lim = Limiter(qps=2.5)  # 2.5 per second: 2
    assert sum(lim.try_acquire(now_ns=ms(10)) for _ in range(9)) == 2


def test_reject_reserve_zero_or_none():
    lim = Limiter(qps=2)
    assert [lim.reserve(now_ns=ms(10)) for _ in range(3)] == [0, 0, None]


@pytest.mark.parametrize(
    "kw",
    [dict(qps=0), dict(qps=0, behavior="warm_up"), dict(qps=0, behavior="throttle"),
     dict(qps=0, behavior="warm_up_throttle"), dict(concurrency=0)],
)
def test_kill_switch(kw):
    lim = Limiter(**kw)
    assert lim.try_acquire(now_ns=ms(5)) is False
    assert lim.reserve(now_ns=ms(5)) is None
    assert lim.reserve(now_ns=ms(5), prioritized=True) is None
    assert lim.try_acquire(now_ns=0) is False
    assert counts(lim, Event.PASS, Event.BLOCK, Event.OCCUPIED_PASS, now_ns=ms(5)) == (0, 4, 0)
    t0 = time.monotonic()
    with pytest.raises(BlockedError):
        lim.acquire(timeout=10)  # can never pass: raises at once
    assert time.monotonic() - t0 < 5


def test_concurrency_limit_with_release():
    lim = Limiter(concurrency=2)
    assert lim.try_acquire(now_ns=ms(1)) is True
    assert lim.reserve(now_ns=ms(1)) == 0
    assert lim.try_acquire(now_ns=ms(1)) is False
    assert lim.reserve(now_ns=ms(1), prioritized=True) is None  # ignored for concurrency
    assert lim.stats(now_ns=ms(1)).concurrency == 2
    lim.release()
    assert lim.stats(now_ns=ms(1)).concurrency == 1
    assert lim.try_acquire(2, now_ns=ms(2)) is False
    assert lim.try_acquire(now_ns=ms(2)) is True
    lim.release(2)
    assert lim.stats(now_ns=ms(2)).concurrency == 0
    assert lim.try_acquire(2, now_ns=ms(3)) is True
    assert lim.try_acquire(3, now_ns=ms(3)) is False
    assert counts(lim, Event.PASS, Event.BLOCK, Event.OCCUPIED_PASS, now_ns=ms(3)) == (5, 7, 0)
    with pytest.raises(ValueError):
        lim.release(3)
    lim.release(2)
    with pytest.raises(ValueError):
        lim.release()


def test_concurrency_does_not_depend_on_time():
    lim = Limiter(concurrency=1)
    assert lim.try_acquire(now_ns=ms(1)) is True
    assert lim.try_acquire(now_ns=ms(10**7)) is False


def test_qps_limiter_try_acquire_does_not_touch_in_flight():
    lim = Limiter(qps=10)
    assert lim.try_acquire(now_ns=ms(1))
    assert lim.reserve(now_ns=ms(1)) == 0
    assert lim.stats(now_ns=ms(1)).concurrency == 0
    with pytest.raises(ValueError):
        lim.release()


# -- prioritized occupy (docs/design.md §4) ---------------------------------------------


def test_prioritized_occupy_grant():
    lim = Limiter(qps=2)  # 2 x 500 ms, occupy_timeout_ms=500
    assert lim.try_acquire(now_ns=ms(100)) and lim.try_acquire(now_ns=ms(100))
    now = 600_123_456
    assert lim.try_acquire(now_ns=now) is False  # BLOCK 1
    assert lim.reserve(now_ns=now) is None  # not prioritized: BLOCK 2
    # bucket 0 (2 passes) slides out in 400 ms < 500: grant, proceed at 1000 ms
    assert lim.reserve(now_ns=now, prioritized=True) == ms(1000) - now
    assert counts(lim, Event.PASS, Event.BLOCK, Event.OCCUPIED_PASS, now_ns=now) == (2, 2, 1)
    assert lim.metric.current(Event.OCCUPIED_PASS, now_ns=now) == 1
    assert lim.stats(now_ns=now).waiting == 1
    now2 = ms(700)
    assert lim.reserve(now_ns=now2, prioritized=True) == ms(300)
    assert lim.stats(now_ns=now2).waiting == 2
    # waiting (2) >= L (2): refused
    assert lim.reserve(now_ns=now2, prioritized=True) is None
    assert counts(lim, Event.PASS, Event.BLOCK, Event.OCCUPIED_PASS, now_ns=now2) == (2, 3, 2)
    # at 1000 the granted passes are counted in the bucket they were granted for
    t = ms(1000)
    assert lim.metric.current(Event.PASS, now_ns=t) == 2
    assert lim.metric.previous(Event.PASS, now_ns=t) == 0
    assert lim.metric.previous(Event.OCCUPIED_PASS, now_ns=t) == 2
    assert counts(lim, Event.PASS, Event.OCCUPIED_PASS, now_ns=t) == (2, 2)
    assert lim.stats(now_ns=t).waiting == 0
    assert lim.try_acquire(now_ns=t) is False  # the borrowed passes fill the window
    bs = lim.metric.buckets(now_ns=t)
    assert [(b.start_ms, b.counts[Event.PASS], b.counts[Event.OCCUPIED_PASS]) for b in bs] == [
        (500, 0, 2), (1000, 2, 0)]


def test_prioritized_refused_when_oldest_bucket_slides_out_too_late():
    lim = Limiter(qps=2)
    lim.try_acquire(2, now_ns=ms(100))
    # at 500 exactly, bucket 0 slides out in w = 500 ms: not < occupy_timeout_ms (500)
    assert lim.reserve(now_ns=ms(500), prioritized=True) is None
    lim2 = Limiter(qps=2, occupy_timeout_ms=501)
    lim2.try_acquire(2, now_ns=ms(100))
    assert lim2.reserve(now_ns=ms(500), prioritized=True) == ms(500)


def test_prioritized_refused_when_oldest_bucket_is_not_enough():
    lim = Limiter(qps=2)
    lim.try_acquire(1, now_ns=ms(100))
    lim.try_acquire(1, now_ns=ms(600))
    # 2 + 0 + 1 - 1 = 2 <= 2: granted; then 2 + 1 + 1 - 1 = 3 > 2: refused
    assert lim.reserve(now_ns=ms(700), prioritized=True) == ms(300)
    assert lim.reserve(now_ns=ms(700), prioritized=True) is None


def test_prioritized_passes_normally_when_room():
    lim = Limiter(qps=2)
    assert lim.reserve(now_ns=ms(700), prioritized=True) == 0
    assert counts(lim, Event.PASS, Event.OCCUPIED_PASS, now_ns=ms(700)) == (1, 0)


@pytest.mark.parametrize(
    "kw",
    [dict(qps=10, behavior="throttle"), dict(qps=3, behavior="warm_up")],
)
def test_prioritized_ignored_elsewhere(kw):
    a, b = Limiter(**kw), Limiter(**kw)
    for i in range(12):
        t = ms(300 + i * 20)
        assert a.reserve(now_ns=t, prioritized=True) == b.reserve(now_ns=t)
    assert a.metric.sum(Event.OCCUPIED_PASS, now_ns=ms(540)) == 0


# -- stats ------------------------------------------------------------------------------------


def test_stats_fields_and_types():
    lim = Limiter(qps=4)
    t = ms(100)
    for _ in range(6):
        lim.try_acquire(now_ns=t)
    lim.metric.add(Event.SUCCESS, 3, now_ns=t)
    lim.metric.add(Event.EXCEPTION, 1, now_ns=t)
    lim.metric.add_rt(10, now_ns=t)
    lim.metric.add_rt(20, now_ns=t)
    s = lim.stats(now_ns=t)
    for f in ("pass_qps", "block_qps", "success_qps", "exception_qps", "avg_rt_ms",
              "min_rt_ms"):
        assert isinstance(getattr(s, f), float), f
    for f in ("concurrency", "waiting"):
        assert type(getattr(s, f)) is int, f
    assert s.pass_qps == pytest.approx(4.0)
    assert s.block_qps == pytest.approx(2.0)
    assert s.success_qps == pytest.approx(3.0)
    assert s.exception_qps == pytest.approx(1.0)
    assert s.avg_rt_ms == pytest.approx(10.0)
    assert s.min_rt_ms == pytest.approx(10.0)
    assert s.concurrency == 0 and s.waiting == 0


def test_stats_rates_use_interval():
    lim = Limiter(qps=10, interval_ms=2000, sample_count=4)
    for _ in range(8):
        lim.try_acquire(now_ns=ms(100))
    assert lim.stats(now_ns=ms(100)).pass_qps == pytest.approx(4.0)


def test_stats_empty():
    s = Limiter(qps=4).stats(now_ns=0)
    assert (s.pass_qps, s.block_qps, s.success_qps, s.exception_qps) == (0.0,) * 4
    assert s.avg_rt_ms == 0.0
    assert s.min_rt_ms == pytest.approx(5000.0)


def test_metric_property():
    lim = Limiter(qps=10)
    assert isinstance(lim.metric, Metric)
    assert (lim.metric.interval_ms, lim.metric.sample_count) == (1000, 2)
    lim = Limiter(qps=10, interval_ms=2000, sample_count=4)
    assert (lim.metric.interval_ms, lim.metric.sample_count, lim.metric.window_ms) == (
        2000, 4, 500)
    lim.try_acquire(now_ns=ms(1))
    assert lim.metric.sum(Event.PASS, now_ns=ms(1)) == 1


def test_repr_shows_config():
    r = repr(Limiter(qps=100, behavior="throttle", max_queueing_ms=500))
    assert "Limiter" in r and "qps=100" in r and "throttle" in r and "500" in r
    r = repr(Limiter(concurrency=8))
    assert "concurrency=8" in r
    r = repr(Limiter(qps=7, behavior="warm_up", warm_up_s=4, cold_factor=5))
    assert "warm_up" in r and "4" in r and "5" in r


def test_limiter_noop_exists():
    # the benchmark-only helpers are private module functions, not Limiter methods
    from slidewin import _core

    assert _core._noop() is None
    assert _core._try_acquire_nogil(Limiter(qps=1), now_ns=0) is True
    assert not hasattr(Limiter(qps=1), "_noop")


# -- BlockedError -------------------------------------------------------------------------


def test_blocked_error_class():
    assert issubclass(BlockedError, Exception)
    e = BlockedError("nope")
    assert str(e) == "nope"
    assert e.retry_after is None and e.limiter is None
    lim = Limiter(qps=1)
    e = BlockedError("x", retry_after=1.5, limiter=lim)
    assert e.retry_after == 1.5 and e.limiter is lim
    with pytest.raises(TypeError):
        BlockedError("x", 1.5)  # keyword-only


def test_blocked_error_retry_after_throttle():
    lim = Limiter(qps=0.1, behavior="throttle", max_queueing_ms=500)  # cost 10 s
    t = time.monotonic_ns()
    assert lim.reserve(now_ns=t) == 0
    with pytest.raises(BlockedError) as info:
        lim.acquire()
    after = time.monotonic_ns()
    e = info.value
    assert e.limiter is lim
    # the queue accepts the request once its wait is <= 500 ms: 9.5 s after t
    ra = e.retry_after
    assert isinstance(ra, float)
    assert (t + 9_500 * MS - after) / S - 0.01 <= ra <= 9.5 + 0.01
    assert lim.metric.sum(Event.BLOCK) == 1


def test_blocked_error_retry_after_reject():
    lim = Limiter(qps=0.2, interval_ms=10_000, sample_count=2)  # 2 per 10 s, 5 s buckets
    t = time.monotonic_ns()
    assert lim.try_acquire(2, now_ns=t)
    with pytest.raises(BlockedError) as info:
        lim.acquire(timeout=0)
    after = time.monotonic_ns()
    e = info.value
    assert e.limiter is lim
    t_ms = t // MS
    slides_out_ns = (t_ms - t_ms % 5000 + 10_000) * MS
    ra = e.retry_after
    assert isinstance(ra, float)
    assert (slides_out_ns - after) / S - 0.01 <= ra <= (slides_out_ns - t) / S + 0.01


def test_blocked_error_retry_after_none_for_concurrency_and_warm_up():
    lim = Limiter(concurrency=1)
    lim.try_acquire()
    with pytest.raises(BlockedError) as info:
        lim.acquire(timeout=0)
    assert info.value.retry_after is None
    lim = Limiter(qps=10, behavior="warm_up")
    for _ in range(3):
        lim.try_acquire()
    with pytest.raises(BlockedError) as info:
        lim.acquire(timeout=0)
    assert info.value.retry_after is None


# -- acquire / timeout ("Waiting") ---------------------------------------------------------


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
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        t0 = time.monotonic()
        await lim.acquire_async()
        waited = time.monotonic() - t0
        progress = ticks - before
        stop = True
        await task
        return waited, progress

    waited, progress = asyncio.run(main())
    assert waited >= 0.15
    assert progress >= 3  # ~50 expected; 0 if acquire_async blocked the loop


# -- entry() -----------------------------------------------------------------------------


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


# -- decorators and limit() ------------------------------------------------------------------


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


def test_warm_up_cold_limiter_fed_only_large_requests_still_warms():
    # DESIGN §5 (c): a cold limiter never dies. Its cold allowance here is 3.33 per window;
    # requests of n=4 alone would never fit, so the first request of an empty window passes
    # whatever its size (n <= L), and the admitted passes warm it up to q.
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    per_second = []
    for sec in range(30):
        admitted = 0
        for k in range(10):  # one try every 100 ms
            if lim.try_acquire(4, now_ns=(100 + sec) * 10**9 + k * 100 * 10**6):
                admitted += 4
        per_second.append(admitted)
    assert per_second[0] == 4  # one request per window while cold
    assert all(a >= 4 for a in per_second)
    assert per_second[-1] == 8  # warm: two n=4 fit under q=10
    # and n above the window's limit still never passes
    assert not lim.try_acquire(11, now_ns=200 * 10**9)
