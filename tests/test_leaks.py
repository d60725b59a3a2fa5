"""Leak tests, each in a fresh interpreter (a subprocess), in two parts.

Mixed workloads: a workload runs once small (to warm caches and free lists), then the
reference count of every type of the package and the process RSS are taken; the full
workload (100_000 objects created and freed, 1_000_000 updates) runs again and both must
stay flat. Then a tenth of the workload runs under tracemalloc, whose traced size must stay
flat too (small slack everywhere).

Type by type: Metric (standalone and `lim.metric` views), Limiter (each behavior, a Python
subclass with on_block), Entry (sync, async, exceptions, never exited, cancelled while
queued, entered twice), the decorators (functions, coroutines, generators and async
generators, finished, closed or failing), Bucket, Stats, BlockedError (raised and caught,
with retry_after and limiter), and every error path of the constructors. Each case runs its
cycle (create, use, free) for a warm-up round and then three measured rounds of N cycles
under tracemalloc. Between the first and the last measured round: `sys.getrefcount` of
every type of the package must not grow (a leaked reference per object would add N),
tracemalloc's current size must stay flat and its peak must not climb (a leaked 16-byte
block per cycle would add 16 * N bytes). Small slack for free lists and caches. The
in-flight count of every limiter must end at 0.

The subprocesses run from tests/, not the source root: `python -c` puts its cwd first on
sys.path, and the source tree's slidewin/ (no built extension after a plain `pip install .`)
would shadow the installed package.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

# ==== mixed workloads ====================================================================

PRELUDE = textwrap.dedent(
    """
    import asyncio, gc, json, sys, tracemalloc
    import slidewin
    from slidewin import BlockedError, Event, KeyedLimiter, Limiter, Metric, limit
    from slidewin import _core

    def package_types():
        seen = {}
        for mod in (slidewin, slidewin._core):
            for v in vars(mod).values():
                if isinstance(v, type):
                    seen[id(v)] = v
        m = Metric(1000, 2)
        lim = Limiter(qps=10)
        kl = KeyedLimiter(qps=10)
        for obj in (m.buckets(now_ns=0)[0], lim.stats(now_ns=0), lim.entry(), lim.metric,
                    kl.entry("k")):
            seen[id(type(obj))] = type(obj)
        return list(seen.values())

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def measure(types):
        gc.collect()
        return [sys.getrefcount(t) for t in types], tracemalloc.get_traced_memory()[0], rss()

    def decorated(deco, scale):
        # a function and a coroutine function under one decorator: the function called
        # 20_000 * scale times, the coroutine function returned (for the workload's loop)
        def f(x):
            return x

        async def g(x):
            return x

        f = deco(f)
        for i in range(int(20_000 * scale)):
            f(i)
        return deco(g)

    def run(workload):
        types = package_types()
        # full size without tracemalloc (it slows Python ~20x): references and RSS
        workload(0.1)
        r0, _, s0 = measure(types)
        workload(1.0)
        r1, _, s1 = measure(types)
        # a tenth of it under tracemalloc: 10_000 objects, 100_000 updates
        tracemalloc.start()
        workload(0.05)
        _, m0, _ = measure(types)
        workload(0.1)
        _, m1, _ = measure(types)
        tracemalloc.stop()
        grew = {t.__qualname__: b - a for t, a, b in zip(types, r0, r1) if b != a}
        print(json.dumps({"refs": grew, "traced": m1 - m0, "rss": s1 - s0}))
    """
)

METRIC = textwrap.dedent(
    """
    def workload(scale):
        k = int(100_000 * scale)
        for i in range(k):
            m = Metric(60_000, 60) if i % 2 else Metric(1000, 2, events=("a", "b"))
            m.add(0, 3, now_ns=i * 1000)
            if i % 2:
                m.add_rt(i % 100, now_ns=i * 1000)
                m.avg_rt(now_ns=i * 1000)
                m.min_rt(now_ns=i * 1000)
            else:
                m.add("b", now_ns=i * 1000)
            m.sum(0, now_ns=i * 1000)
            m.rate(0, now_ns=i * 1000)
            m.previous(0, now_ns=i * 1000)
            m.buckets(now_ns=i * 1000)
            repr(m)
            _core._noop()
            del m
        m = Metric(1000, 2)
        add = m.add
        for i in range(int(1_000_000 * scale)):
            add(Event.PASS, 1, now_ns=i * 997)
        m.reset()
        for i in range(int(10_000 * scale)):
            for bad in (lambda: m.add("nope"), lambda: m.add(0, -1), lambda: m.add(0, 1.5),
                        lambda: m.sum(0, now_ns=-1), lambda: Metric(1000, 3)):
                try:
                    bad()
                except (TypeError, ValueError):
                    pass

    run(workload)
    """
)

LIMITER = textwrap.dedent(
    """
    def workload(scale):
        k = int(100_000 * scale)
        behaviors = ["reject", "warm_up", "throttle", "warm_up_throttle"]
        for i in range(k):
            lim = Limiter(qps=10, behavior=behaviors[i % 4]) if i % 5 else Limiter(concurrency=2)
            lim.try_acquire(now_ns=i * 10**6)
            lim.reserve(now_ns=i * 10**6, prioritized=True)
            lim.stats(now_ns=i * 10**6)
            lim.metric.sum(0, now_ns=i * 10**6)
            repr(lim)
            _core._noop()
            _core._try_acquire_nogil(lim, now_ns=i * 10**6)
            del lim
        lim = Limiter(qps=10**9, interval_ms=60_000, sample_count=60)
        for i in range(int(1_000_000 * scale)):
            lim.try_acquire(now_ns=i * 10**6)
        for i in range(k):
            with lim.entry():
                pass
        for i in range(int(20_000 * scale)):
            try:
                with lim.entry():
                    raise KeyError(i)
            except KeyError:
                pass
        blocked = Limiter(qps=0)
        for i in range(k):
            try:
                blocked.acquire(timeout=0)
            except BlockedError as e:
                assert e.limiter is blocked
        for i in range(int(10_000 * scale)):
            e = BlockedError("x", retry_after=1.0, limiter=blocked)
            del e
        conc = Limiter(concurrency=1)
        for i in range(int(20_000 * scale)):
            conc.acquire(timeout=0)
            try:
                conc.acquire(timeout=0)
            except BlockedError:
                pass
            conc.release()
            try:
                conc.release()
            except ValueError:
                pass

        g = decorated(limit(qps=10**9), scale)

        async def amain():
            for i in range(int(20_000 * scale)):
                await g(i)
                async with lim.entry():
                    pass
                await lim.acquire_async(timeout=0)
                try:
                    await blocked.acquire_async(timeout=0)
                except BlockedError:
                    pass

        asyncio.run(amain())

    run(workload)
    """
)


KEYED = textwrap.dedent(
    """
    def workload(scale):
        k = int(100_000 * scale)
        for i in range(k):
            kinds = (dict(qps=10), dict(qps=10, behavior="throttle"), dict(concurrency=2))
            kl = KeyedLimiter(**kinds[i % 3], max_keys=4, overrides={"vip": 5, 7: 3})
            kl.try_acquire(i % 7, now_ns=i * 10**6)
            kl.try_acquire(b"x" * (i % 300), now_ns=i * 10**6)
            kl.try_acquire(str(i), now_ns=i * 10**6)
            kl.try_acquire(10**30 + i, now_ns=i * 10**6)
            kl.reserve("vip", now_ns=i * 10**6)
            kl.stats(now_ns=i * 10**6)
            kl.overrides = {"a": 1}
            repr(kl)
            len(kl)
            del kl
        kl = KeyedLimiter(qps=10**9, max_keys=1000)
        for i in range(int(1_000_000 * scale)):
            kl.try_acquire(i % 5000, now_ns=i * 10**6)
        for i in range(k):
            with kl.entry(i % 100):
                pass
        for i in range(int(20_000 * scale)):
            try:
                with kl.entry("e"):
                    raise KeyError(i)
            except KeyError:
                pass
        conc = KeyedLimiter(concurrency=1)
        for i in range(int(20_000 * scale)):
            conc.acquire("c", timeout=0)
            try:
                conc.acquire("c", timeout=0)
            except BlockedError as e:
                assert e.limiter is conc
            conc.release("c")
            for bad in (lambda: conc.release("c"), lambda: conc.try_acquire(1.5),
                        lambda: KeyedLimiter(qps=1, overrides={"a": -1})):
                try:
                    bad()
                except (TypeError, ValueError):
                    pass

        g = decorated(kl(key=lambda x: x % 10), scale)

        async def amain():
            for i in range(int(20_000 * scale)):
                await g(i)
                async with kl.entry("a"):
                    pass
                await kl.acquire_async("b", timeout=0)
                try:
                    await conc.acquire_async("c", timeout=0)
                    conc.release("c")
                except BlockedError:
                    pass

        asyncio.run(amain())

    run(workload)
    """
)


def run_leak_check(body):
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + body],
        # not the source root: `python -c` puts its cwd first on sys.path, and the source
        # tree's slidewin/ (no built extension after a plain `pip install .`) would shadow
        # the installed package
        cwd=os.path.dirname(os.path.abspath(__file__)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("body", [METRIC, LIMITER, KEYED], ids=["metric", "limiter", "keyed"])
def test_no_leaks(body):
    res = run_leak_check(body)
    # a leak of one reference per object would show as ~100_000
    assert all(abs(v) <= 10 for v in res["refs"].values()), res
    # a leaked 16-byte block per object would show as >= 160_000 (10_000 objects)
    assert res["traced"] < 32 * 1024, res
    # 100_000 leaked states of a 60-bucket window would be hundreds of MB; under ASan
    # (SLIDEWIN_UNDER_ASAN, .ci/asan.sh) the allocator's quarantine grows RSS by ~500 MB
    # whatever the code does, so only the reference and tracemalloc checks hold there
    if not os.environ.get("SLIDEWIN_UNDER_ASAN"):
        assert res["rss"] < 32 * 1024 * 1024, res


def test_leak_check_detects_a_leak():
    """The harness itself works: a deliberate leak of references is reported."""
    body = textwrap.dedent(
        """
        keep = []
        def workload(scale):
            for i in range(int(10_000 * scale)):
                keep.append(Metric(1000, 2))
        run(workload)
        """
    )
    res = run_leak_check(body)
    assert res["refs"].get("Metric", 0) >= 9000
    assert res["traced"] > 32 * 1024


# ==== type by type =======================================================================

N = 800 if os.environ.get("SLIDEWIN_UNDER_ASAN") else 2000
SLACK_BYTES = 4 * 1024  # measured: 736 B (the rounds list); 16 B leaked a cycle is 12-32 KiB

HARNESS = textwrap.dedent(
    """
    import asyncio, gc, json, sys, tracemalloc
    import slidewin
    from slidewin import BlockedError, Bucket, Event, Limiter, Metric, Stats, limit

    N = int(sys.argv[1])
    MS = 10**6
    S = 10**9
    live = []          # limiters whose in-flight count must end at 0

    def package_types():
        seen = {}
        for mod in (slidewin, slidewin._core, slidewin._limiter):
            for v in vars(mod).values():
                if isinstance(v, type) and v.__module__.startswith("slidewin"):
                    seen[id(v)] = v
        lim = Limiter(qps=10)
        for obj in (lim.entry(), lim.metric, lim.stats(now_ns=0), Metric().buckets(now_ns=0)[0]):
            seen[id(type(obj))] = type(obj)
        return list(seen.values())

    def main(cycle):
        types = package_types()
        tracemalloc.start()
        rounds = []
        for r in range(4):
            for i in range(N):
                cycle(i)
            gc.collect()
            tracemalloc.reset_peak()
            cur, _ = tracemalloc.get_traced_memory()
            for i in range(N):
                cycle(i)
            gc.collect()
            cur2, peak = tracemalloc.get_traced_memory()
            rounds.append({"refs": [sys.getrefcount(t) for t in types], "cur": cur2,
                           "peak": peak})
        tracemalloc.stop()
        first, last = rounds[1], rounds[-1]
        print(json.dumps({
            "refs": {t.__qualname__: b - a
                     for t, a, b in zip(types, first["refs"], last["refs"]) if b != a},
            "cur": last["cur"] - first["cur"],
            "peak": last["peak"] - first["peak"],
            "in_flight": [lim.in_flight for lim in live],
        }))
    """
)

CASES = {
    "metric_standalone": """
        def cycle(i):
            m = Metric(1000, 2) if i % 2 else Metric(60_000, 60, events=("a", "b", "c"))
            t = i * 7 * MS
            m.add(0, 2, now_ns=t)
            m.add(1, now_ns=max(t - S, 0))  # clamped
            m.sum(0, now_ns=t); m.rate(1, now_ns=t); m.current(0, now_ns=t)
            m.previous(0, now_ns=t); m.buckets(now_ns=t); repr(m); m.events
            if i % 2:
                m.add_rt(i % 50, now_ns=t); m.min_rt(now_ns=t); m.avg_rt(now_ns=t)
            m.reset()
    """,
    "metric_view": """
        lim = Limiter(qps=10**6)
        def cycle(i):
            v = lim.metric
            t = i * MS
            v.add(Event.SUCCESS, now_ns=t); v.sum("pass", now_ns=t); v.buckets(now_ns=t)
            v.add_rt(3, now_ns=t); v.min_rt(now_ns=t); repr(v)
            w = Limiter(qps=5).metric  # the view outlives its (otherwise dropped) limiter
            w.add(0, now_ns=t); w.sum(0, now_ns=t)
    """,
    "bucket": """
        m = Metric(100, 10)
        def cycle(i):
            m.add(i % 6, now_ns=i * 10 * MS)
            for b in m.buckets(now_ns=i * 10 * MS):
                b.start_ms, b.counts, b.min_rt, tuple(b), repr(b)
    """,
    "stats": """
        lims = [Limiter(qps=10), Limiter(concurrency=3), Limiter(qps=5, behavior="throttle")]
        def cycle(i):
            for lim in lims:
                s = lim.stats(now_ns=i * MS)
                s.pass_qps, s.block_qps, s.avg_rt_ms, s.concurrency, s.waiting, tuple(s)
                repr(s)
    """,
    "blocked_error": """
        lim = Limiter(qps=0)
        thr = Limiter(qps=1, behavior="throttle", max_queueing_ms=0)
        def cycle(i):
            try:
                lim.acquire(timeout=0)
            except BlockedError as e:
                assert e.limiter is lim and e.retry_after is None
            thr.reserve(now_ns=10 * S)
            try:
                thr.acquire()
            except BlockedError as e:
                assert e.retry_after is not None and e.limiter is thr
                str(e); repr(e); e.args
            e = BlockedError("x", retry_after=1.5, limiter=lim)
            try:
                raise e
            except BlockedError as caught:
                caught.__traceback__  # a frame cycle: collected by gc
            del e
            BlockedError(); BlockedError("y", limiter=None)
            try:
                BlockedError("z", retry_after=-1)
            except ValueError:
                pass
    """,
    "entry_sync": """
        lim = Limiter(concurrency=4); live.append(lim)
        qps = Limiter(qps=10**9); live.append(qps)
        def cycle(i):
            with lim.entry(2):
                pass
            try:
                with qps.entry():
                    raise KeyError(i)
            except KeyError:
                pass
            try:
                with lim.entry():
                    raise SystemExit  # BaseException: nothing counted, released
            except SystemExit:
                pass
            e = lim.entry(); e.n; e.limiter; repr(e)
            try:
                e.__exit__(None, None, None)  # not entered
            except RuntimeError:
                pass
            with e:
                try:
                    e.__enter__()  # twice
                except RuntimeError:
                    pass
    """,
    "entry_never_exited": """
        lim = Limiter(concurrency=2); live.append(lim)
        def cycle(i):
            e = lim.entry()
            e.__enter__()
            del e  # dropped while entered: the in-flight count comes back
            assert lim.in_flight == 0
    """,
    "entry_async": """
        lim = Limiter(concurrency=3); live.append(lim)
        qps = Limiter(qps=10**9); live.append(qps)

        async def body(i):
            async with lim.entry():
                pass
            try:
                async with qps.entry(2):
                    raise ValueError(i)
            except ValueError:
                pass
            e = lim.entry()
            await e.__aenter__()
            try:
                await e.__aenter__()  # twice: refused, no second in-flight count
            except RuntimeError:
                pass
            await e.__aexit__(None, None, None)
            await lim.acquire_async(timeout=0); lim.release()

        loop = asyncio.new_event_loop()
        def cycle(i):
            loop.run_until_complete(body(i))
    """,
    "entry_async_cancelled_while_queued": """
        # a throttle queues the entry (wait > 0); cancelling it gives the slot back
        lim = Limiter(qps=10**5, behavior="throttle", max_queueing_ms=1000); live.append(lim)

        async def one():
            async with lim.entry():
                await asyncio.sleep(0)

        async def body():
            tasks = [asyncio.ensure_future(one()) for _ in range(4)]
            await asyncio.sleep(0)
            tasks[-1].cancel()
            for t in tasks:
                try:
                    await t
                except asyncio.CancelledError:
                    pass

        loop = asyncio.new_event_loop()
        def cycle(i):
            if i % 10 == 0:
                loop.run_until_complete(body())
    """,
    "decorators": """
        @limit(qps=10**9)
        def f(x):
            return x

        @limit(qps=10**9)
        async def g(x):
            return x

        @limit(qps=0, on_block=lambda err, x: ("busy", err.limiter is not None))
        def h(x):
            return x

        @limit(concurrency=0, on_block=lambda err, x: "busy")
        async def k(x):
            return x

        live.extend([f.limiter, g.limiter, h.limiter, k.limiter])
        loop = asyncio.new_event_loop()
        def cycle(i):
            f(i); h(i)
            loop.run_until_complete(g(i)); loop.run_until_complete(k(i))
    """,
}

for _b in ("reject", "warm_up", "throttle", "warm_up_throttle"):
    CASES["limiter_" + _b] = """
        def cycle(i):
            lim = Limiter(qps=10, behavior=%r, interval_ms=1000, sample_count=2)
            t = i * 37 * MS
            lim.try_acquire(now_ns=t); lim.reserve(2, now_ns=t)
            lim.reserve(now_ns=t, prioritized=True); lim.stats(now_ns=t)
            lim.metric.sum(0, now_ns=t); repr(lim); lim.qps; lim.behavior
            lim.reserve(10**6, now_ns=t)  # never admissible: BLOCK / NEVER
            try:
                lim.release()
            except ValueError:
                pass
    """ % _b

CASES["upstream"] = """
    from slidewin import Upstream
    headers = {"x-ratelimit-remaining-tokens": "900000", "x-ratelimit-reset-tokens": "1s",
               "retry-after": "junk"}
    api = Upstream(requests="1000000000/second", tokens="1000000000000/second", concurrency=2)
    def cycle(i):
        with api.call(tokens=50, timeout=5) as c:
            c.observe(200, headers, tokens=20 if i % 2 else 80)
        with api.call(tokens=0) as c:
            c.observe(429, {"retry-after-ms": "0"})
        try:
            with api.call(tokens=10, timeout=5):
                raise KeyError(i)
        except KeyError:
            pass
        assert api._conc_lim.in_flight == 0
        api.stats(); repr(api)
        other = Upstream(requests="1000000/second", tokens="1000000000/second", concurrency=2)
        with other.call(tokens=5) as c:
            c.observe(200, headers, tokens=1)
"""

CASES["limiter_concurrency"] = """
    def cycle(i):
        lim = Limiter(concurrency=2)
        lim.try_acquire(); lim.try_acquire(); lim.try_acquire()
        lim.release(2)
        try:
            lim.acquire(3, timeout=0)
        except BlockedError:
            pass
        lim.acquire(timeout=0.0); lim.release()
        lim.stats(); repr(lim); assert lim.in_flight == 0
"""

CASES["limiter_subclass_on_block"] = """
    class MyLimiter(Limiter):
        pass

    def handler(err, *a):
        return None

    def cycle(i):
        lim = MyLimiter(qps=0, on_block=handler)
        lim(lambda: None)()  # blocked: on_block called with the error
        lim2 = MyLimiter(qps=10, on_block=lambda err: None)
        lim2.try_acquire(now_ns=i * MS); repr(lim2)
"""

CASES["constructor_errors"] = """
    def cycle(i):
        for bad in (lambda: Metric(1000, 3), lambda: Metric(events=("a", "a")),
                    lambda: Metric(events=("a", 1)), lambda: Metric(events=["x"] * 33),
                    lambda: Metric(events={"a", "b"}), lambda: Metric(events="ab"),
                    lambda: Limiter(qps=0.5), lambda: Limiter(qps=float("nan")),
                    lambda: Limiter(qps=1e15, cold_factor=1.0000001),
                    lambda: Limiter(qps=10, behavior="nope"), lambda: Limiter(),
                    lambda: Limiter(concurrency=1, behavior="throttle"),
                    lambda: Limiter(qps=10, foo=1), lambda: Limiter(qps=1, on_block=3),
                    lambda: BlockedError("x", retry_after="1")):
            try:
                bad()
            except (TypeError, ValueError):
                pass
"""

CASES["decorated_generators"] = """
    lim = limit(concurrency=1); live.append(lim)

    @lim
    def numbers(k):
        yield from range(k)

    @lim
    def failing():
        yield 1
        raise KeyError("k")

    def cycle(i):
        assert sum(numbers(3)) == 3
        g = numbers(3); next(g); g.close()
        g = numbers(3); next(g); del g  # abandoned: collected, closed
        try:
            list(failing())
        except KeyError:
            pass
"""

CASES["decorated_async_generators"] = """
    lim = limit(concurrency=1); live.append(lim)
    blocked = limit(concurrency=0, on_block=lambda err: ["busy"]); live.append(blocked)

    @lim
    async def numbers(k):
        for j in range(k):
            yield j

    @blocked
    async def refused():
        yield 1

    async def body():
        assert [x async for x in numbers(3)] == [0, 1, 2]
        g = numbers(3)
        await g.__anext__()
        await g.aclose()
        assert [x async for x in refused()] == ["busy"]

    loop = asyncio.new_event_loop()
    def cycle(i):
        loop.run_until_complete(body())
"""

CASES["method_errors"] = """
    m = Metric()
    lim = Limiter(qps=10)
    def cycle(i):
        for bad in (lambda: m.add("nope"), lambda: m.add(0, -1), lambda: m.add(0, True),
                    lambda: m.sum(0, now_ns=2**63), lambda: m.buckets(now_ns=-1),
                    lambda: m.add(0, 1, 2), lambda: m.add(0, x=1),
                    lambda: lim.try_acquire(0), lambda: lim.reserve(prioritized=1),
                    lambda: lim.acquire(timeout="1"), lambda: lim.entry(1.0),
                    lambda: lim.stats(now_ns=1.5), lambda: lim.release(2**64)):
            try:
                bad()
            except (TypeError, ValueError):
                pass
"""


def run_case(body, n=N):
    script = HARNESS + textwrap.dedent(body) + "\nmain(cycle)\n"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=600,
        cwd=os.path.dirname(os.path.abspath(__file__)),  # not the source root: no shadowing
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_flat_over_many_cycles(case):
    res = run_case(CASES[case])
    assert all(abs(v) <= 3 for v in res["refs"].values()), res
    assert res["cur"] < SLACK_BYTES, res
    # asyncio cases run on the real clock: how many tasks and timer handles are alive at the
    # peak depends on scheduling (seen: 5 KiB on CPython 3.9), so their peak gets more slack;
    # a leak there still shows in `cur` (16 B a cycle is >= 12 KiB)
    peak_slack = 4 * SLACK_BYTES if "async" in case else SLACK_BYTES
    assert res["peak"] < peak_slack, res
    assert all(v == 0 for v in res["in_flight"]), res


def test_harness_sees_a_leaked_reference_and_block():
    res = run_case("""
        keep = []
        def cycle(i):
            keep.append(Limiter(qps=10).stats(now_ns=0))
    """, n=1000)
    assert res["refs"].get("Stats", 0) >= 1000
    assert res["cur"] > SLACK_BYTES


def test_harness_sees_a_leaked_in_flight_count():
    res = run_case("""
        lim = Limiter(concurrency=10**9); live.append(lim)
        keep = []
        def cycle(i):
            e = lim.entry(); e.__enter__(); keep.append(e)
    """, n=200)
    assert res["in_flight"] != [0]
