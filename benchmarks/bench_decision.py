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


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    skipped: List[str] = []
    all_cases: List[Case] = C.floor_cases() + C.slidewin_cases() + C.peer_cases(skipped)
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


def _med(rows, key):
    for r in rows:
        if r["key"] == key:
            return r["median_ns"]
    return None


def targets(rows) -> List[Dict[str, Any]]:
    """The issue's targets, each with the ratio exactly as measured."""
    out = []
    noop = _med(rows, "floor.noop")
    rej = _med(rows, REF)
    entry = _med(rows, "sw.entry")

    def add(name, value, limit, ok, detail):
        out.append({"target": name, "measured": value, "limit": limit,
                    "met": bool(ok), "detail": detail})

    if noop and rej:
        v = rej / noop
        add("try_acquire (reject) / _noop", v, "<= 2x", v <= 2, f"{rej:.1f} / {noop:.1f} ns")
    if noop and entry:
        v = entry / noop
        add("with lim.entry() / _noop", v, "<= 15x", v <= 15, f"{entry:.1f} / {noop:.1f} ns")
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
            p = _med(rows, key)
            if p:
                v = p / rej
                add(f"{label} / try_acquire", v, f">= {lim}x", v >= lim,
                    f"{p:.1f} / {rej:.1f} ns")
    return out


GROUP_TITLES = {
    "floor": "floors",
    "slidewin": "slidewin",
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


def render_text(res) -> str:
    out = [text_table(HEADERS, table_rows(res), "llrrr")]
    if res["targets"]:
        out.append("")
        out.append(text_table(["target", "measured", "wanted", "met", "detail"],
                              [[t["target"], f"{t['measured']:.2f}x", t["limit"],
                                "yes" if t["met"] else "NO", t["detail"]]
                               for t in res["targets"]], "lrllr"))
    return "\n".join(out)


def render_md(res) -> str:
    out = [md_table(HEADERS, table_rows(res), "llrrr")]
    notes = [r for r in res["rows"] if r["note"]]
    for r in notes:
        out.append(f"\n- {r['label']}: {r['note']}.")
    if res["targets"]:
        out.append("\nTargets (ratios as measured):\n")
        out.append(md_table(["target", "measured", "wanted", "met", "detail"],
                            [[t["target"], f"{t['measured']:.2f}x", t["limit"],
                              "yes" if t["met"] else "**no**", t["detail"]]
                             for t in res["targets"]], "lrllr"))
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run: python benchmarks/run.py --only decision")
