"""Section "decision": the cost of one decision, floors vs slidewin vs peers.

All cases run interleaved in one process: every round times each case once (a fresh
limiter per timing), in an order rotated every round, so a noisy moment hits everyone.
Each timing is a ``timeit``-style loop with the bound method in a local; reported numbers
are raw ns per call (loop overhead included for everyone, nothing subtracted).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

import cases as C
from common import Case, calibrate, fmt_ns, interleaved, md_table, summarize, text_table

REF = "sw.reject"  # the ratio column is relative to this case

TITLE = "Decision: ns per call, floors vs slidewin vs peers"
ABOUT = """
Raw ns per call (loop overhead included for everyone, nothing subtracted): median and
min - max of 7 interleaved rounds; each round times every case once, on a fresh
limiter, in an order rotated every round. Limits are far above the load (10**9/s), so
every case takes its admit path unless it says "refusing". "x try_acquire" is the ratio
to slidewin's `try_acquire()` (reject, qps, admitting). The "by sample_count" rows use one
window of 300 s cut into 2 .. 100000 buckets: their cost must not grow with the count.
"""


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    skipped: List[str] = []
    all_cases: List[Case] = C.floor_cases() + C.slidewin_cases() + C.scale_cases()
    all_cases += C.peer_cases(skipped)
    all_cases += C.async_floor_cases() + C.slidewin_async_cases() + C.peer_async_cases(skipped)
    if skipped:
        log(f"  peers not installed (pip install -e .[bench]): {', '.join(skipped)}")

    counts = {}
    for c in all_cases:
        counts[c.key] = calibrate(c, cfg["target_s"], cfg["max_n"])
    log(f"  {len(all_cases)} cases, {cfg['repeats']} interleaved rounds, "
        f"~{cfg['target_s'] * 1000:.0f} ms per timing")
    samples = interleaved(all_cases, counts, cfg["repeats"], progress=lambda s: log("  " + s))

    ref = summarize(samples[REF])["median_ns"]
    rows = []
    for c in all_cases:
        s = summarize(samples[c.key])
        s.update(key=c.key, label=c.label, group=c.group, loops=counts[c.key],
                 ratio_to_try_acquire=s["median_ns"] / ref, note=c.note,
                 samples_ns=[round(x, 2) for x in samples[c.key]])
        rows.append(s)
    res = {"rows": rows, "reference": REF, "skipped_peers": skipped,
           "targets": targets(rows)}
    return res


def _row(rows, key):
    for r in rows:
        if r["key"] == key:
            return r
    return None


def targets(rows) -> List[Dict[str, Any]]:
    """The issue's targets, each with the ratio exactly as measured: of medians (the
    headline) and, for reference, of minimums (the least disturbed run of each)."""
    out = []
    noop = _row(rows, "floor.noop")
    rej = _row(rows, REF)
    entry = _row(rows, "sw.entry")

    def add(name, a, b, limit, test):
        v = a["median_ns"] / b["median_ns"]
        out.append({"target": name, "measured": v,
                    "measured_min": a["min_ns"] / b["min_ns"], "limit": limit,
                    "met": bool(test(v)),
                    "detail": f"{a['median_ns']:.1f} / {b['median_ns']:.1f} ns"})

    if noop and rej:
        add("try_acquire (reject) / _noop", rej, noop, "<= 2x", lambda v: v <= 2)
    if noop and entry:
        add("with lim.entry() / _noop", entry, noop, "<= 15x", lambda v: v <= 15)
    lo, hi = C.SCALE_SAMPLES[0], C.SCALE_SAMPLES[-1]
    for kind, what in (("admit", "try_acquire() admitting"), ("refuse", "try_acquire() refusing"),
                       ("stats", "stats()")):
        a, b = _row(rows, f"scale.{kind}.{hi}"), _row(rows, f"scale.{kind}.{lo}")
        if a and b:
            add(f"{what}: sample_count {hi} / {lo}", a, b, "<= 1.5x", lambda v: v <= 1.5)
    if rej:
        for key, lim, label in (
            ("peer.limits.fixed", 50, "limits fixed window"),
            ("peer.limits.moving", 50, "limits moving window"),
            ("peer.limits.sliding", 50, "limits sliding window counter"),
            ("peer.pyrate", 50, "pyrate-limiter"),
            ("peer.throttled.fixed_window", 50, "throttled-py fixed_window"),
            ("peer.throttled.sliding_window", 50, "throttled-py sliding_window"),
            ("peer.throttled.leaking_bucket", 50, "throttled-py leaking_bucket"),
            ("peer.throttled.token_bucket", 50, "throttled-py token_bucket"),
            ("peer.throttled.gcra", 50, "throttled-py gcra"),
            ("peer.token_bucket", 10, "token-bucket"),
        ):
            p = _row(rows, key)
            if p:
                add(f"{label} / try_acquire", p, rej, f">= {lim}x",
                    lambda v, lim=lim: v >= lim)
    return out


GROUP_TITLES = {
    "floor": "floors",
    "slidewin": "slidewin",
    "scale": "slidewin by sample_count",
    "peer": "peers (PyPI)",
    "async-floor": "async floor",
    "async-slidewin": "slidewin async",
    "async-peer": "async peers",
}


def table_rows(res):
    rows = []
    for r in res["rows"]:
        rows.append([
            GROUP_TITLES.get(r["group"], r["group"]),
            r["label"],
            fmt_ns(r["median_ns"]),
            f"{fmt_ns(r['min_ns'])} - {fmt_ns(r['max_ns'])}",
            f"{r['ratio_to_try_acquire']:.2f}x",
        ])
    return rows


HEADERS = ["group", "case", "median ns/call", "min - max", "x try_acquire"]


def _target_rows(res, missed: str):
    return [[t["target"], f"{t['measured']:.2f}x", t["limit"],
             "yes" if t["met"] else missed, t["detail"],
             (f"{t['measured_min']:.2f}x" if 'measured_min' in t else '-')]
            for t in res["targets"]]


def render_text(res) -> str:
    out = [text_table(HEADERS, table_rows(res), "llrrr")]
    if res["targets"]:
        out.append("")
        out.append(text_table(["target", "measured", "wanted", "met", "medians",
                               "ratio of mins"], _target_rows(res, "NO"), "lrllrr"))
    return "\n".join(out)


def render_md(res) -> str:
    out = [md_table(HEADERS, table_rows(res), "llrrr")]
    notes = [r for r in res["rows"] if r["note"]]
    for r in notes:
        out.append(f"\n- {r['label']}: {r['note']}.")
    if res["targets"]:
        out.append("\nTargets (ratios as measured):\n")
        out.append(md_table(["target", "measured (medians)", "wanted", "met", "medians",
                             "ratio of mins"], _target_rows(res, "**no**"), "lrllrr"))
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run: python benchmarks/run.py --only decision")
