"""A concurrency limit: try_acquire() takes a slot, release() gives it back, time does not."""

import pytest

from slidewin import Event, Limiter

from limiter_helpers import counts, ms


def test_concurrency_limit_with_release():
    lim = Limiter(concurrency=2)
    assert lim.try_acquire(now_ns=ms(1)) is True
    assert lim.reserve(now_ns=ms(1)) == 0
    assert lim.try_acquire(now_ns=ms(1)) is False
    assert lim.reserve(now_ns=ms(1), prioritized=True) is None  # ignored for concurrency
    assert lim.stats(now_ns=ms(1)).concurrency == 2
    lim.release()
    assert lim.stats(now_ns=ms(1)).concurrency == 1
    assert lim.try_acquire(2, now_ns=ms(2)) is False
    assert lim.try_acquire(now_ns=ms(2)) is True
    lim.release(2)
    assert lim.stats(now_ns=ms(2)).concurrency == 0
    assert lim.try_acquire(2, now_ns=ms(3)) is True
    assert lim.try_acquire(3, now_ns=ms(3)) is False
    assert counts(lim, Event.PASS, Event.BLOCK, Event.OCCUPIED_PASS, now_ns=ms(3)) == (5, 7, 0)
    with pytest.raises(ValueError):
        lim.release(3)
    lim.release(2)
    with pytest.raises(ValueError):
        lim.release()


def test_concurrency_does_not_depend_on_time():
    lim = Limiter(concurrency=1)
    assert lim.try_acquire(now_ns=ms(1)) is True
    assert lim.try_acquire(now_ns=ms(10**7)) is False


def test_qps_limiter_try_acquire_does_not_touch_in_flight():
    lim = Limiter(qps=10)
    assert lim.try_acquire(now_ns=ms(1))
    assert lim.reserve(now_ns=ms(1)) == 0
    assert lim.stats(now_ns=ms(1)).concurrency == 0
    with pytest.raises(ValueError):
        lim.release()
