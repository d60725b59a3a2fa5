"""Section "breaker": a circuit breaker's cost on the closed path, and whether it serialises.

- Per call, one thread: ``try_pass()`` + ``record()`` on a closed Breaker next to a private
  ``Limiter.try_acquire()`` (the target: within 2x), ``with br.entry()`` (the decorator's
  path), and pybreaker's ``call()`` of an empty function.
- Under 8 threads, each calling a protected function that sleeps 10 ms (an I/O call: the
  GIL is released) ``calls`` times: the wall time through one Breaker, through one
  pybreaker CircuitBreaker (its lock is held around the protected call), and with no
  breaker at all. A breaker that does not serialise takes about the time of one thread.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Dict, List

from common import Case, calibrate, fmt_ns, interleaved, md_table, summarize, text_table

TITLE = "Breaker: the closed path, and 8 threads through one breaker"
ABOUT = __doc__.split("\n", 2)[2]


def _noop() -> None:
    return None


def decision_cases() -> List[Case]:
    import slidewin

    def limiter() -> Dict[str, Any]:
        return {"lim": slidewin.Limiter(qps=1e12)}

    def breaker() -> Dict[str, Any]:
        return {"br": slidewin.Breaker(error_ratio=0.5)}

    cases = [
        Case("sw.try_acquire", "Limiter.try_acquire() (private, reject)", "slidewin", limiter,
             "lim.try_acquire()"),
        Case("sw.breaker.pair", "Breaker.try_pass() + record(1.0)", "slidewin", breaker,
             "br.try_pass()\nbr.record(1.0)"),
        Case("sw.breaker.try_pass", "Breaker.try_pass() alone", "slidewin", breaker,
             "br.try_pass()"),
        Case("sw.breaker.entry", "with Breaker.entry(): pass", "slidewin", breaker,
             "with br.entry():\n    pass"),
    ]
    try:
        import pybreaker
    except ImportError:
        return cases

    def pyb() -> Dict[str, Any]:
        return {"cb": pybreaker.CircuitBreaker(fail_max=5, reset_timeout=10), "f": _noop}

    cases.append(Case("peer.pybreaker", "pybreaker CircuitBreaker.call(f)", "peer", pyb,
                      "cb.call(f)"))
    return cases


def run_decision(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    cs = decision_cases()
    counts = {c.key: calibrate(c, cfg["target_s"], cfg["max_n"]) for c in cs}
    samples = interleaved(cs, counts, cfg["repeats"], progress=lambda s: log("  " + s))
    rows = []
    base = summarize(samples["sw.try_acquire"])["median_ns"]
    for c in cs:
        s = summarize(samples[c.key])
        rows.append({"key": c.key, "label": c.label, "group": c.group, **s,
                     "ratio_to_try_acquire": s["median_ns"] / base})
    pair = next(r for r in rows if r["key"] == "sw.breaker.pair")
    target = {"target": "Breaker try_pass() + record() / Limiter.try_acquire()",
              "measured": pair["ratio_to_try_acquire"], "limit": "<= 2x",
              "met": pair["ratio_to_try_acquire"] <= 2.0}
    return {"rows": rows, "target": target}


def _wall(nthreads: int, calls: int, call) -> float:
    barrier = threading.Barrier(nthreads + 1)
    ends: List[float] = []

    def body() -> None:
        barrier.wait()
        for _ in range(calls):
            call()
        ends.append(time.perf_counter())

    ts = [threading.Thread(target=body) for _ in range(nthreads)]
    for t in ts:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in ts:
        t.join()
    return max(ends) - start


def run_threads(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    import slidewin

    nthreads = 8
    calls = int(cfg.get("breaker_calls", 10))
    sleep_s = 0.010

    def backend() -> None:
        time.sleep(sleep_s)

    br = slidewin.Breaker(error_ratio=0.5)
    protected = br(backend)
    runs: Dict[str, Any] = {"no breaker": backend, "slidewin Breaker (@br)": protected}
    try:
        import pybreaker

        cb = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=10)
        runs["pybreaker call()"] = lambda: cb.call(backend)
    except ImportError:
        log("  pybreaker is not installed: its row is skipped")
    rows = []
    for label, f in runs.items():
        log(f"  8 threads: {label}")
        best = min(_wall(nthreads, calls, f) for _ in range(int(cfg.get("breaker_repeats", 3))))
        rows.append({"label": label, "wall_s": best})
    ideal = calls * sleep_s
    for r in rows:
        r["x_one_thread"] = r["wall_s"] / ideal
    return {"threads": nthreads, "calls": calls, "sleep_ms": sleep_s * 1000, "rows": rows}


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    return {"decision": run_decision(cfg, log), "threads": run_threads(cfg, log)}


def _dec_rows(res):
    return [[r["label"], fmt_ns(r["median_ns"]), f"{fmt_ns(r['min_ns'])} - {fmt_ns(r['max_ns'])}",
             f"{r['ratio_to_try_acquire']:.2f}x"] for r in res["decision"]["rows"]]


def _thr_rows(res):
    return [[r["label"], f"{r['wall_s'] * 1000:.0f} ms", f"{r['x_one_thread']:.2f}x"]
            for r in res["threads"]["rows"]]


def _target(res, missed):
    t = res["decision"]["target"]
    return [[t["target"], f"{t['measured']:.2f}x", t["limit"], "yes" if t["met"] else missed]]


def _thr_title(res) -> str:
    t = res["threads"]
    return (f"{t['threads']} threads x {t['calls']} calls of a {t['sleep_ms']:.0f} ms call "
            f"(one thread alone: {t['calls'] * t['sleep_ms']:.0f} ms)")


def render_text(res) -> str:
    return "\n".join([
        text_table(["case", "median ns/call", "min - max", "x try_acquire"], _dec_rows(res),
                   "lrrr"),
        "",
        text_table(["target", "measured", "wanted", "met"], _target(res, "NO"), "lrll"),
        "",
        _thr_title(res),
        text_table(["through", "wall time", "x one thread"], _thr_rows(res), "lrr"),
    ])


def render_md(res) -> str:
    return "\n".join([
        md_table(["case", "median ns/call", "min - max", "x try_acquire"], _dec_rows(res),
                 "lrrr"),
        "",
        md_table(["target", "measured", "wanted", "met"], _target(res, "**no**"), "lrll"),
        "",
        _thr_title(res) + ":",
        "",
        md_table(["through", "wall time", "x one thread"], _thr_rows(res), "lrr"),
    ])


if __name__ == "__main__":  # pragma: no cover
    quick = "--quick" in sys.argv
    cfg = {"target_s": 0.002 if quick else 0.08, "max_n": 200_000 if quick else 20_000_000,
           "repeats": 3 if quick else 7, "breaker_calls": 5 if quick else 10,
           "breaker_repeats": 1 if quick else 3}
    print(render_text(run(cfg, lambda s: print(s, file=sys.stderr))))
