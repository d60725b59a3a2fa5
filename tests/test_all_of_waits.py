"""slidewin.all_of's waits: interrupted after the admission, and without end.

- a caller interrupted in a throttle member's wait after the group admitted it (a cancelled
  task, KeyboardInterrupt in the sync sleep) never learned it was admitted: acquire,
  acquire_async, entry and the decorator give back every in-flight count it took;
- every timeout a Limiter accepts waits the same way in a group: None, inf, 1e10, 1e300,
  an int beyond a double (without end), on a full concurrency member, through acquire,
  entry, the decorator and keyed members, threads and asyncio.
"""
import asyncio
import signal
import threading
import time

import pytest

from slidewin import KeyedLimiter, Limiter, all_of


def conc_member(keyed, limit=5):
    if keyed:
        kl = KeyedLimiter(concurrency=limit)
        return (kl, "k"), (lambda: kl.in_flight("k")), kl
    lim = Limiter(concurrency=limit)
    return lim, (lambda: lim.in_flight), lim


def slow_throttle():
    """A throttle whose queue admits waits of a second each, up to 10 s."""
    return Limiter(qps=1, behavior="throttle", max_queueing_ms=10_000)


# -- interrupted after the admission ----------------------------------------------------------


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("how", ["acquire_async", "acquire_async_timeout", "entry",
                                 "decorator"])
def test_tasks_cancelled_in_a_throttle_wait_after_the_group_admitted_them_hold_nothing(
        keyed, how):
    member, in_flight, _ = conc_member(keyed)
    thr = slow_throttle()
    g = all_of(member, thr)

    @g
    async def decorated():
        await asyncio.sleep(30)

    async def one():
        if how == "acquire_async":
            await g.acquire_async()
        elif how == "acquire_async_timeout":
            await g.acquire_async(timeout=5)
        elif how == "entry":
            async with g.entry():
                await asyncio.sleep(30)
        else:
            await decorated()

    async def main():
        tasks = [asyncio.ensure_future(one()) for _ in range(5)]
        for _ in range(20):  # every task decided (admitted; four sleep their wait)
            await asyncio.sleep(0)
        assert thr.totals()["pass"] == 5
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        # the first one went at once: its acquire returned (it holds its slot, as told)
        return sum(r is None for r in results)

    kept = asyncio.run(main())
    assert kept == (1 if how.startswith("acquire") else 0)
    assert in_flight() == kept
    assert thr.in_flight == 0


@pytest.fixture
def sigint_default():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def interrupt_main_once(admitted):
    """SIGINT to the main thread once admitted() is true (the group decided: the main thread
    is in the wait that follows), and a little later (then surely asleep)."""
    main_id = threading.main_thread().ident

    def send():
        deadline = time.monotonic() + 10
        while not admitted() and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)
        signal.pthread_kill(main_id, signal.SIGINT)

    t = threading.Thread(target=send)
    t.start()
    return t


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals are handled on the main thread")
@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("how", ["acquire", "acquire_timeout", "entry", "decorator"])
def test_keyboardinterrupt_in_a_group_wait_after_the_admission_holds_nothing(
        keyed, how, sigint_default):
    member, in_flight, _ = conc_member(keyed)
    thr = slow_throttle()
    g = all_of(member, thr)
    assert thr.try_acquire()  # the next slot is a second away

    @g
    def decorated():
        time.sleep(30)

    t = interrupt_main_once(lambda: thr.totals()["pass"] == 2)
    try:
        with pytest.raises(KeyboardInterrupt):
            if how == "acquire":
                g.acquire()
            elif how == "acquire_timeout":
                g.acquire(timeout=5)
            elif how == "entry":
                with g.entry():
                    time.sleep(30)
            else:
                decorated()
            time.sleep(5)  # not reached: the wait is a second
    finally:
        t.join()
    assert thr.totals()["pass"] == 2
    assert in_flight() == 0 and thr.in_flight == 0


def test_a_group_entry_interrupted_in_its_wait_may_be_entered_again():
    conc = Limiter(concurrency=1)
    thr = Limiter(qps=20, behavior="throttle", max_queueing_ms=1000)
    g = all_of(conc, thr)
    e = g.entry()

    async def main():
        assert thr.try_acquire()
        task = asyncio.ensure_future(e.__aenter__())
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert conc.in_flight == 0

    asyncio.run(main())
    with e:
        assert conc.in_flight == 1
    assert conc.in_flight == 0


# -- timeouts without end ---------------------------------------------------------------------

ENDLESS = [None, float("inf"), 1e10, 1e300, 10**400]


def _tid(timeout):
    return "10**400" if timeout == 10**400 else repr(timeout)


@pytest.mark.parametrize("timeout", ENDLESS[1:], ids=_tid)
@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("how", ["acquire", "entry", "decorator", "acquire_async",
                                 "async_entry"])
def test_a_group_wait_with_an_endless_timeout_waits_for_a_release(timeout, keyed, how):
    member, in_flight, owner = conc_member(keyed, limit=1)
    g = all_of(member, Limiter(qps=1000))
    release = (lambda: owner.release("k")) if keyed else owner.release
    assert g.try_acquire()
    timer = threading.Timer(0.05, release)
    timer.start()
    try:
        if how == "acquire":
            g.acquire(timeout=timeout)
            release()
        elif how == "entry":
            with g.entry(timeout=timeout):
                assert in_flight() == 1
        elif how == "decorator":
            assert g(timeout=timeout)(lambda: in_flight())() == 1
        elif how == "acquire_async":
            asyncio.run(g.acquire_async(timeout=timeout))
            release()
        else:
            async def main():
                async with g.entry(timeout=timeout):
                    assert in_flight() == 1
            asyncio.run(main())
    finally:
        timer.join()
    assert in_flight() == 0


@pytest.mark.parametrize("timeout", ENDLESS[1:], ids=_tid)
@pytest.mark.parametrize("kind", ["limiter", "keyed", "shared", "shared_keyed"])
def test_a_limiter_wait_with_an_endless_timeout_waits_for_a_release(timeout, kind):
    """The reference a group follows: a Limiter's and a KeyedLimiter's waits, threads and
    asyncio, end at the release whatever the timeout."""
    keyed = kind.endswith("keyed")
    shared = True if kind.startswith("shared") else None
    lim = (KeyedLimiter if keyed else Limiter)(concurrency=1, shared=shared)
    at = ("k",) if keyed else ()
    for mode in ("sync", "async"):
        lim.acquire(*at)
        timer = threading.Timer(0.05, lim.release, at)
        timer.start()
        try:
            if mode == "sync":
                lim.acquire(*at, timeout=timeout)
            else:
                asyncio.run(lim.acquire_async(*at, timeout=timeout))
        finally:
            timer.join()
        lim.release(*at)
