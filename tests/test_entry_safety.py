"""Entry safety: no type of the module can be made half-built from Python, an Entry is a GC
type, and each Entry transition (idle -> entered -> exited) is one atomic step."""
import asyncio
import copy
import gc
import threading
import weakref

import pytest

import slidewin
from slidewin import BlockedError, KeyedLimiter, Limiter, Metric, _core


# -- nothing can be instantiated half-built -----------------------------------------------

@pytest.mark.parametrize("kind", ["Entry", "KeyedEntry"])
def test_entry_cannot_be_instantiated(kind):
    t = getattr(_core, kind)
    with pytest.raises(TypeError):
        t()
    entry = Limiter(qps=10).entry() if kind == "Entry" else KeyedLimiter(qps=10).entry("k")
    assert type(entry) is t
    with pytest.raises(TypeError):
        t.__new__(t)
    with pytest.raises(TypeError):
        object.__new__(t)
    with pytest.raises(TypeError):
        copy.copy(entry)


def test_every_other_type_is_built_whole_or_refuses():
    lim = Limiter(qps=10)
    # Limiter / Metric / BlockedError: their constructors validate
    with pytest.raises(ValueError):
        _core.Limiter()
    with pytest.raises(TypeError):
        object.__new__(_core.Limiter)
    with pytest.raises(TypeError):
        object.__new__(Metric)
    m = type(lim.metric)()  # a Metric view's type is Metric: a new standalone one
    assert m.sum(0) == 0
    with pytest.raises(TypeError):
        copy.copy(lim.metric)
    assert BlockedError().retry_after is None
    # Stats and Bucket are tuples: a new one is a plain value, never a crash
    stats_t, bucket_t = type(lim.stats()), type(Metric(1000, 2).buckets(now_ns=10**9)[0])
    with pytest.raises(TypeError):
        stats_t()
    with pytest.raises(TypeError):
        bucket_t()
    assert stats_t(range(9)).pass_qps == 0
    assert bucket_t((1, (0,), 5000)).start_ms == 1


# -- an Entry is a GC type ----------------------------------------------------------------

class Holder(Limiter):
    """A Limiter subclass with a __dict__, so it can hold its own entry."""


@pytest.mark.parametrize("entered", [False, True])
def test_limiter_holding_its_own_entry_is_collected(entered):
    gc.collect()
    lim = Holder(qps=100)
    lim.e = lim.entry()
    if entered:
        lim.e.__enter__()
        assert lim.in_flight == 1
    wr = weakref.ref(lim)
    del lim
    gc.collect()
    assert wr() is None


def test_entered_entry_collected_in_a_cycle_gives_its_count_back():
    lim = Limiter(concurrency=1)

    class Box:
        pass

    b = Box()
    b.self = b
    b.e = lim.entry()
    b.e.__enter__()
    assert lim.in_flight == 1
    del b
    gc.collect()
    assert lim.in_flight == 0


# -- one atomic step per transition -------------------------------------------------------

def test_second_enter_and_second_exit_are_refused():
    lim = Limiter(concurrency=5)
    e = lim.entry(2)
    with e:
        with pytest.raises(RuntimeError, match="already entered"):
            e.__enter__()
        assert lim.in_flight == 2
    assert lim.in_flight == 0
    with pytest.raises(RuntimeError, match="not entered"):
        e.__exit__(None, None, None)
    with pytest.raises(RuntimeError, match="has exited"):
        e.__enter__()
    assert lim.in_flight == 0


def test_a_refused_enter_leaves_the_entry_usable():
    lim = Limiter(concurrency=1)
    held = lim.entry()
    held.__enter__()
    e = lim.entry()
    with pytest.raises(BlockedError):
        e.__enter__()
    held.__exit__(None, None, None)
    with e:
        assert lim.in_flight == 1
    assert lim.in_flight == 0


@pytest.mark.parametrize("behavior", ["reject", "throttle"])
def test_threads_racing_to_enter_one_entry(behavior):
    # throttle: the winner sleeps its wait (GIL released) while the others try
    for _ in range(20):
        if behavior == "throttle":
            lim = Limiter(qps=1000, behavior="throttle", max_queueing_ms=500)
            for _ in range(10):
                lim.reserve()  # queue ahead, so the entry's enter waits ~10 ms
        else:
            lim = Limiter(concurrency=100)
        e = lim.entry()
        barrier = threading.Barrier(8)
        ok, errors = [], []

        def body():
            barrier.wait()
            try:
                e.__enter__()
                ok.append(1)
            except RuntimeError:
                errors.append(1)

        ts = [threading.Thread(target=body) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert len(ok) == 1 and len(errors) == 7
        assert lim.in_flight == 1

        exits = []

        def leave():
            try:
                e.__exit__(None, None, None)
                exits.append(1)
            except RuntimeError:
                pass

        ts = [threading.Thread(target=leave) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert exits == [1]
        assert lim.in_flight == 0


def test_concurrent_async_enters_of_one_entry_take_one_count():
    async def main():
        lim = Limiter(qps=100, behavior="throttle", max_queueing_ms=1000)
        for _ in range(5):
            lim.reserve()  # the entry's acquisition waits (~50 ms): both enters overlap
        e = lim.entry()

        async def enter():
            return await e.__aenter__()

        res = await asyncio.gather(enter(), enter(), return_exceptions=True)
        assert sum(r is e for r in res) == 1
        assert sum(isinstance(r, RuntimeError) for r in res) == 1
        assert lim.in_flight == 1
        await e.__aexit__(None, None, None)
        assert lim.in_flight == 0

    asyncio.run(main())


def test_async_refused_enter_can_be_retried():
    async def main():
        lim = Limiter(concurrency=1)
        held = lim.entry()
        held.__enter__()
        e = lim.entry()
        with pytest.raises(BlockedError):
            async with e:
                pass
        held.__exit__(None, None, None)
        async with e:
            assert lim.in_flight == 1
        assert lim.in_flight == 0

    asyncio.run(main())
