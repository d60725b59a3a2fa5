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
    assert sum(lim.try_acquire(now_ns=T0) for _ in range(1000)) == 1
    assert lim.try_acquire(now_ns=T0 + 1)
