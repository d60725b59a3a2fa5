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


def _pcts(xs: List[float]) -> Dict[str, float]:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
    return {"median_us": statistics.median(xs) * 1e6, "p99_us": p99 * 1e6}


TITLE = "Waiting asyncio tasks: CPU while waiting, wake-up after a release"
ABOUT = __doc__.split("\n", 2)[2].split("\n", 2)[2]


def run(cfg: Dict[str, Any], log: Callable[[str], None]) -> Dict[str, Any]:
    tasks, seconds, rounds = cfg["waiters_tasks"], cfg["waiters_s"], cfg["waiters_rounds"]
    name = "bench-waiters-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    idle: List[Dict[str, Any]] = []
    wake: List[Dict[str, Any]] = []
    try:
        entry = lambda g: g.entry(timeout=600)  # noqa: E731
        for label, make in (("private Limiter", lambda: Limiter(concurrency=1)),
                            ("shared Limiter", lambda: Limiter(concurrency=1, shared=name))):
            log(f"  idle cost, {tasks} waiters, {label}")
            cpu = asyncio.run(_idle_cost(make, entry, tasks, seconds))
            idle.append({"label": label, "core_pct": cpu * 100})
        cpu = asyncio.run(_idle_cost(lambda: asyncio.Semaphore(1), lambda g: g, tasks, seconds))
        idle.append({"label": "asyncio.Semaphore (for comparison)", "core_pct": cpu * 100})

        log("  wake-up latency")
        lim = Limiter(concurrency=1)
        wake.append({"label": "release() in the loop", **_pcts(
            asyncio.run(_wake_latency(lim, lim.acquire, lim.release, rounds)))})
        wake.append({"label": "release() from another thread", **_pcts(
            asyncio.run(_wake_latency(lim, lim.acquire, _from_thread(lim.release), rounds)))})
        shared = Limiter(concurrency=1, shared=name)
        other = Limiter(concurrency=1, shared=name)  # as another process's object
        wake.append({"label": "shared, release() in the loop", **_pcts(
            asyncio.run(_wake_latency(shared, shared.acquire, shared.release, rounds)))})
        wake.append({"label": "shared, another object's release from a thread (futex path)",
                     **_pcts(asyncio.run(_wake_latency(
                         shared, other.acquire, _from_thread(other.release), rounds)))})
    finally:
        slidewin.unlink(name)
    worst = max(r["core_pct"] for r in idle[:2])
    return {"tasks": tasks, "wait_s": seconds, "rounds": rounds, "idle": idle, "wake": wake,
            "target": {"target": f"{tasks} asyncio tasks waiting on a saturated limiter",
                       "measured": worst, "limit": "< 5% of a core", "met": worst < 5}}


def _tables(res: Dict[str, Any]):
    from common import md_table
    idle = md_table([f"{res['tasks']} tasks waiting {res['wait_s']} s on", "CPU, % of a core"],
                    [[r["label"], f"{r['core_pct']:.2f}%"] for r in res["idle"]], "lr")
    wake = md_table(["one waiter woken by", "median", "99th percentile"],
                    [[r["label"], f"{r['median_us']:.0f} µs", f"{r['p99_us']:.0f} µs"]
                     for r in res["wake"]], "lrr")
    return idle, wake


def render_md(res: Dict[str, Any]) -> str:
    idle, wake = _tables(res)
    return idle + "\n\n" + wake


def render_text(res: Dict[str, Any]) -> str:
    return render_md(res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=200)
    a = ap.parse_args()
    res = run({"waiters_tasks": a.tasks, "waiters_s": a.seconds, "waiters_rounds": a.rounds},
              lambda m: print(m, flush=True))
    print(render_text(res))


if __name__ == "__main__":
    main()
