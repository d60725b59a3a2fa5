"""Worker functions for the shared-memory tests (importable by spawned processes)."""

from __future__ import annotations

import contextlib
import os
import time

import slidewin

T0 = 10**12  # a fixed decision time (ns): the windows are deterministic


def hammer_try(name: str, kwargs: dict, tries: int, now_ns: int, n: int = 1) -> int:
    """try_acquire `tries` times at one instant; return the admitted count."""
    lim = slidewin.Limiter(**kwargs, shared=name)
    return sum(lim.try_acquire(n, now_ns=now_ns) for _ in range(tries))


def hammer_reserve(name: str, kwargs: dict, tries: int, now_ns: int,
                   prioritized: bool = False) -> list:
    lim = slidewin.Limiter(**kwargs, shared=name)
    return [lim.reserve(now_ns=now_ns, prioritized=prioritized) for _ in range(tries)]


def add_many(name: str, times: int) -> None:
    m = slidewin.Metric(1000, 2, shared=name)
    for _ in range(times):
        m.add("pass", now_ns=T0)


def entries(name: str, limit: int, rounds: int, counter, peak) -> int:
    """Run `rounds` bodies under the shared concurrency limiter, counting the bodies in
    flight across processes in `counter` (a multiprocessing.Value) and its peak in `peak`."""
    lim = slidewin.Limiter(concurrency=limit, shared=name)
    done = 0
    for _ in range(rounds):
        try:
            with lim.entry():
                with counter.get_lock():
                    counter.value += 1
                    if counter.value > peak.value:
                        peak.value = counter.value
                time.sleep(0.0002)
                with counter.get_lock():
                    counter.value -= 1
                done += 1
        except slidewin.BlockedError:
            time.sleep(0.0001)
    return done


def real_clock(name: str, qps: float, seconds: float) -> int:
    lim = slidewin.Limiter(qps=qps, shared=name)
    end = time.monotonic() + seconds
    passed = 0
    while time.monotonic() < end:
        if lim.try_acquire():
            passed += 1
        else:
            time.sleep(0.0005)
    return passed


def hold_and_hang(name: str, held: int, ready) -> None:
    """Take `held` in-flight counts and hang until killed."""
    lim = slidewin.Limiter(concurrency=1000, shared=name)
    for _ in range(held):
        assert lim.try_acquire()
    ready.set()
    while True:
        time.sleep(1)


def busy_until_killed(name: str, hook_us: int) -> None:
    """Decide in a loop, each decision held open `hook_us` inside the critical section."""
    from slidewin import _core

    lim = slidewin.Limiter(concurrency=4, shared=name)
    if hook_us:
        _core._set_test_hook(hook_us)
    while True:
        if lim.try_acquire():
            lim.release()
        if hook_us:
            time.sleep(0.0002)  # the lock is held ~90% of the time: a kill lands inside


def hold_then_release(name: str, held, go, key=None) -> None:
    """Hold the one count of a shared concurrency limiter (a KeyedLimiter's `key` when one is
    given), say so (`held`), then release it a moment after `go`."""
    if key is None:
        lim = slidewin.Limiter(concurrency=1, shared=name)
        lim.acquire()
    else:
        lim = slidewin.KeyedLimiter(concurrency=1, shared=name)
        lim.acquire(key)
    held.set()
    go.wait(30)
    time.sleep(0.3)
    if key is None:
        lim.release()
    else:
        lim.release(key)


@contextlib.contextmanager
def held_in_another_process(name: str, key=None):
    """A spawned process holds the one count of a shared concurrency limiter (a KeyedLimiter's
    `key` when one is given) while the block runs; the block gets an Event: set it, and the
    process releases the count a moment later. The process is joined when the block ends."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    held, go = ctx.Event(), ctx.Event()
    p = ctx.Process(target=hold_then_release, args=(name, held, go, key))
    p.start()
    try:
        # a spawned interpreter on a loaded 2-core machine (a free-threaded CPython beside
        # other jobs) can take a minute to start
        assert held.wait(180), "the spawned holder did not start within 180 s"
        yield go
    finally:
        go.set()
        p.join(30)


def pid() -> int:
    return os.getpid()


def add_many_eventual(name: str, times: int, now_ns: int = T0) -> None:
    m = slidewin.Metric(1000, 2, shared=name, consistency="eventual")
    for _ in range(times):
        m.add("pass", now_ns=now_ns)

