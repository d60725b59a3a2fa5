"""Draw the README plots from benchmark results (needs matplotlib).

    python benchmarks/plots.py [benchmarks/results/latest.json] [--out docs]

- ``warmup.png``: admitted per second from cold (warm_up, warm_up_throttle) vs docs/design.md;
- ``throttle.png``: pacing on the real clock, interval between admissions;
- ``boundary.png``: sliding vs fixed window at a boundary burst;
- ``adaptive.png`` (drawn by bench_adaptive.py): AdaptiveLimiter's limit and goodput.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True,
                         "grid.alpha": 0.3, "axes.spines.top": False,
                         "axes.spines.right": False})
    return plt


def warmup(acc: Dict[str, Any], path: str) -> None:
    plt = _plt()
    w = acc["warmup"]
    cfg = w["config"]
    n = len(w["warm_up"])
    xs = list(range(n))
    exp = w["expected_first"] + [cfg["qps"]] * (n - len(w["expected_first"]))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar([x - 0.2 for x in xs], w["warm_up"], width=0.4, label="warm_up", color="#3b7dd8")
    ax.bar([x + 0.2 for x in xs], w["warm_up_throttle"], width=0.4,
           label="warm_up_throttle", color="#8fb8ee")
    ax.plot(xs, exp, "k_", markersize=14, mew=2, label="expected (Sentinel, docs/design.md)")
    ax.axhline(cfg["qps"], color="grey", ls="--", lw=1, label=f"qps = {cfg['qps']}")
    ax.axhline(cfg["qps"] / cfg["cold_factor"], color="grey", ls=":", lw=1,
               label=f"cold rate: qps / cold_factor = {cfg['qps'] / cfg['cold_factor']:.2f}")
    ax.set_xticks(xs)
    ax.set_xlabel("second since start (limiter starts cold)")
    ax.set_ylabel("admitted in that second")
    ax.set_title(f"Warm-up from cold: qps={cfg['qps']}, warm_up_s={cfg['warm_up_s']}, "
                 f"cold_factor={cfg['cold_factor']}, demand {cfg['demand_per_s']}/s")
    ax.set_ylim(0, cfg["qps"] * 1.6)
    ax.legend(loc="upper left", frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def throttle(acc: Dict[str, Any], path: str) -> None:
    plt = _plt()
    rates = sorted({r["qps"] for r in acc["throttle"]})
    fig, axes = plt.subplots(1, len(rates), figsize=(10, 3.4))
    for ax, q in zip(axes, rates):
        cost_us = 1e6 / q
        for method, color in (("acquire", "#d8703b"), ("reserve+spin", "#3b7dd8"),
                              ("acquire x4 threads", "#5aa469")):
            ys = acc["throttle_series"].get(f"{q}/{method}")
            if not ys:
                continue
            r = next(r for r in acc["throttle"] if r["qps"] == q and r["method"] == method)
            ax.plot(range(len(ys)), ys, ".", ms=2, color=color, alpha=0.7,
                    label=f"{method}: {r['achieved_qps']:,.1f}/s ({r['rate_error_pct']:+.2f}%)")
        ax.axhline(cost_us, color="k", lw=1, ls="--")
        ax.set_title(f"throttle qps={q:,} (1/qps = {cost_us:,.0f} µs)")
        ax.set_xlabel("admission (subsampled)")
        ax.set_ylim(0, cost_us * 2.5)
        ax.legend(loc="upper right", frameon=False, fontsize=7, markerscale=4)
    axes[0].set_ylabel("interval since previous admission, µs")
    fig.suptitle("Throttle pacing on the real clock", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def boundary(acc: Dict[str, Any], path: str) -> None:
    plt = _plt()
    tl = acc["boundary"]["timeline"]
    limit = acc["boundary"]["limit_per_s"]
    names = list(tl["by"])
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    end = max(tl["demand_ms"]) + 300
    grid = [x * 5.0 for x in range(int(700 / 5), int(end / 5))]
    colors = ["#d8703b", "#3b7dd8", "#5aa469"]
    styles = [dict(lw=2), dict(lw=3, alpha=0.6), dict(lw=1.2, ls="--")]
    for name, color, style in zip(names, colors, styles):
        adm = tl["by"][name]["admitted_ms"]
        # admitted in the trailing second at each instant
        ys = [sum(1 for a in adm if t - 1000 < a <= t) for t in grid]
        ax.step(grid, ys, where="post", color=color, **style,
                label=f"{name}: max {tl['by'][name]['max_in_any_1s']} in any 1 s")
    for d in tl["demand_ms"]:
        ax.axvline(d, color="grey", lw=0.6, ls=":")
    ax.axhline(limit, color="k", lw=1, ls="--")
    ax.text(grid[0], limit + 0.3, f"limit {limit}/s", va="bottom")
    ax.set_xlabel(f"time, ms (dotted: a burst of {tl['burst']} requests)")
    ax.set_ylabel("admitted in the trailing 1 s")
    ax.set_title("Boundary bursts: sliding window vs fixed window")
    ax.set_ylim(0, limit * 2.4)
    ax.legend(loc="upper right", frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def adaptive(res: Dict[str, Any], path: str) -> None:
    """AdaptiveLimiter (benchmarks/bench_adaptive.py): the learned limit against the
    capacity, and the goodput of each limiter, per second of virtual time."""
    plt = _plt()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 5.6), sharex=True)
    caps_t, caps = [], []
    t = 0.0
    for seconds, cap in res["phases"]:
        caps_t += [t, t + seconds]
        caps += [cap, cap]
        t += seconds
    top.plot(caps_t, caps, color="k", lw=1.5, label="capacity C (calls at full speed)")
    colors = {"AdaptiveLimiter bbr": "#d8703b", "AdaptiveLimiter gradient": "#3b7dd8"}
    for name, series in res["limits"].items():
        xs = [x for x, _ in series]
        ys = [y for _, y in series]
        top.step(xs, ys, where="post", color=colors.get(name), lw=1.2,
                 label=name.replace("AdaptiveLimiter ", "limit: "))
    top.set_ylabel("concurrency limit")
    top.set_ylim(0, max(caps) * 3.5)
    top.legend(loc="upper left", frameon=False, fontsize=8, ncol=3)
    top.set_title("AdaptiveLimiter in a simulated overload (1.5x, then 3x, then 1.5x the "
                  "capacity)")
    styles = {"no limit": dict(color="grey", ls=":"),
              "fixed 40 (right)": dict(color="k", lw=1),
              "fixed 160 (too high)": dict(color="#5aa469", ls="--"),
              "fixed 20 (too low)": dict(color="#9b59b6", ls="-."),
              "AdaptiveLimiter bbr": dict(color="#d8703b"),
              "AdaptiveLimiter gradient": dict(color="#3b7dd8", lw=2, alpha=0.8)}
    for name, ys in res["goodput_series"].items():
        bottom.plot([i + 0.5 for i in range(len(ys))], ys, label=name, **styles.get(name, {}))
    bottom.set_ylabel("goodput per s (within the 1 s timeout)")
    bottom.set_xlabel("virtual time, s (capacity 40 -> 20 at 30 s -> 40 at 60 s)")
    bottom.legend(loc="lower left", frameon=False, fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


PLOTS: Dict[str, Callable[[Dict[str, Any], str], None]] = {
    "warmup.png": warmup, "throttle.png": throttle, "boundary.png": boundary,
}


def draw(results: Dict[str, Any], outdir: str, log=print) -> List[str]:
    acc = results.get("sections", {}).get("accuracy")
    if not acc or acc.get("skipped"):
        log("plots: no accuracy results to draw from")
        return []
    os.makedirs(outdir, exist_ok=True)
    out = []
    for name, fn in PLOTS.items():
        p = os.path.join(outdir, name)
        fn(acc, p)
        out.append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="draw the plots from a results file")
    ap.add_argument("results", nargs="?", default=os.path.join(HERE, "results", "latest.json"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "docs"))
    a = ap.parse_args(argv)
    with open(a.results) as f:
        res = json.load(f)
    for p in draw(res, a.out):
        print("wrote", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
