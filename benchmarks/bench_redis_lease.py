"""Leased quotas (`lease=True`) against per-decision Redis limiting: one fleet key, 8 client
processes on one local redis-server it starts, each calling `try_acquire()` (on the server's
clock) as fast as it can for a few seconds.

Cases: slidewin's RedisLimiter deciding in Redis (one round trip a decision); limits'
RedisStorage moving window and sliding window counter (`hit()`, one round trip a decision),
when limits is installed; RedisLimiter with `lease=True`. Two limits: one above what the
fleet asks (every decision admitted) and one below it (most refused). "round trips" is the
server's count of script calls (`INFO commandstats`: EVALSHA and EVAL) over the decisions
made. The decision cost is one process's `try_acquire()` with a slice in hand, next to a
private in-process `Limiter.try_acquire()`, in the same process.

Standalone: `python benchmarks/bench_redis_lease.py [--quick] [--cost]` (prints a table;
--cost: only the decision costs; the figures depend on the machine's load: say so when
quoting them).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import timeit
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(binary: str) -> Tuple[subprocess.Popen, int, str]:
    import redis

    port, d = _free_port(), tempfile.mkdtemp(prefix="bench-lease-")
    p = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", d],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c = redis.Redis(port=port)
    for _ in range(500):
        try:
            c.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    c.close()
    return p, port, d


def _decider(mode: str, port: int, name: str, qps: int) -> Any:
    """A zero-argument decision of the mode, on a client of this process."""
    import redis

    if mode.startswith("limits"):
        import limits
        from limits.storage import RedisStorage
        from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter

        st = RedisStorage("redis://127.0.0.1:%d" % port)
        cls = (MovingWindowRateLimiter if mode == "limits moving window"
               else SlidingWindowCounterRateLimiter)
        lim = cls(st)
        item = limits.parse("%d/second" % qps)
        return lambda: lim.hit(item, name)
    from slidewin.redis import RedisLimiter

    rl = RedisLimiter(redis.Redis(port=port), name, qps=qps, lease=(mode == "lease"))
    return rl.try_acquire


def _worker(mode: str, port: int, name: str, qps: int, seconds: float, ready: Any, go: Any,
            q: Any) -> None:
    decide = _decider(mode, port, name, qps)
    decide()
    ready.put(1)
    go.wait(60)
    n = ok = 0
    batch = 64 if mode == "lease" else 1  # the clock read outside the timed decisions
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(batch):
            ok += bool(decide())
        n += batch
    q.put((n, ok))


def _script_calls(port: int) -> int:
    import redis

    c = redis.Redis(port=port)
    st = c.info("commandstats")
    c.close()
    return sum(int(st.get(k, {}).get("calls", 0)) for k in ("cmdstat_evalsha", "cmdstat_eval"))


def run_case(mode: str, port: int, qps: int, procs: int, seconds: float) -> Dict[str, Any]:
    ctx = multiprocessing.get_context("fork")
    q, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    name = "fleet-%s-%d" % (mode.replace(" ", "-"), qps)
    ps = [ctx.Process(target=_worker, args=(mode, port, name, qps, seconds, ready, go, q))
          for _ in range(procs)]
    for p in ps:
        p.start()
    for _ in ps:
        ready.get(timeout=120)
    calls0 = _script_calls(port)
    go.set()
    res = [q.get(timeout=120) for _ in ps]
    calls = _script_calls(port) - calls0
    for p in ps:
        p.join(30)
    n = sum(r[0] for r in res)
    ok = sum(r[1] for r in res)
    return {"mode": mode, "qps": qps, "decisions_s": n / seconds, "admitted_s": ok / seconds,
            "round_trips_pct": 100.0 * calls / n if n else 0.0}


def decision_cost(port: int, number: int, repeat: int = 15) -> Dict[str, float]:
    """ns per try_acquire, the minimum over `repeat` interleaved rounds of timeit: a private
    Limiter, a leased RedisLimiter with a slice, a private KeyedLimiter and a leased
    RedisKeyedLimiter with a slice for its key."""
    import functools

    import redis

    import slidewin
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    private = slidewin.Limiter(qps=1e12)
    pkeyed = slidewin.KeyedLimiter(qps=1e12)
    client = redis.Redis(port=port)
    leased = RedisLimiter(client, "cost", qps=10**9, lease=True)
    lkeyed = RedisKeyedLimiter(client, "costk", qps=10**9, lease=True)
    for _ in range(2000):
        leased.try_acquire()
        lkeyed.try_acquire("k")
    cases = (("private Limiter", private.try_acquire), ("lease=True", leased.try_acquire),
             ("private KeyedLimiter", functools.partial(pkeyed.try_acquire, "k")),
             ("keyed lease=True", functools.partial(lkeyed.try_acquire, "k")))
    out = {label: float("inf") for label, _ in cases}
    for _ in range(repeat):  # interleaved: each round times every case once (a noisy CPU)
        for label, f in cases:
            out[label] = min(out[label], timeit.timeit(f, number=number) / number * 1e9)
    leased.close()
    lkeyed.close()
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        print("redis-server not found: skipped")
        return
    try:
        import limits  # noqa: F401
        peers = ["limits moving window", "limits sliding window counter"]
    except ImportError:
        peers = []
        print("limits not installed: its cases skipped")
    seconds = 1.0 if quick else 3.0
    procs = 8
    server, port, d = _start_server(binary)
    try:
        load = os.getloadavg()[0]
        print("%s, %d client processes, %.0f s a case, load average %.2f at the start"
              % (os.path.basename(binary), procs, seconds, load))
        rows: List[Dict[str, Any]] = []
        for qps in (() if "--cost" in sys.argv else (10**7, 20_000)):
            for mode in ["per decision"] + peers + ["lease"]:
                rows.append(run_case(mode, port, qps, procs, seconds))
                r = rows[-1]
                print("  limit %8d/s  %-30s %10.0f decisions/s %10.0f admitted/s  "
                      "round trips %6.2f%% of decisions"
                      % (qps, r["mode"], r["decisions_s"], r["admitted_s"],
                         r["round_trips_pct"]))
        cost = decision_cost(port, 20_000 if quick else 100_000)
        print("  try_acquire: private Limiter %.0f ns, lease=True with a slice %.0f ns (%.1fx)"
              % (cost["private Limiter"], cost["lease=True"],
                 cost["lease=True"] / cost["private Limiter"]))
        print("  try_acquire(key): private KeyedLimiter %.0f ns, lease=True with a slice %.0f ns "
              "(%.1fx the private Limiter)"
              % (cost["private KeyedLimiter"], cost["keyed lease=True"],
                 cost["keyed lease=True"] / cost["private Limiter"]))
        print("load average %.2f at the end" % os.getloadavg()[0])
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
