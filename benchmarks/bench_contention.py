"""Contention on one hot shared object: 1 process vs N processes, and the tail latency of a
shared decision with twice as many processes as cores.

Standalone (not a section of run.py): ``python benchmarks/bench_contention.py``.

- **Throughput.** Spawned workers hammer one shared object for ``SECONDS`` from a common
  CLOCK_MONOTONIC instant; the figure is the decisions per second summed over the workers.
  Cases: a shared ``Limiter`` admitting (``qps=10**9``), a shared ``Limiter`` refusing
  (``qps=1000``: full after the first thousand), a shared concurrency limit
  (``try_acquire`` + ``release``), a shared ``Breaker`` (``try_pass`` + ``record``), and a
  private ``Limiter`` per process (nothing shared: what the machine itself gives). Every
  case and process count once per round, round-robin; "NP / 1P" is the median of the
  per-round ratios. "per CPU-s" is the same ratio over the calls per CPU-second of each
  process, summed: the figure that survives a machine shared with other load.
- **Tail latency.** ``2 x cores`` workers each time every shared decision (``try_acquire``
  on one shared ``Limiter``, ``qps=10**9``), then spin ``WORK_NS`` of busy work; p50, p99,
  p99.9 and max over every decision of every worker (the same with a private ``Limiter``
  beside it).

Environment: ``PROCS`` (default ``1,2``), ``SECONDS`` (1), ``ROUNDS`` (5), ``WORK_NS``
(20000), ``LAT_PROCS`` (2 x cores), ``ONLY`` (``tp`` or ``lat``).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from typing import Any, Dict, List, Tuple

PROCS = [int(x) for x in os.environ.get("PROCS", "1,2").split(",")]
SECONDS = float(os.environ.get("SECONDS", "1.0"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
WORK_NS = int(os.environ.get("WORK_NS", "20000"))
LAT_PROCS = int(os.environ.get("LAT_PROCS", str(2 * (os.cpu_count() or 1))))
ONLY = os.environ.get("ONLY", "")
TAG = os.environ.setdefault("SW_CONTENTION_TAG", uuid.uuid4().hex[:8])

TP_CASES = [
    ("admit", "shared Limiter, admitting (qps=10**9)"),
    ("refuse", "shared Limiter, refusing (qps=1000)"),
    ("conc", "shared concurrency, try_acquire + release"),
    ("breaker", "shared Breaker, try_pass + record"),
    ("private", "private Limiter per process (the machine's ceiling)"),
]
LAT_CASES = [("lat_shared", "shared Limiter try_acquire"),
             ("lat_private", "private Limiter try_acquire")]
NAMES = ("admit", "refuse", "conc", "brk", "lat")


def _name(what: str) -> str:
    return f"contention-{what}-{TAG}"


def make(kind: str):
    from slidewin import Breaker, Limiter

    if kind == "admit":
        lim = Limiter(qps=10**9, shared=_name("admit"))
        return lim.try_acquire, lim
    if kind == "refuse":
        lim = Limiter(qps=1000, shared=_name("refuse"))
        return lim.try_acquire, lim
    if kind == "conc":
        lim = Limiter(concurrency=10**6, shared=_name("conc"))
        acq, rel = lim.try_acquire, lim.release

        def pair() -> bool:
            ok = acq()
            rel()
            return ok
        return pair, lim
    if kind == "breaker":
        b = Breaker(error_ratio=0.5, min_requests=10**9, shared=_name("brk"))
        tp, rec = b.try_pass, b.record

        def both() -> bool:
            ok = tp()
            rec(1.0)
            return ok
        return both, b
    if kind in ("private", "lat_private"):
        lim = Limiter(qps=10**9)
        return lim.try_acquire, lim
    if kind == "lat_shared":
        lim = Limiter(qps=10**9, shared=_name("lat"))
        return lim.try_acquire, lim
    raise ValueError(kind)


def hammer(f, start_ns: int, end_ns: int) -> Tuple[int, int, int]:
    clock = time.monotonic_ns
    rep = itertools.repeat
    calls = 0
    while clock() < start_ns:
        pass
    cpu0 = time.process_time_ns()
    while True:
        for _ in rep(None, 256):
            f()
        calls += 256
        t = clock()
        if t >= end_ns:
            break
    return calls, t, time.process_time_ns() - cpu0


def hammer_lat(f, start_ns: int, end_ns: int) -> List[int]:
    clock = time.monotonic_ns
    pc = time.perf_counter_ns
    lat: List[int] = []
    add = lat.append
    spin = WORK_NS
    while clock() < start_ns:
        pass
    n = 0
    while True:
        t0 = pc()
        f()
        t1 = pc()
        add(t1 - t0)
        t = t1 + spin
        while pc() < t:
            pass
        n += 1
        if (n & 15) == 0 and clock() >= end_ns:
            break
    return lat


def worker(conn) -> None:
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, dur_ns = msg
        try:
            f, obj = make(kind)
            for _ in range(200):
                f()
            conn.send("ready")
        except Exception as e:  # reported to the parent, never a hang
            conn.send(f"error {type(e).__name__}: {e}")
            continue
        start = conn.recv()
        if kind.startswith("lat_"):
            conn.send(hammer_lat(f, start, start + dur_ns))
        else:
            conn.send(hammer(f, start, start + dur_ns))
        del f, obj


def run_once(pipes, kind: str, n: int, seconds: float):
    cs = pipes[:n]
    for c in cs:
        c.send((kind, int(seconds * 1e9)))
    ready = [c.recv() for c in cs]
    bad = [x for x in ready if x != "ready"]
    if bad:
        raise RuntimeError(f"{kind}: {bad[0]}")
    start = time.monotonic_ns() + 20_000_000
    for c in cs:
        c.send(start)
    outs = [c.recv() for c in cs]
    return start, outs


def fmt_rate(v: float) -> str:
    return f"{v / 1e6:.2f} M/s"


def fmt_ns(v: float) -> str:
    return f"{v / 1000:.1f} us" if v >= 1000 else f"{v:.0f} ns"


def main() -> int:
    if not sys.platform.startswith("linux"):
        print("shared regions: Linux only")
        return 0
    import slidewin

    ncpu = os.cpu_count() or 1
    nmax = max(PROCS + ([LAT_PROCS] if ONLY != "tp" else []))
    print(f"cpus {ncpu}, python {sys.version.split()[0]}, procs {PROCS}, {SECONDS} s x "
          f"{ROUNDS} rounds; latency: {LAT_PROCS} processes, {WORK_NS} ns of work per "
          "decision", flush=True)
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(nmax):
        a, b = ctx.Pipe()
        p = ctx.Process(target=worker, args=(b,), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)
    keep = [slidewin.Limiter(qps=10**9, shared=_name("admit")),
            slidewin.Limiter(qps=1000, shared=_name("refuse")),
            slidewin.Limiter(concurrency=10**6, shared=_name("conc")),
            slidewin.Limiter(qps=10**9, shared=_name("lat"))]
    tp: Dict[Tuple[str, int], List[Tuple[float, float]]] = {}
    lat: Dict[str, List[int]] = {}
    try:
        if ONLY != "lat":
            for r in range(ROUNDS):
                for kind, _ in TP_CASES:
                    for n in PROCS:
                        start, outs = run_once(pipes, kind, n, SECONDS)
                        per_s = sum(c / ((end - start) / 1e9) for c, end, _ in outs)
                        per_cpu = sum(c / max(cpu, 1) * 1e9 for c, _, cpu in outs)
                        tp.setdefault((kind, n), []).append((per_s, per_cpu))
                print(f"  round {r + 1}/{ROUNDS} done", flush=True)
        if ONLY != "tp":
            for _ in range(max(1, ROUNDS // 2)):
                for kind, _ in LAT_CASES:
                    _, outs = run_once(pipes, kind, LAT_PROCS, SECONDS)
                    lat.setdefault(kind, []).extend(x for o in outs for x in o)
    finally:
        for c in pipes:
            c.send(None)
        for p in procs:
            p.join(5)
        del keep
        for nm in NAMES:
            try:
                slidewin.unlink(_name(nm))
            except Exception:
                pass
    if tp:
        print("\nAggregate decisions/s, median of the rounds (NP / 1P: median of the per-round "
              "ratios)")
        head = ["case"] + [f"{n}P" for n in PROCS] + [f"{n}P / 1P" for n in PROCS[1:]] + \
               [f"{n}P / 1P per CPU-s" for n in PROCS[1:]]
        rows = []
        for kind, label in TP_CASES:
            one = tp[(kind, PROCS[0])]
            row = [label] + [fmt_rate(statistics.median(x[0] for x in tp[(kind, n)]))
                             for n in PROCS]
            row += [f"{statistics.median(b[0] / a[0] for a, b in zip(one, tp[(kind, n)])):.2f}x"
                    for n in PROCS[1:]]
            row += [f"{statistics.median(b[1] / a[1] for a, b in zip(one, tp[(kind, n)])):.2f}x"
                    for n in PROCS[1:]]
            rows.append(row)
        widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
        for r in [head] + rows:
            print("  " + "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                                   for i, (c, w) in enumerate(zip(r, widths))))
    if lat:
        print(f"\nDecision latency, {LAT_PROCS} processes on {ncpu} cores, {WORK_NS} ns of "
              "work after each decision")
        for kind, label in LAT_CASES:
            xs = sorted(lat[kind])
            q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
            print(f"  {label}: p50 {fmt_ns(q(0.5))}, p99 {fmt_ns(q(0.99))}, "
                  f"p99.9 {fmt_ns(q(0.999))}, max {fmt_ns(xs[-1])} ({len(xs):,} decisions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
