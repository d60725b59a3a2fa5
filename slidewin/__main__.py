"""`python -m slidewin`: a simulated workload through a Limiter and its Metric, one table
row per second.

A service receives bursts of requests (about --load per second, with spikes), a Limiter of
--qps admits them, and every admitted request records a response time. Each row shows what
the sliding window saw during that second. Time is simulated with `now_ns`, so the numbers
are exact and repeatable (--seed); rows appear once a second unless --fast.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import List, Optional

from . import Event, Limiter, Metric

NS = 1_000_000_000


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["top"]:
        from . import _top

        return _top.main(args[1:])
    p = argparse.ArgumentParser(
        prog="python -m slidewin",
        description=__doc__.splitlines()[0],
        epilog="python -m slidewin top [--once] [--folder DIR] [--interval S]: every shared "
               "region of the host, live (see python -m slidewin top --help)",
    )
    p.add_argument("--seconds", type=int, default=8, help="seconds to simulate (default 8)")
    p.add_argument("--qps", type=float, default=100.0, help="the limiter's qps (default 100)")
    p.add_argument("--load", type=float, default=150.0, help="mean offered load per second")
    p.add_argument("--behavior", default="reject",
                   choices=["reject", "warm_up", "throttle", "warm_up_throttle"],
                   help="the limiter's behavior (default reject)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--fast", action="store_true", help="print at once instead of once a second")
    a = p.parse_args(args)
    if a.seconds < 1 or a.load <= 0 or a.qps < 0:
        p.error("--seconds must be >= 1, --load > 0 and --qps >= 0")

    rng = random.Random(a.seed)
    try:
        lim = Limiter(qps=a.qps, behavior=a.behavior, warm_up_s=5)
    except ValueError as e:
        p.error(str(e))
    per_second = Metric(60_000, 60)  # one bucket per second, for the table
    start = 10 * NS  # any monotonic origin works: time is passed explicitly
    print(f"slidewin demo: {lim!r}, offered ~{a.load:.0f}/s with spikes, seed {a.seed}")
    print(f"{'second':>6} {'offered':>8} {'pass':>6} {'block':>6} {'avg_rt':>7} {'min_rt':>7}"
          f" {'window_pass_qps':>16}")
    wall = time.monotonic()
    for sec in range(a.seconds):
        spike = 3.0 if sec % 4 == 2 else 1.0
        n_req = max(0, int(rng.gauss(a.load * spike, a.load * 0.1)))
        for off in sorted(rng.randrange(NS) for _ in range(n_req)):
            now = start + sec * NS + off
            wait = lim.reserve(now_ns=now)
            if wait is None:
                per_second.add(Event.BLOCK, now_ns=now)
                continue
            per_second.add(Event.PASS, now_ns=now)
            # response time: the queueing wait plus the work; recorded at the decision
            # time (a window clamps times behind its newest bucket, so feed it in order)
            rt = wait // 1_000_000 + max(1, int(rng.expovariate(1 / 20)))
            per_second.add(Event.SUCCESS, now_ns=now)
            per_second.add_rt(rt, now_ns=now)
        end = start + (sec + 1) * NS - 1
        b = per_second.buckets(now_ns=end)[-1]
        passed, blocked, ok, rt_sum = (b.counts[e] for e in (Event.PASS, Event.BLOCK,
                                                             Event.SUCCESS, Event.RT))
        avg = rt_sum / ok if ok else 0.0
        stats = lim.stats(now_ns=end)
        print(f"{sec:>6} {n_req:>8} {passed:>6} {blocked:>6} {avg:>7.1f} {b.min_rt:>7}"
              f" {stats.pass_qps:>16.1f}", flush=True)
        if not a.fast and sec + 1 < a.seconds:
            time.sleep(max(0.0, wall + sec + 1 - time.monotonic()))
    print(f"minute window totals: pass {per_second.sum('pass', now_ns=end)}, "
          f"block {per_second.sum('block', now_ns=end)}")
    return 0


def _run() -> int:
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # `... | head`: SIGPIPE's exit code, and no second failing flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


if __name__ == "__main__":
    sys.exit(_run())
