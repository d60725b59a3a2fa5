"""Bad arguments: TypeError for a wrong type, ValueError naming the parameter (API.md).

One case per bad argument, for Metric(...), every Metric method, Limiter(...) and every
Limiter method. ``match`` is a regular expression the message must contain: the
parameter's name (and, for a sub-1 window limit, the suggestion "throttle").
"""

import asyncio

import pytest

from slidewin import Event, Limiter, Metric

N = r"\bn\b"  # the parameter n, as a word


def metric():
    return Metric(1000, 2)


def custom():
    return Metric(1000, 2, events=("sent", "dropped"))


def qps_lim():
    return Limiter(qps=10)


def conc_lim():
    return Limiter(concurrency=2)


CASES = [
    # ---- Metric(...) -------------------------------------------------------------------
    ("Metric interval 0", lambda: Metric(0, 1), ValueError, "interval_ms"),
    ("Metric interval negative", lambda: Metric(-1000, 2), ValueError, "interval_ms"),
    ("Metric interval float", lambda: Metric(1000.0, 2), TypeError, "interval_ms"),
    ("Metric interval str", lambda: Metric("1000", 2), TypeError, "interval_ms"),
    ("Metric interval kw float", lambda: Metric(interval_ms=1.5), TypeError, "interval_ms"),
    ("Metric sample_count 0", lambda: Metric(1000, 0), ValueError, "sample_count"),
    ("Metric sample_count negative", lambda: Metric(1000, -2), ValueError, "sample_count"),
    ("Metric sample_count float", lambda: Metric(1000, 2.0), TypeError, "sample_count"),
    ("Metric sample_count None", lambda: Metric(1000, None), TypeError, "sample_count"),
    ("Metric not divisible", lambda: Metric(1000, 3), ValueError, "interval_ms|sample_count"),
    ("Metric interval < sample_count", lambda: Metric(5, 10), ValueError,
     "interval_ms|sample_count"),
    ("Metric events int", lambda: Metric(1000, 2, events=5), TypeError, "events"),
    ("Metric events non-str", lambda: Metric(1000, 2, events=("a", 1)), TypeError, "events"),
    ("Metric events duplicate", lambda: Metric(1000, 2, events=("a", "a")), ValueError,
     "events"),
    ("Metric unknown kw", lambda: Metric(1000, 2, interval=5), TypeError, "interval"),
    # ---- Metric.add ------------------------------------------------------------------
    ("add unknown name", lambda: metric().add("nope", now_ns=0), ValueError, "event"),
    ("add index too big", lambda: metric().add(6, now_ns=0), ValueError, "event"),
    ("add index negative", lambda: metric().add(-1, now_ns=0), ValueError, "event"),
    ("add event float", lambda: metric().add(1.0, now_ns=0), TypeError, "event"),
    ("add event None", lambda: metric().add(None, now_ns=0), TypeError, "event"),
    ("add n negative", lambda: metric().add(Event.PASS, -1, now_ns=0), ValueError, N),
    ("add n float", lambda: metric().add(Event.PASS, 1.0, now_ns=0), TypeError, N),
    ("add n str", lambda: metric().add(Event.PASS, "1", now_ns=0), TypeError, N),
    ("add now negative", lambda: metric().add(Event.PASS, now_ns=-1), ValueError, "now_ns"),
    ("add now float", lambda: metric().add(Event.PASS, now_ns=1.0), TypeError, "now_ns"),
    ("add now str", lambda: metric().add(Event.PASS, now_ns="5"), TypeError, "now_ns"),
    ("custom add unknown", lambda: custom().add("pass", now_ns=0), ValueError, "event"),
    ("custom add index", lambda: custom().add(2, now_ns=0), ValueError, "event"),
    # ---- Metric.add_rt ---------------------------------------------------------------
    ("add_rt negative", lambda: metric().add_rt(-1, now_ns=0), ValueError, "rt_ms"),
    ("add_rt float", lambda: metric().add_rt(1.5, now_ns=0), TypeError, "rt_ms"),
    ("add_rt now negative", lambda: metric().add_rt(1, now_ns=-5), ValueError, "now_ns"),
    ("add_rt now float", lambda: metric().add_rt(1, now_ns=5.0), TypeError, "now_ns"),
    ("custom add_rt", lambda: custom().add_rt(1, now_ns=0), ValueError, "(?i)rt|event"),
    # ---- Metric reads ------------------------------------------------------------------
    ("sum unknown", lambda: metric().sum("nope", now_ns=0), ValueError, "event"),
    ("sum index", lambda: metric().sum(6, now_ns=0), ValueError, "event"),
    ("sum event float", lambda: metric().sum(0.0, now_ns=0), TypeError, "event"),
    ("sum now negative", lambda: metric().sum(0, now_ns=-1), ValueError, "now_ns"),
    ("sum now float", lambda: metric().sum(0, now_ns=1e9), TypeError, "now_ns"),
    ("rate unknown", lambda: metric().rate("nope", now_ns=0), ValueError, "event"),
    ("rate now negative", lambda: metric().rate(0, now_ns=-1), ValueError, "now_ns"),
    ("rate now float", lambda: metric().rate(0, now_ns=0.5), TypeError, "now_ns"),
    ("current unknown", lambda: metric().current("x", now_ns=0), ValueError, "event"),
    ("current index", lambda: metric().current(-1, now_ns=0), ValueError, "event"),
    ("current now negative", lambda: metric().current(0, now_ns=-1), ValueError, "now_ns"),
    ("current now float", lambda: metric().current(0, now_ns=0.0), TypeError, "now_ns"),
    ("previous unknown", lambda: metric().previous("x", now_ns=0), ValueError, "event"),
    ("previous index", lambda: metric().previous(99, now_ns=0), ValueError, "event"),
    ("previous now negative", lambda: metric().previous(0, now_ns=-1), ValueError, "now_ns"),
    ("previous now float", lambda: metric().previous(0, now_ns=2.0), TypeError, "now_ns"),
    ("min_rt now negative", lambda: metric().min_rt(now_ns=-1), ValueError, "now_ns"),
    ("min_rt now float", lambda: metric().min_rt(now_ns=1.0), TypeError, "now_ns"),
    ("avg_rt now negative", lambda: metric().avg_rt(now_ns=-1), ValueError, "now_ns"),
    ("avg_rt now float", lambda: metric().avg_rt(now_ns=1.0), TypeError, "now_ns"),
    ("buckets now negative", lambda: metric().buckets(now_ns=-1), ValueError, "now_ns"),
    ("buckets now float", lambda: metric().buckets(now_ns=1.0), TypeError, "now_ns"),
    ("custom min_rt", lambda: custom().min_rt(now_ns=0), ValueError, "(?i)rt|event"),
    ("custom avg_rt", lambda: custom().avg_rt(now_ns=0), ValueError, "(?i)rt|event"),
    ("custom sum unknown", lambda: custom().sum("rt", now_ns=0), ValueError, "event"),
    # ---- Limiter(...) ------------------------------------------------------------------
    ("Limiter neither", lambda: Limiter(), ValueError, "qps|concurrency"),
    ("Limiter both", lambda: Limiter(qps=1, concurrency=1), ValueError, "qps|concurrency"),
    ("Limiter qps negative", lambda: Limiter(qps=-1), ValueError, "qps"),
    ("Limiter qps nan", lambda: Limiter(qps=float("nan")), ValueError, "qps"),
    ("Limiter qps str", lambda: Limiter(qps="10"), TypeError, "qps"),
    ("Limiter concurrency negative", lambda: Limiter(concurrency=-1), ValueError,
     "concurrency"),
    ("Limiter concurrency str", lambda: Limiter(concurrency="2"), TypeError, "concurrency"),
    ("Limiter behavior unknown", lambda: Limiter(qps=10, behavior="nope"), ValueError,
     "behavior"),
    ("Limiter behavior int", lambda: Limiter(qps=10, behavior=3), TypeError, "behavior"),
    ("Limiter behavior with concurrency", lambda: Limiter(concurrency=2, behavior="throttle"),
     ValueError, "behavior|concurrency"),
    ("Limiter warm_up with concurrency", lambda: Limiter(concurrency=2, behavior="warm_up"),
     ValueError, "behavior|concurrency"),
    ("Limiter reject qps<1 per window", lambda: Limiter(qps=0.5), ValueError, "throttle"),
    ("Limiter warm_up qps<1 per window", lambda: Limiter(qps=0.5, behavior="warm_up"),
     ValueError, "throttle"),
    ("Limiter reject short interval", lambda: Limiter(qps=1, interval_ms=500), ValueError,
     "throttle"),
    ("Limiter reject qps<1 names qps", lambda: Limiter(qps=0.5), ValueError,
     "qps|interval_ms"),
    ("Limiter cold_factor 1", lambda: Limiter(qps=10, behavior="warm_up", cold_factor=1),
     ValueError, "cold_factor"),
    ("Limiter cold_factor 0", lambda: Limiter(qps=10, behavior="warm_up", cold_factor=0),
     ValueError, "cold_factor"),
    ("Limiter cold_factor validated for reject", lambda: Limiter(qps=10, cold_factor=1),
     ValueError, "cold_factor"),
    ("Limiter cold_factor str", lambda: Limiter(qps=10, cold_factor="3"), TypeError,
     "cold_factor"),
    ("Limiter warm_up_s negative", lambda: Limiter(qps=10, behavior="warm_up", warm_up_s=-1),
     ValueError, "warm_up_s"),
    ("Limiter warm_up_s str", lambda: Limiter(qps=10, warm_up_s="10"), TypeError, "warm_up_s"),
    ("Limiter max_queueing negative",
     lambda: Limiter(qps=10, behavior="throttle", max_queueing_ms=-1), ValueError,
     "max_queueing_ms"),
    ("Limiter max_queueing validated for reject", lambda: Limiter(qps=10, max_queueing_ms=-1),
     ValueError, "max_queueing_ms"),
    ("Limiter max_queueing str", lambda: Limiter(qps=10, max_queueing_ms="5"), TypeError,
     "max_queueing_ms"),
    ("Limiter occupy negative", lambda: Limiter(qps=10, occupy_timeout_ms=-1), ValueError,
     "occupy_timeout_ms"),
    ("Limiter interval 0", lambda: Limiter(qps=10, interval_ms=0), ValueError, "interval_ms"),
    ("Limiter interval float", lambda: Limiter(qps=10, interval_ms=1000.0), TypeError,
     "interval_ms"),
    ("Limiter sample_count 0", lambda: Limiter(qps=10, sample_count=0), ValueError,
     "sample_count"),
    ("Limiter not divisible", lambda: Limiter(qps=10, sample_count=3), ValueError,
     "interval_ms|sample_count"),
    ("Limiter behavior positional", lambda: Limiter(10, "throttle"), TypeError, None),
    ("Limiter unknown kw", lambda: Limiter(qps=10, burst=5), TypeError, "burst"),
    # ---- Limiter.try_acquire / reserve ---------------------------------------------------
    ("try_acquire n 0", lambda: qps_lim().try_acquire(0, now_ns=0), ValueError, N),
    ("try_acquire n negative", lambda: qps_lim().try_acquire(-1, now_ns=0), ValueError, N),
    ("try_acquire n float", lambda: qps_lim().try_acquire(1.0, now_ns=0), TypeError, N),
    ("try_acquire now negative", lambda: qps_lim().try_acquire(now_ns=-1), ValueError,
     "now_ns"),
    ("try_acquire now float", lambda: qps_lim().try_acquire(now_ns=1.0), TypeError, "now_ns"),
    ("try_acquire conc n 0", lambda: conc_lim().try_acquire(0), ValueError, N),
    ("reserve n 0", lambda: qps_lim().reserve(0, now_ns=0), ValueError, N),
    ("reserve n float", lambda: qps_lim().reserve(2.0, now_ns=0), TypeError, N),
    ("reserve now negative", lambda: qps_lim().reserve(now_ns=-1), ValueError, "now_ns"),
    ("reserve now float", lambda: qps_lim().reserve(now_ns=0.0), TypeError, "now_ns"),
    ("reserve throttle n 0", lambda: Limiter(qps=10, behavior="throttle").reserve(0, now_ns=0),
     ValueError, N),
    # ---- Limiter.acquire / acquire_async -------------------------------------------------
    ("acquire n 0", lambda: qps_lim().acquire(0), ValueError, N),
    ("acquire n float", lambda: qps_lim().acquire(1.5), TypeError, N),
    ("acquire timeout negative", lambda: qps_lim().acquire(timeout=-1), ValueError, "timeout"),
    ("acquire timeout str", lambda: qps_lim().acquire(timeout="1"), TypeError, "timeout"),
    ("acquire_async n 0", lambda: asyncio.run(qps_lim().acquire_async(0)), ValueError, N),
    ("acquire_async timeout negative",
     lambda: asyncio.run(qps_lim().acquire_async(timeout=-0.5)), ValueError, "timeout"),
    ("acquire_async timeout str",
     lambda: asyncio.run(qps_lim().acquire_async(timeout="1")), TypeError, "timeout"),
    # ---- Limiter.release -------------------------------------------------------------------
    ("release beyond in flight", lambda: conc_lim().release(), ValueError, N + "|in flight|"
     "in-flight|release"),
    ("release more than held", lambda: _held(conc_lim(), 1).release(2), ValueError,
     N + "|in flight|in-flight|release"),
    ("release on qps limiter", lambda: qps_lim().release(), ValueError,
     N + "|in flight|in-flight|release"),
    ("release n 0", lambda: _held(conc_lim(), 1).release(0), ValueError, N),
    ("release n float", lambda: _held(conc_lim(), 1).release(1.0), TypeError, N),
    # ---- Limiter.entry / stats ------------------------------------------------------------
    ("entry n 0", lambda: _enter(qps_lim().entry(0)), ValueError, N),
    ("entry n float", lambda: _enter(qps_lim().entry(1.0)), TypeError, N),
    ("stats now negative", lambda: qps_lim().stats(now_ns=-1), ValueError, "now_ns"),
    ("stats now float", lambda: qps_lim().stats(now_ns=1.0), TypeError, "now_ns"),
]


def _held(lim, n):
    assert lim.try_acquire(n)
    return lim


def _enter(ctx):
    with ctx:
        pass


@pytest.mark.parametrize(("call", "exc", "match"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_case_ids_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


def test_value_error_message_names_value():
    """The message names the parameter, the value and what is allowed."""
    with pytest.raises(ValueError) as info:
        Metric(1000, 0)
    assert "sample_count" in str(info.value) and "0" in str(info.value)
    with pytest.raises(ValueError) as info:
        Limiter(qps=10, cold_factor=1)
    assert "cold_factor" in str(info.value) and "1" in str(info.value)


def test_failed_calls_change_nothing():
    m = metric()
    m.add(Event.PASS, 2, now_ns=10**9)
    for bad in (lambda: m.add(Event.PASS, -1, now_ns=10**9), lambda: m.add("x", now_ns=10**9),
                lambda: m.add(Event.PASS, now_ns=-1), lambda: m.add_rt(-3, now_ns=10**9)):
        with pytest.raises((TypeError, ValueError)):
            bad()
    assert m.sum(Event.PASS, now_ns=10**9) == 2
    assert m.sum(Event.RT, now_ns=10**9) == 0
    lim = Limiter(qps=2)
    with pytest.raises(ValueError):
        lim.try_acquire(0, now_ns=10**9)
    with pytest.raises(ValueError):
        lim.release()
    assert lim.metric.sum(Event.PASS, now_ns=10**9) == 0
    assert lim.metric.sum(Event.BLOCK, now_ns=10**9) == 0
    assert lim.try_acquire(2, now_ns=10**9)


def test_accepted_edge_values():
    """Values at the edge of what is allowed are accepted, not refused."""
    Limiter(qps=0.5, behavior="throttle")  # sub-1 per window is fine for throttle
    Limiter(qps=0.5, behavior="warm_up_throttle")
    Limiter(qps=1)  # exactly 1 per window
    Limiter(qps=2, interval_ms=500, sample_count=1)
    Limiter(qps=0)  # kill switch
    Limiter(qps=0, behavior="warm_up")
    Limiter(concurrency=0)
    Limiter(qps=10, max_queueing_ms=0, occupy_timeout_ms=0)
    Limiter(qps=10, behavior="warm_up", cold_factor=2)
    Limiter(qps=1.5, behavior="throttle")
    Limiter(100)  # qps positional
    Metric(1, 1)
    m = Metric(1000, 2)
    m.add(Event.PASS, 0, now_ns=0)
    m.add_rt(0, now_ns=0)
    Limiter(qps=10).try_acquire(now_ns=0)
    Limiter(qps=10).acquire(timeout=0)
