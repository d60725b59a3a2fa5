"""Shared helpers for the benchmark scripts: timing loops, cases, pure-Python floors.

Nothing here imports slidewin or a peer at module level, so every section can report
"skipped" instead of crashing when one of them is missing.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import statistics
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

NS = 1_000_000_000


@dataclass
class Case:
    """One thing to time: a statement run in a loop with names from ``factory()``.

    ``factory`` returns a fresh namespace (dict) per timed run, so a limiter's state
    never leaks from one repeat into the next. ``stmt`` is the body of the timing
    loop; it may span several lines. For the threads section, ``stmt`` must be an
    expression and ``ok`` an expression over ``_r`` that is true when admitted.
    """

    key: str
    label: str
    group: str  # floor | slidewin | peer | async-floor | async-slidewin | async-peer
    factory: Callable[[], Dict[str, Any]]
    stmt: str
    ok: Optional[str] = "_r"
    is_async: bool = False
    note: str = ""
    meta: Dict[str, Any] = field(default_factory=dict)


_SYNC_TEMPLATE = """
def _inner(_ns, _n, _timer=_timer, _repeat=_repeat):
{unpack}
    _it = _repeat(None, _n)
    _t0 = _timer()
    for _ in _it:
{stmt}
    return _timer() - _t0
"""

# the same loop as a coroutine (its statements may await)
_ASYNC_TEMPLATE = _SYNC_TEMPLATE.replace("\ndef _inner(", "\nasync def _inner(", 1)

_THREAD_TEMPLATE = """
def _inner(_ns, _chunk, _stop, _timer=_timer, _repeat=_repeat):
{unpack}
    _calls = 0
    _refused = 0
    while not _stop:
        for _ in _repeat(None, _chunk):
            _r = {stmt}
            if not ({ok}):
                _refused += 1
        _calls += _chunk
    return _calls, _refused, _timer()
"""


def _unpack(names) -> str:
    lines = [f"    {n} = _ns[{n!r}]" for n in sorted(names)]
    return "\n".join(lines) or "    pass"


def _compile(template: str, ns_names, **parts) -> Callable:
    src = template.format(unpack=_unpack(ns_names), **parts)
    glb = {"_timer": time.perf_counter_ns, "_repeat": itertools.repeat}
    exec(compile(src, "<bench>", "exec"), glb)
    return glb["_inner"]


def make_timer(case: Case, ns: Dict[str, Any]) -> Callable[[int], int]:
    """Return ``run(n) -> elapsed ns`` for ``n`` iterations of the case over ``ns``."""
    stmt = textwrap.indent(textwrap.dedent(case.stmt).strip("\n"), " " * 8)
    if case.is_async:
        inner = _compile(_ASYNC_TEMPLATE, ns, stmt=stmt)
        loop = ns["__loop__"]

        def run(n: int) -> int:
            return loop.run_until_complete(inner(ns, n))

        return run
    inner = _compile(_SYNC_TEMPLATE, ns, stmt=stmt)
    return lambda n: inner(ns, n)


def make_thread_worker(case: Case, ns: Dict[str, Any]) -> Callable:
    """Return ``worker(chunk, stop) -> (calls, refused, end_ns)``; ``stop`` is a list
    that becomes truthy (the worker checks it between chunks)."""
    inner = _compile(_THREAD_TEMPLATE, ns, stmt=case.stmt.strip(), ok=case.ok or "True")
    return lambda chunk, stop: inner(ns, chunk, stop)


_LOOP: Optional[asyncio.AbstractEventLoop] = None


def event_loop() -> asyncio.AbstractEventLoop:
    """One event loop for every async case of a run."""
    global _LOOP
    if _LOOP is None or _LOOP.is_closed():
        _LOOP = asyncio.new_event_loop()
    return _LOOP


def new_ns(case: Case) -> Dict[str, Any]:
    if case.is_async:
        loop = event_loop()
        asyncio.set_event_loop(loop)
        ns = case.factory()
        ns["__loop__"] = loop
        return ns
    return case.factory()


def calibrate(case: Case, target_s: float, max_n: int = 50_000_000) -> int:
    """Like ``timeit.Timer.autorange``: the smallest 1-2-5 loop count taking >= target."""
    ns = new_ns(case)
    run = make_timer(case, ns)
    run(10)  # warm caches, first-call allocations, lazy imports
    for n in (10 ** e * m for e in range(0, 9) for m in (1, 2, 5)):
        if n > max_n:
            return max_n
        if run(n) >= target_s * NS:
            return n
    return max_n


def interleaved(cases: List[Case], counts: Dict[str, int], repeats: int,
                progress: Callable[[str], None] = lambda s: None) -> Dict[str, List[float]]:
    """Time every case ``repeats`` times, round-robin, rotating the order each round so
    no case is always first or last. Returns ns per call for every run."""
    out: Dict[str, List[float]] = {c.key: [] for c in cases}
    order = list(cases)
    for r in range(repeats):
        progress(f"round {r + 1}/{repeats}")
        for c in order:
            ns = new_ns(c)
            run = make_timer(c, ns)
            run(min(100, counts[c.key]))  # fresh object: first-touch costs out of the way
            gc_was = gc.isenabled()
            gc.disable()
            try:
                elapsed = run(counts[c.key])
            finally:
                if gc_was:
                    gc.enable()
            out[c.key].append(elapsed / counts[c.key])
            teardown = ns.get("__teardown__")
            if teardown:
                teardown()
        order = order[1:] + order[:1]
    return out


def summarize(samples: List[float]) -> Dict[str, float]:
    return {
        "median_ns": statistics.median(samples),
        "min_ns": min(samples),
        "max_ns": max(samples),
        "runs": len(samples),
    }


# ---------------------------------------------------------------- pure-Python floors

class PyTwoBucketWindow:
    """A straightforward pure-Python sliding window: two half-interval buckets, the
    same shape as slidewin's default (2 x 500 ms). The floor a Python author gets
    without a C extension. Not thread-safe; used single-threaded only."""

    __slots__ = ("limit", "width", "starts", "counts")

    def __init__(self, limit: int, interval_ns: int = NS) -> None:
        self.limit = limit
        self.width = interval_ns // 2
        self.starts = [-1, -1]
        self.counts = [0, 0]

    def try_acquire(self, n: int = 1, now_ns: Optional[int] = None) -> bool:
        now = time.monotonic_ns() if now_ns is None else now_ns
        w = self.width
        start = now - now % w
        i = (now // w) & 1
        starts = self.starts
        counts = self.counts
        if starts[i] != start:
            starts[i] = start
            counts[i] = 0
        j = i ^ 1
        other = counts[j] if starts[j] == start - w else 0
        if counts[i] + other + n > self.limit:
            return False
        counts[i] += n
        return True


class PyFixedWindow:
    """The classic fixed window counter (one counter per aligned interval), used to
    show the boundary burst a sliding window prevents."""

    __slots__ = ("limit", "interval", "start", "count")

    def __init__(self, limit: int, interval_ns: int = NS) -> None:
        self.limit = limit
        self.interval = interval_ns
        self.start = -1
        self.count = 0

    def try_acquire(self, n: int = 1, now_ns: Optional[int] = None) -> bool:
        now = time.monotonic_ns() if now_ns is None else now_ns
        start = now - now % self.interval
        if start != self.start:
            self.start = start
            self.count = 0
        if self.count + n > self.limit:
            return False
        self.count += n
        return True


def fmt_ns(x: float) -> str:
    if x >= 100_000:
        return f"{x / 1000:,.0f} µs"
    if x >= 10_000:
        return f"{x / 1000:,.1f} µs"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}"


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M/s"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k/s"
    return f"{x:.0f} /s"


def md_table(headers: List[str], rows: List[List[str]], align: Optional[str] = None) -> str:
    """A GitHub Markdown table; ``align`` is a string of 'l'/'r' per column."""
    align = align or "l" + "r" * (len(headers) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(headers: List[str], rows: List[List[str]], align: Optional[str] = None) -> str:
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(
            str(c).ljust(w) if a == "l" else str(c).rjust(w)
            for c, w, a in zip(cells, widths, align)
        )

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)
