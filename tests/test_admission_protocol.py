"""The one admission protocol (slidewin._admission.Admitter): every admission type
implements it, and the one entry, the one waiter and the one decorator run over it for all
of them; the C types call the Python layer through registered functions, never a method of
a subclass by name."""
import asyncio
import threading
import time

import pytest

from slidewin import (AdaptiveLimiter, BlockedError, Breaker, KeyedLimiter, Limiter, _core,
                      all_of)
from slidewin._admission import AdmissionEntry, Admitter
from slidewin._waiters import waiters_of


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def _every_type():
    return [Limiter(qps=100), KeyedLimiter(qps=100), AdaptiveLimiter(),
            all_of(Limiter(qps=100), Limiter(concurrency=5)),
            Breaker(error_count=100)]


@pytest.mark.parametrize("adm", _every_type(), ids=lambda a: type(a).__name__)
def test_every_admission_type_implements_the_one_protocol(adm):
    assert isinstance(adm, Admitter)
    for name in ("_adm_decide", "_adm_refuse", "_adm_retry_in", "_adm_hold", "_adm_exit",
                 "_adm_release", "_adm_listen"):
        assert callable(getattr(adm, name)), name


def test_the_entries_of_a_group_and_of_a_breaker_are_the_one_entry():
    assert isinstance(all_of(Limiter(qps=5)).entry(), AdmissionEntry)
    assert isinstance(Breaker(error_count=3).entry(), AdmissionEntry)


def _decorated_kinds(deco, generators=True):
    """The four kinds of function (without generators: two), each decorated by `deco`, and
    what each returns."""

    @deco
    def f(x):
        return x + 1

    @deco
    async def c(x):
        return x + 2

    if not generators:
        return [f(1), _run(c(1))]

    @deco
    def g(x):
        yield x
        yield x + 3

    @deco
    async def ag(x):
        yield x
        yield x + 4

    async def consume():
        return [await c(1), [i async for i in ag(1)]]

    return [f(1), list(g(1))] + _run(consume())


@pytest.mark.parametrize("make", [
    lambda: Limiter(qps=100), lambda: AdaptiveLimiter(), lambda: Breaker(error_count=100),
    lambda: all_of(Limiter(qps=100), Limiter(concurrency=5)),
], ids=["Limiter", "AdaptiveLimiter", "Breaker", "Group"])
def test_one_decorator_serves_the_four_kinds_of_function_for_every_type(make):
    adm = make()
    assert _decorated_kinds(adm) == [2, [1, 4], 3, [1, 5]]


def test_one_decorator_serves_a_keyed_limiters_functions_and_coroutines():
    per_key = KeyedLimiter(qps=100)
    assert _decorated_kinds(per_key(key=lambda x: "k"), generators=False) == [2, 3]
    assert per_key.totals()["pass"] == 2


@pytest.mark.parametrize("make", [
    lambda: Limiter(concurrency=1),
    lambda: all_of(Limiter(concurrency=1), Limiter(qps=1000)),
], ids=["Limiter", "Group"])
def test_a_cancelled_async_waiter_leaves_the_fifo_and_the_next_is_admitted(make):
    adm = make()

    async def main():
        held = adm.entry()
        await held.__aenter__()
        first = asyncio.ensure_future(adm.entry(timeout=10).__aenter__())
        second = asyncio.ensure_future(adm.entry(timeout=10).__aenter__())
        await asyncio.sleep(0.05)
        assert waiters_of(adm)._n == 2
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert waiters_of(adm)._n == 1  # out of the queue
        await held.__aexit__(None, None, None)
        entry = await asyncio.wait_for(second, 5)  # the release reaches the next one
        assert waiters_of(adm)._n == 0
        await entry.__aexit__(None, None, None)

    _run(main())


def test_a_thread_and_a_task_wait_in_one_fifo_of_a_group():
    group = all_of(Limiter(concurrency=1))
    order = []
    held = group.entry()
    held.__enter__()

    def thread_waiter():
        with group.entry(timeout=10):
            order.append("thread")

    t = threading.Thread(target=thread_waiter)
    t.start()
    while waiters_of(group)._n < 1:
        time.sleep(0.005)

    async def task_waiter():
        async with group.entry(timeout=10):
            order.append("task")

    async def main():
        task = asyncio.ensure_future(task_waiter())
        while waiters_of(group)._n < 2:
            await asyncio.sleep(0.005)
        held.__exit__(None, None, None)
        await asyncio.wait_for(task, 10)

    _run(main())
    t.join(10)
    assert order == ["thread", "task"]  # first come, first admitted
    assert waiters_of(group)._n == 0


def test_a_limiter_subclass_attribute_named_aenter_or_aexit_is_not_called_by_the_c_entry():
    class Odd(Limiter):
        __slots__ = ()
        _aenter = None  # a name the C entry once called back
        _aexit = None

    lim = Odd(concurrency=1)

    async def main():
        async with lim.entry():
            assert lim.in_flight == 1
        async with lim.entry(timeout=1):
            pass

    _run(main())
    assert lim.in_flight == 0 and lim.totals()["success"] == 2


def test_the_c_breaker_alone_changes_state_without_a_python_teller_method():
    br = _core.Breaker(error_count=1, min_requests=1)
    for _ in range(3):
        if br.try_pass():
            br.record(1.0, error=True)
    assert br.state == "open"


def test_a_breakers_listeners_hear_every_change_through_the_registered_teller():
    seen = []
    br = Breaker(error_count=1, min_requests=1, recovery_s=0.01)
    br.on_change(lambda old, new, value: seen.append((old, new)))
    for _ in range(2):
        with pytest.raises(ValueError):
            with br.entry():
                raise ValueError
    assert seen == [("closed", "open")]


def test_set_layer_takes_three_callables():
    with pytest.raises(TypeError, match="callables"):
        _core._set_layer(None, None, None)
    with pytest.raises(TypeError):
        _core._set_layer(print)


def test_a_group_entry_without_a_timeout_refuses_at_once_and_holds_nothing():
    a = Limiter(concurrency=1)
    group = all_of(a, Limiter(qps=1000))
    with group.entry():
        with pytest.raises(BlockedError):
            group.entry().__enter__()
    assert a.in_flight == 0
