"""What a window promises, exactly, on virtual time (explicit now_ns).

- counts a window cannot hold exactly are refused, not rounded: ``rate=`` above 2**52 a
  period, a ``qps`` window limit (``qps * interval_ms / 1000``) of 2**53 or more; below, a
  window admits exactly its count, never one more; a throttle faster than one request a
  nanosecond still paces;
- the sliding window's worst case: ``limit`` in any window aligned to the buckets, and up to
  ``limit * (1 + (sample_count - 1) / sample_count)`` rounded down... in an arbitrary span of
  ``interval_ms`` (docs/behaviors.md, "What a window guarantees"): reached, never exceeded.
"""
import pytest

from slidewin import KeyedLimiter, Limiter

MS = 1_000_000
T0 = 10**12  # a bucket boundary for every window below


# -- counts a window can hold exactly -------------------------------------------------------


@pytest.mark.parametrize("kind", [Limiter, KeyedLimiter])
@pytest.mark.parametrize("count", [2**52 + 1, 4_900_000_000_000_001, 8_445_126_336_697_683,
                                   9 * 10**15])
def test_a_rate_count_beyond_2_52_is_refused_naming_rate_and_the_bound(kind, count):
    with pytest.raises(ValueError, match=r"rate.*2\*\*52"):
        kind(rate="%d/minute" % count)


@pytest.mark.parametrize("period", ["second", "minute", "hour", "day", "5minutes",
                                    "7seconds", "30seconds", "2hours", "13minutes"])
@pytest.mark.parametrize("count", [2**52, 2**52 - 1, 2**52 - 3, 4_499_999_999_999_999,
                                   3_000_000_000_000_001])
def test_a_huge_rate_admits_exactly_its_count_not_one_more(period, count):
    lim = Limiter(rate="%d/%s" % (count, period), sample_count=1)
    assert lim.try_acquire(count, now_ns=T0)
    assert not lim.try_acquire(1, now_ns=T0)
    assert lim.totals()["pass"] == count


def test_a_rate_admits_exactly_its_count_at_every_count_near_the_bound():
    """Every count of the last 2000 below 2**52 over periods whose qps is inexact."""
    for period in ("minute", "day", "7seconds"):
        for count in range(2**52 - 2000, 2**52 + 1, 7):
            lim = Limiter(rate="%d/%s" % (count, period), sample_count=1)
            assert lim.try_acquire(count, now_ns=T0), (count, period)
            assert not lim.try_acquire(1, now_ns=T0), (count, period)


@pytest.mark.parametrize("qps,interval_ms", [(9e15, 60_000), (9e12, 1001_000),
                                             (2**53 / 1000, 1_000_000), (1e10, 2**40)])
def test_a_qps_window_beyond_2_53_is_refused_naming_qps_and_the_bound(qps, interval_ms):
    with pytest.raises(ValueError, match=r"qps.*2\*\*53"):
        Limiter(qps=qps, interval_ms=interval_ms, sample_count=1)
    with pytest.raises(ValueError, match=r"qps.*2\*\*53"):
        KeyedLimiter(qps=qps, interval_ms=interval_ms, sample_count=1)
    lim = Limiter(qps=1, interval_ms=interval_ms, sample_count=1)
    with pytest.raises(ValueError, match=r"qps.*2\*\*53"):
        lim.update(qps=qps)
    # a throttle has no window limit: it paces at qps
    Limiter(qps=qps if qps <= 9e15 else 9e15, behavior="throttle", interval_ms=interval_ms,
            sample_count=1)


@pytest.mark.parametrize("qps,interval_ms,limit", [(9e15, 1000, 9 * 10**15),
                                                   (9e12, 1000_000, 9 * 10**15),
                                                   (9007199254740.99, 1_000_000, 2**53 - 2)])
def test_a_huge_qps_window_admits_exactly_its_limit_not_one_more(qps, interval_ms, limit):
    lim = Limiter(qps=qps, interval_ms=interval_ms, sample_count=1)
    assert lim.try_acquire(limit, now_ns=T0)
    assert not lim.try_acquire(1, now_ns=T0)


@pytest.mark.parametrize("qps", [2.5e9, 1e12, 9e15])
def test_a_throttle_faster_than_a_request_a_nanosecond_admits_one_a_nanosecond(qps):
    lim = Limiter(qps=qps, behavior="throttle", max_queueing_ms=0)
    assert admitted(lim, T0, 1000) == 1
    assert lim.try_acquire(now_ns=T0 + 1)


# -- the sliding window's worst case ----------------------------------------------------------

DAY = 86_400 * 10**9
B0 = 10 * DAY  # a boundary of every step below (whole days)


def admitted(lim, now_ns, tries):
    """How many of `tries` decisions at now_ns pass."""
    return sum(lim.try_acquire(now_ns=now_ns) for _ in range(tries))


@pytest.mark.parametrize("make, step_ms, window_ms, count, tries", [
    # the default window (1 s in 2 steps of 500 ms): 5 in the last nanosecond of a step, 5
    # more the moment that step slides out, 500 ms + 1 ns later; not a nanosecond sooner
    (lambda: Limiter(qps=5), 500, 1000, 5, 20),
    # 60 steps of 1 s: 100 in the last nanosecond of the first, 100 more 59 s + 1 ns later
    (lambda: Limiter(rate="100/minute"), 1000, 60_000, 100, 150),
], ids=["qps_5_admits_10_within_500_ms_and_1_ns",
      "rate_100_a_minute_admits_200_within_59_s_and_1_ns"])
def test_twice_the_count_within_a_window_less_a_step_and_1_ns_and_no_sooner(
        make, step_ms, window_ms, count, tries):
    lim = make()
    t1 = B0 + step_ms * MS - 1
    assert admitted(lim, t1, tries) == count
    assert admitted(lim, B0 + window_ms * MS - 1, tries) == 0
    t2 = B0 + window_ms * MS
    assert t2 - t1 == (window_ms - step_ms) * MS + 1
    assert admitted(lim, t2, tries) == count
    # and then nothing until the step of t2 slides out in its turn (the count of t2 is in it)
    assert admitted(lim, t2 + step_ms * MS - 1, tries) == 0


def _most_within(events, span_ns):
    """The largest total of the admissions whose times lie within span_ns of each other."""
    best = total = i = 0
    for t, n in events:
        total += n
        while events[i][0] < t - span_ns:
            total -= events[i][1]
            i += 1
        best = max(best, total)
    return best


WINDOWS = {
    "qps=5": (dict(qps=5), 5),
    "qps=10, sample_count=10": (dict(qps=10, sample_count=10), 10),
    "qps=5, sample_count=10": (dict(qps=5, sample_count=10), 5),
    "qps=4, sample_count=1": (dict(qps=4, sample_count=1), 4),
    "rate=100/minute": (dict(rate="100/minute"), 100),
    "rate=7/second": (dict(rate="7/second"), 7),
    "qps=2.5, interval_ms=2000, sample_count=4": (dict(qps=2.5, interval_ms=2000,
                                                       sample_count=4), 5),
}


@pytest.mark.parametrize("name", sorted(WINDOWS))
def test_a_sliding_window_never_exceeds_its_stated_worst_case(name):
    """Random arrivals (clustered at step edges, where the worst case lives), on virtual time:
    at most L in every sample_count consecutive steps and among admissions within
    interval_ms - step of each other; at most 2 L within interval_ms (docs/behaviours.md);
    and both figures are reached."""
    import random

    kw, limit = WINDOWS[name]
    lim = Limiter(**kw)
    interval, sc = lim.interval_ms * MS, lim.sample_count
    step = interval // sc
    rnd = random.Random(name)
    events, t = [], B0
    for _ in range(4000):
        r = rnd.random()
        if r < 0.3:  # to the last nanosecond of this step, or the first of the next
            edge = (t // step + 1) * step
            t = edge - 1 if rnd.random() < 0.5 else edge
        else:
            t += rnd.choice((1, MS, step // 3, step, interval - step))
        n = rnd.choice((1, 1, 1, 2, 3))
        if lim.try_acquire(n, now_ns=t):
            events.append((t, n))
    buckets = {}
    for t, n in events:
        buckets[t // step] = buckets.get(t // step, 0) + n
    first, last = min(buckets), max(buckets)
    per = [buckets.get(b, 0) for b in range(first, last + 1)]
    assert max(sum(per[i:i + sc]) for i in range(len(per))) <= limit
    assert _most_within(events, interval - step) <= limit
    assert _most_within(events, interval) <= 2 * limit
    # the worst case, reached on a fresh limiter: L at the last nanosecond of a step, L more
    # interval - step + 1 ns later
    lim = Limiter(**kw)
    edge = B0 + step
    assert lim.try_acquire(limit, now_ns=edge - 1)
    assert not lim.try_acquire(1, now_ns=edge - 1 + interval - step)
    assert lim.try_acquire(limit, now_ns=edge + interval - step)
