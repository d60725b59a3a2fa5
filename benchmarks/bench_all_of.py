"""Section "all_of": one admission over several limiters vs one limiter.

Timed like the decision section (``timeit``-style loops with the bound method in a local,
every case once per round in an order rotated every round, a fresh group and fresh
limiters per timing, GC off while timing; median and min - max of the rounds, raw ns per
call with the loop overhead included for everyone):

- a private ``Limiter.try_acquire()`` (the reference) and ``all_of(a, b).try_acquire()``
  over two private limiters (the target: within 2.5x);
- ``all_of(rpm, tpm).try_acquire(1, 500)`` with a size per member, a group of three (an LLM
  client's requests/min, tokens/min and concurrency: ``try_acquire`` then the
  concurrency's ``release()``), a group with a ``(KeyedLimiter, key)`` member, a refusing
  group (the second member full), and two limiters called one after the other (what
  ``all_of`` replaces: not all or nothing, shown for the cost only).
Limits are far above the load (10**9/s) unless the case says "refusing".
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

from common import Case, calibrate, fmt_ns, interleaved, md_table, summarize, text_table

TITLE = "all_of: one admission over several limiters"
ABOUT = __doc__.split("\n", 2)[2]
BIG = 10 ** 9
TOKENS = 10 ** 13  # the tokens member: 500 a call never fills it within a timing

REF = "one.try_acquire"
TARGET = "group2.try_acquire"


def cases() -> List[Case]:
    from slidewin import KeyedLimiter, Limiter, all_of

    def one():
        lim = Limiter(qps=BIG)
        return {"f": lim.try_acquire, "lim": lim}

    def group2():
        a, b = Limiter(qps=BIG), Limiter(qps=BIG)
        return {"f": all_of(a, b).try_acquire, "keep": (a, b)}

    def sizes():
        a, b = Limiter(qps=BIG), Limiter(qps=TOKENS)
        return {"f": all_of(a, b).try_acquire, "keep": (a, b)}

    def llm():
        rpm, tpm, conc = Limiter(qps=BIG), Limiter(qps=TOKENS), Limiter(concurrency=BIG)
        return {"f": all_of(rpm, tpm, conc).try_acquire, "rel": conc.release,
                "keep": (rpm, tpm, conc)}

    def keyed():
        a, k = Limiter(qps=BIG), KeyedLimiter(qps=BIG)
        return {"f": all_of(a, (k, "user-42")).try_acquire, "keep": (a, k)}

    def refusing():
        a, b = Limiter(qps=BIG), Limiter(qps=1)
        g = all_of(a, b)
        assert g.try_acquire() and not g.try_acquire()
        return {"f": g.try_acquire, "keep": (a, b)}

    def sequential():
        a, b = Limiter(qps=BIG), Limiter(qps=BIG)
        return {"f": a.try_acquire, "g": b.try_acquire}

    return [
        Case(REF, "Limiter.try_acquire() (private)", "one", one, "    _r = f()"),
        Case(TARGET, "all_of(a, b).try_acquire()", "group", group2, "    _r = f()"),
        Case("group2.sizes", "all_of(rpm, tpm).try_acquire(1, 500)", "group", sizes,
             "    _r = f(1, 500)"),
        Case("group3.llm", "all_of(rpm, tpm, concurrency): try_acquire(1, 500, 1) + release()",
             "group", llm, "    _r = f(1, 500, 1)\n    rel()"),
        Case("group2.keyed", "all_of(a, (keyed, key)).try_acquire()", "group", keyed,
             "    _r = f()"),
        Case("group2.refusing", "all_of(a, full).try_acquire() refusing", "group", refusing,
             "    _r = f()"),
        Case("seq2", "a.try_acquire() and b.try_acquire() (not all or nothing)", "one",
             sequential, "    _r = f() and g()"),
    ]


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    all_cases = cases()
    counts = {c.key: calibrate(c, cfg["target_s"], cfg["max_n"]) for c in all_cases}
    log(f"  {len(all_cases)} cases, {cfg['repeats']} interleaved rounds")
    samples = interleaved(all_cases, counts, cfg["repeats"], progress=lambda s: log("  " + s))
    ref = summarize(samples[REF])
    rows = []
    for c in all_cases:
        s = summarize(samples[c.key])
        s.update(key=c.key, label=c.label, loops=counts[c.key],
                 ratio=s["median_ns"] / ref["median_ns"],
                 samples_ns=[round(x, 2) for x in samples[c.key]])
        rows.append(s)
    # the median of per-round ratios: each round times both cases close together
    per_round = sorted(g / o for g, o in zip(samples[TARGET], samples[REF]))
    tgt = next(r for r in rows if r["key"] == TARGET)
    target = {"target": "all_of(a, b).try_acquire() / Limiter.try_acquire()",
              "measured": tgt["median_ns"] / ref["median_ns"],
              "measured_min": tgt["min_ns"] / ref["min_ns"],
              "median_round_ratio": per_round[len(per_round) // 2],
              "limit": "<= 2.5x", "met": tgt["median_ns"] / ref["median_ns"] <= 2.5,
              "detail": f"{tgt['median_ns']:.1f} / {ref['median_ns']:.1f} ns"}
    return {"rows": rows, "reference": REF, "targets": [target]}


HEADERS = ["case", "median ns/call", "min - max", "x try_acquire"]


def _rows(res):
    return [[r["label"], fmt_ns(r["median_ns"]), f"{fmt_ns(r['min_ns'])} - {fmt_ns(r['max_ns'])}",
             f"{r['ratio']:.2f}x"] for r in res["rows"]]


def _targets(res, missed):
    return [[t["target"], f"{t['measured']:.2f}x", t["limit"], "yes" if t["met"] else missed,
             t["detail"], f"{t['measured_min']:.2f}x", f"{t['median_round_ratio']:.2f}x"]
            for t in res["targets"]]


TARGET_HEADERS = ["target", "measured (medians)", "wanted", "met", "medians", "ratio of mins",
                  "median of round ratios"]


def render_text(res) -> str:
    return "\n".join([text_table(HEADERS, _rows(res), "lrrr"), "",
                      text_table(TARGET_HEADERS, _targets(res, "NO"), "lrllrrr")])


def render_md(res) -> str:
    return "\n".join([md_table(HEADERS, _rows(res), "lrrr"), "\nTarget:\n",
                      md_table(TARGET_HEADERS, _targets(res, "**no**"), "lrllrrr")])


if __name__ == "__main__":  # pragma: no cover
    # a run of this section alone: python benchmarks/bench_all_of.py [--quick]
    quick = "--quick" in sys.argv
    cfg = {"target_s": 0.002 if quick else 0.08, "max_n": 200_000 if quick else 20_000_000,
           "repeats": 3 if quick else 7}
    res = run(cfg, lambda m: print(m, file=sys.stderr))
    print(render_text(res))
