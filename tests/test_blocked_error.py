"""BlockedError: the class, the retry_after each behaviour gives, and what pickle and copy keep
(retry_after, and the limiter where it can)."""
import copy
import pickle
import time

import pytest

from slidewin import BlockedError, Event, Limiter

from limiter_helpers import MS, S


def refused(lim):
    with pytest.raises(BlockedError) as ei:
        lim.acquire()
    return ei.value


def test_pickle_keeps_retry_after_and_drops_the_limiter():
    lim = Limiter(qps=1)
    assert lim.try_acquire()
    e = refused(lim)
    assert e.retry_after is not None and e.limiter is lim
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        c = pickle.loads(pickle.dumps(e, proto))
        assert type(c) is BlockedError
        assert c.args == e.args and str(c) == str(e)
        assert c.retry_after == e.retry_after
        assert c.limiter is None  # a Limiter is private to its process


def test_pickle_keeps_a_picklable_limiter_value_and_extra_attributes():
    e = BlockedError("no", retry_after=2.5, limiter="api")
    e.note = {"k": 1}
    c = pickle.loads(pickle.dumps(e))
    assert (c.args, c.retry_after, c.limiter, c.note) == (("no",), 2.5, "api", {"k": 1})


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy])
def test_copy_keeps_retry_after_and_the_limiter(how):
    lim = Limiter(qps=1)
    assert lim.try_acquire()
    e = refused(lim)
    e.note = [1, 2]
    c = how(e)
    assert c is not e and type(c) is BlockedError
    assert c.args == e.args
    assert c.retry_after == e.retry_after
    assert c.limiter is lim
    assert c.note == [1, 2]
    assert (c.note is e.note) == (how is copy.copy)


def test_none_values_and_no_message_survive():
    for e in (BlockedError(), BlockedError("m")):
        for c in (copy.copy(e), copy.deepcopy(e), pickle.loads(pickle.dumps(e))):
            assert c.args == e.args and c.retry_after is None and c.limiter is None


def test_subclass_round_trips():
    class Mine(BlockedError):
        pass

    e = Mine("x", retry_after=1.0)
    c = copy.copy(e)
    assert type(c) is Mine and c.retry_after == 1.0


def test_setstate_validates_retry_after():
    e = BlockedError("x")
    with pytest.raises(ValueError):
        e.__setstate__({"retry_after": -1.0})
    with pytest.raises(TypeError):
        e.__setstate__(["retry_after"])


# -- the class, retry_after of each behaviour ------------------------------------------

def test_blocked_error_class():
    assert issubclass(BlockedError, Exception)
    e = BlockedError("nope")
    assert str(e) == "nope"
    assert e.retry_after is None and e.limiter is None
    lim = Limiter(qps=1)
    e = BlockedError("x", retry_after=1.5, limiter=lim)
    assert e.retry_after == 1.5 and e.limiter is lim
    with pytest.raises(TypeError):
        BlockedError("x", 1.5)  # keyword-only


def test_blocked_error_retry_after_throttle():
    lim = Limiter(qps=0.1, behavior="throttle", max_queueing_ms=500)  # cost 10 s
    t = time.monotonic_ns()
    assert lim.reserve(now_ns=t) == 0
    with pytest.raises(BlockedError) as info:
        lim.acquire()
    after = time.monotonic_ns()
    e = info.value
    assert e.limiter is lim
    # the queue accepts the request once its wait is <= 500 ms: 9.5 s after t
    ra = e.retry_after
    assert isinstance(ra, float)
    assert (t + 9_500 * MS - after) / S - 0.01 <= ra <= 9.5 + 0.01
    assert lim.metric.sum(Event.BLOCK) == 1


def test_blocked_error_retry_after_reject():
    lim = Limiter(qps=0.2, interval_ms=10_000, sample_count=2)  # 2 per 10 s, 5 s buckets
    t = time.monotonic_ns()
    assert lim.try_acquire(2, now_ns=t)
    with pytest.raises(BlockedError) as info:
        lim.acquire(timeout=0)
    after = time.monotonic_ns()
    e = info.value
    assert e.limiter is lim
    t_ms = t // MS
    slides_out_ns = (t_ms - t_ms % 5000 + 10_000) * MS
    ra = e.retry_after
    assert isinstance(ra, float)
    assert (slides_out_ns - after) / S - 0.01 <= ra <= (slides_out_ns - t) / S + 0.01


def test_blocked_error_retry_after_none_for_concurrency_and_warm_up():
    lim = Limiter(concurrency=1)
    lim.try_acquire()
    with pytest.raises(BlockedError) as info:
        lim.acquire(timeout=0)
    assert info.value.retry_after is None
    lim = Limiter(qps=10, behavior="warm_up")
    for _ in range(3):
        lim.try_acquire()
    with pytest.raises(BlockedError) as info:
        lim.acquire(timeout=0)
    assert info.value.retry_after is None
