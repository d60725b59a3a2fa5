"""Waiting asyncio tasks: the CPU they cost while they wait, and how soon a release wakes one.

    python benchmarks/bench_waiters.py [--tasks 1000] [--seconds 2]

- idle cost: N tasks in ``async with lim.entry(timeout=...)`` on a saturated
  ``Limiter(concurrency=1)`` (private, then shared), and on an ``asyncio.Semaphore(1)`` for
  comparison; the process's CPU time (``time.process_time``) over the wall time of the wait.
- wake-up: one task waiting; ``release()`` from the loop's own thread, from another thread,
  and (shared) from another Limiter object on the same region in another thread (the path of a
  release in another process: the region's futex, then the helper thread); the time from just
  before ``release()`` to the task running inside its entry. Median and 99th percentile.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
import uuid
from typing import Any, Callable, Dict, List

import slidewin
from slidewin import Limiter


async def _idle_cost(make_gate: Callable[[], Any], enter: Callable[[Any], Any],
                     tasks: int, seconds: float) -> float:
    gate = make_gate()
    async with enter(gate):
        waiting = [asyncio.ensure_future(_hold(gate, enter)) for _ in range(tasks)]
        await asyncio.sleep(0.3)  # every task queued
        c0, w0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        c1, w1 = time.process_time(), time.monotonic()
    await asyncio.gather(*waiting)
    return (c1 - c0) / (w1 - w0)


async def _hold(gate: Any, enter: Callable[[Any], Any]) -> None:
    async with enter(gate):
        pass


async def _wake_latency(lim: Limiter, hold: Callable[[], None], release: Callable[[], None],
                        rounds: int) -> List[float]:
    out: List[float] = []
    for _ in range(rounds):
        hold()
        t_release = [0.0]

        async def waiter() -> None:
            async with lim.entry(timeout=30):
                out.append(time.perf_counter() - t_release[0])

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.002)  # queued and asleep
        t_release[0] = time.perf_counter()
        release()
        await task
    return out


def _from_thread(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        t = threading.Thread(target=fn)
        t.start()
        t.join()
    return run


def _fmt_us(xs: List[float]) -> str:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
    return "median %.0f us, p99 %.0f us" % (statistics.median(xs) * 1e6, p99 * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=200)
    a = ap.parse_args()
    name = "bench-waiters-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    results: Dict[str, str] = {}
    try:
        entry = lambda g: g.entry(timeout=600)  # noqa: E731
        for label, make in (("private", lambda: Limiter(concurrency=1)),
                            ("shared", lambda: Limiter(concurrency=1, shared=name))):
            cpu = asyncio.run(_idle_cost(make, entry, a.tasks, a.seconds))
            results["%d waiters, %s Limiter" % (a.tasks, label)] = "%.2f%% of a core" % (cpu * 100)
        cpu = asyncio.run(_idle_cost(lambda: asyncio.Semaphore(1), lambda g: g, a.tasks,
                                     a.seconds))
        results["%d waiters, asyncio.Semaphore" % a.tasks] = "%.2f%% of a core" % (cpu * 100)

        lim = Limiter(concurrency=1)
        results["wake-up, release() in the loop"] = _fmt_us(
            asyncio.run(_wake_latency(lim, lim.acquire, lim.release, a.rounds)))
        results["wake-up, release() from a thread"] = _fmt_us(
            asyncio.run(_wake_latency(lim, lim.acquire, _from_thread(lim.release), a.rounds)))
        shared = Limiter(concurrency=1, shared=name)
        other = Limiter(concurrency=1, shared=name)  # as another process's object
        results["wake-up, shared, release() in the loop"] = _fmt_us(
            asyncio.run(_wake_latency(shared, shared.acquire, shared.release, a.rounds)))
        results["wake-up, shared, futex path (another object's release, a thread)"] = _fmt_us(
            asyncio.run(_wake_latency(shared, other.acquire, _from_thread(other.release),
                                      a.rounds)))
    finally:
        slidewin.unlink(name)
    width = max(map(len, results))
    for k, v in results.items():
        print("%-*s  %s" % (width, k, v))


if __name__ == "__main__":
    main()
