"""slidewin.Limiter against the reference model (tests/refmodel.py), decision for decision.

For each behavior, hypothesis draws a configuration and a request stream
(try_acquire / reserve / release with n, now_ns and prioritized) and replays it on the
real Limiter and on the model, comparing every decision, every wait returned by
reserve, and the counts PASS / BLOCK / OCCUPIED_PASS of ``lim.metric`` after it.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slidewin import Event, Limiter

from refmodel import NS_PER_MS, LimiterModel

MS = NS_PER_MS

WINDOWS = [(1000, 2), (1000, 1), (1000, 4), (500, 2), (2000, 4), (200, 2), (100, 1),
           (250, 5), (1000, 10)]

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def configs(draw, behavior):
    interval_ms, sample_count = draw(st.sampled_from(WINDOWS))
    kw = dict(interval_ms=interval_ms, sample_count=sample_count)
    if behavior == "concurrency":
        kw["concurrency"] = draw(st.sampled_from([0, 1, 2, 3, 5, 10]))
        return kw
    kw["behavior"] = behavior
    if behavior in ("reject", "warm_up"):
        qps = draw(st.sampled_from([0, 1, 2, 3, 5, 10, 20, 2.5, 7.5, 100]))
        if 0 < qps * interval_ms / 1000 < 1:  # a ValueError: see test_bad_input.py
            qps = 10
    else:
        qps = draw(st.sampled_from([0, 0.3, 0.5, 1, 3, 7, 10, 33, 1500, 3e6]))
    kw["qps"] = qps
    if behavior in ("warm_up", "warm_up_throttle"):
        kw["warm_up_s"] = draw(st.sampled_from([1, 2, 3, 10]))
        kw["cold_factor"] = draw(st.sampled_from([2, 3, 4]))
    if behavior in ("throttle", "warm_up_throttle"):
        kw["max_queueing_ms"] = draw(st.sampled_from([0, 1, 100, 500, 2000]))
    if behavior == "reject":
        kw["occupy_timeout_ms"] = draw(st.sampled_from([500, 200, 1000, 0]))
    return kw


op_st = st.tuples(
    st.sampled_from(["try", "reserve", "reserve", "prio", "release"]),
    st.one_of(st.just(1), st.just(1), st.integers(1, 4), st.integers(1, 200)),
    st.sampled_from(["stay", "tiny", "tiny", "small", "small", "small", "back", "far"]),
    st.integers(0, 1000),
    st.integers(0, 10**6 - 1),
)


def base_step_ns(kw):
    """A time step that fits the configuration: a bucket, or one request's cost."""
    if kw.get("behavior") in ("throttle", "warm_up_throttle"):
        q = kw["qps"]
        return int(min(2e9, 3e9 / q)) if q > 0 else 10**9
    return kw["interval_ms"] // kw["sample_count"] * MS


def run_stream(kw, start_ms, ops):
    lim = Limiter(**kw)
    model = LimiterModel(**kw)
    base = base_step_ns(kw)
    now = start_ms * MS
    log = [f"Limiter(**{kw!r})"]
    for op, n, kind, permille, sub in ops:
        if kind == "tiny":
            now += permille * base // 4000
        elif kind == "small":
            now += permille * 2 * base // 1000 + sub
        elif kind == "back":
            now = max(0, now - permille * kw["interval_ms"] * MS // 1000 - sub)
        elif kind == "far":
            now += kw["interval_ms"] * MS * (1 + permille // 50) + sub
        if op == "release":
            if kw.get("concurrency") is None or model.in_flight == 0:
                continue
            n = min(n, model.in_flight)
            log.append(f"release({n})")
            lim.release(n)
            model.release(n)
        elif op == "try":
            log.append(f"try_acquire({n}, now_ns={now})")
            got = lim.try_acquire(n, now_ns=now)
            exp = model.try_acquire(n, now_ns=now)
            assert got is exp, ("try_acquire", got, exp, "\n".join(log))
        else:
            prio = op == "prio"
            log.append(f"reserve({n}, now_ns={now}, prioritized={prio})")
            got = lim.reserve(n, now_ns=now, prioritized=prio)
            exp = model.reserve(n, now_ns=now, prioritized=prio)
            assert got == exp, ("reserve", got, exp, "\n".join(log))
            assert got is None or type(got) is int
        for ev in (Event.PASS, Event.BLOCK, Event.OCCUPIED_PASS):
            g = lim.metric.sum(ev, now_ns=now)
            e = model.sec.sum(int(ev), now)
            assert g == e, (ev.name, g, e, "\n".join(log))
        got_b = [(b.start_ms, b.counts[0], b.counts[1], b.counts[5])
                 for b in lim.metric.buckets(now_ns=now)]
        exp_b = [(s_, c[0], c[1], c[5]) for s_, c, _ in model.sec.buckets(now)]
        assert got_b == exp_b, ("buckets", got_b, exp_b, "\n".join(log))
        st_ = lim.stats(now_ns=now)
        assert st_.waiting == model.waiting(now), ("waiting", st_.waiting, "\n".join(log))
        assert st_.concurrency == model.in_flight, ("concurrency", "\n".join(log))


starts = st.one_of(st.just(0), st.integers(0, 10**6), st.integers(0, 10**10))


@pytest.mark.parametrize(
    "behavior", ["reject", "concurrency", "warm_up", "throttle", "warm_up_throttle"]
)
@SETTINGS
@given(data=st.data())
def test_limiter_matches_model(behavior, data):
    kw = data.draw(configs(behavior), label="config")
    start_ms = data.draw(starts, label="start_ms")
    ops = data.draw(st.lists(op_st, max_size=120), label="ops")
    run_stream(kw, start_ms, ops)


@pytest.mark.parametrize("behavior", ["warm_up", "warm_up_throttle"])
@SETTINGS
@given(data=st.data())
def test_warm_up_long_busy_streams_match_model(behavior, data):
    """Dense demand over many seconds, so the tokens run down through the ramp."""
    kw = data.draw(configs(behavior), label="config")
    kw["warm_up_s"] = data.draw(st.sampled_from([1, 2]), label="warm_up_s")
    start_ms = data.draw(starts, label="start_ms")
    gaps = data.draw(
        st.lists(st.integers(0, 400), min_size=50, max_size=300), label="gaps_ms"
    )
    ops = [("reserve" if g % 3 else "try", 1 + g % 2, "stay", 0, 0) for g in gaps]
    lim = Limiter(**kw)
    model = LimiterModel(**kw)
    now = start_ms * MS
    log = [repr(kw)]
    for (op, n, *_), g in zip(ops, gaps):
        now += g * MS + g * 997
        log.append(f"{op}({n}, now_ns={now})")
        if op == "try":
            assert lim.try_acquire(n, now_ns=now) is model.try_acquire(n, now_ns=now), log
        else:
            assert lim.reserve(n, now_ns=now) == model.reserve(n, now_ns=now), log
        assert lim.metric.sum(Event.PASS, now_ns=now) == model.sec.sum(0, now), log


prio_op_st = st.tuples(
    st.sampled_from(["try", "prio", "prio", "prio", "reserve"]),
    st.sampled_from([1, 1, 1, 2, 3]),
    st.sampled_from(["stay", "tiny", "tiny", "tiny", "small", "back", "far"]),
    st.integers(0, 1000),
    st.integers(0, 10**6 - 1),
)


@SETTINGS
@given(data=st.data())
def test_reject_prioritized_occupy_matches_model(data):
    """Small window limits and mostly prioritized requests: many occupy grants."""
    interval_ms, sample_count = data.draw(st.sampled_from(WINDOWS), label="window")
    window_ms = interval_ms // sample_count
    limit = data.draw(st.sampled_from([1, 2, 3, 5]), label="limit")
    kw = dict(
        qps=limit * 1000 / interval_ms,
        interval_ms=interval_ms,
        sample_count=sample_count,
        occupy_timeout_ms=data.draw(
            st.sampled_from([window_ms, window_ms // 2, window_ms + 1, 2 * window_ms, 0, 500]),
            label="occupy_timeout_ms",
        ),
    )
    start_ms = data.draw(starts, label="start_ms")
    ops = data.draw(st.lists(prio_op_st, min_size=10, max_size=120), label="ops")
    run_stream(kw, start_ms, ops)
