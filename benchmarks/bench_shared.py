"""Section "shared": a limiter shared by the processes of a host (``shared=``).

Two parts.

- **Per decision, one process.** A shared limiter (named region in ``/dev/shm``, and the
  anonymous ``shared=True``) against a private one, timed like the decision section: every
  case once per round, interleaved, order rotated, a fresh limiter (a fresh region) per
  timing, median and min - max of the rounds. Ratio "shared / private" of the medians.
- **Throughput across processes.** Worker processes (``multiprocessing``, spawn) hammer one
  shared limiter for a fixed time from a common start instant; the figure is the decisions
  per second summed over the processes, refusals included. 1 process vs 2 processes on the
  same limiter, round-robin over cases and process counts; "2P / 1P" is the median of the
  per-round ratios. Next to it: private limiters (one per process, nothing shared: what
  the machine itself scales to) and pyrate-limiter's ``MultiprocessBucket`` (a
  ``multiprocessing.Manager`` list and a ``multiprocessing.RLock``), the one peer that
  shares a limit between processes, with the same process count. And a shared ``Metric``
  counting (``add``) in both consistency modes: ``"strong"`` (every add under the region's
  lock) and ``"eventual"`` (an atomic add on the process's own stripe, no lock). And a
  shared ``KeyedLimiter`` with keys of each process's own (10 000 a process): the table is
  in stripes, each with its own lock, so that processes on different keys seldom meet.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

from common import (Case, calibrate, fmt_ns, fmt_rate, interleaved, md_table, summarize,
                    text_table)

TITLE = "Shared: one limiter for the processes of a host (shared=)"
ABOUT = __doc__.split("\n", 2)[2]

BIG = 10 ** 9
REFUSING_QPS = 1000        # the "mostly refused" throughput case: 1 000 admitted per second
PYRATE_ADMIT_RATE = 10 ** 6  # far above what MultiprocessBucket can do: every call admitted
PYRATE_REFUSE_RATE = 10      # full after 10: every later call refused
KEYED_KEYS = 10_000          # the shared keyed case: keys of each process's own


_CREATED: List[str] = []  # every region name this run made, unlinked at the end


def _region_name(tag: str) -> str:
    name = f"bench-{os.getpid()}-{tag}-{len(_CREATED)}"
    _CREATED.append(name)
    return name


def _unlink_all() -> None:
    import slidewin

    while _CREATED:
        slidewin.unlink(_CREATED.pop())


# ------------------------------------------------------------------ per decision

def decision_cases() -> List[Case]:
    """Pairs of (private, shared) cases; a fresh limiter (and region) per timing."""
    import slidewin
    from slidewin import Limiter

    def factory(shared, attrs=("try_acquire",), refuse=False, **kw):
        def make():
            name = _region_name("d") if shared == "name" else None
            lim = Limiter(shared=name if shared == "name" else shared, **kw)
            if refuse:
                while lim.try_acquire():
                    pass
            ns = {"lim": lim, "f": getattr(lim, attrs[0])}
            if "release" in attrs:
                ns["rel"] = lim.release
            if "entry" in attrs:
                ns["entry"] = lim.entry
            if name is not None:
                ns["__teardown__"] = lambda: slidewin.unlink(name)
            return ns

        return make

    out = []
    modes = (("private", None), ("named", "name"), ("anon", True))
    for mode, shared in modes:
        label = {"private": "private", "named": "shared='name'",
                 "anon": "shared=True"}[mode]
        out.append(Case(f"{mode}.admit", f"try_acquire() reject, admitting, {label}", mode,
                        factory(shared, qps=BIG), "f()"))
        out.append(Case(f"{mode}.refuse", f"try_acquire() reject, refusing, {label}", mode,
                        factory(shared, refuse=True, qps=1), "f()", ok="not _r"))
        if mode == "anon":
            continue
        out.append(Case(f"{mode}.pair", f"try_acquire() + release() concurrency, {label}",
                        mode, factory(shared, ("try_acquire", "release"), concurrency=BIG),
                        "f(); rel()", ok=None))
        out.append(Case(f"{mode}.entry", f"with lim.entry(): pass, {label}", mode,
                        factory(shared, ("try_acquire", "entry"), qps=BIG),
                        "with entry():\n    pass", ok=None))
    return out


# (shared case, private case, target label, limit or None)
DECISION_TARGETS = [
    ("named.admit", "private.admit", "shared try_acquire (named, admitting) / private", 1.3),
    ("named.refuse", "private.refuse", "shared try_acquire (named, refusing) / private", 1.3),
    ("anon.admit", "private.admit", "shared=True try_acquire (admitting) / private", 1.3),
    ("anon.refuse", "private.refuse", "shared=True try_acquire (refusing) / private", 1.3),
    ("named.pair", "private.pair", "shared try_acquire + release (concurrency) / private",
     None),
    ("named.entry", "private.entry", "shared with lim.entry() / private", None),
]


def run_decision(cfg, log) -> Dict[str, Any]:
    cs = decision_cases()
    counts = {c.key: calibrate(c, cfg["target_s"], cfg["max_n"]) for c in cs}
    log(f"  per decision: {len(cs)} cases, {cfg['repeats']} interleaved rounds")
    try:
        samples = interleaved(cs, counts, cfg["repeats"], progress=lambda s: log("  " + s))
    finally:
        _unlink_all()  # calibrate() does not tear its limiters down
    rows = []
    for c in cs:
        s = summarize(samples[c.key])
        s.update(key=c.key, label=c.label, group=c.group, loops=counts[c.key],
                 samples_ns=[round(x, 2) for x in samples[c.key]])
        rows.append(s)
    by = {r["key"]: r for r in rows}
    targets = []
    for a, b, label, limit in DECISION_TARGETS:
        if a not in by or b not in by:
            continue
        v = by[a]["median_ns"] / by[b]["median_ns"]
        targets.append({
            "target": label, "measured": v,
            "measured_min": by[a]["min_ns"] / by[b]["min_ns"],
            # per-round ratios (the two timings of a round are close in time)
            "measured_rounds": statistics.median(
                x / y for x, y in zip(samples[a], samples[b])),
            "limit": f"<= {limit}x" if limit else "-",
            "met": (v <= limit) if limit else None,
            "detail": f"{by[a]['median_ns']:.1f} / {by[b]['median_ns']:.1f} ns"})
    return {"rows": rows, "targets": targets}


# ------------------------------------------------------------- across processes

def _make_call(spec: Dict[str, Any], pyrate: Dict[str, Any], cache: Dict[str, Any]):
    """The callable a worker hammers, and whether it returns True when admitted."""
    kind = spec["kind"]
    if kind == "slidewin":
        from slidewin import Limiter

        lim = Limiter(**spec["kw"])
        cache["keep"] = lim
        return lim.try_acquire
    if kind == "keyed":
        from slidewin import KeyedLimiter

        lim = KeyedLimiter(**spec["kw"])
        cache["keep"] = lim
        # keys of this process's own (no other process decides on them), cycled
        keys = itertools.cycle([f"{os.getpid()}-{i}" for i in range(spec["keys"])])
        acq = lim.try_acquire
        return lambda: acq(next(keys))
    if kind == "metric":
        import functools

        from slidewin import Metric

        m = Metric(**spec["kw"])
        cache["keep"] = m
        return functools.partial(m.add, 0)  # add(PASS): returns None, nothing is refused
    if kind == "pyrate":
        import pyrate_limiter as pr

        key = spec["bucket"]
        lim = cache.get(key)
        if lim is None:
            lim = cache[key] = pr.Limiter(pyrate[key])
        acq = lim.try_acquire
        if spec["blocking"] is True:
            return lambda: acq("k")
        if spec["blocking"] == "timeout0":
            return lambda: acq("k", timeout=0)
        return lambda: acq("k", blocking=False)
    raise ValueError(kind)


def _hammer(f, chunk: int, start_ns: int, end_ns: int, decides: bool = True):
    clock = time.monotonic_ns
    rep = itertools.repeat
    calls = refused = 0
    late = clock() > start_ns
    while clock() < start_ns:
        pass
    t = clock()
    cpu0 = time.process_time_ns()
    while True:  # at least one chunk, even for a late starter
        if decides:
            for _ in rep(None, chunk):
                if not f():
                    refused += 1
        else:
            for _ in rep(None, chunk):
                f()
        calls += chunk
        t = clock()
        if t >= end_ns:
            break
    return {"calls": calls, "refused": refused, "late": late, "end_ns": t,
            "cpu_ns": time.process_time_ns() - cpu0}


def _worker(conn, pyrate: Dict[str, Any]) -> None:  # runs in a spawned process
    cache: Dict[str, Any] = {}
    while True:
        msg = conn.recv()
        if msg is None:
            break
        spec, dur_ns = msg
        try:
            f = _make_call(spec, pyrate, cache)
            for _ in range(spec.get("warm", 100)):
                f()
        except Exception as e:  # reported, never a hang of the parent
            f = None
            err = f"{type(e).__name__}: {e}"
        conn.send("ready" if f is not None else {"error": err})
        start_ns = conn.recv()
        if f is not None:
            res = _hammer(f, spec["chunk"], start_ns, start_ns + dur_ns,
                          spec["kind"] != "metric")
            cache.pop("keep", None)
            conn.send(res)
    for lim in cache.values():
        close = getattr(lim, "close", None)
        if close:
            try:
                close()
            except Exception:
                pass


class Pool:
    """Persistent spawned workers; a measurement sends one job to the first n of them."""

    def __init__(self, n: int, pyrate: Dict[str, Any]):
        ctx = mp.get_context("spawn")
        self.conns = []
        self.procs = []
        for _ in range(n):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(b, pyrate), daemon=True)
            p.start()
            self.conns.append(a)
            self.procs.append(p)

    def measure(self, spec, nprocs: int, seconds: float) -> Dict[str, Any]:
        """Every worker builds its limiter and warms it up; then all start at one instant
        (a few ms ahead, on CLOCK_MONOTONIC, which all processes share) and stop at
        ``start + seconds``."""
        conns = self.conns[:nprocs]
        for c in conns:
            c.send((spec, int(seconds * 1e9)))
        ready = [c.recv() for c in conns]
        start = time.monotonic_ns() + 5_000_000
        for c in conns:
            c.send(start)
        errs = [r["error"] for r in ready if r != "ready"]
        rs = [c.recv() for c, r in zip(conns, ready) if r == "ready"]
        if errs:
            return {"error": errs[0]}
        per_s = sum(r["calls"] / ((r["end_ns"] - start) / 1e9) for r in rs)
        # per CPU-second of each process, summed: what the processes would give each on a
        # core of its own (contention included), when the machine is shared with other load
        per_cpu_s = sum(r["calls"] / max(r["cpu_ns"], 1) * 1e9 for r in rs)
        return {"per_s": per_s, "per_cpu_s": per_cpu_s, "calls": sum(r["calls"] for r in rs),
                "refused": sum(r["refused"] for r in rs),
                "late": sum(1 for r in rs if r["late"]),
                "per_proc": [r["calls"] for r in rs]}

    def close(self):
        for c in self.conns:
            try:
                c.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.terminate()


def _pyrate_buckets(log):
    """The MultiprocessBuckets (made in the parent, handed to the workers at spawn)."""
    try:
        import pyrate_limiter as pr

        mpb = pr.MultiprocessBucket
    except ImportError as e:
        return {}, f"pyrate-limiter not installed ({e}; it needs Python >= 3.10)", None
    except AttributeError:
        return {}, "pyrate-limiter has no MultiprocessBucket", None
    try:
        # what MultiprocessBucket.init() does (a Manager list and an RLock), with the spawn
        # context's objects: the workers are spawned, and init() uses the default context
        ctx = mp.get_context("spawn")
        manager = ctx.Manager()
        out = {key: mpb([pr.Rate(rate, pr.Duration.SECOND)], manager.list(), ctx.RLock())
               for key, rate in (("admit", PYRATE_ADMIT_RATE), ("refuse", PYRATE_REFUSE_RATE))}
        return out, "", manager
    except Exception as e:  # pragma: no cover - environment specific
        return {}, f"MultiprocessBucket failed: {type(e).__name__}: {e}", None


def throughput_cases(names: Dict[str, str], pyrate_ok: bool):
    """(key, label, spec, group)."""
    out = [
        ("sw.admit", f"slidewin shared='name', qps=10**9 (all admitted)",
         {"kind": "slidewin", "kw": {"qps": BIG, "shared": names["admit"]}, "chunk": 256},
         "slidewin"),
        ("sw.refuse", f"slidewin shared='name', qps={REFUSING_QPS} (mostly refused)",
         {"kind": "slidewin", "kw": {"qps": REFUSING_QPS, "shared": names["refuse"]},
          "chunk": 256}, "slidewin"),
        ("sw.keyed", f"slidewin KeyedLimiter shared='name', qps=10**9, {KEYED_KEYS:,} distinct "
         "keys per process (all admitted)",
         {"kind": "keyed", "kw": {"qps": BIG, "shared": names["keyed"]}, "keys": KEYED_KEYS,
          "chunk": 256, "warm": 2 * KEYED_KEYS}, "slidewin"),
        ("private.admit", "slidewin private, one limiter per process (nothing shared)",
         {"kind": "slidewin", "kw": {"qps": BIG}, "chunk": 256}, "reference"),
        ("metric.strong", "slidewin Metric shared='name', add(PASS), consistency='strong'",
         {"kind": "metric", "kw": {"shared": names["m_strong"]}, "chunk": 256}, "slidewin"),
        ("metric.eventual", "slidewin Metric shared='name', add(PASS), consistency='eventual'",
         {"kind": "metric", "kw": {"shared": names["m_eventual"], "consistency": "eventual"},
          "chunk": 256}, "slidewin"),
    ]
    if pyrate_ok:
        out += [
            ("pyrate.admit", f"pyrate-limiter MultiprocessBucket, Rate({PYRATE_ADMIT_RATE:,}/s), "
             "try_acquire (blocking: waits for the lock)",
             {"kind": "pyrate", "bucket": "admit", "blocking": True, "chunk": 1, "warm": 5},
             "peer"),
            ("pyrate.admit_nb", f"pyrate-limiter MultiprocessBucket, Rate({PYRATE_ADMIT_RATE:,}/s), "
             "try_acquire(blocking=False)",
             {"kind": "pyrate", "bucket": "admit", "blocking": False, "chunk": 1, "warm": 5},
             "peer"),
            ("pyrate.refuse", f"pyrate-limiter MultiprocessBucket, Rate({PYRATE_REFUSE_RATE}/s), "
             "try_acquire(timeout=0) (refusing)",
             {"kind": "pyrate", "bucket": "refuse", "blocking": "timeout0", "chunk": 1,
              "warm": 20},
             "peer"),
        ]
    return out


# (slidewin case, pyrate case)
PEER_TARGETS = [("sw.admit", "pyrate.admit", "admitting"),
                ("sw.refuse", "pyrate.refuse", "refusing")]


def run_processes(cfg, log) -> Dict[str, Any]:
    import slidewin
    from slidewin import KeyedLimiter, Limiter

    procs = cfg.get("shared_procs", [1, 2])
    seconds = cfg["shared_s"]
    from slidewin import Metric

    names = {"admit": _region_name("tp-admit"), "refuse": _region_name("tp-refuse"),
             "m_strong": _region_name("tp-m-strong"),
             "m_eventual": _region_name("tp-m-eventual"), "keyed": _region_name("tp-keyed")}
    keep = [Limiter(qps=BIG, shared=names["admit"]),
            Limiter(qps=REFUSING_QPS, shared=names["refuse"]),
            Metric(shared=names["m_strong"]),
            Metric(shared=names["m_eventual"], consistency="eventual"),
            KeyedLimiter(qps=BIG, shared=names["keyed"])]
    pyrate, why, manager = _pyrate_buckets(log)
    if why:
        log(f"  {why}")
    tcases = throughput_cases(names, bool(pyrate))
    raw: Dict[str, Dict[int, List[Dict[str, Any]]]] = {k: {n: [] for n in procs}
                                                       for k, *_ in tcases}
    errors: Dict[str, str] = {}
    pool = None
    try:
        pool = Pool(max(procs), pyrate)
        for r in range(cfg["shared_repeats"]):
            log(f"  processes: round {r + 1}/{cfg['shared_repeats']}")
            order = tcases[r % len(tcases):] + tcases[:r % len(tcases)]
            for key, label, spec, group in order:
                if key in errors:
                    continue
                for n in (procs if r % 2 == 0 else procs[::-1]):
                    m = pool.measure(spec, n, seconds)
                    if "error" in m:
                        errors[key] = m["error"]
                        log(f"  {label}: {m['error']}")
                        break
                    raw[key][n].append(m)
    finally:
        if pool is not None:
            pool.close()
        if manager is not None:
            manager.shutdown()
        del keep
        _unlink_all()
    rows = []
    for key, label, spec, group in tcases:
        row: Dict[str, Any] = {"key": key, "label": label, "group": group, "by_procs": {}}
        if key in errors:
            row["error"] = errors[key]
            rows.append(row)
            continue
        for n in procs:
            runs = raw[key][n]
            row["by_procs"][str(n)] = {
                "per_s": statistics.median(x["per_s"] for x in runs),
                "per_cpu_s": statistics.median(x["per_cpu_s"] for x in runs),
                "min_per_s": min(x["per_s"] for x in runs),
                "max_per_s": max(x["per_s"] for x in runs),
                "calls": sum(x["calls"] for x in runs),
                "refused": sum(x["refused"] for x in runs),
                "late_starts": sum(x["late"] for x in runs),
                "runs_per_s": [round(x["per_s"]) for x in runs],
            }
        first = raw[key][procs[0]]
        for n in procs:
            row["by_procs"][str(n)]["vs_1"] = statistics.median(
                b["per_s"] / a["per_s"] for a, b in zip(first, raw[key][n]))
            row["by_procs"][str(n)]["cpu_vs_1"] = statistics.median(
                b["per_cpu_s"] / a["per_cpu_s"] for a, b in zip(first, raw[key][n]))
        rows.append(row)
        log(f"  {label}: " + ", ".join(
            f"{n}P {fmt_rate(row['by_procs'][str(n)]['per_s'])}" for n in procs))
    by = {r["key"]: r for r in rows}
    targets = []
    two = str(procs[-1])
    for key, what in (("sw.admit", "admitting"), ("sw.refuse", "mostly refused")):
        r = by.get(key)
        if r and two in r["by_procs"]:
            v = r["by_procs"][two]["vs_1"]
            targets.append({"target": f"{two} processes / 1 process, shared limiter ({what})",
                            "measured": v, "limit": ">= 0.9x", "met": v >= 0.9,
                            "detail": f"{fmt_rate(r['by_procs'][two]['per_s'])} / "
                                      f"{fmt_rate(r['by_procs']['1']['per_s'])}"})
    r = by.get("sw.keyed")
    if r and "error" not in r and two in r["by_procs"]:
        v = r["by_procs"][two]["vs_1"]
        cv = r["by_procs"][two]["cpu_vs_1"]
        targets.append({"target": f"{two} processes / 1 process, shared KeyedLimiter, "
                                  "distinct keys (a lock per stripe of the table)",
                        "measured": v, "limit": ">= 1.6x", "met": v >= 1.6,
                        "detail": f"{fmt_rate(r['by_procs'][two]['per_s'])} / "
                                  f"{fmt_rate(r['by_procs']['1']['per_s'])}; per "
                                  f"CPU-second {cv:.2f}x"})
    for key, what, limit in (("metric.eventual", "consistency='eventual'", 1.6),
                             ("metric.strong", "consistency='strong'", None)):
        r = by.get(key)
        if r and "error" not in r and two in r["by_procs"]:
            v = r["by_procs"][two]["vs_1"]
            cv = r["by_procs"][two]["cpu_vs_1"]
            targets.append({"target": f"{two} processes / 1 process, shared Metric add "
                                      f"({what})",
                            "measured": v, "limit": f">= {limit}x" if limit else "-",
                            "met": (v >= limit) if limit else None,
                            "detail": f"{fmt_rate(r['by_procs'][two]['per_s'])} / "
                                      f"{fmt_rate(r['by_procs']['1']['per_s'])}; per "
                                      f"CPU-second {cv:.2f}x"})
    ref = by.get("private.admit")
    for a, b, what in PEER_TARGETS:
        ra, rb = by.get(a), by.get(b)
        if not ra or "error" in ra:
            continue
        if not rb or "error" in rb:
            targets.append({"target": f"slidewin / pyrate MultiprocessBucket ({what})",
                            "measured": None, "limit": ">= 500x", "met": None,
                            "detail": (rb or {}).get("error") or why or "not run"})
            continue
        for n in procs:
            x, y = ra["by_procs"][str(n)]["per_s"], rb["by_procs"][str(n)]["per_s"]
            targets.append({"target": f"slidewin / pyrate MultiprocessBucket ({what}, "
                                      f"{n} process{'es' if n > 1 else ''})",
                            "measured": x / y, "limit": ">= 500x", "met": x / y >= 500,
                            "detail": f"{fmt_rate(x)} / {fmt_rate(y)}"})
    return {"rows": rows, "targets": targets, "procs": procs, "seconds_each": seconds,
            "repeats": cfg["shared_repeats"], "pyrate": why or "ok",
            "machine_ceiling": (ref["by_procs"][two]["vs_1"]
                                if ref and "error" not in ref and two in ref["by_procs"]
                                else None)}


# ------------------------------------------------------------------------- section

def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    if not sys.platform.startswith("linux"):
        return {"skipped": "shared regions are Linux only"}
    return {"decision": run_decision(cfg, log), "processes": run_processes(cfg, log)}


def _fmt_x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x" if v < 100 else f"{v:,.0f}x"


def _met(t, missed):
    return "-" if t["met"] is None else ("yes" if t["met"] else missed)


def _dec_rows(res):
    return [[r["label"], fmt_ns(r["median_ns"]), f"{fmt_ns(r['min_ns'])} - {fmt_ns(r['max_ns'])}"]
            for r in res["decision"]["rows"]]


def _dec_targets(res, missed):
    return [[t["target"], _fmt_x(t["measured"]), t["limit"], _met(t, missed), t["detail"],
             _fmt_x(t["measured_min"]), _fmt_x(t["measured_rounds"])]
            for t in res["decision"]["targets"]]


def _has_cpu(res) -> bool:
    """Whether the run timed CPU per process (runs before it did not)."""
    return all("cpu_vs_1" in v for r in res["processes"]["rows"] if "error" not in r
               for k, v in r["by_procs"].items() if k != "1")


def _proc_table(res):
    p = res["processes"]
    procs = p["procs"]
    cpu = _has_cpu(res)
    headers = (["case"] + [f"{n} process{'es' if n > 1 else ''}" for n in procs]
               + [f"{n}P / 1P" for n in procs[1:]]
               + ([f"{n}P / 1P per CPU-s" for n in procs[1:]] if cpu else [])
               + ["refused / calls"])
    rows = []
    for r in p["rows"]:
        if "error" in r:
            rows.append([r["label"]] + [f"failed: {r['error']}"] + [""] * (len(headers) - 2))
            continue
        bp = r["by_procs"]
        rows.append([r["label"]] + [fmt_rate(bp[str(n)]["per_s"]) for n in procs]
                    + [f"{bp[str(n)]['vs_1']:.2f}x" for n in procs[1:]]
                    + ([f"{bp[str(n)]['cpu_vs_1']:.2f}x" for n in procs[1:]] if cpu else [])
                    + [f"{sum(v['refused'] for v in bp.values()):,} / "
                       f"{sum(v['calls'] for v in bp.values()):,}"])
    return headers, rows


def _proc_targets(res, missed):
    return [[t["target"], _fmt_x(t["measured"]), t["limit"], _met(t, missed), t["detail"]]
            for t in res["processes"]["targets"]]


DEC_HEADERS = ["case", "median ns/call", "min - max"]
DEC_T_HEADERS = ["target", "measured (medians)", "wanted", "met", "medians", "ratio of mins",
                 "median of per-round ratios"]
PROC_T_HEADERS = ["target", "measured", "wanted", "met", "detail"]


def render_text(res) -> str:
    out = [text_table(DEC_HEADERS, _dec_rows(res), "lrr"), "",
           text_table(DEC_T_HEADERS, _dec_targets(res, "NO"), "lrllrrr"), ""]
    h, rows = _proc_table(res)
    out += [text_table(h, rows), "", text_table(PROC_T_HEADERS, _proc_targets(res, "NO"),
                                                "lrllr")]
    return "\n".join(out)


def render_md(res) -> str:
    p = res["processes"]
    h, rows = _proc_table(res)
    out = ["Per decision, one process:", "",
           md_table(DEC_HEADERS, _dec_rows(res), "lrr"), "",
           md_table(DEC_T_HEADERS, _dec_targets(res, "**no**"), "lrllrrr"), "",
           "Across processes (decisions per second summed over the processes, refusals "
           "included):", "", md_table(h, rows), "",
           f"Each cell: median of {p['repeats']} runs of {p['seconds_each']} s, round-robin "
           "over cases and process counts; \"2P / 1P\" is the median of the per-round "
           "ratios." + (" \"per CPU-s\" is the same ratio of the calls per CPU-second of "
           "each process, summed (what the processes give each on a core of its own, "
           "contention included: the figure that survives a machine shared with other "
           "load)." if _has_cpu(res) else "") + " The private row (one limiter per process, nothing shared) is what the "
           "machine itself gives a second process: the ceiling of the shared rows. pyrate's "
           "`MultiprocessBucket` also runs its `Manager` server process (every list access is "
           "a round trip to it) and a leak thread per process. Admitting, it is called with "
           "its defaults (blocking: it waits for the lock, never refuses below the limit); "
           "refusing, with `timeout=0` (one try, False when refused). With "
           "`blocking=False` a call that finds the lock held returns False below the limit "
           "without deciding anything: here the lock stays held by another thread of the "
           "caller (`RLock(SomeOtherThread, nonzero)` after the first call, pyrate-limiter "
           "4.5.1), so nearly every such call is a spurious refusal; that row is shown for "
           "completeness, not compared.", "",
           md_table(PROC_T_HEADERS, _proc_targets(res, "**no**"), "lrllr")]
    if p.get("pyrate") not in (None, "ok"):
        out += ["", f"pyrate-limiter: {p['pyrate']}."]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run: python benchmarks/run.py --only shared")
