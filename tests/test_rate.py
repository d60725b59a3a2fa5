"""rate="100/minute": the count per period on every limiter type, exact at the window's edges."""
import asyncio
import pickle
import random

import pytest

import slidewin
from slidewin import BlockedError, KeyedLimiter, Limiter, limit

S = 10**9
MS = 10**6
T0 = 2 * 86_400 * S  # monotonic start: a whole number of days (every period's step divides it)


def test_100_per_minute_exact_at_the_edges():
    lim = Limiter(rate="100/minute")
    assert (lim.interval_ms, lim.sample_count) == (60_000, 60)
    assert all(lim.try_acquire(now_ns=T0) for _ in range(100))
    assert not lim.try_acquire(now_ns=T0)                      # the 101st
    assert not lim.try_acquire(now_ns=T0 + 59_999 * MS)        # still within the minute
    assert all(lim.try_acquire(now_ns=T0 + 60 * S) for _ in range(100))  # the window slid
    assert not lim.try_acquire(now_ns=T0 + 60 * S)


def test_a_spread_minute_slides_step_by_step():
    lim = Limiter(rate="100/minute")
    assert all(lim.try_acquire(now_ns=T0) for _ in range(50))
    assert all(lim.try_acquire(now_ns=T0 + 30 * S) for _ in range(50))
    assert not lim.try_acquire(now_ns=T0 + 59 * S + 999 * MS)
    assert all(lim.try_acquire(now_ns=T0 + 60 * S) for _ in range(50))   # the first 50 left
    assert not lim.try_acquire(now_ns=T0 + 89 * S)
    assert all(lim.try_acquire(now_ns=T0 + 90 * S) for _ in range(50))


def test_qps_with_a_long_interval_is_still_per_second():
    # the pitfall rate= avoids: qps is per second, so 100 x 60 s = 6000 a window
    lim = Limiter(qps=100, interval_ms=60_000)
    assert sum(lim.try_acquire(now_ns=T0) for _ in range(7000)) == 6000
    lim = Limiter(rate="100/minute")
    assert sum(lim.try_acquire(now_ns=T0) for _ in range(7000)) == 100


@pytest.mark.parametrize("period", ["second", "minute", "hour", "day", "5minutes", "7s",
                                    "3 hours", "2d"])
def test_the_count_is_admitted_exactly_whatever_the_rounding(period):
    # qps * interval_ms / 1000 in doubles may fall below the count (7/day): never admits one less
    for count in list(range(1, 60)) + [97, 100, 997, 1000, 9999, 10_000, 123_457]:
        rate = "%d/%s" % (count, period)
        lim = Limiter(rate=rate)
        got = sum(lim.try_acquire(now_ns=T0) for _ in range(count + 1))
        assert got == count, rate


def test_no_span_of_the_period_less_one_step_admits_more_than_the_count():
    rnd = random.Random(19)
    lim = Limiter(rate="20/minute")           # 60 steps of 1 s
    t, admitted = T0, []
    for _ in range(3000):
        t += rnd.randrange(0, 2 * S)
        if lim.try_acquire(now_ns=t):
            admitted.append(t)
    assert len(admitted) > 200
    span = 59 * S                              # the period less one step
    j = 0
    for i, a in enumerate(admitted):
        while admitted[j] < a - span:
            j += 1
        assert i - j + 1 <= 20


def test_day_windows_private_and_shared(tmp_path):
    for shared in (None, str(tmp_path / "day")):
        lim = Limiter(rate="3/day", shared=shared)
        assert (lim.interval_ms, lim.sample_count) == (86_400_000, 60)
        assert all(lim.try_acquire(now_ns=T0 + k * 3600 * S) for k in range(3))
        assert not lim.try_acquire(now_ns=T0 + 86_399 * S)
        # the first slides out a day after its 24-minute step began
        assert lim.try_acquire(now_ns=T0 + 86_400 * S)
        assert not lim.try_acquire(now_ns=T0 + 86_400 * S)
        big = Limiter(rate="10000/day", sample_count=1440, shared=None if shared is None
                      else shared + "2")
        assert sum(big.try_acquire(now_ns=T0) for _ in range(10_001)) == 10_000


def test_keyed_is_per_key():
    per_user = KeyedLimiter(rate="10/minute")
    assert repr(per_user) == "KeyedLimiter(rate='10/minute', sample_count=6)"
    for key in ("alice", "bob"):
        assert all(per_user.try_acquire(key, now_ns=T0) for _ in range(10))
        assert not per_user.try_acquire(key, now_ns=T0 + 59 * S)
    assert per_user.try_acquire("alice", now_ns=T0 + 60 * S)


def test_decorator_factories():
    @limit(rate="2/hour")
    def send():
        return "sent"

    assert send() == send() == "sent"
    with pytest.raises(BlockedError) as e:
        send()
    assert e.value.retry_after > 3000

    per_user = KeyedLimiter(rate="1/day")

    @per_user(key=lambda user: user)
    async def hello(user):
        return user

    async def main():
        assert await hello("a") == "a" and await hello("b") == "b"
        with pytest.raises(BlockedError):
            await hello("a")

    asyncio.run(main())


def test_forms_and_what_they_set():
    cases = {
        "5/second": (5.0, 1000, 50), "1000/hour": (1000 / 3600, 3_600_000, 60),
        "10000/day": (10000 / 86400, 86_400_000, 60), "30/5minutes": (0.1, 300_000, 60),
        "100 per minute": (100 / 60, 60_000, 60), "100/Minutes": (100 / 60, 60_000, 60),
        "6/5s": (1.2, 5000, 50), "0/minute": (0.0, 60_000, 60),
    }
    for rate, (qps, iv, sc) in cases.items():
        lim = Limiter(rate=rate)
        assert lim.qps == pytest.approx(qps, rel=1e-12) and (lim.interval_ms, lim.sample_count) \
            == (iv, sc), rate
        assert lim.rate == rate
    assert Limiter(rate="100/minute", sample_count=6).sample_count == 6
    assert Limiter(rate="10/minute", behavior="throttle").qps == pytest.approx(1 / 6)


def test_repr_and_pickle(tmp_path):
    assert repr(Limiter(rate="100/minute")) == "Limiter(rate='100/minute', sample_count=60)"
    lim = Limiter(rate="100/minute", behavior="throttle", shared=str(tmp_path / "p"))
    assert "rate='100/minute', behavior='throttle'" in repr(lim)
    back = pickle.loads(pickle.dumps(lim))
    assert back.rate == "100/minute" and back.qps == lim.qps
    lim.update(rate="50/minute")
    assert repr(lim).startswith("Limiter(rate='50/minute'")
    lim.update(qps=1)
    assert lim.rate is None and repr(lim).startswith("Limiter(qps=1.0")


@pytest.mark.parametrize("kind", [Limiter, KeyedLimiter, limit])
@pytest.mark.parametrize("kw,exc,words", [
    (dict(rate="100/minute", qps=5), ValueError, ["rate=", "qps=5"]),
    (dict(rate="100/minute", interval_ms=60000), ValueError, ["rate=", "interval_ms=60000"]),
    (dict(rate="100/minute", concurrency=5), ValueError, ["rate=", "concurrency=5"]),
    (dict(rate="100/fortnight"), ValueError, ["rate", "100/minute", "second"]),
    (dict(rate="100"), ValueError, ["rate", "/"]),
    (dict(rate="-1/minute"), ValueError, ["rate"]),
    (dict(rate="1.5/minute"), ValueError, ["rate"]),
    (dict(rate="1/0minutes"), ValueError, ["rate", "period"]),
    (dict(rate="1/40000days"), ValueError, ["rate", "period"]),
    (dict(rate="1" * 5000 + "/minute"), ValueError, ["rate must be"]),  # no int() error
    (dict(rate="1/" + "1" * 5000 + "s"), ValueError, ["rate must be"]),
    (dict(rate="\u0661\u0660/minute"), ValueError, ["rate must be"]),    # ASCII digits only
    (dict(rate=100), TypeError, ["rate", "int"]),
    (dict(rate=b"1/s"), TypeError, ["rate"]),
])
def test_bad_input(kind, kw, exc, words):
    with pytest.raises(exc) as e:
        kind(**kw)
    for w in words:
        assert w in str(e.value)


def test_update_keeps_the_window():
    lim = Limiter(rate="100/minute")
    with pytest.raises(ValueError, match="interval_ms=60000"):
        lim.update(rate="100/hour")
    with pytest.raises(ValueError, match="rate="):
        lim.update(rate="10/minute", qps=3)
    assert lim.rate == "100/minute"


def test_unchanged_defaults_without_rate():
    lim = Limiter(qps=5)
    assert (lim.interval_ms, lim.sample_count, lim.rate) == (1000, 2, None)
    assert repr(lim) == "Limiter(qps=5.0)"
    slidewin.Limiter(qps=5, interval_ms=2000)  # interval_ms alone as before


@pytest.mark.parametrize("kind", [Limiter, KeyedLimiter, limit])
def test_the_defaults_given_explicitly_are_the_defaults(kind):
    # None is the default of interval_ms and sample_count: given, it means what leaving them
    # out means (Sentinel's 1000 ms in 2 steps, or a rate's period), never a value of its own
    steps = 6 if kind is KeyedLimiter else 60
    for kw in ({}, dict(interval_ms=None), dict(sample_count=None),
               dict(interval_ms=None, sample_count=None)):
        lim = kind(qps=5, **kw)
        assert (lim.interval_ms, lim.sample_count, repr(lim)) == \
            (1000, 2, "%s(qps=5.0)" % type(lim).__name__)
        lim = kind(rate="100/minute", **kw)
        assert (lim.interval_ms, lim.sample_count, lim.rate) == (60_000, steps, "100/minute")
    lim = kind(rate="5/second", sample_count=2)  # a value given is that value
    assert (lim.interval_ms, lim.sample_count, repr(lim)) == \
        (1000, 2, "%s(rate='5/second')" % type(lim).__name__)
    with pytest.raises(ValueError, match="interval_ms=1000"):  # the window is the rate's
        kind(rate="5/second", interval_ms=1000)


def test_the_docs_page_runs():
    import os
    import re

    pytest.importorskip("fastapi")
    pytest.importorskip("flask")
    page = os.path.join(os.path.dirname(__file__), "..", "docs", "rates-and-routes.md")
    with open(page, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) >= 5
    for i, code in enumerate(blocks):
        exec(compile(code, "docs/rates-and-routes.md block %d" % i, "exec"), {"__name__": "docs"})
