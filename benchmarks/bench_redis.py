"""slidewin.redis against a local redis-server: one decision vs a bare PING round trip (the
floor), side by side with limits (RedisStorage: moving window, sliding window counter, fixed
window), pyrate-limiter's RedisBucket and throttled-py's Redis store; Redis memory per key.

Standalone (not wired into benchmarks/run.py):

    taskset -c 0 python benchmarks/bench_redis.py          # starts its own redis-server,
                                                           # pinned to the same CPU

On a 2-vCPU VM a loopback round trip between two CPUs is noisy (PING ~120 us on one CPU,
~380 us across), so the ratios are taken with the client and the server on one CPU: the
script pins the server it starts to the CPU it runs on (taskset).
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

import redis

from slidewin.redis import RedisKeyedLimiter, RedisLimiter


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server():
    port, d = free_port(), tempfile.mkdtemp(prefix="bench-redis-")
    cpus = sorted(os.sched_getaffinity(0))
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", d]
    if len(cpus) == 1 and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpus[0])] + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    c = redis.Redis(port=port)
    for _ in range(200):
        try:
            c.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    return p, port, d


def per_call_us(fn, n, rounds=5):
    best = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(best)


def peers(c, port):
    out = {}
    try:
        import limits
        from limits.storage import RedisStorage
        from limits.strategies import (FixedWindowRateLimiter, MovingWindowRateLimiter,
                                       SlidingWindowCounterRateLimiter)

        st = RedisStorage("redis://127.0.0.1:%d" % port)
        item = limits.parse("1000000/second")
        for label, cls in [("limits moving window", MovingWindowRateLimiter),
                           ("limits sliding window counter", SlidingWindowCounterRateLimiter),
                           ("limits fixed window", FixedWindowRateLimiter)]:
            lim = cls(st)
            out[label] = (lambda lim=lim: lim.hit(item, "bench"), "LIMITS*")
    except ImportError as e:
        print("limits not installed:", e)
    try:
        from pyrate_limiter import Duration, Limiter, Rate, RedisBucket

        bucket = RedisBucket.init([Rate(1_000_000, Duration.SECOND)], c, "pyrate-bench")
        pl = Limiter(bucket)
        out["pyrate-limiter RedisBucket"] = (lambda: pl.try_acquire("x"), "pyrate-bench*")
    except Exception as e:  # noqa: BLE001 - a peer's API drift must not stop the bench
        print("pyrate-limiter unavailable:", e)
    try:
        from throttled import RateLimiterType, Throttled, rate_limiter, store

        th = Throttled(key="bench", quota=rate_limiter.per_sec(1_000_000),
                       using=RateLimiterType.SLIDING_WINDOW.value,
                       store=store.RedisStore(server="redis://127.0.0.1:%d/0" % port))
        out["throttled-py sliding window"] = (lambda: th.limit("bench"), "*bench*")
    except Exception as e:  # noqa: BLE001
        print("throttled-py unavailable:", e)
    return out


def memory(c, pattern):
    keys = c.keys(pattern)
    if not keys:
        return None
    return max(c.memory_usage(k) or 0 for k in keys)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3000)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    n = 300 if a.quick else a.n
    proc, port, d = start_server()
    try:
        c = redis.Redis(port=port)
        print("redis-server %s, redis-py %s, CPUs %s" % (c.info()["redis_version"],
                                                       redis.__version__,
                                                       sorted(os.sched_getaffinity(0))))
        rows = []
        ping = per_call_us(c.ping, n)
        rows.append(("PING (the floor)", ping, None))
        mine = {
            "slidewin reject": RedisLimiter(c, "b1", qps=1e9),
            "slidewin throttle": RedisLimiter(c, "b2", qps=1e9, behavior="throttle"),
            "slidewin warm_up": RedisLimiter(c, "b3", qps=1e9, behavior="warm_up"),
        }
        for label, lim in mine.items():
            rows.append((label, per_call_us(lim.try_acquire, n), memory(c, lim.key)))
        per = RedisKeyedLimiter(c, "bk", qps=1e9)
        rows.append(("slidewin keyed reject (per key)",
                     per_call_us(lambda: per.try_acquire("user-1"), n),
                     memory(c, "slidewin:k:*")))
        for label, (fn, pat) in peers(c, port).items():
            rows.append((label, per_call_us(fn, n), memory(c, pat)))
        print("%-34s %10s %8s %12s" % ("", "us/call", "x PING", "bytes/key"))
        for label, us, mem in rows:
            print("%-34s %10.1f %8.2f %12s" % (label, us, us / ping, mem if mem else "-"))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
