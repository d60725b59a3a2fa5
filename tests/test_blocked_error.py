"""BlockedError keeps retry_after (and limiter where it can) through pickle and copy."""
import copy
import pickle

import pytest

from slidewin import BlockedError, Limiter


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
