"""Write the recorded benchmark run into the README and docs/ (every figure from one run).

    python benchmarks/render.py           # fill the generated blocks from results/latest.json
    python benchmarks/render.py --check   # exit 1 when a block is not what the run says

A generated block sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` in
README.md or a page of docs/; everything between the two lines is rewritten, so figures are
never typed by hand. Each block starts with the run's stamp (commit, date, machine).

The run must be one run: a full ``python benchmarks/run.py`` (not ``--quick``), every section
measured at the same commit of a clean checkout. A file mixing sections of several runs
(``--only``) or measured with uncommitted changes is refused: rerun in full. ``run.py``
calls this after a full run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import report  # noqa: E402
from common import md_table  # noqa: E402

BLOCK = re.compile(r"(<!-- bench:([a-z-]+) -->\n)(.*?)(<!-- /bench:\2 -->)", re.S)


class NotOneRun(ValueError):
    """The results file is not one full run of one clean commit."""


def one_run(results: Dict[str, Any]) -> Tuple[str, str]:
    """(commit, date) of the run; NotOneRun when the file mixes runs or is a smoke run."""
    if results.get("quick"):
        raise NotOneRun("a --quick smoke run: its numbers are noise; run benchmarks/run.py")
    env = results.get("environment", {})
    if env.get("git_dirty"):
        raise NotOneRun(f"measured with uncommitted changes (git {env.get('git')}): "
                        "commit, then rerun")
    commits = {name: sec.get("environment", {}).get("git")
               for name, sec in results.get("sections", {}).items()}
    if not commits:
        raise NotOneRun("no sections")
    found = sorted(set(commits.values()), key=str)
    if len(found) != 1 or not found[0]:
        raise NotOneRun("sections from several runs: " + ", ".join(
            f"{name} at {commit}" for name, commit in commits.items())
            + "; rerun `python benchmarks/run.py` in full")
    return found[0], str(env.get("date", ""))[:10]


def stamp(results: Dict[str, Any]) -> str:
    commit, date = one_run(results)
    env = results["environment"]
    return (f"_One run of `python benchmarks/run.py` at git {commit} on {date}: "
            f"{env.get('processor')} ({env.get('cpus')} CPUs), CPython {env.get('python')}, "
            f"load average {(env.get('loadavg_at_start') or ['?'])[0]} at the start. Ratios matter more "
            f"than absolute numbers, which vary by machine._")


# ---------------------------------------------------------------------------- figures

def _ns(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:.2f} µs" if v < 10_000 else f"{v / 1000:.1f} µs"
    return f"{v:.1f} ns" if v < 100 else f"{v:.0f} ns"


def _span(values: List[float], fmt: Callable[[float], str]) -> str:
    values = sorted(values)
    if not values:
        return "—"
    lo, hi = fmt(values[0]), fmt(values[-1])
    return lo if lo == hi else f"{lo}–{hi}"


def _x(v: float) -> str:
    return f"{v:,.2f}x"


def _match(key: str, pattern: str) -> bool:
    """A pattern ending in '.' or ' ' is a prefix; any other names one key exactly."""
    return key.startswith(pattern) if pattern.endswith((".", " ")) else key == pattern


def _decision(results, prefix: str) -> List[float]:
    sec = results["sections"].get("decision") or {}
    return [r["median_ns"] for r in sec.get("rows", []) if _match(r["key"], prefix)]


def _threads(results, prefix: str) -> List[float]:
    sec = results["sections"].get("threads") or {}
    return [r["by_threads"]["2"]["vs_1"] for r in sec.get("rows", [])
            if _match(r["key"], prefix) and "2" in r.get("by_threads", {})]


def _bytes_per_key(results, prefix: str) -> List[float]:
    sec = results["sections"].get("keyed") or {}
    rows = (sec.get("memory") or {}).get("rows", [])
    return [r["tracemalloc"]["per_key"] for r in rows
            if _match(r["key"], prefix) and r.get("tracemalloc")]


def _redis_x(results, prefix: str) -> List[float]:
    sec = results["sections"].get("redis") or {}
    return [r["x_ping"] for r in sec.get("rows", []) if _match(r["label"], prefix)]


def _shared_x(results) -> List[float]:
    sec = (results["sections"].get("shared") or {}).get("decision") or {}
    return [t["measured"] for t in sec.get("targets", [])
            if t["target"].startswith(("shared try_acquire (", "shared=True try_acquire"))]


def readme(results: Dict[str, Any]) -> str:
    """The README's measured table: slidewin against its peers, from one run."""
    cols = ["slidewin", "limits", "pyrate-limiter", "aiolimiter", "throttled-py"]
    dec = [_span(_decision(results, p), _ns) for p in
           ("sw.reject", "peer.limits.", "peer.pyrate", "apeer.aiolimiter", "peer.throttled.")]
    dec[0] = f"**{dec[0].split('–')[0]}**"
    dec[3] += " (`async with`)" if dec[3] != "—" else ""
    thr = [_span(_threads(results, p), _x) for p in
           ("sw.reject", "peer.limits.", "peer.pyrate", "-", "peer.throttled.")]
    thr[3] = "asyncio only"
    mem = [_span(_bytes_per_key(results, p), lambda v: f"{v:.0f}" if v >= 100 else f"{v:.1f}")
           for p in ("slidewin", "limits.", "-", "-", "throttled.")]
    red = [_span(_redis_x(results, p), _x) for p in
           ("slidewin RedisLimiter ", "limits ", "pyrate-limiter ", "-", "throttled-py ")]
    red[3] = "no Redis"
    shx = _span(_shared_x(results), _x)
    rows = [["one in-memory decision"] + dec,
            ["2 threads on one limiter / 1 thread"] + thr,
            ["bytes a key, per-key limits"] + mem,
            ["a decision on a local Redis / a `PING`"] + red,
            ["one limit for a host's processes: a decision / a private one",
             f"{shx} (shared memory)", "a server", _multiprocess(results), "no",
             "a server"]]
    return md_table(["measured"] + cols, rows, "l" + "r" * len(cols))


def _multiprocess(results) -> str:
    sec = (results["sections"].get("shared") or {}).get("processes") or {}
    xs = [t["measured"] for t in sec.get("targets", [])
          if "MultiprocessBucket" in t["target"] and t.get("measured")]
    if not xs:
        return "`MultiprocessBucket`"
    return "`MultiprocessBucket`: " + _span(xs, lambda v: f"{v:,.0f}x") + " slower"


def section(name: str) -> Callable[[Dict[str, Any]], str]:
    def render(results: Dict[str, Any]) -> str:
        sec = results["sections"].get(name)
        if sec is None:
            return f"(the run has no {name} section)"
        if sec.get("skipped"):
            return f"(skipped in this run: {sec['skipped']})"
        return report.modules()[name].render_md(sec)
    return render


def full(results: Dict[str, Any]) -> str:
    return report.render_md(results, heading_level=2, environment=False)


BLOCKS: Dict[str, Callable[[Dict[str, Any]], str]] = {
    "readme": readme,
    "full": full,
    "gil": section("gil"),
    "shared": section("shared"),
    "keyed": section("keyed"),
    "redis": section("redis"),
    "waiters": section("waiters"),
    "adaptive": section("adaptive"),
    "all-of": section("all_of"),
    "breaker": section("breaker"),
}


def fill(text: str, results: Dict[str, Any], where: str) -> str:
    def one(m: "re.Match[str]") -> str:
        name = m.group(2)
        if name not in BLOCKS:
            raise ValueError(f"{where}: unknown generated block {name!r} "
                             f"(known: {', '.join(BLOCKS)})")
        body = stamp(results) + "\n\n" + BLOCKS[name](results).rstrip() + "\n"
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(one, text)


def targets() -> List[str]:
    docs = os.path.join(ROOT, "docs")
    return [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 when a generated block is out of date")
    ap.add_argument("--results", default=os.path.join(HERE, "results", "latest.json"))
    args = ap.parse_args(argv)
    with open(args.results) as f:
        results = json.load(f)
    try:
        one_run(results)
    except NotOneRun as e:
        print(f"render: {os.path.relpath(args.results)}: {e}", file=sys.stderr)
        return 1
    stale = []
    for path in targets():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = fill(text, results, os.path.relpath(path, ROOT))
        if new != text:
            stale.append(os.path.relpath(path, ROOT))
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    if args.check and stale:
        print("render: out of date (run `python benchmarks/render.py`): " + ", ".join(stale),
              file=sys.stderr)
        return 1
    if not args.check:
        print("render: " + (", ".join(stale) if stale else "nothing to change"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
