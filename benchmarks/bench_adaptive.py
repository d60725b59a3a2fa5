"""AdaptiveLimiter: the benchmark that decides, against no limit and fixed limits.

    python benchmarks/bench_adaptive.py [--quick] [--no-plot] [--realtime]

**A discrete-event simulation in virtual time that drives the real limiters.** Every
decision is the real C core's (``try_acquire(now_ns=...)``, ``release(rt_ms=...,
now_ns=...)``), at the simulated instant; nothing sleeps. So a run is fast (seconds for
minutes of traffic), deterministic (seeded: the same numbers on every machine, however
loaded) and exact (latencies are the model's, not the scheduler's).

The backend is processor sharing with a capacity of C calls: n calls in flight each get
min(1, C / n) of a server, so a call's latency is its work x max(1, n / C) while n stays
put: below C calls run at full speed, above it every call slows down. Work per call is
uniform in [10, 30] ms (mean 20 ms). Clients are open-loop: Poisson arrivals at 1.5x the
capacity (C / 20 ms x 1.5), more than the backend can serve; a refused call is answered at
once (a 503) and not retried; a client gives up after 1 s, so an admitted call that takes
longer is not goodput (the backend still spends the work on it: it does not know).

Phases: C = 40 for 30 s, then C = 20 (capacity halves) for 30 s, then C = 40 again for
30 s; arrivals stay at 1.5x the first capacity (3000/s) throughout, so the middle phase
is 3x overloaded. Limiters: none; fixed concurrency limits too low (C/2 = 20), right
(C = 40) and too high (4C = 160) for the first phase; AdaptiveLimiter "bbr" and
"gradient" with their defaults.

Reported per limiter and phase: goodput (calls answered within the 1 s timeout, per s),
p50 and p99 latency of the admitted calls, refusals per s; and for each change, the time
to follow it: from the change until the first second from which every 1 s bin has a
goodput >= 90 % of the new capacity and a p99 <= 2x the p99 of the right fixed limit in
the first phase (the targets: p99 within 2x of the right fixed limit's,
goodput >= 90 % of it, following a change within 5 s).

``--realtime`` adds a short confirmation on the real clock: threads as clients of a
backend that sleeps its (processor-sharing) latency, gradient vs the right fixed limit.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MS = 1_000_000
WORK_MS = (10.0, 30.0)      # uniform work per call
TIMEOUT_MS = 1000.0         # a client gives up after this
C0 = 40                     # the first phase's capacity
LOAD = 1.5                  # arrivals per s = LOAD x C0 / mean work
PHASES: List[Tuple[float, int]] = [(30.0, 40), (30.0, 20), (30.0, 40)]
SEED = 23


class NoLimit:
    limit = None

    def try_acquire(self, now_ns: int) -> bool:
        return True

    def release(self, rt_ms: float, now_ns: int) -> None:
        pass


class Fixed:
    def __init__(self, limit: int) -> None:
        import slidewin

        self.lim = slidewin.Limiter(concurrency=limit)
        self.limit = limit

    def try_acquire(self, now_ns: int) -> bool:
        return self.lim.try_acquire(now_ns=now_ns)

    def release(self, rt_ms: float, now_ns: int) -> None:
        self.lim.release()


class Adaptive:
    def __init__(self, algorithm: str) -> None:
        import slidewin

        self.lim = slidewin.AdaptiveLimiter(algorithm=algorithm)

    @property
    def limit(self) -> int:
        return self.lim.limit

    def try_acquire(self, now_ns: int) -> bool:
        return self.lim.try_acquire(now_ns=now_ns)

    def release(self, rt_ms: float, now_ns: int) -> None:
        self.lim.release(rt_ms=rt_ms, now_ns=now_ns)


def simulate(guard: Any, phases: List[Tuple[float, int]], seed: int = SEED) -> Dict[str, Any]:
    """Run the phases; returns per-1 s bins (good, admitted, refused, latencies) and the
    limit every 100 ms."""
    rng = random.Random(seed)
    rate_per_ms = LOAD * C0 / (sum(WORK_MS) / 2)
    total_ms = sum(p[0] for p in phases) * 1000.0
    changes = []  # (time, capacity)
    acc = 0.0
    for seconds, cap in phases:
        changes.append((acc, cap))
        acc += seconds * 1000.0
    n_bins = int(total_ms // 1000)
    bins = [{"good": 0, "late": 0, "refused": 0, "lat": []} for _ in range(n_bins)]
    limits: List[Tuple[float, Optional[int]]] = []
    t = 0.0
    served = 0.0  # attained service per call since the start (ms of work)
    running: List[Tuple[float, float]] = []  # heap of (served at finish, start time)
    cap = changes[0][1]
    ci = 1
    t_arr = rng.expovariate(rate_per_ms)
    next_sample = 0.0
    while True:
        n = len(running)
        share = min(1.0, cap / n) if n else 1.0
        t_done = t + (running[0][0] - served) / share if n else math.inf
        t_cap = changes[ci][0] if ci < len(changes) else math.inf
        t_next = min(t_done, t_arr, t_cap, total_ms)
        if n:
            served += (t_next - t) * share
        t = t_next
        if t >= total_ms:
            break
        while t >= next_sample:
            limits.append((next_sample / 1000.0, guard.limit))
            next_sample += 100.0
        now_ns = int(t * MS)
        if t == t_cap:
            cap = changes[ci][1]
            ci += 1
        elif t == t_done:
            _, started = heapq.heappop(running)
            rt = t - started
            guard.release(rt_ms=rt, now_ns=now_ns)
            b = bins[min(int(t // 1000), n_bins - 1)]
            b["lat"].append(rt)
            if rt <= TIMEOUT_MS:
                b["good"] += 1
            else:
                b["late"] += 1
        else:
            work = rng.uniform(*WORK_MS)
            if guard.try_acquire(now_ns):
                heapq.heappush(running, (served + work, t))
            else:
                bins[int(t // 1000)]["refused"] += 1
            t_arr = t + rng.expovariate(rate_per_ms)
    return {"bins": bins, "limits": limits}


# ------------------------------------------------ a backend that keeps up, and one 10x slower

# (label, arrivals per s, [(probability, response time ms)]): a backend with no capacity
# limit, each call taking its own sampled time whatever the load (a cache in front of a
# database; a service with rare outliers of seconds)
KEEPS_UP: List[Tuple[str, float, List[Tuple[float, float]]]] = [
    ("half 1 ms, half 200 ms, 1,000/s", 1000.0, [(0.5, 1.0), (0.5, 200.0)]),
    ("90% 1 ms, 10% 100 ms, 2,000/s", 2000.0, [(0.9, 1.0), (0.1, 100.0)]),
    ("99% 20 ms, 1% 30 s, 500/s", 500.0, [(0.99, 20.0), (0.01, 30000.0)]),
]
KEEPS_UP_SECONDS = 60.0
KEEPS_UP_SEEDS = (1, 2, 3)


def keeps_up(guard: Any, rate_per_s: float, mix: List[Tuple[float, float]],
             seconds: float = KEEPS_UP_SECONDS, seed: int = 1) -> Dict[str, Any]:
    """Open-loop Poisson arrivals at ``rate_per_s`` against a backend with no capacity
    limit: an admitted call takes a response time drawn from ``mix`` ([(probability, ms)]),
    whatever else is in flight. Virtual time through ``try_acquire(now_ns=)`` and
    ``release(rt_ms=, now_ns=)``, seeded. Returns the refused fraction over the second half
    of the run (warmed up), over the whole run, and the limit at the end."""
    rng = random.Random(seed)
    t0 = 10**12  # ns: any fixed origin
    end = seconds * 1000.0
    half = end / 2
    cum: List[Tuple[float, float]] = []
    acc = 0.0
    for p, rt in mix:
        acc += p
        cum.append((acc, rt))
    running: List[Tuple[float, float]] = []  # heap of (finish ms, response time ms)
    counts = {"admitted": 0, "refused": 0, "admitted_late": 0, "refused_late": 0}
    t = rng.expovariate(rate_per_s / 1000.0)
    while t < end:
        while running and running[0][0] <= t:
            done, rt = heapq.heappop(running)
            guard.release(rt_ms=rt, now_ns=t0 + int(done * MS))
        u = rng.random()
        rt = next((r for c, r in cum if u < c), cum[-1][1])
        late = "_late" if t >= half else ""
        if guard.try_acquire(now_ns=t0 + int(t * MS)):
            heapq.heappush(running, (t + rt, rt))
            counts["admitted" + late] += 1
        else:
            counts["refused" + late] += 1
        t += rng.expovariate(rate_per_s / 1000.0)
    late_n = counts["admitted_late"] + counts["refused_late"]
    all_n = late_n + counts["admitted"] + counts["refused"]
    return {"refused_late": counts["refused_late"] / max(1, late_n),
            "refused_all": (counts["refused"] + counts["refused_late"]) / max(1, all_n),
            "limit_end": guard.limit}


SLOWER_CAP = 40            # calls the backend serves at full speed, before and after
SLOWER_FACTOR = 10.0       # the work of every call from the change on
SLOWER_AT_S = 20           # when
SLOWER_SECONDS = 40


def slower(guard: Any, seconds: int = SLOWER_SECONDS, at_s: int = SLOWER_AT_S,
           cap: int = SLOWER_CAP, factor: float = SLOWER_FACTOR, seed: int = SEED) -> Dict[str, Any]:
    """A dependency becomes ``factor`` x slower at the same concurrency capacity: the
    processor-sharing backend of the overload benchmark (capacity ``cap``, work uniform in
    10-30 ms, Poisson arrivals at 1.5x the capacity, 1 s client timeout), whose work per
    call is multiplied by ``factor`` from ``at_s`` on (the capacity in calls per s falls
    ``factor``-fold). Returns the goodput per 1 s bin and the limit every 100 ms."""
    rng = random.Random(seed)
    rate_per_ms = LOAD * cap / (sum(WORK_MS) / 2)
    total = seconds * 1000.0
    good = [0] * seconds
    limits: List[Tuple[float, Optional[int]]] = []
    t = served = 0.0
    running: List[Tuple[float, float]] = []
    t_arr = rng.expovariate(rate_per_ms)
    next_sample = 0.0
    while True:
        n = len(running)
        share = min(1.0, cap / n) if n else 1.0
        t_done = t + (running[0][0] - served) / share if n else math.inf
        t_next = min(t_done, t_arr, total)
        if n:
            served += (t_next - t) * share
        t = t_next
        if t >= total:
            break
        while t >= next_sample:
            limits.append((next_sample / 1000.0, guard.limit))
            next_sample += 100.0
        if t == t_done:
            _, started = heapq.heappop(running)
            rt = t - started
            guard.release(rt_ms=rt, now_ns=int(t * MS))
            if rt <= TIMEOUT_MS:
                good[int(t // 1000)] += 1
        else:
            work = rng.uniform(*WORK_MS) * (factor if t >= at_s * 1000.0 else 1.0)
            if guard.try_acquire(now_ns=int(t * MS)):
                heapq.heappush(running, (served + work, t))
            t_arr = t + rng.expovariate(rate_per_ms)
    return {"good": good, "limits": limits}


def slower_summary(run: Dict[str, Any], min_limit: int = 1, at_s: int = SLOWER_AT_S,
                   cap: int = SLOWER_CAP, factor: float = SLOWER_FACTOR) -> Dict[str, Any]:
    """Goodput per s before and after the change (the last 10 s), the time to follow it
    (from the change until the first 1 s bin from which the mean goodput is >= 90 % of the
    new capacity's and no bin is under 75 %: a probe's dip allowed, not a long one) and the
    seconds spent at ``min_limit`` after it."""
    good = run["good"]
    new_cap = cap / (sum(WORK_MS) / 2 * factor) * 1000.0
    after = good[at_s:]
    follow = next((float(i) for i in range(len(after))
                   if sum(after[i:]) >= 0.9 * new_cap * len(after[i:])
                   and all(g >= 0.75 * new_cap for g in after[i:])), None)
    at_min = sum(0.1 for x, l in run["limits"] if x >= at_s and l is not None and l <= min_limit)
    before = good[max(1, at_s - 10):at_s]  # the first second is the cold start
    return {"before": sum(before) / max(1, len(before)), "after": sum(good[-10:]) / 10.0,
            "follow_s": follow, "at_min_limit_s": round(at_min, 1)}


def pct(xs: List[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(math.ceil(q * len(s))) - 1)]


def summarize(run: Dict[str, Any], start_s: int, end_s: int) -> Dict[str, float]:
    bins = run["bins"][start_s:end_s]
    lat = [x for b in bins for x in b["lat"]]
    secs = max(1, end_s - start_s)
    return {"goodput": sum(b["good"] for b in bins) / secs,
            "p50": pct(lat, 0.50), "p99": pct(lat, 0.99),
            "refused": sum(b["refused"] for b in bins) / secs}


def follow_time(run: Dict[str, Any], change_s: int, end_s: int, cap: int,
                p99_ref: float) -> Optional[float]:
    """Seconds from the change until the first 1 s bin from which every bin to the phase's
    end meets both targets (goodput >= 90 % of the capacity's, p99 <= 2x the reference);
    None when it never does."""
    good_ref = cap / (sum(WORK_MS) / 2) * 1000.0
    ok = []
    for b in run["bins"][change_s:end_s]:
        ok.append(b["good"] >= 0.9 * good_ref and bool(b["lat"]) and pct(b["lat"], 0.99) <= 2 * p99_ref)
    for i in range(len(ok)):
        if all(ok[i:]):
            return float(i)
    return None


def run_all(quick: bool = False) -> Dict[str, Any]:
    phases = [(s / 3 if quick else s, c) for s, c in PHASES]
    guards = {
        "no limit": NoLimit(),
        "fixed 20 (too low)": Fixed(20),
        "fixed 40 (right)": Fixed(40),
        "fixed 160 (too high)": Fixed(160),
        "AdaptiveLimiter bbr": Adaptive("bbr"),
        "AdaptiveLimiter gradient": Adaptive("gradient"),
    }
    edges = [0]
    for s, _ in phases:
        edges.append(edges[-1] + int(s))
    runs: Dict[str, Any] = {}
    wall: Dict[str, float] = {}
    for name, guard in guards.items():
        t0 = time.perf_counter()
        runs[name] = simulate(guard, phases)
        wall[name] = time.perf_counter() - t0
    ref = summarize(runs["fixed 40 (right)"], 0, edges[1])
    table = []
    for name, run in runs.items():
        row: Dict[str, Any] = {"limiter": name, "phases": []}
        for i, (_, cap) in enumerate(phases):
            # steady state of each phase: its last two thirds
            start = edges[i] + (edges[i + 1] - edges[i]) // 3
            row["phases"].append(dict(summarize(run, start, edges[i + 1]), capacity=cap))
        row["follow_halved_s"] = follow_time(run, edges[1], edges[2], phases[1][1], ref["p99"])
        row["follow_doubled_s"] = follow_time(run, edges[2], edges[3], phases[2][1], ref["p99"])
        row["sim_wall_s"] = round(wall[name], 2)
        table.append(row)
    keeps = []
    for label, rate, mix in KEEPS_UP:
        row = {"workload": label}
        for algorithm in ("bbr", "gradient"):
            runs_k = [keeps_up(Adaptive(algorithm), rate, mix, seed=seed)
                      for seed in KEEPS_UP_SEEDS]
            row[algorithm] = [r["refused_late"] for r in runs_k]
            row[algorithm + "_limit"] = [r["limit_end"] for r in runs_k]
        keeps.append(row)
    slow = {}
    for name, guard in (("fixed 40", Fixed(SLOWER_CAP)), ("AdaptiveLimiter bbr", Adaptive("bbr")),
                        ("AdaptiveLimiter gradient", Adaptive("gradient"))):
        slow[name] = slower_summary(slower(guard))
    return {"phases": phases, "edges": edges, "reference": ref, "table": table,
            "keeps_up": keeps, "slower": slow,
            "limits": {k: v["limits"] for k, v in runs.items() if "Adaptive" in k},
            "goodput_series": {k: [b["good"] for b in v["bins"]] for k, v in runs.items()},
            "config": {"work_ms": WORK_MS, "timeout_ms": TIMEOUT_MS, "load": LOAD,
                       "arrivals_per_s": LOAD * C0 / (sum(WORK_MS) / 2) * 1000, "seed": SEED}}


def verdicts(res: Dict[str, Any]) -> List[str]:
    ref = res["table"][[r["limiter"] for r in res["table"]].index("fixed 40 (right)")]
    out = []
    for row in res["table"]:
        if "Adaptive" not in row["limiter"]:
            continue
        checks = []
        for i, ph in enumerate(row["phases"]):
            # the right limit's steady state (C = 40), scaled to the phase's capacity: the
            # right limit for C = 20 is 20, with the same latencies and half the goodput
            rp = ref["phases"][0]
            good_ok = ph["goodput"] >= 0.9 * rp["goodput"] * ph["capacity"] / rp["capacity"]
            p99_ok = ph["p99"] <= 2 * rp["p99"]
            checks.append(good_ok and p99_ok)
        follow = [row["follow_halved_s"], row["follow_doubled_s"]]
        f_ok = all(f is not None and f <= 5 for f in follow)
        out.append("%s: steady-state targets %s in phases 1-3; follows the changes in %s s -> %s"
                   % (row["limiter"], ["met" if c else "MISSED" for c in checks],
                      [("never" if f is None else "%g" % f) for f in follow],
                      "MEETS the targets" if all(checks) and f_ok else "does NOT meet the targets"))
    return out


def _span_pct(xs: List[float]) -> str:
    lo, hi = min(xs) * 100, max(xs) * 100
    return "%.1f%%" % lo if round(lo, 1) == round(hi, 1) else "%.1f-%.1f%%" % (lo, hi)


def markdown(res: Dict[str, Any]) -> str:
    cfg = res["config"]
    lines = [
        "# AdaptiveLimiter vs fixed limits (benchmarks/bench_adaptive.py)",
        "",
        "Discrete-event simulation in virtual time driving the real limiters (explicit "
        "`now_ns`): deterministic, seed %d. Processor-sharing backend, work uniform in "
        "[%g, %g] ms, open-loop Poisson arrivals at %.0f/s (1.5x the first capacity), "
        "client timeout %g ms, no retries. Capacity C = %s over phases of %s s. Each phase's "
        "numbers cover its last two thirds (steady state)."
        % (cfg["seed"], cfg["work_ms"][0], cfg["work_ms"][1], cfg["arrivals_per_s"],
           cfg["timeout_ms"], " -> ".join(str(c) for _, c in res["phases"]),
           "/".join("%g" % s for s, _ in res["phases"])),
        "",
        "| limiter | C | goodput/s | p50 ms | p99 ms | refused/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in res["table"]:
        for ph in row["phases"]:
            lines.append("| %s | %d | %.0f | %.1f | %.1f | %.0f |" % (
                row["limiter"], ph["capacity"], ph["goodput"], ph["p50"], ph["p99"],
                ph["refused"]))
    lines += ["", "Targets, per phase: goodput >= 90 % of the right fixed limit's "
              "(scaled to the phase's capacity), p99 <= 2x its p99.", "",
              "Time to follow a change (s; every later 1 s bin at >= 90 %% of the new "
              "capacity's goodput and p99 <= 2x the right fixed limit's %.1f ms):"
              % res["reference"]["p99"], "",
              "| limiter | C 40 -> 20 | C 20 -> 40 |", "| --- | ---: | ---: |"]
    for row in res["table"]:
        f = [row["follow_halved_s"], row["follow_doubled_s"]]
        lines.append("| %s | %s | %s |" % (row["limiter"], *[
            "never" if x is None else "%g" % x for x in f]))
    lines += ["", "Verdicts:", ""] + ["- " + v for v in verdicts(res)]
    if res.get("keeps_up"):
        lines += ["", "A backend that keeps up (no capacity limit: each call takes its own "
                  "time whatever the load; Poisson arrivals, %g s, seeds %s): refused over the "
                  "second half of each run (target: <= 1 %%):" % (
                      KEEPS_UP_SECONDS, ", ".join(str(x) for x in KEEPS_UP_SEEDS)), "",
                  "| workload | bbr refused | gradient refused |", "| --- | ---: | ---: |"]
        for row in res["keeps_up"]:
            lines.append("| %s | %s | %s |" % (row["workload"], _span_pct(row["bbr"]),
                                                _span_pct(row["gradient"])))
    if res.get("slower"):
        lines += ["", "A dependency 10x slower at the same concurrency capacity (%d in flight; "
                  "work x%g at t = %d s; %d s): goodput per s before and over the last 10 s, "
                  "time to follow (from then on a mean goodput >= 90 %% of the new "
                  "capacity's, no 1 s bin under 75 %%), and time at the limit of 1 after "
                  "the change:" % (
                      SLOWER_CAP, SLOWER_FACTOR, SLOWER_AT_S, SLOWER_SECONDS), "",
                  "| limiter | goodput/s before | after | follows in | at limit 1 |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for name, r in res["slower"].items():
            lines.append("| %s | %.0f | %.0f | %s | %.1f s |" % (
                name, r["before"], r["after"],
                "never" if r["follow_s"] is None else "%g s" % r["follow_s"],
                r["at_min_limit_s"]))
    if res.get("realtime"):
        lines += ["", "Real-clock confirmation (threads, %s):" % res["realtime"]["what"], ""]
        for k, v in res["realtime"]["rows"].items():
            lines.append("- %s: %s" % (k, v))
    return "\n".join(lines) + "\n"


def plot(res: Dict[str, Any], path: str) -> None:
    import plots

    plots.adaptive(res, path)


# ---------------------------------------------------------------- real-clock confirmation

def realtime(seconds: float = 6.0) -> Dict[str, Any]:
    """Threads as open-loop clients of a backend that sleeps its processor-sharing latency
    (the latency of a call admitted with n in flight: work x max(1, n / C)), C = 8, work
    20 ms, 1.5x the capacity. Short and noisy (the machine is shared): a sanity check that
    the real clock agrees with the simulation, not a measurement to quote."""
    import threading

    import slidewin

    cap, work = 8, 0.020
    rate = 1.5 * cap / work
    rows = {}
    for name, guard in (("fixed 8 (right)", slidewin.Limiter(concurrency=cap)),
                        ("gradient", slidewin.AdaptiveLimiter(algorithm="gradient")),
                        ("no limit", None)):
        lock = threading.Lock()
        state = {"n": 0, "good": 0, "refused": 0, "lat": []}

        def call() -> None:
            t0 = time.monotonic()
            try:
                ctx = guard.entry() if guard is not None else None
                if ctx is not None:
                    ctx.__enter__()
            except slidewin.BlockedError:
                with lock:
                    state["refused"] += 1
                return
            with lock:
                state["n"] += 1
                n = state["n"]
            time.sleep(work * max(1.0, n / cap))
            with lock:
                state["n"] -= 1
            if ctx is not None:
                ctx.__exit__(None, None, None)
            rt = time.monotonic() - t0
            with lock:
                state["lat"].append(rt * 1000)
                state["good"] += rt <= 1.0

        rng = random.Random(SEED)
        end = time.monotonic() + seconds
        threads = []
        nxt = time.monotonic()
        while nxt < end:
            nxt += rng.expovariate(rate)
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            th = threading.Thread(target=call, daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join(5)
        rows[name] = "goodput %.0f/s, p50 %.1f ms, p99 %.1f ms, refused %.0f/s" % (
            state["good"] / seconds, pct(state["lat"], 0.5), pct(state["lat"], 0.99),
            state["refused"] / seconds)
        if isinstance(guard, slidewin.AdaptiveLimiter):
            rows[name] += ", limit at the end %d" % guard.limit
    return {"what": "C = 8, work 20 ms, 1.5x load, %g s each" % seconds, "rows": rows}


# ---------------------------------------------------------------- benchmarks/run.py section

TITLE = "AdaptiveLimiter vs no limit and fixed limits (simulated overload, virtual time)"
ABOUT = """A discrete-event simulation in virtual time that drives the real limiters (explicit
``now_ns``): deterministic, the same numbers on every machine. Processor-sharing backend,
work uniform in 10-30 ms, open-loop arrivals at 1.5x the first capacity, 1 s client
timeout; capacity 40 -> 20 -> 40 (docs/adaptive.md)."""


def run(cfg: Dict[str, Any], log: Any) -> Dict[str, Any]:
    res = run_all(quick=bool(cfg.get("adaptive_quick")))
    res.pop("goodput_series", None)
    res.pop("limits", None)  # the plot's series: bench_adaptive.py draws it
    return res


def render_md(res: Dict[str, Any]) -> str:
    text = markdown(res)
    return text.split("\n", 3)[3].strip()  # without the title and the config paragraph


def render_text(res: Dict[str, Any]) -> str:
    return render_md(res)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="phases a third as long")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--realtime", action="store_true", help="add the real-clock check")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    res = run_all(quick=a.quick)
    if a.realtime:
        res["realtime"] = realtime()
    md = markdown(res)
    print(md)
    if not a.quick:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "adaptive.md"), "w") as f:
            f.write(md)
        with open(os.path.join(a.out, "adaptive.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)
        if not a.no_plot:
            plot(res, os.path.join(os.path.dirname(HERE), "docs", "adaptive.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
