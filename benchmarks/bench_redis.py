"""slidewin.redis against a local redis-server it starts: one decision next to a bare
redis-py PING round trip (the floor) and next to the peers' Redis modes on the same server
(limits' RedisStorage: moving window, sliding window counter, fixed window; pyrate-limiter's
RedisBucket; throttled-py's Redis store), with the server's own time per call and Redis
memory per key.

Client and server are pinned to one CPU (`sched_setaffinity`, inherited by the server): on a
2-vCPU VM a loopback round trip between two CPUs is noisy (PING ~120 us on one CPU, ~380 us
across). Every case runs once per round, the rounds interleaved, and each row is the median
over rounds. "server us" is `INFO commandstats` (usec / calls over the case's commands): the
time Redis spent inside the commands of one decision (a script's, with the commands it
calls). "cmds/call" counts a script's inner commands too. "bytes/key" is `MEMORY USAGE` of one
key right after the case's last round (it includes the key's name: slidewin's keyed key here is
`slidewin:k:{bk:suser-1}`, 23 characters; limits' is `LIMITS:LIMITER/bench/1000000/1/second`).

Standalone: `python benchmarks/bench_redis.py [--quick]` (writes results/redis.md and .json);
also the `redis` section of benchmarks/run.py, skipped when redis-server is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

TITLE = "Redis: one decision vs a PING round trip and the peers' Redis modes"
ABOUT = __doc__.split("\n\n", 1)[1].rsplit("\n\nStandalone", 1)[0]
HERE = os.path.dirname(os.path.abspath(__file__))
PING_LIMIT = 1.2  # a decision within 1.2x a bare PING round trip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(binary: str) -> Tuple[subprocess.Popen, int, str]:
    import redis

    port, d = _free_port(), tempfile.mkdtemp(prefix="bench-redis-")
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


def _peers(c: Any, port: int, log) -> Dict[str, Tuple[Callable[[], Any], str]]:
    """label -> (one decision, a key pattern for MEMORY USAGE)."""
    out: Dict[str, Tuple[Callable[[], Any], str]] = {}
    try:
        import limits
        from limits.storage import RedisStorage
        from limits.strategies import (FixedWindowRateLimiter, MovingWindowRateLimiter,
                                       SlidingWindowCounterRateLimiter)

        st = RedisStorage("redis://127.0.0.1:%d" % port)
        item = limits.parse("1000000/second")
        for label, cls, pat in [
            ("limits moving window", MovingWindowRateLimiter, "LIMITS:LIMITER/bench/*"),
            ("limits sliding window counter", SlidingWindowCounterRateLimiter,
             "LIMITS:LIMITER/bench-swc/*"),
            ("limits fixed window", FixedWindowRateLimiter, "LIMITS:LIMITER/bench-fw/*"),
        ]:
            lim = cls(st)
            key = {"limits moving window": "bench", "limits sliding window counter":
                   "bench-swc", "limits fixed window": "bench-fw"}[label]
            out[label] = (lambda lim=lim, key=key: lim.hit(item, key), pat)
    except ImportError as e:
        log("  limits not installed: %s" % e)
    try:
        from pyrate_limiter import Duration, Limiter, Rate, RedisBucket

        bucket = RedisBucket.init([Rate(1_000_000, Duration.SECOND)], c, "pyrate-bench")
        pl = Limiter(bucket)
        out["pyrate-limiter RedisBucket"] = (lambda: pl.try_acquire("x"), "pyrate-bench*")
    except Exception as e:  # noqa: BLE001 - a peer's API drift must not stop the bench
        log("  pyrate-limiter unavailable: %s" % e)
    try:
        from throttled import RateLimiterType, Throttled, rate_limiter, store

        th = Throttled(key="thr-bench", quota=rate_limiter.per_sec(1_000_000),
                       using=RateLimiterType.SLIDING_WINDOW.value,
                       store=store.RedisStore(server="redis://127.0.0.1:%d/0" % port))
        out["throttled-py sliding window"] = (lambda: th.limit("thr-bench"), "*thr-bench*")
    except Exception as e:  # noqa: BLE001
        log("  throttled-py unavailable: %s" % e)
    return out


def _memory(c: Any, pattern: str) -> Optional[int]:
    keys = c.keys(pattern)
    if not keys:
        return None
    return max(c.memory_usage(k) or 0 for k in keys)


_SCRIPTS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro",
            "cmdstat_fcall")


def _server_us(c: Any) -> Tuple[int, int]:
    """(commands, usec) of the top level: a script's usec already includes the commands it
    calls (which commandstats also lists), so those are left out where a script ran."""
    st = {k: v for k, v in c.info("commandstats").items()
          if k.startswith("cmdstat_") and k not in ("cmdstat_config", "cmdstat_info")}
    calls = sum(v["calls"] for v in st.values())
    if any(k in st for k in _SCRIPTS):
        usec = sum(v["usec"] for k, v in st.items() if k in _SCRIPTS)
    else:
        usec = sum(v["usec"] for v in st.values())
    return calls, usec


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    binary = shutil.which("redis-server")
    if binary is None:
        return {"skipped": "redis-server is not installed (apt-get install redis-server)"}
    try:
        import redis
    except ImportError:
        return {"skipped": "redis-py is not installed (pip install 'slidewin[redis]')"}
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    n = cfg.get("redis_n", 2000)
    rounds = cfg.get("redis_rounds", 9)
    old_aff = os.sched_getaffinity(0)
    cpu = min(old_aff)
    os.sched_setaffinity(0, {cpu})  # the server inherits it
    proc, port, d = _start_server(binary)
    try:
        c = redis.Redis(port=port)
        version = c.info()["redis_version"]
        log("  redis-server %s, redis-py %s, client and server on CPU %d; %d rounds of %d"
            % (version, redis.__version__, cpu, rounds, n))
        lim = RedisLimiter(c, "b1", qps=1e9)
        thr = RedisLimiter(c, "b2", qps=1e9, behavior="throttle")
        warm = RedisLimiter(c, "b3", qps=1e9, behavior="warm_up")
        per = RedisKeyedLimiter(c, "bk", qps=1e9)
        # the same decision through redis-py's public API (client.evalsha), the path of a
        # client the fast path does not know (slidewin/redis/_fast.py)
        pub = RedisLimiter(c, "b4", qps=1e9)
        pub._t.fast = False
        cases: Dict[str, Tuple[Callable[[], Any], Optional[str]]] = {
            "PING (the floor)": (c.ping, None),
            "slidewin RedisLimiter reject": (lim.try_acquire, lim.key),
            "slidewin RedisLimiter throttle": (thr.try_acquire, thr.key),
            "slidewin RedisLimiter warm_up": (warm.try_acquire, warm.key),
            "slidewin RedisKeyedLimiter reject": (lambda: per.try_acquire("user-1"),
                                                  "slidewin:k:*"),
            "public API (evalsha): RedisLimiter reject": (pub.try_acquire, pub.key),
        }
        for label, (fn, pat) in _peers(c, port, log).items():
            cases[label] = (fn, pat)
        for fn, _ in cases.values():  # warm: connections, scripts
            for _ in range(50):
                fn()
        times: Dict[str, List[float]] = {k: [] for k in cases}
        server: Dict[str, List[int]] = {k: [0, 0] for k in cases}
        memory: Dict[str, Optional[int]] = {}
        for rnd in range(rounds):
            for label, (fn, pat) in cases.items():
                c.config_resetstat()
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                times[label].append((time.perf_counter() - t0) / n * 1e6)
                calls, usec = _server_us(c)
                server[label][0] += calls
                server[label][1] += usec
                if rnd == rounds - 1 and pat:
                    # right after the case's last round: a key idle past its expiry (a
                    # window plus a second, when a loaded round takes longer) is gone
                    memory[label] = _memory(c, pat)
        ping = statistics.median(times["PING (the floor)"])
        rows = []
        for label, (fn, pat) in cases.items():
            us = statistics.median(times[label])
            calls, usec = server[label]
            rows.append({"label": label, "us": round(us, 1), "x_ping": round(us / ping, 3),
                         "server_us": round(usec / (n * rounds), 2),
                         "commands_per_call": round(calls / (n * rounds), 2),
                         "bytes_per_key": memory.get(label)})
        c.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)
        os.sched_setaffinity(0, old_aff)
    mine = [r for r in rows if r["label"].startswith("slidewin")]
    theirs = [r for r in rows if not r["label"].startswith(("slidewin", "PING"))]
    fixed = next((r for r in theirs if r["label"] == "limits fixed window"), None)
    targets = []
    for r in mine:
        targets.append({"target": "%s within %.1fx PING" % (r["label"], PING_LIMIT),
                        "measured": r["x_ping"], "limit": "<= %.1fx" % PING_LIMIT,
                        "met": r["x_ping"] <= PING_LIMIT})
    best = min(r["us"] for r in mine if "reject" in r["label"])
    for r in theirs:
        targets.append({"target": "slidewin reject faster than %s" % r["label"],
                        "measured": round(r["us"] / best, 2), "limit": "> 1x",
                        "met": r["us"] > best})
    if fixed and fixed["bytes_per_key"]:
        keyed = next(r for r in mine if "Keyed" in r["label"])
        targets.append({"target": "keyed bytes/key <= limits fixed window",
                        "measured": keyed["bytes_per_key"],
                        "limit": "<= %d" % fixed["bytes_per_key"],
                        "met": keyed["bytes_per_key"] <= fixed["bytes_per_key"]})
    return {"server": "redis-server " + version, "redis_py": redis.__version__,
            "cpu": cpu, "rounds": rounds, "n": n, "rows": rows, "targets": targets}


def _table(res) -> Tuple[List[str], List[List[str]]]:
    head = ["", "us/call", "x PING", "server us", "cmds/call", "bytes/key"]
    body = []
    for r in res["rows"]:
        body.append([r["label"], "%.1f" % r["us"], "%.2f" % r["x_ping"],
                     "-" if r["server_us"] is None else "%.1f" % r["server_us"],
                     "%.2f" % r["commands_per_call"],
                     "-" if r["bytes_per_key"] is None else str(r["bytes_per_key"])])
    return head, body


def render_text(res) -> str:
    head, body = _table(res)
    out = ["%s, redis-py %s, client and server pinned to CPU %d, median of %d rounds of %d"
           % (res["server"], res["redis_py"], res["cpu"], res["rounds"], res["n"]),
           "%-36s %9s %8s %10s %10s %10s" % tuple(head)]
    for b in body:
        out.append("%-36s %9s %8s %10s %10s %10s" % tuple(b))
    for t in res["targets"]:
        out.append("  %-60s %8s  %-8s %s" % (t["target"], t["measured"], t["limit"],
                                             "met" if t["met"] else "NOT MET"))
    return "\n".join(out)


def render_md(res) -> str:
    from common import md_table

    head, body = _table(res)
    t = [[x["target"], str(x["measured"]), x["limit"], "yes" if x["met"] else "**no**"]
         for x in res["targets"]]
    return "\n".join([
        "%s, redis-py %s, client and server pinned to CPU %d, median of %d interleaved "
        "rounds of %d calls." % (res["server"], res["redis_py"], res["cpu"], res["rounds"],
                                 res["n"]), "",
        md_table(head, body, "lrrrrr"), "", md_table(["target", "measured", "limit", "met"],
                                                     t, "lrll")])


def main(argv=None) -> int:
    import argparse
    import datetime

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "redis"))
    a = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    cfg = {"redis_n": 200, "redis_rounds": 3} if a.quick else {"redis_n": a.n,
                                                                "redis_rounds": a.rounds}
    res = run(cfg, lambda m: print(m, flush=True))
    if res.get("skipped"):
        print("skipped:", res["skipped"])
        return 0
    print(render_text(res))
    if not a.quick:
        res["date"] = datetime.datetime.now().isoformat(timespec="seconds")
        res["loadavg"] = os.getloadavg()
        with open(a.out + ".json", "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        with open(a.out + ".md", "w") as f:
            f.write("# %s\n\n_%s, load average %s._\n\n%s\n\n%s\n" % (
                TITLE, res["date"], ", ".join("%.2f" % x for x in res["loadavg"]),
                ABOUT.strip(), render_md(res)))
        print("wrote", os.path.relpath(a.out + ".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
