"""Section "threads": total decisions per second with 1, 2 and 4 threads on one limiter.

Every limiter is configured far above the load (10**9 per second), so every refusal is
spurious: a limiter that refuses below its limit under contention has a bug. Each
measurement runs the threads for a fixed time on one shared limiter; throughput is the
total number of decisions divided by the wall time from the common start to the last
thread's end.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any, Dict, List

import cases as C
from common import Case, fmt_rate, make_thread_worker, md_table, new_ns, text_table

TITLE = "Threads: decisions per second on one shared limiter"
ABOUT = __doc__.split("\n", 2)[2]


def measure(case: Case, nthreads: int, seconds: float, chunk: int = 256) -> Dict[str, Any]:
    """Run ``nthreads`` threads on one shared instance for ``seconds``."""
    ns = new_ns(case)
    stop: List[bool] = []
    results: List[Any] = [None] * nthreads
    barrier = threading.Barrier(nthreads + 1)
    start = [0]

    def body(i):
        worker = make_thread_worker(case, ns)
        barrier.wait()
        results[i] = worker(chunk, stop)

    ts = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(nthreads)]
    for t in ts:
        t.start()
    barrier.wait()
    start[0] = time.perf_counter_ns()
    time.sleep(seconds)
    stop.append(True)
    for t in ts:
        t.join()
    end = max(r[2] for r in results)
    calls = sum(r[0] for r in results)
    refused = sum(r[1] for r in results)
    teardown = ns.get("__teardown__")
    if teardown:
        teardown()
    elapsed = (end - start[0]) / 1e9
    return {"calls": calls, "refused": refused, "seconds": elapsed,
            "per_s": calls / elapsed, "per_thread": [r[0] for r in results]}


def thread_cases() -> List[Case]:
    sw = {c.key: c for c in C.slidewin_cases()}
    skipped: List[str] = []
    peers = {c.key: c for c in C.peer_cases(skipped)}
    out = [sw["sw.reject"], sw["sw.warm_up"], sw["sw.throttle"]]
    out += [peers[k] for k in C.THREAD_PEERS if k in peers]
    return out


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    tcases = thread_cases()
    raw: Dict[str, Dict[int, List[Dict[str, Any]]]] = {
        c.key: {n: [] for n in cfg["threads"]} for c in tcases}
    # round-robin over repeats x cases x thread counts, so a noisy moment (other work on
    # the machine) is spread over everyone instead of sinking one cell
    for r in range(cfg["thread_repeats"]):
        log(f"  round {r + 1}/{cfg['thread_repeats']}")
        for case in tcases:
            for n in cfg["threads"]:
                raw[case.key][n].append(measure(case, n, cfg["thread_s"]))
    rows = []
    for case in tcases:
        row = {"key": case.key, "label": case.label, "by_threads": {}}
        for n in cfg["threads"]:
            runs = raw[case.key][n]
            row["by_threads"][str(n)] = {
                "per_s": statistics.median(r["per_s"] for r in runs),
                "min_per_s": min(r["per_s"] for r in runs),
                "max_per_s": max(r["per_s"] for r in runs),
                "calls": sum(r["calls"] for r in runs),
                "refused": sum(r["refused"] for r in runs),
                # fairness: the least served thread's share of an equal split
                "min_thread_share": min(
                    min(r["per_thread"]) * n / max(1, r["calls"]) for r in runs),
            }
        # ratio to one thread: the median of per-round ratios (each round's runs are
        # adjacent in time, so slow drifts of the machine's load cancel out)
        first = raw[case.key][cfg["threads"][0]]
        for n in cfg["threads"]:
            row["by_threads"][str(n)]["vs_1"] = statistics.median(
                b["per_s"] / a["per_s"] for a, b in zip(first, raw[case.key][n]))
        row["refused"] = sum(v["refused"] for v in row["by_threads"].values())
        rows.append(row)
        log(f"  {case.label}: " + ", ".join(
            f"{n}T {fmt_rate(row['by_threads'][str(n)]['per_s'])}" for n in cfg["threads"]))
    ref = rows[0]["by_threads"]
    res = {"rows": rows, "threads": cfg["threads"], "seconds_each": cfg["thread_s"],
           "repeats": cfg["thread_repeats"]}
    if "2" in ref:
        res["target"] = {"target": "2 threads / 1 thread (slidewin try_acquire)",
                         "measured": ref["2"]["vs_1"], "limit": ">= 0.9x",
                         "met": ref["2"]["vs_1"] >= 0.9 and rows[0]["refused"] == 0,
                         "spurious_refusals": rows[0]["refused"]}
    return res


def _table(res):
    headers = ["case"] + [f"{n} thread{'s' if n > 1 else ''}" for n in res["threads"]]
    headers += [f"{n}T / 1T" for n in res["threads"][1:]] + ["spurious refusals"]
    rows = []
    for r in res["rows"]:
        bt = r["by_threads"]
        rows.append([r["label"]] + [fmt_rate(bt[str(n)]["per_s"]) for n in res["threads"]]
                    + [f"{bt[str(n)]['vs_1']:.2f}x" for n in res["threads"][1:]]
                    + [f"{r['refused']:,} / {sum(v['calls'] for v in bt.values()):,}"])
    return headers, rows


def render_text(res) -> str:
    h, rows = _table(res)
    out = text_table(h, rows)
    t = res.get("target")
    if t:
        out += (f"\n\ntarget {t['target']}: {t['measured']:.2f}x (wanted {t['limit']}), "
                f"spurious refusals {t['spurious_refusals']}: "
                f"{'met' if t['met'] else 'NOT met'}")
    return out


def render_md(res) -> str:
    h, rows = _table(res)
    out = md_table(h, rows)
    out += (f"\n\nEach cell: median of {res['repeats']} runs of {res['seconds_each']} s, "
            "run round-robin over cases and thread counts; \"nT / 1T\" is the median of the "
            "per-round ratios; "
            "\"spurious refusals\" counts refusals below the limit over all runs / all calls.")
    t = res.get("target")
    if t:
        out += (f"\n\nTarget {t['target']}: **{t['measured']:.2f}x** (wanted {t['limit']}), "
                f"spurious refusals: {t['spurious_refusals']} — "
                f"{'met' if t['met'] else '**not met**'}.")
    return out
