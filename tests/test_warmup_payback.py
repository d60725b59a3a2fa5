"""The warm-up bypass is closed: an oversize request admitted into an empty window is paid
back, so a cold limiter's passes stay within what its ramp allows (issue: a cold
Limiter(qps=100, behavior="warm_up") admitted try_acquire(100) every second)."""

from hypothesis import given, settings, strategies as st

from slidewin import Limiter
from refmodel import LimiterModel

S = 10**9
MS = 10**6


def test_full_size_requests_from_cold_get_the_cold_rate():
    lim = Limiter(qps=100, behavior="warm_up")
    passed = [lim.try_acquire(100, now_ns=(1 + s) * S) for s in range(10)]
    # cold, the ramp admits 33.3 per second: a request of 100 every 3 s, not every second
    assert passed[0] and sum(passed) <= 4, passed
    lim34 = Limiter(qps=100, behavior="warm_up")
    got = sum(34 * lim34.try_acquire(34, now_ns=(1 + s) * S) for s in range(10))
    assert got <= 34 * 10 * 33.4 / 34 + 34, got          # within the cold rate, plus one


def test_still_live_a_cold_limiter_fed_only_large_requests_warms_up():
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    admitted = [lim.try_acquire(10, now_ns=(1 + s) * S // 2) for s in range(200)]
    assert admitted[0] and any(admitted[-20:])           # passes, and keeps passing
    assert sum(admitted[-20:]) >= 5                      # warm by the end: 10 a second


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1500), st.integers(1, 10)), min_size=1, max_size=60))
def test_passes_stay_within_the_ramps_allowance(steps):
    """From cold, under any request sizes and times: over the run, the passes never exceed
    the highest admitted rate seen times (the run + one window), plus one request."""
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    model = LimiterModel(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    t = 5 * S
    first = t
    passed, top_rate, biggest = 0, 0.0, 0
    for dt_ms, n in steps:
        t += dt_ms * MS
        ok = lim.try_acquire(n, now_ns=t)
        assert ok == model.try_acquire(n, now_ns=t)       # the core is the model
        top_rate = max(top_rate, model.warm_rate())
        if ok:
            passed += n
            biggest = max(biggest, n)
    span_s = (t - first) / S
    assert passed <= top_rate * (span_s + 1.0) + biggest, (passed, top_rate, span_s)
