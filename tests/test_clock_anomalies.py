"""Clock anomalies: now_ns at 0, at INT64_MAX, beyond it, negative, going backwards, jumping
by years forward and back -- for Metric and for every Limiter behavior.

What must hold everywhere: no crash, no lost count (every decision counts PASS, BLOCK or
OCCUPIED_PASS somewhere a read at the newest time sees it), and the documented result
(README "Clock anomalies"):

- a time behind the newest bucket is clamped into the newest bucket, for writes and reads;
- a jump forward is time passing: old buckets slide out, a throttle is idle, warm-up refills;
- after a jump back, the window stays frozen at the newest bucket until the clock catches
  up (it can admit at most one window's limit meanwhile); a throttle's `last` never moves
  back, so requests are paced after it (refused beyond max_queueing_ms);
- 0 and INT64_MAX are ordinary times; 2**63 and negative times are a ValueError naming
  now_ns, and change nothing.
"""

import pytest

from slidewin import Event, Limiter, Metric

MS = 10**6
S = 10**9
YEAR = 365 * 24 * 3600 * S
INT64_MAX = 2**63 - 1
LAST_BUCKET_MS = (INT64_MAX // MS) // 500 * 500  # start of the bucket holding INT64_MAX

BEHAVIORS = ["reject", "warm_up", "throttle", "warm_up_throttle", "concurrency"]


def make(behavior, **kw):
    if behavior == "concurrency":
        return Limiter(concurrency=kw.pop("concurrency", 5), **kw)
    kw.setdefault("qps", 10)
    return Limiter(behavior=behavior, max_queueing_ms=kw.pop("max_queueing_ms", 1000), **kw)


def decisions(lim, now, k):
    """k reserve() calls at now; returns the answers (wait ns or None)."""
    return [lim.reserve(now_ns=now) for _ in range(k)]


def counted(lim, now):
    """PASS + BLOCK + OCCUPIED_PASS in the bucket read at now (clamped like any read)."""
    m = lim.metric
    return sum(m.current(e, now_ns=now) for e in (Event.PASS, Event.BLOCK, Event.OCCUPIED_PASS))


def assert_nothing_counted(lim):
    for b in lim.metric.buckets(now_ns=0):
        assert b.counts == (0,) * 6


# ---------------------------------------------------------------------------------------
# Metric


def test_metric_at_zero():
    m = Metric(1000, 2)
    m.add(Event.PASS, 3, now_ns=0)
    m.add_rt(7, now_ns=0)
    assert m.sum(Event.PASS, now_ns=0) == 3
    assert m.current(Event.PASS, now_ns=0) == 3
    assert m.previous(Event.PASS, now_ns=0) == 0
    assert m.min_rt(now_ns=0) == 7
    # dense, but no bucket with a negative start
    assert [b.start_ms for b in m.buckets(now_ns=0)] == [0]


def test_metric_at_int64_max():
    m = Metric(1000, 2)
    m.add(Event.PASS, 2, now_ns=INT64_MAX)
    m.add_rt(9, now_ns=INT64_MAX)
    m.add(Event.SUCCESS, now_ns=INT64_MAX)
    assert m.sum(Event.PASS, now_ns=INT64_MAX) == 2
    assert m.rate(Event.PASS, now_ns=INT64_MAX) == 2.0
    assert m.current(Event.PASS, now_ns=INT64_MAX) == 2
    assert m.min_rt(now_ns=INT64_MAX) == 9
    assert m.avg_rt(now_ns=INT64_MAX) == 9.0
    starts = [b.start_ms for b in m.buckets(now_ns=INT64_MAX)]
    assert starts == [LAST_BUCKET_MS - 500, LAST_BUCKET_MS]


@pytest.mark.parametrize("bad", [2**63, 2**64, 10**30])
def test_metric_beyond_int64_is_a_value_error(bad):
    m = Metric(1000, 2)
    m.add(Event.PASS, now_ns=S)
    for call in (lambda: m.add(Event.PASS, now_ns=bad), lambda: m.add_rt(1, now_ns=bad),
                 lambda: m.sum(Event.PASS, now_ns=bad), lambda: m.buckets(now_ns=bad),
                 lambda: m.min_rt(now_ns=bad)):
        with pytest.raises(ValueError, match=r"now_ns.*9223372036854775807"):
            call()
    assert m.sum(Event.PASS, now_ns=S) == 1


@pytest.mark.parametrize("bad", [-1, -S, -(2**63), -(2**70)])
def test_metric_negative_is_a_value_error(bad):
    m = Metric(1000, 2)
    with pytest.raises(ValueError, match=r"now_ns must be >= 0"):
        m.add(Event.PASS, now_ns=bad)
    with pytest.raises(ValueError, match=r"now_ns"):
        m.current(Event.PASS, now_ns=bad)
    assert m.sum(Event.PASS, now_ns=0) == 0


def test_metric_backwards_is_clamped_into_the_newest_bucket():
    m = Metric(1000, 2)
    t = 10 * S + 700 * MS  # bucket [10500, 11000) ms
    m.add(Event.PASS, 1, now_ns=t)
    m.add(Event.PASS, 2, now_ns=t - 300 * MS)  # the bucket before: clamped
    m.add(Event.PASS, 4, now_ns=t - 5 * S)  # far behind the window: clamped
    m.add(Event.PASS, 8, now_ns=0)
    assert m.current(Event.PASS, now_ns=t) == 15
    assert m.sum(Event.PASS, now_ns=t) == 15
    # reads behind are clamped too: they see the newest bucket, not an empty past
    assert m.sum(Event.PASS, now_ns=t - 5 * S) == 15
    assert m.previous(Event.PASS, now_ns=t) == 0


def test_metric_years_forward_then_back():
    m = Metric(1000, 2)
    m.add(Event.PASS, 1, now_ns=S)
    m.add(Event.PASS, 2, now_ns=S + 10 * YEAR)  # forward: the old bucket slides out
    assert m.sum(Event.PASS, now_ns=S + 10 * YEAR) == 2
    m.add(Event.PASS, 4, now_ns=S)  # back by 10 years: clamped into the newest bucket
    m.add_rt(3, now_ns=S)
    assert m.sum(Event.PASS, now_ns=S + 10 * YEAR) == 6
    assert m.sum(Event.PASS, now_ns=S) == 6
    assert m.min_rt(now_ns=S) == 3
    # frozen until the clock catches up, then it slides as usual
    assert m.sum(Event.PASS, now_ns=S + 10 * YEAR + 999 * MS) == 6
    assert m.sum(Event.PASS, now_ns=S + 10 * YEAR + 2 * S) == 0
    # reset() forgets the newest time: the past is writable again
    m.reset()
    m.add(Event.PASS, now_ns=S)
    assert m.sum(Event.PASS, now_ns=S) == 1


def test_metric_from_zero_to_int64_max_and_back():
    m = Metric(1000, 2)
    m.add(Event.PASS, now_ns=0)
    m.add(Event.PASS, now_ns=INT64_MAX)
    m.add(Event.PASS, now_ns=0)
    assert m.sum(Event.PASS, now_ns=INT64_MAX) == 2
    assert m.buckets(now_ns=0)[-1].start_ms == LAST_BUCKET_MS


# ---------------------------------------------------------------------------------------
# Limiter: every behavior


@pytest.mark.parametrize("behavior", BEHAVIORS)
def test_limiter_at_zero(behavior):
    lim = make(behavior)
    first = lim.reserve(now_ns=0)
    assert first == 0  # a fresh limiter admits its first request at once, even at 0
    answers = decisions(lim, 0, 11)
    assert counted(lim, 0) == 12
    st = lim.stats(now_ns=0)
    assert st.pass_qps + st.block_qps == 12
    assert sum(a is not None for a in answers) + 1 == st.pass_qps


@pytest.mark.parametrize("behavior", BEHAVIORS)
def test_limiter_at_int64_max(behavior):
    lim = make(behavior)
    answers = decisions(lim, INT64_MAX, 12)
    assert answers[0] == 0
    assert counted(lim, INT64_MAX) == 12
    admitted = sum(a is not None for a in answers)
    expected = {
        "reject": 10,  # the window's limit
        "warm_up": 3,  # cold: qps / cold_factor
        # the queue cannot extend past INT64_MAX ns: the first request and the one whose
        # slot reaches the end of the clock pass, the rest are refused (not all admitted)
        "throttle": 2,
        "warm_up_throttle": 2,
        "concurrency": 5,
    }[behavior]
    assert admitted == expected, answers
    assert all(a is None or 0 <= a <= 1000 * MS for a in answers)
    assert lim.try_acquire(now_ns=INT64_MAX) is False
    st = lim.stats(now_ns=INT64_MAX)
    assert st.pass_qps == expected and st.block_qps == 13 - expected


@pytest.mark.parametrize("behavior", BEHAVIORS)
@pytest.mark.parametrize("bad", [2**63, -1, -(2**63)])
def test_limiter_out_of_range_time_is_a_value_error(behavior, bad):
    lim = make(behavior)
    for call in (lambda: lim.try_acquire(now_ns=bad), lambda: lim.reserve(now_ns=bad),
                 lambda: lim.reserve(now_ns=bad, prioritized=True),
                 lambda: lim.stats(now_ns=bad), lambda: lim.metric.sum(0, now_ns=bad)):
        with pytest.raises(ValueError, match="now_ns") as info:
            call()
        if bad > 0:
            assert "9223372036854775807" in str(info.value)
        else:
            assert ">= 0" in str(info.value)
    assert_nothing_counted(lim)
    assert lim.in_flight == 0


@pytest.mark.parametrize("behavior", BEHAVIORS)
def test_limiter_backwards_is_clamped_no_lost_count(behavior):
    lim = make(behavior, concurrency=50) if behavior == "concurrency" else make(behavior)
    t = 100 * S + 600 * MS
    before = decisions(lim, t, 2)
    back = decisions(lim, t - 550 * MS, 3) + decisions(lim, t - 20 * S, 3)
    assert counted(lim, t) == 8  # all in the newest bucket: nothing lost
    if behavior in ("throttle", "warm_up_throttle"):
        # `last` never moves back: a request behind it is paced after it, never before
        admitted = [w for w in back if w is not None]
        assert all(w >= 550 * MS for w in admitted[:1])
        assert back[-3:] == [None] * 3  # 20 s behind: beyond max_queueing_ms
    elif behavior == "concurrency":
        assert back == [0] * 6
    else:
        assert before[0] == 0


@pytest.mark.parametrize("behavior", BEHAVIORS)
def test_limiter_years_forward(behavior):
    lim = make(behavior)
    t0 = 5 * S
    decisions(lim, t0, 12)
    later = decisions(lim, t0 + 3 * YEAR, 12)
    # time passed: the window slid, a throttle is idle, warm-up refilled (cold again)
    expected = {"reject": 10, "warm_up": 3, "throttle": 11, "warm_up_throttle": 4,
                "concurrency": 0}[behavior]
    # (concurrency: the 5 reserved at t0 are still in flight, time does not release them)
    assert sum(a is not None for a in later) == expected, later
    assert counted(lim, t0 + 3 * YEAR) == 12
    assert lim.stats(now_ns=t0 + 3 * YEAR).waiting == 0


@pytest.mark.parametrize("behavior", BEHAVIORS)
def test_limiter_years_forward_then_back(behavior):
    lim = make(behavior)
    t0 = 5 * S
    fwd = t0 + 10 * YEAR
    first = decisions(lim, fwd, 2)
    back = decisions(lim, t0, 12)
    # every decision at the earlier time is clamped into the newest (future) bucket
    assert counted(lim, fwd) == 14
    admitted = sum(a is not None for a in first + back)
    expected = {
        "reject": 10,  # the frozen window admits its limit in all, then refuses
        "warm_up": 3,
        # the throttle's last admission is 10 years ahead: everything is refused until the
        # clock catches up (retry_after says how long)
        "throttle": 2,
        "warm_up_throttle": 2,
        "concurrency": 5,
    }[behavior]
    assert admitted == expected, (first, back)
    if behavior in ("throttle", "warm_up_throttle"):
        assert back == [None] * 12
    # still frozen a second of real time later: the window holds what it held
    assert counted(lim, t0 + S) == 14
    # when the clock catches up, the window slides and admits again
    if behavior != "concurrency":
        assert lim.reserve(now_ns=fwd + 5 * S) is not None


def test_prioritized_reject_at_int64_max():
    """A borrow granted for a bucket past INT64_MAX: the wait is cut to what fits below the
    end of the clock (never negative, never a crash), and both counts are kept."""
    lim = Limiter(qps=2)
    assert lim.reserve(2, now_ns=INT64_MAX - 400 * MS) == 0
    wait = lim.reserve(now_ns=INT64_MAX, prioritized=True)
    assert wait is not None and 0 <= wait <= 500 * MS
    st = lim.stats(now_ns=INT64_MAX)
    assert st.waiting == 1 and st.occupied_qps == 1.0 and st.pass_qps == 2.0


def test_prioritized_reject_backwards_and_years():
    lim = Limiter(qps=2)
    t = 10 * S + 900 * MS
    assert lim.reserve(2, now_ns=t) == 0
    # 200 ms into the next bucket, then a caller whose clock lags by 500 ms
    assert lim.reserve(now_ns=t + 300 * MS, prioritized=True) == 300 * MS
    assert lim.reserve(now_ns=t - 200 * MS, prioritized=True) is None  # clamped, borrowed
    assert counted(lim, t + 300 * MS) == 2  # OCCUPIED_PASS 1 + BLOCK 1 in the newest bucket
    assert lim.stats(now_ns=t + 300 * MS).waiting == 1
    # years later the borrowed pass has long become current and slid out
    st = lim.stats(now_ns=t + YEAR)
    assert st.waiting == 0 and st.pass_qps == 0


def test_throttle_end_of_clock_refuses_behind_the_saturated_slot():
    """With now_ns near INT64_MAX the queue end saturates at INT64_MAX: requests behind it are
    refused, never all given the same 100 ms wait (a throttle admitting without limit)."""
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=10_000)
    answers = decisions(lim, INT64_MAX - 5, 50)
    assert answers[:2] == [0, 100 * MS]
    assert answers[2:] == [None] * 48
    assert lim.stats(now_ns=INT64_MAX).pass_qps == 2
