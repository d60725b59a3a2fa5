"""Run slidewin's benchmarks and compare it with its peers, all in one process.

    pip install -e .[bench]            # slidewin plus the pinned peers and matplotlib
    python benchmarks/run.py           # everything, ~3 minutes; writes results/latest.*
    python benchmarks/run.py --quick   # CI smoke run (< 60 s), writes results/quick.*
    python benchmarks/run.py --only decision,threads

Sections: decision, threads, gil, accuracy, memory, shared, keyed, waiters, redis (skipped without
redis-server; plots are drawn by plots.py from
the accuracy results when matplotlib is importable). A full run writes
``benchmarks/results/latest.json`` and ``latest.md`` and the PNGs in ``docs/``; a run
with ``--only`` replaces just those sections in the existing ``latest.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from typing import Any, Callable, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import cases  # noqa: E402
from report import SECTIONS, modules, render_md  # noqa: E402

FULL = {
    "target_s": 0.08,    # one timing of one decision case
    "max_n": 20_000_000,
    "repeats": 7,
    "thread_s": 0.3,     # one threads measurement
    "thread_repeats": 9,
    "threads": [1, 2, 4],
    "accuracy_s": 1.0,   # real-clock throttle run per rate and method
    "accuracy_runs": 3,
    "memory_n": 10_000,
    "shared_s": 0.5,      # one measurement of processes hammering a shared limiter
    "shared_repeats": 7,
    "shared_procs": [1, 2],
    "keyed_sizes": [10_000, 1_000_000],  # KeyedLimiter tables filled to max_keys
    "keyed_peer_keys": 10_000,           # keys of the per-key peer comparison
    "keyed_max_calls": 2_000_000,        # calls per timing at most
    "keyed_mem_keys": 1_000_000,         # bytes per key: slidewin's table
    "keyed_mem_peer_keys": 100_000,      # bytes per key: the peers' stores (slower to fill)
    "redis_n": 2000,     # calls per case and round against a local redis-server
    "redis_rounds": 9,
    "waiters_tasks": 1000,  # asyncio tasks waiting on a saturated limiter
    "waiters_s": 2.0,
    "waiters_rounds": 200,
    "adaptive_quick": False,  # AdaptiveLimiter: the simulated phases a third as long
}
QUICK = {
    "target_s": 0.002,
    "max_n": 200_000,
    "repeats": 3,
    "thread_s": 0.05,
    "thread_repeats": 1,
    "threads": [1, 2, 4],
    "accuracy_s": 0.15,
    "accuracy_runs": 1,
    "memory_n": 1_000,
    "shared_s": 0.05,
    "shared_repeats": 1,
    "shared_procs": [1, 2],
    "keyed_sizes": [10_000, 100_000],
    "keyed_peer_keys": 2_000,
    "keyed_max_calls": 200_000,
    "keyed_mem_keys": 100_000,
    "keyed_mem_peer_keys": 10_000,
    "redis_n": 100,
    "redis_rounds": 2,
    "waiters_tasks": 100,
    "waiters_s": 0.2,
    "waiters_rounds": 5,
    "adaptive_quick": True,
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def environment() -> Dict[str, Any]:
    ok, ver = cases.slidewin_available()
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpus": os.cpu_count(),
        "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)(),
        "switch_interval_s": sys.getswitchinterval(),
        "loadavg_at_start": _loadavg(),
        "slidewin": ver if ok else f"unavailable ({ver})",
        "peers": cases.peer_versions(),
    }
    try:
        import subprocess

        env["git"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip()
        # a run with uncommitted changes is not the commit it names: render.py refuses it
        # (the results themselves and the plots, which a run rewrites, do not count)
        status = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--",
                                 ".", ":!benchmarks/results", ":!docs/*.png"],
                                capture_output=True, text=True).stdout
        env["git_dirty"] = bool(status.strip())
    except Exception:
        pass
    return env


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="tiny iteration counts: a smoke run for CI (< 60 s); "
                         "writes results/quick.* and draws plots into results/")
    ap.add_argument("--only", metavar="SECTION[,SECTION]",
                    help="run only these sections: " + ", ".join(SECTIONS))
    ap.add_argument("--out", metavar="PREFIX",
                    help="write PREFIX.json and PREFIX.md (default: "
                         "benchmarks/results/latest, or .../quick with --quick)")
    ap.add_argument("--no-plots", action="store_true", help="do not draw the PNG plots")
    args = ap.parse_args(argv)

    only = SECTIONS
    if args.only:
        only = [s.strip() for s in args.only.split(",") if s.strip()]
        bad = [s for s in only if s not in SECTIONS + ["plots"]]
        if bad:
            ap.error(f"unknown section {bad[0]!r}; choose from {', '.join(SECTIONS)}, plots")
    cfg = dict(QUICK if args.quick else FULL)
    prefix = args.out or os.path.join(HERE, "results", "quick" if args.quick else "latest")
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)

    env = environment()
    log(f"slidewin {env['slidewin']} on Python {env['python']}, {env['cpus']} CPUs"
        + (" [quick]" if args.quick else ""))
    ok, why = cases.slidewin_available()

    results: Dict[str, Any] = {"environment": env, "quick": args.quick, "config": cfg,
                               "sections": {}}
    # --only in a full run: keep the other sections of the previous results file
    if args.only and not args.quick and os.path.exists(prefix + ".json"):
        try:
            with open(prefix + ".json") as f:
                prev = json.load(f)
            if not prev.get("quick"):
                results["sections"] = prev.get("sections", {})
        except (OSError, ValueError):
            pass

    mods = modules()
    t_all = time.perf_counter()
    for name in SECTIONS:
        if name not in only:
            continue
        log(f"[{name}]")
        t0 = time.perf_counter()
        load_before = _loadavg()
        if not ok:
            sec = {"skipped": f"slidewin is not importable: {why}"}
        else:
            sec = mods[name].run(cfg, log)
        sec["seconds"] = round(time.perf_counter() - t0, 1)
        sec["environment"] = {k: env.get(k) for k in ("date", "python", "slidewin", "git")}
        sec["environment"]["loadavg_before"] = load_before
        sec["environment"]["loadavg"] = _loadavg()
        results["sections"][name] = sec
        if sec.get("skipped"):
            print(f"\n== {name}: skipped: {sec['skipped']}")
        else:
            print(f"\n== {name} ({sec['seconds']} s)\n")
            print(mods[name].render_text(sec))
        sys.stdout.flush()

    env["loadavg_at_end"] = _loadavg()
    with open(prefix + ".json", "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(prefix + ".md", "w") as f:
        f.write(render_md(results))
    log(f"wrote {os.path.relpath(prefix + '.json')} and .md "
        f"({time.perf_counter() - t_all:.0f} s)")

    if not args.quick and not args.out:
        # the README and docs/ take their figures from this file: rewrite them (a run of
        # some sections only leaves a mixed file, which render.py refuses: say so)
        import render

        try:
            render.one_run(results)
        except render.NotOneRun as e:
            log(f"README and docs/ not rewritten: {e}")
        else:
            render.main([])

    if not args.no_plots and ("accuracy" in only or "plots" in only):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            log("matplotlib is not installed: no plots (pip install -e .[bench])")
        else:
            import plots

            outdir = os.path.join(HERE, "results", "quick-plots") if args.quick \
                else os.path.join(ROOT, "docs")
            for p in plots.draw(results, outdir, log):
                log(f"wrote {os.path.relpath(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
