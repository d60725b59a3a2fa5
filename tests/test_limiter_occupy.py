"""Prioritized requests borrow from the next window (docs/design.md §4): when the grant is
made, refused, or ignored (behaviours other than reject)."""

import pytest

from slidewin import Event, Limiter

from limiter_helpers import counts, ms


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
