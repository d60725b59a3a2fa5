"""Section "keyed": ``KeyedLimiter``, per key, next to a private Limiter and peers.

Three parts, the first two timed in one interleaved run (every case once per round, the
order rotated every round, GC off while timing, median and min - max of the rounds):

- **Per key vs private.** ``try_acquire(key)`` with short str keys (``f"user-{i}"``, built
  before any timing, in a shuffled order of ``i``: the list is visited front to back, the
  ids in random order) on a table filled to ``max_keys`` (keys inserted in id order, so
  the entries, placed by hash, are not visited in memory order), at 10 000 and
  1 000 000 keys. Next to it, a private ``Limiter.try_acquire()`` called from the same loop
  over the same key list (the same loop, the same fetch of a key, the same verdict test;
  only the call differs): the target ratio. A ``timeit``-style private ``try_acquire()``
  (no key list) is shown too, the decision section's reference. ``qps=10`` per key (the
  verdicts are counted: which share was refused is in the table) and ``qps=10**9`` (every
  call admitted). A table is built once per case and kept over the rounds (it stays full);
  a timing visits the next slice of the key list.
- **Per key vs peers**, at 10 000 keys, a limit of 10 per second per key for everyone:
  limits (``MemoryStorage``: fixed window, moving window, sliding window counter,
  ``strategy.hit(item, key)``) and throttled-py (``MemoryStore(options={"MAX_SIZE": keys})``,
  every algorithm, ``Throttled(...).limit(key)``), each with its store filled with the same
  keys first and visited in the same shuffled order. limits' ``MemoryStorage`` expires keys
  from a timer thread (every 10 ms while hits come, scanning every key): that is its cost
  and it is counted; the thread is stopped after each of its timings so that it never runs
  during another case's timing. pyrate-limiter is not here: its ``Limiter`` puts every name
  in the one bucket its factory returns (not a limit per key).
- **Bytes per key**, each in a fresh process: the table (or store) filled with N distinct
  keys, ``tracemalloc`` (everything allocated through Python's allocators after the keys
  were built, divided by N) and the RSS difference (``/proc/self/statm`` before and after
  the fill, divided by N; measured in another fresh process, without tracemalloc). Peers
  with limits of 10 per hour, so that no key expires while the store fills; the number of
  keys held at the end is checked.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from common import fmt_ns, md_table, text_table

TITLE = "Keyed: KeyedLimiter per key"
ABOUT = __doc__.split("\n", 2)[2]

BIG = 10 ** 9
HERE = os.path.dirname(os.path.abspath(__file__))

_TEMPLATE = """
def _inner(_ns, _keys, _passes, _timer=_timer, _repeat=_repeat):
{unpack}
    _refused = 0
    _t0 = _timer()
    for _ in _repeat(None, _passes):
        for _k in _keys:
            _r = {stmt}
            _refused += not ({ok})
    return _timer() - _t0, _refused
"""

_REPEAT_TEMPLATE = """
def _inner(_ns, _n, _timer=_timer, _repeat=_repeat):
{unpack}
    _refused = 0
    _t0 = _timer()
    for _ in _repeat(None, _n):
        _r = {stmt}
        _refused += not ({ok})
    return _timer() - _t0, _refused
"""


def _compile(template: str, names, stmt: str, ok: str) -> Callable:
    unpack = "\n".join(f"    {n} = _ns[{n!r}]" for n in sorted(names)) or "    pass"
    src = template.format(unpack=unpack, stmt=stmt, ok=ok)
    glb = {"_timer": time.perf_counter_ns, "_repeat": itertools.repeat}
    exec(compile(src, "<bench_keyed>", "exec"), glb)
    return glb["_inner"]


def make_keys(n: int) -> List[str]:
    """``f"user-{i}"`` for i in 0..n-1 in a shuffled order, allocated in list order."""
    ids = list(range(n))
    random.Random(n).shuffle(ids)
    return [f"user-{i}" for i in ids]


class KCase:
    """One timed thing: ``stmt`` over names from ``make()``, once per key of a slice of
    ``keys`` (or ``keys=None``: a ``timeit``-style loop without keys)."""

    def __init__(self, key, label, group, make, stmt, ok="_r", keys=None, size=None,
                 after=None, ref=None):
        self.key, self.label, self.group = key, label, group
        self.make, self.stmt, self.ok = make, stmt, ok
        self.keys, self.size, self.after, self.ref = keys, size, after, ref
        self.ns: Optional[Dict[str, Any]] = None
        self.inner: Optional[Callable] = None
        self.pos = 0
        self.calls = 0      # per timing (calibrated)
        self.passes = 1

    def setup(self) -> None:
        self.ns = self.make()
        tpl = _TEMPLATE if self.keys is not None else _REPEAT_TEMPLATE
        self.inner = _compile(tpl, [k for k in self.ns if not k.startswith("__")],
                              self.stmt, self.ok)

    def _slice(self, m: int) -> List[str]:
        keys = self.keys
        n = len(keys)
        if m >= n:
            return keys
        lo = self.pos
        self.pos = (lo + m) % n
        if lo + m <= n:
            return keys[lo:lo + m]
        return keys[lo:] + keys[:lo + m - n]

    def time(self, calls: int, passes: int = 1):
        """ns per call, refused count, calls made."""
        if self.keys is None:
            gc_was = gc.isenabled()
            gc.disable()
            try:
                el, ref = self.inner(self.ns, calls)
            finally:
                if gc_was:
                    gc.enable()
            made = calls
        else:
            part = self._slice(calls)
            gc_was = gc.isenabled()
            gc.disable()
            try:
                el, ref = self.inner(self.ns, part, passes)
            finally:
                if gc_was:
                    gc.enable()
            made = len(part) * passes
        if self.after:
            self.after(self.ns)
        return el / made, ref, made

    def calibrate(self, target_s: float, max_calls: int) -> None:
        probe = 200 if self.keys is None else min(len(self.keys), 1000)
        self.time(probe)  # warm up
        per, _, _ = self.time(probe)
        want = max(probe, min(max_calls, int(target_s * 1e9 / max(per, 1.0))))
        if self.keys is None or want <= len(self.keys):
            self.calls, self.passes = want, 1
        else:
            self.calls, self.passes = len(self.keys), math.ceil(want / len(self.keys))


# ------------------------------------------------------------------------- cases

def _fill_keyed(lim, n: int) -> None:
    f = lim.try_acquire
    for i in range(n):
        f(f"user-{i}")


def keyed_cases(sizes: List[int], keysets: Dict[int, List[str]]) -> List[KCase]:
    from slidewin import KeyedLimiter, Limiter

    out: List[KCase] = []

    def private(qps):
        def make():
            return {"f": Limiter(qps=qps).try_acquire}
        return make

    out.append(KCase("private.repeat", "private Limiter(qps=10**9).try_acquire(), "
                     "timeit-style loop (no key list)", "private", private(BIG), "f()"))
    for n in sizes:
        keys = keysets[n]

        def keyed(qps, n=n):
            def make():
                lim = KeyedLimiter(qps=qps, max_keys=n)
                _fill_keyed(lim, n)
                # a key whose 256-entry probe path is full takes another's place before the
                # table holds max_keys keys (docs/keys.md: about 1 in 10 million), and such
                # paths come in clusters (a CI run once lost 2 of 100,000)
                assert len(lim) >= n - max(8, n // 100_000), (len(lim), n)
                return {"f": lim.try_acquire, "__lim__": lim}
            return make

        out += [
            KCase(f"keyed.{n}.mix", f"KeyedLimiter(qps=10, max_keys={n:,}).try_acquire(key)",
                  "keyed", keyed(10), "f(_k)", keys=keys, size=n, ref=f"private.{n}.mix"),
            KCase(f"private.{n}.mix", "private Limiter(qps=10).try_acquire(), same loop",
                  "private", private(10), "f()", keys=keys, size=n),
            KCase(f"keyed.{n}.admit",
                  f"KeyedLimiter(qps=10**9, max_keys={n:,}).try_acquire(key)", "keyed",
                  keyed(BIG), "f(_k)", keys=keys, size=n, ref=f"private.{n}.admit"),
            KCase(f"private.{n}.admit", "private Limiter(qps=10**9).try_acquire(), same loop",
                  "private", private(BIG), "f()", keys=keys, size=n),
        ]
    return out


def peer_cases(n: int, keys: List[str], skipped: List[str]) -> List[KCase]:
    out: List[KCase] = []
    try:
        from limits import RateLimitItemPerSecond, storage, strategies

        def stop_timer(ns):
            t = ns["__st__"].timer
            t.cancel()
            if t.is_alive():
                t.join()

        def limits_make(cls):
            def make():
                st = storage.MemoryStorage()
                s = cls(st)
                item = RateLimitItemPerSecond(10)
                for i in range(n):
                    s.hit(item, f"user-{i}")
                ns = {"hit": s.hit, "item": item, "__st__": st}
                stop_timer(ns)
                return ns
            return make

        for k, label, cls in (
            ("fixed", "fixed window", strategies.FixedWindowRateLimiter),
            ("moving", "moving window", strategies.MovingWindowRateLimiter),
            ("sliding", "sliding window counter", strategies.SlidingWindowCounterRateLimiter),
        ):
            out.append(KCase(f"peer.limits.{k}", f"limits {label} (MemoryStorage), "
                             "hit(item, key)", "peer", limits_make(cls), "hit(item, _k)",
                             keys=keys, size=n, after=stop_timer))
    except ImportError:
        skipped.append("limits")
    try:
        from throttled import MemoryStore, RateLimiterType, Throttled, per_sec

        def thr_make(using):
            def make():
                t = Throttled(using=using, quota=per_sec(10),
                              store=MemoryStore(options={"MAX_SIZE": n}))
                for i in range(n):
                    t.limit(f"user-{i}")
                return {"limit": t.limit}
            return make

        for using in RateLimiterType.choice():
            out.append(KCase(f"peer.throttled.{using}", f"throttled-py {using} "
                             "(MemoryStore), limit(key)", "peer", thr_make(using),
                             "limit(_k)", ok="not _r.limited", keys=keys, size=n))
    except ImportError:
        skipped.append("throttled-py")
    return out


# ---------------------------------------------------------------------- memory

def _rss() -> Optional[int]:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _mem_subject(name: str, n: int):
    """(make, fill(obj, keys), held(obj)) for a memory subject."""
    if name == "slidewin":
        from slidewin import KeyedLimiter

        def make():
            return KeyedLimiter(qps=10, max_keys=n)

        def fill(lim, keys):
            f = lim.try_acquire
            for k in keys:
                f(k)

        return make, fill, len
    if name.startswith("limits."):
        from limits import RateLimitItemPerHour, storage, strategies

        cls = {"fixed": strategies.FixedWindowRateLimiter,
               "moving": strategies.MovingWindowRateLimiter,
               "sliding": strategies.SlidingWindowCounterRateLimiter}[name.split(".")[1]]
        item = RateLimitItemPerHour(10)

        def make():
            st = storage.MemoryStorage()
            return st, cls(st)

        def fill(obj, keys):
            hit = obj[1].hit
            for k in keys:
                hit(item, k)

        def held(obj):
            st = obj[0]
            return max(len(st.storage), len(st.events))

        return make, fill, held
    if name.startswith("throttled."):
        from throttled import MemoryStore, Throttled, per_hour

        using = name.split(".", 1)[1]

        def make():
            store = MemoryStore(options={"MAX_SIZE": n})
            return store, Throttled(using=using, quota=per_hour(10), store=store)

        def fill(obj, keys):
            lim = obj[1].limit
            for k in keys:
                lim(k)

        def held(obj):
            return len(obj[0]._backend.get_client())

        return make, fill, held
    raise ValueError(name)


def mem_worker(name: str, n: int, method: str) -> Dict[str, Any]:
    """Runs in a fresh process: bytes per key of one subject filled with n keys."""
    import tracemalloc

    make, fill, held = _mem_subject(name, n)
    keys = [f"user-{i}" for i in range(n)]
    warm = make()            # first-use allocations (imports, caches, a thread) out of the way
    fill(warm, [f"warm-{i}" for i in range(8)])
    gc.collect()
    if method == "tracemalloc":
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    else:
        base = _rss()
    t0 = time.perf_counter()
    obj = make()
    fill(obj, keys)
    secs = time.perf_counter() - t0
    gc.collect()
    if method == "tracemalloc":
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    else:
        after = _rss()
        used = None if base is None or after is None else after - base
    kept = held(obj)
    timer = getattr(obj[0], "timer", None) if isinstance(obj, tuple) else None
    if timer is not None:
        timer.cancel()
    return {"bytes": used, "per_key": None if used is None else used / n, "held": kept,
            "fill_s": secs}


def _run_mem(name: str, n: int, method: str, timeout: float) -> Dict[str, Any]:
    code = ("import sys, json; sys.path.insert(0, %r); import bench_keyed as b; "
            "print(json.dumps(b.mem_worker(%r, %d, %r)))" % (HERE, name, n, method))
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


MEM_SUBJECTS = [
    ("slidewin", "slidewin KeyedLimiter(qps=10) (reject, default window)"),
    ("limits.moving", "limits MemoryStorage, moving window"),
    ("limits.fixed", "limits MemoryStorage, fixed window"),
    ("limits.sliding", "limits MemoryStorage, sliding window counter"),
    ("throttled.fixed_window", "throttled-py MemoryStore, fixed_window"),
    ("throttled.sliding_window", "throttled-py MemoryStore, sliding_window"),
    ("throttled.token_bucket", "throttled-py MemoryStore, token_bucket"),
    ("throttled.gcra", "throttled-py MemoryStore, gcra"),
]


def run_memory(cfg, log) -> Dict[str, Any]:
    rows = []
    for name, label in MEM_SUBJECTS:
        n = cfg["keyed_mem_keys"] if name == "slidewin" else cfg["keyed_mem_peer_keys"]
        row: Dict[str, Any] = {"key": name, "label": label, "keys": n}
        for method in ("tracemalloc", "rss"):
            r = _run_mem(name, n, method, cfg.get("keyed_mem_timeout", 600))
            row[method] = r
            if "error" in r:
                log(f"  memory {name} ({method}): {r['error']}")
        rows.append(row)
        parts = [f"{m} {row[m]['per_key']:.1f} B/key" for m in ("tracemalloc", "rss")
                 if row[m].get("per_key") is not None]
        log(f"  memory {label}, {n:,} keys: " + ", ".join(parts))
    return {"rows": rows}


# ------------------------------------------------------------------------ section

def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    sizes = cfg["keyed_sizes"]
    peer_n = cfg["keyed_peer_keys"]
    skipped: List[str] = []
    t0 = time.perf_counter()
    keysets = {n: make_keys(n) for n in sorted(set(sizes) | {peer_n})}
    log(f"  key lists built ({time.perf_counter() - t0:.1f} s)")
    cases = keyed_cases(sizes, keysets) + peer_cases(peer_n, keysets[peer_n], skipped)
    if skipped:
        log(f"  peers not installed (pip install -e .[bench]): {', '.join(skipped)}")
    for c in cases:
        t = time.perf_counter()
        c.setup()
        c.calibrate(cfg["target_s"], cfg["keyed_max_calls"])
        log(f"  set up {c.key} ({time.perf_counter() - t:.1f} s): "
            f"{c.calls:,} calls x {c.passes} per timing")
    samples: Dict[str, List[float]] = {c.key: [] for c in cases}
    refused: Dict[str, List[int]] = {c.key: [] for c in cases}
    made: Dict[str, List[int]] = {c.key: [] for c in cases}
    order = list(cases)
    for r in range(cfg["repeats"]):
        log(f"  round {r + 1}/{cfg['repeats']}")
        for c in order:
            per, ref, m = c.time(c.calls, c.passes)
            samples[c.key].append(per)
            refused[c.key].append(ref)
            made[c.key].append(m)
        order = order[1:] + order[:1]
    rows = []
    for c in cases:
        s = samples[c.key]
        rows.append({"key": c.key, "label": c.label, "group": c.group, "keys": c.size,
                     "median_ns": statistics.median(s), "min_ns": min(s), "max_ns": max(s),
                     "runs": len(s), "calls_per_timing": made[c.key][0],
                     "refused_share": sum(refused[c.key]) / max(1, sum(made[c.key])),
                     "samples_ns": [round(x, 2) for x in s], "ref": c.ref})
    for c in cases:  # drop the tables (1M keys: ~60 MB each) before the memory part
        c.ns = None
    gc.collect()
    res = {"rows": rows, "sizes": sizes, "peer_keys": peer_n, "skipped_peers": skipped,
           "repeats": cfg["repeats"]}
    res["memory"] = run_memory(cfg, log)
    res["targets"] = targets(res)
    return res


def targets(res) -> List[Dict[str, Any]]:
    """The issue's targets, from the rows (so they can be recomputed from a results file).
    Peers are compared with the all-admitted KeyedLimiter case: at 10 000 keys and a few
    microseconds a call they are all admitted too."""
    by = {r["key"]: r for r in res["rows"]}
    samples = {r["key"]: r["samples_ns"] for r in res["rows"]}
    out = []
    limits = {}
    sizes = res["sizes"]
    if sizes:
        limits[sizes[0]] = 3.0
        for n in sizes[1:]:
            limits[n] = 5.0

    def ratio(a, b):
        ra, rb = by[a], by[b]
        return {"measured": ra["median_ns"] / rb["median_ns"],
                "measured_min": ra["min_ns"] / rb["min_ns"],
                "measured_rounds": statistics.median(
                    x / y for x, y in zip(samples[a], samples[b])),
                "detail": f"{fmt_ns(ra['median_ns'])} / {fmt_ns(rb['median_ns'])} ns"}

    rep = by.get("private.repeat")
    for n in sizes:
        lim = limits[n]
        for kind, what in (("mix", "qps=10"), ("admit", "qps=10**9, all admitted")):
            a, b = f"keyed.{n}.{kind}", f"private.{n}.{kind}"
            if a not in by or b not in by:
                continue
            t = ratio(a, b)
            t.update(target=f"KeyedLimiter try_acquire(key) / private try_acquire(), "
                            f"{n:,} keys ({what}; {by[a]['refused_share']:.0%} refused)",
                     limit=f"<= {lim:g}x", met=t["measured"] <= lim, kind="speed")
            if rep:
                t["vs_timeit"] = by[a]["median_ns"] / rep["median_ns"]
            out.append(t)
    ref = f"keyed.{res['peer_keys']}.admit"
    if ref in by:
        for r in res["rows"]:
            if r["group"] != "peer":
                continue
            t = ratio(r["key"], ref)
            t.update(target=f"{r['label'].split(' (')[0]} / KeyedLimiter, "
                            f"{res['peer_keys']:,} keys (all admitted)", limit=">= 50x",
                     met=t["measured"] >= 50, kind="peer")
            out.append(t)
    for m in res["memory"]["rows"]:
        if m["key"] != "slidewin":
            continue
        for method in ("tracemalloc", "rss"):
            v = m[method].get("per_key")
            if v is None:
                continue
            out.append({"target": f"KeyedLimiter bytes per key at max_keys={m['keys']:,} "
                                  f"({method})", "measured": v, "limit": "<= 64",
                        "met": v <= 64, "kind": "memory", "detail": f"{m[method]['bytes']:,} B",
                        "measured_min": None, "measured_rounds": None})
    return out


# -------------------------------------------------------------------------- render

GROUPS = {"keyed": "slidewin KeyedLimiter", "private": "slidewin private Limiter",
          "peer": "peers (PyPI)"}


def _rows(res):
    out = []
    for r in res["rows"]:
        out.append([GROUPS.get(r["group"], r["group"]), r["label"],
                    f"{r['keys']:,}" if r["keys"] else "-", fmt_ns(r["median_ns"]),
                    f"{fmt_ns(r['min_ns'])} - {fmt_ns(r['max_ns'])}",
                    f"{r['refused_share']:.1%}"])
    return out


HEADERS = ["group", "case", "keys", "median ns/call", "min - max", "refused"]


def _x(v):
    if v is None:
        return "-"
    return f"{v:.2f}x" if v < 100 else f"{v:,.0f}x"


def _trows(res, missed):
    out = []
    for t in res["targets"]:
        m = (f"{t['measured']:.1f} B" if t["kind"] == "memory" else _x(t["measured"]))
        out.append([t["target"], m, t["limit"], "yes" if t["met"] else missed, t["detail"],
                    _x(t.get("measured_min")), _x(t.get("measured_rounds")),
                    _x(t.get("vs_timeit"))])
    return out


T_HEADERS = ["target", "measured (medians)", "wanted", "met", "medians", "ratio of mins",
             "median of per-round ratios", "vs timeit-style private"]


def _mrows(res):
    out = []
    for m in res["memory"]["rows"]:
        cells = [m["label"], f"{m['keys']:,}"]
        for method in ("tracemalloc", "rss"):
            r = m[method]
            cells.append(f"failed: {r['error']}" if "error" in r else
                         "-" if r.get("per_key") is None else f"{r['per_key']:,.1f}")
        held = m["tracemalloc"].get("held")
        cells.append("-" if held is None else f"{held:,}")
        fs = m["tracemalloc"].get("fill_s")
        cells.append("-" if fs is None else f"{fs:.1f} s")
        out.append(cells)
    return out


M_HEADERS = ["store", "keys", "bytes/key (tracemalloc)", "bytes/key (RSS)", "keys held",
             "fill time (traced)"]


def render_text(res) -> str:
    return "\n".join([text_table(HEADERS, _rows(res), "lllrrr"), "",
                      text_table(M_HEADERS, _mrows(res), "lrrrrr"), "",
                      text_table(T_HEADERS, _trows(res, "NO"), "lrllrrrr")])


def render_md(res) -> str:
    out = [md_table(HEADERS, _rows(res), "lllrrr"), "",
           f"Median and min - max of {res['repeats']} interleaved rounds. \"refused\": the "
           "share of the timed calls refused, counted in the timed loop of every case with the "
           "same branch-free statement (`_refused += not _r`), whatever the verdict.",
           "", "Bytes per key (each in a fresh process; the peers with fewer keys where "
           "the \"keys\" column says so):", "", md_table(M_HEADERS, _mrows(res), "lrrrrr"),
           "", "Targets (ratios of medians; the private reference is the same loop over "
           "the same key list, the last column the ratio to the timeit-style private "
           "`try_acquire()`):", "", md_table(T_HEADERS, _trows(res, "**no**"), "lrllrrrr")]
    if res.get("skipped_peers"):
        out += ["", "Peers not installed: " + ", ".join(res["skipped_peers"]) + "."]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run: python benchmarks/run.py --only keyed")
