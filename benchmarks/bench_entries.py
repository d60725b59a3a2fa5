"""The cost of the admission protocol's forms against the bare decision, and an A/B of two
builds of slidewin run alternately.

Standalone (not a section of run.py):

- ``python benchmarks/bench_entries.py``: this build. Each form is timed against
  ``Limiter.try_acquire()`` right before it (15 rounds, or ``ROUNDS=N`` in the environment;
  minimum of 3 timeit repeats of 5,000 calls each), and printed as ns and as a multiple of that ``try_acquire``: the
  multiple is what survives a machine whose CPU speed changes between runs.
- ``python benchmarks/bench_entries.py --ab BEFORE AFTER [--runs N]``: BEFORE and AFTER are
  two source trees with slidewin built in place (``python setup.py build_ext --inplace``);
  each run starts one process per tree (``PYTHONPATH`` set to it), alternately, N times
  (default 6), and the table gives the median of each form's multiple per tree and the
  ratio AFTER / BEFORE. A form that BEFORE lacks is left blank.

Forms: ``with lim.entry()``, ``async with lim.entry()``, a decorated function, a
``Breaker``'s ``try_pass`` + ``record``, ``with br.entry()``, ``async with br.entry()`` and a
function decorated with it, an ``all_of`` group of two limiters' ``try_acquire``,
``with group.entry()`` and ``async with group.entry()``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import timeit
from typing import Callable, Dict, List

ROUNDS = int(os.environ.get("ROUNDS", "15"))
NUMBER = 5000


def forms() -> Dict[str, Callable[[], object]]:
    from slidewin import Breaker, Limiter, all_of

    lim = Limiter(qps=10**9)
    other = Limiter(qps=10**9)
    group = all_of(lim, other)
    br = Breaker(error_ratio=0.5)

    def entry() -> None:
        with lim.entry():
            pass

    @lim
    def decorated() -> None:
        pass

    loop = asyncio.new_event_loop()

    def async_entry(of: object) -> Callable[[], object]:
        """NUMBER `async with of.entry()` a call (divided below: PER_CALL)"""
        async def entries() -> None:
            for _ in range(NUMBER):
                async with of.entry():  # type: ignore[attr-defined]
                    pass

        return lambda: loop.run_until_complete(entries())

    def breaker_pair() -> None:
        if br.try_pass():
            br.record(0.0)

    def breaker_entry() -> None:
        with br.entry():
            pass

    @br
    def breaker_decorated() -> None:
        pass

    def group_entry() -> None:
        with group.entry():
            pass

    out: Dict[str, Callable[[], object]] = {
        "try_acquire": lim.try_acquire,
        "with lim.entry()": entry,
        "async with lim.entry()": async_entry(lim),
        "@lim function": decorated,
        "Breaker try_pass() + record()": breaker_pair,
        "with br.entry()": breaker_entry,
        "async with br.entry()": async_entry(br),
        "@br function": breaker_decorated,
        "all_of(a, b).try_acquire()": group.try_acquire,
        "with all_of(a, b).entry()": group_entry,
        "async with all_of(a, b).entry()": async_entry(group),
    }
    return out


PER_CALL = {name: NUMBER for name in ("async with lim.entry()", "async with br.entry()",
                                       "async with all_of(a, b).entry()")}


def measure() -> Dict[str, List[float]]:
    """{form: [ns per call, one a round]}; try_acquire is timed before each form."""
    fs = forms()
    base = fs.pop("try_acquire")
    ns: Dict[str, List[float]] = {"try_acquire": []}
    mult: Dict[str, List[float]] = {}
    for _ in range(ROUNDS):
        for name, fn in fs.items():
            t0 = min(timeit.repeat(base, number=NUMBER, repeat=3)) / NUMBER
            number = 1 if name in PER_CALL else NUMBER
            t = min(timeit.repeat(fn, number=number, repeat=3)) / (number * PER_CALL.get(name, 1))
            ns["try_acquire"].append(t0 * 1e9)
            ns.setdefault(name, []).append(t * 1e9)
            mult.setdefault(name, []).append(t / t0)
    return {"ns": {k: statistics.median(v) for k, v in ns.items()},  # type: ignore[dict-item]
            "x": {k: statistics.median(v) for k, v in mult.items()}}


def table(rows: List[List[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                               enumerate(zip(r, widths))) for r in rows)


def ab(before: str, after: str, runs: int) -> None:
    got: Dict[str, List[Dict[str, Dict[str, float]]]] = {before: [], after: []}
    for _ in range(runs):
        for tree in (before, after):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--json"],
                                 env=env, cwd="/", check=True, stdout=subprocess.PIPE,
                                 universal_newlines=True).stdout
            got[tree].append(json.loads(out))
    names = list(got[after][0]["x"])
    rows = [["form (x try_acquire, median of runs)", "before", "after", "after/before"]]
    for name in names:
        b = [r["x"][name] for r in got[before] if name in r["x"]]
        a = statistics.median(r["x"][name] for r in got[after])
        bm = statistics.median(b) if b else None
        rows.append([name, "" if bm is None else "%.2f" % bm, "%.2f" % a,
                     "" if bm is None else "%.2fx" % (a / bm)])
    t0 = {k: statistics.median(r["ns"]["try_acquire"] for r in v) for k, v in got.items()}
    print("before: %s   after: %s   %d alternating runs each" % (before, after, runs))
    print("try_acquire, median ns: before %.0f, after %.0f\n" % (t0[before], t0[after]))
    print(table(rows))


def main(argv: List[str]) -> None:
    if argv[:1] == ["--json"]:
        print(json.dumps(measure()))
        return
    if argv[:1] == ["--ab"] and len(argv) >= 3:
        runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 6
        ab(argv[1], argv[2], runs)
        return
    if argv:
        sys.exit("usage: bench_entries.py [--ab BEFORE AFTER [--runs N]]")
    r = measure()
    rows = [["form", "ns (median)", "x try_acquire"]]
    rows.append(["try_acquire", "%.0f" % r["ns"]["try_acquire"], "1.00"])
    for name, x in r["x"].items():
        rows.append([name, "%.0f" % r["ns"][name], "%.2f" % x])
    print(table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
