"""What a Limiter tells about itself: stats(), its metric, repr()."""

import pytest

from slidewin import Event, Limiter, Metric

from limiter_helpers import ms


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
    # the settings that differ from the defaults, as keywords that rebuild the limiter
    assert repr(Limiter(qps=100, behavior="throttle", max_queueing_ms=500)) == (
        "Limiter(qps=100.0, behavior='throttle', max_queueing_ms=500)")
    assert repr(Limiter(concurrency=8)) == "Limiter(concurrency=8)"
    assert repr(Limiter(qps=7, behavior="warm_up", warm_up_s=4, cold_factor=5)) == (
        "Limiter(qps=7.0, behavior='warm_up', warm_up_s=4.0, cold_factor=5.0)")
