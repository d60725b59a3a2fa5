"""The constructor fuzzed against the core: whatever the numbers, Limiter(...) either builds a
limiter that decides, or raises TypeError/ValueError naming a parameter — never the generic
"invalid configuration", never a crash (the binding only turns the core's one check into the
exception)."""

import math

from hypothesis import given, settings, strategies as st

from slidewin import Limiter

PARAMS = ("qps", "concurrency", "behavior", "warm_up_s", "cold_factor", "max_queueing_ms",
          "occupy_timeout_ms", "interval_ms", "sample_count", "pass exactly one")

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=1e-20, max_value=1e20),
    st.integers(-10, 10**18),
    st.sampled_from([0, 1, 2, 3, 0.5, 1.0000001, 9e15, 9.1e15, 2**53, 2**53 + 1, 1e-16]),
)
ints = st.one_of(st.integers(-5, 2**41), st.sampled_from([1, 2, 3, 7, 60, 1000, 100000]))


@settings(max_examples=1500, deadline=None)
@given(
    qps=numbers,
    behavior=st.sampled_from(["reject", "warm_up", "throttle", "warm_up_throttle"]),
    warm_up_s=numbers,
    cold_factor=numbers,
    max_queueing_ms=ints,
    interval_ms=ints,
    sample_count=st.one_of(st.integers(-2, 10), st.sampled_from([100000, 100001])),
)
def test_qps_constructor(qps, behavior, warm_up_s, cold_factor, max_queueing_ms, interval_ms,
                         sample_count):
    kw = dict(behavior=behavior, warm_up_s=warm_up_s, cold_factor=cold_factor,
              max_queueing_ms=max_queueing_ms, interval_ms=interval_ms,
              sample_count=sample_count)
    try:
        lim = Limiter(qps, **kw)
    except (TypeError, ValueError) as e:
        msg = str(e)
        assert "invalid Limiter configuration" not in msg
        assert any(p in msg for p in PARAMS), msg
        assert "-9223372036854775808" not in msg
        return
    # built: every argument was in range, and the limiter decides
    assert qps >= 0 and math.isfinite(qps) and cold_factor > 1 and interval_ms % sample_count == 0
    t = 10**12
    ok = lim.try_acquire(now_ns=t)
    if qps > 0 and behavior in ("reject", "warm_up"):
        assert ok, (qps, kw)  # a window limit of at least one request: the first passes
    lim.stats(now_ns=t)


@settings(max_examples=300, deadline=None)
@given(concurrency=st.one_of(st.integers(-3, 2**54), st.sampled_from([2**53, 2**53 + 1])))
def test_concurrency_constructor(concurrency):
    try:
        lim = Limiter(concurrency=concurrency)
    except ValueError as e:
        assert "concurrency" in str(e)
        assert concurrency < 0 or concurrency > 2**53
        return
    assert 0 <= concurrency <= 2**53
    assert lim.try_acquire() == (concurrency >= 1)
