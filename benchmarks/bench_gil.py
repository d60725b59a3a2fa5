"""Section "gil": the O(1) decision with the GIL held vs released around the core call.

``Limiter.try_acquire`` keeps the GIL; ``slidewin._core._try_acquire_nogil(lim)`` (a benchmark-only
twin) releases it around the core call (``Py_BEGIN_ALLOW_THREADS``). Both run with 1, 2
and 4 threads on one limiter, and one limiter thread next to one CPU-bound pure-Python
thread, where the question is how much each side keeps of what it does alone.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from typing import Any, Dict, List

import cases as C
from bench_threads import measure
from common import fmt_rate, make_thread_worker, md_table, new_ns, text_table

TITLE = "GIL: held vs released around the O(1) decision"
ABOUT = __doc__.split("\n", 2)[2]


def _burner(stop: List[bool], out: List[int], chunk: int = 1000) -> None:
    """CPU-bound pure Python: count loop iterations until stopped."""
    n = 0
    x = 0
    while not stop:
        for _ in itertools.repeat(None, chunk):
            x += 1
        n += chunk
    out.append(n)


def next_to_cpu(case, seconds: float) -> Dict[str, Any]:
    """One thread making decisions with ``case`` (or none) and one CPU-bound thread."""
    stop: List[bool] = []
    cpu: List[int] = []
    dec: List[Any] = []
    barrier = threading.Barrier(3 if case else 2)
    ts = []

    def cpu_body():
        barrier.wait()
        _burner(stop, cpu)

    ts.append(threading.Thread(target=cpu_body, daemon=True))
    if case:
        ns = new_ns(case)
        worker = make_thread_worker(case, ns)

        def dec_body():
            barrier.wait()
            dec.append(worker(64, stop))

        ts.append(threading.Thread(target=dec_body, daemon=True))
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter_ns()
    time.sleep(seconds)
    stop.append(True)
    for t in ts:
        t.join()
    el = (time.perf_counter_ns() - t0) / 1e9
    out = {"cpu_per_s": cpu[0] / el}
    if case:
        out["decisions_per_s"] = dec[0][0] / el
        out["refused"] = dec[0][1]
    return out


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    if not C.has_nogil():
        msg = ("slidewin._core._try_acquire_nogil is not in this build of slidewin; "
               "the GIL study needs it")
        log("  skipped: " + msg)
        return {"skipped": msg}
    sw = {c.key: c for c in C.slidewin_cases()}
    held, rel = sw["sw.reject"], sw["sw.reject_nogil"]
    secs, reps = cfg["thread_s"], cfg["thread_repeats"]

    # round-robin: every configuration once per round, so noise is shared
    raw: Dict[str, List[Dict[str, Any]]] = {}

    def add(key, value):
        raw.setdefault(key, []).append(value)

    for r in range(reps):
        log(f"  round {r + 1}/{reps}")
        for n in cfg["threads"]:
            add(f"held{n}", measure(held, n, secs))
            add(f"rel{n}", measure(rel, n, secs))
        add("cpu", next_to_cpu(None, secs))
        add("cpu_held", next_to_cpu(held, secs))
        add("cpu_rel", next_to_cpu(rel, secs))

    def med(key):
        runs = raw[key]
        return {k: statistics.median(r[k] for r in runs) for k in runs[0]
                if isinstance(runs[0][k], (int, float))}

    by_threads = {}
    for n in cfg["threads"]:
        h, r = med(f"held{n}"), med(f"rel{n}")
        by_threads[str(n)] = {"held_per_s": h["per_s"], "released_per_s": r["per_s"],
                              "released_vs_held": statistics.median(
                                  b["per_s"] / a["per_s"]
                                  for a, b in zip(raw[f"held{n}"], raw[f"rel{n}"])),
                              "held_refused": sum(x["refused"] for x in raw[f"held{n}"]),
                              "released_refused": sum(x["refused"] for x in raw[f"rel{n}"])}
        log(f"  {n} thread(s): held {fmt_rate(h['per_s'])}, released {fmt_rate(r['per_s'])}")
    solo_cpu = med("cpu")["cpu_per_s"]
    cpu_held = med("cpu_held")
    cpu_rel = med("cpu_rel")
    one = by_threads[str(cfg["threads"][0])]
    res = {
        "threads": cfg["threads"],
        "by_threads": by_threads,
        "cpu_alone_per_s": solo_cpu,
        "next_to_cpu": {
            "held": {**cpu_held, "cpu_share": cpu_held["cpu_per_s"] / solo_cpu,
                     "decision_share": cpu_held["decisions_per_s"] / one["held_per_s"]},
            "released": {**cpu_rel, "cpu_share": cpu_rel["cpu_per_s"] / solo_cpu,
                         "decision_share": cpu_rel["decisions_per_s"] / one["released_per_s"]},
        },
        "switch_interval_s": __import__("sys").getswitchinterval(),
    }
    res["conclusion"] = conclusion(res)
    return res


def conclusion(res) -> str:
    bt = res["by_threads"]
    one = bt["1"]
    cost = 1e9 / one["released_per_s"] - 1e9 / one["held_per_s"]
    multi = [n for n in res["threads"] if n > 1]
    gains = {n: bt[str(n)].get("released_vs_held",
                               bt[str(n)]["released_per_s"] / bt[str(n)]["held_per_s"])
             for n in multi}
    nc = res["next_to_cpu"]
    h, r = nc["held"], nc["released"]
    parts = [
        f"Releasing the GIL around the O(1) decision costs {cost:+.0f} ns per call on one "
        f"thread ({1 / one.get('released_vs_held', one['released_per_s'] / one['held_per_s']):.2f}x "
        "the time of keeping it)."
    ]
    parts.append(
        "With several threads on one limiter it changes total throughput by "
        + ", ".join(f"{g:.2f}x at {n} threads" for n, g in gains.items())
        + ": the Python-level call around the core still needs the GIL, so the released "
          "section is too short for another thread to run in it, and the threads only "
          "add hand-overs."
        if all(g < 1.15 for g in gains.values()) else
        "With several threads on one limiter it changes total throughput by "
        + ", ".join(f"{g:.2f}x at {n} threads" for n, g in gains.items()) + "."
    )
    parts.append(
        f"Next to one CPU-bound Python thread, the limiter thread keeps "
        f"{h['decision_share']:.0%} of its solo rate with the GIL held "
        f"({fmt_rate(h['decisions_per_s'])}) and {r['decision_share']:.1%} with it "
        f"released ({fmt_rate(r['decisions_per_s'])}), while the CPU-bound thread keeps "
        f"{h['cpu_share']:.0%} vs {r['cpu_share']:.0%} of its own solo rate."
    )
    if r["decisions_per_s"] < h["decisions_per_s"]:
        parts.append(
            "Each release is a chance for the waiting CPU-bound thread to take the GIL, and "
            "the limiter thread then waits until it is handed back (up to the "
            f"{res['switch_interval_s'] * 1000:.0f} ms switch interval): the releasing side "
            "pays a hand-over per call for a core call of a few tens of ns that has nothing "
            "to overlap with. Keeping the GIL for O(1) decisions, and releasing it only "
            "around waits (acquire's sleep), is the right default on a GIL build."
        )
    else:
        parts.append("Releasing the GIL did not slow the limiter thread down here.")
    return " ".join(parts)


def _tables(res):
    h1 = ["threads", "GIL held", "GIL released", "released / held (median of rounds)",
          "refusals (held/rel.)"]
    rows1 = []
    for n in res["threads"]:
        b = res["by_threads"][str(n)]
        rows1.append([str(n), fmt_rate(b["held_per_s"]), fmt_rate(b["released_per_s"]),
                      f"{b.get('released_vs_held', b['released_per_s'] / b['held_per_s']):.2f}x",
                      f"{b['held_refused']:.0f} / {b['released_refused']:.0f}"])
    nc = res["next_to_cpu"]
    h2 = ["1 limiter thread + 1 CPU-bound thread", "decisions/s", "of solo",
          "CPU thread loops/s", "of solo"]
    rows2 = [["CPU-bound thread alone", "-", "-", fmt_rate(res["cpu_alone_per_s"]), "100%"]]
    for k in ("held", "released"):
        v = nc[k]
        rows2.append([f"GIL {k}", fmt_rate(v["decisions_per_s"]), f"{v['decision_share']:.1%}",
                      fmt_rate(v["cpu_per_s"]), f"{v['cpu_share']:.0%}"])
    return (h1, rows1), (h2, rows2)


def render_text(res) -> str:
    (h1, r1), (h2, r2) = _tables(res)
    return "\n".join([text_table(h1, r1), "", text_table(h2, r2), "", conclusion(res)])


def render_md(res) -> str:
    (h1, r1), (h2, r2) = _tables(res)
    return "\n".join([md_table(h1, r1), "", md_table(h2, r2), "",
                      "**Conclusion.** " + conclusion(res)])
