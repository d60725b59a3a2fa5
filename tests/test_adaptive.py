"""AdaptiveLimiter: a concurrency limit learned from the traffic.

The algorithms are driven in virtual time (explicit ``now_ns``) against a small simulated
processor-sharing backend, so every run is the same; the limiter's faces (entry, decorator,
asyncio, try_acquire/release, BlockedError, names, totals, update, pickling, ``shared=``
across two real processes) are checked as for a Limiter.
"""

from __future__ import annotations

import asyncio
import heapq
import os
import pickle
import subprocess
import sys

import random

import pytest

import slidewin
from slidewin import AdaptiveLimiter, BlockedError

MS = 1_000_000


def simulate(lim, phases, clients, work_ms=20.0, retry_ms=20.0, noise=0.0):
    """Closed-loop clients against a processor-sharing backend (latency = work x max(1,
    in flight / capacity)), in virtual time, through the real limiter with explicit now_ns.
    phases: [(seconds, capacity)]; noise: the work of a call is uniform in work_ms x
    [1 - noise, 1 + noise] (seeded). Returns per phase (completions, refusals, mean latency
    ms, the limit at the end)."""
    rng = random.Random(23)
    t = 0.0  # ms
    service = 0.0  # attained service per call (ms of work) since the start
    running = []  # heap of (service at which it finishes, start time)
    ready = [(i * 1.0 % retry_ms, i) for i in range(clients)]  # heap of (time, client)
    heapq.heapify(ready)
    out = []
    end = 0.0
    for seconds, cap in phases:
        end += seconds * 1000.0
        done = refused = 0
        lat = 0.0
        while True:
            n = len(running)
            rate = min(1.0, cap / n) if n else 1.0
            t_done = t + (running[0][0] - service) / rate if n else float("inf")
            t_ready = ready[0][0] if ready else float("inf")
            t_next = min(t_done, t_ready, end)
            service += (t_next - t) * rate if n else 0.0
            t = t_next
            if t >= end and t_next == end and t_done > end and t_ready > end:
                break
            now_ns = int(t * MS)
            if t_done <= t_ready:
                _, started = heapq.heappop(running)
                lim.release(rt_ms=t - started, now_ns=now_ns)
                done += 1
                lat += t - started
                heapq.heappush(ready, (t, -1))
            else:
                heapq.heappop(ready)
                if lim.try_acquire(now_ns=now_ns):
                    work = work_ms * (1.0 + noise * (2.0 * rng.random() - 1.0)) if noise else work_ms
                    heapq.heappush(running, (service + work, t))
                else:
                    refused += 1
                    heapq.heappush(ready, (t + retry_ms, -1))
        out.append((done, refused, lat / max(done, 1), lim.limit))
    for _, started in running:  # the calls still running end (at the end, out of the counts)
        lim.release(rt_ms=t - started, now_ns=int(t * MS))
    return out


# ------------------------------------------------------------------------- the algorithms

class Spy:
    """A limiter for simulate() that notes the limit in force at every decision."""

    def __init__(self, lim, seen):
        self.lim, self.seen = lim, seen

    def try_acquire(self, now_ns):
        self.seen.append(self.lim.limit)
        return self.lim.try_acquire(now_ns=now_ns)

    def release(self, **kw):
        self.lim.release(**kw)

    @property
    def limit(self):
        return self.lim.limit


def test_gradient_follows_capacity_halved_and_doubled():
    lim = AdaptiveLimiter(algorithm="gradient")
    res = simulate(lim, [(20, 40), (20, 20), (20, 40)], clients=120)
    for (done, refused, lat, limit), cap in zip(res, (40, 20, 40)):
        assert cap <= limit <= cap * 1.25 + (cap * 1.25) ** 0.5 + 1, (cap, res)
        assert done * 20.0 / (20_000 * cap) >= 0.9, (cap, res)  # goodput
        assert lat <= 1.6 * 20.0, (cap, res)  # no queue builds up
        assert refused > 0


@pytest.mark.parametrize("noise", [0.0, 0.5])
@pytest.mark.parametrize("clients", [120, 400])
def test_bbr_does_not_ratchet_up_under_overload(clients, noise):
    """Sentinel's/aegis' rule alone holds any level above the capacity (by Little's law the
    max pass rate x min RT is the level in flight), and the max/min selections push it up:
    the limit ratcheted to 3-40x the capacity with RTs queued 5-13x. slidewin's bbr re-measures
    the min RT drained (docs/adaptive.md): the limit stays within a factor of C, and the
    backend's queue with it."""
    lim = AdaptiveLimiter(algorithm="bbr")
    limits = []
    res = simulate(Spy(lim, limits), [(20, 40), (20, 20), (20, 40)], clients=clients, noise=noise)
    for (done, refused, lat, limit), cap in zip(res, (40, 20, 40)):
        assert cap / 2 <= limit <= cap * 2, (cap, res)
        assert done * 20.0 / (20_000 * cap) >= 0.9, (cap, res)  # goodput
        assert lat <= 1.6 * 20.0, (cap, res)  # no queue builds up
    assert max(limits[len(limits) // 6:]) <= 2 * 40 * 1.25, max(limits)  # past the cold start


@pytest.mark.parametrize("algorithm", ["bbr", "gradient"])
def test_fewer_callers_than_capacity_are_never_refused(algorithm):
    lim = AdaptiveLimiter(algorithm=algorithm)
    (done, refused, lat, limit), = simulate(lim, [(30, 40)], clients=10)
    assert refused == 0 and done > 10_000
    assert lim.totals()["block"] == 0


def closed_loop_no_capacity(lim, clients, rt_ms=10.0, jitter=True, seconds=30, seed=1):
    """Closed-loop clients against a backend without a capacity limit (the RT does not depend
    on the load): a call takes rt_ms (x uniform [0.5, 1.5] with jitter), then the client
    thinks 0-2 ms; a refused client tries again after rt_ms. Virtual time, seeded. Returns
    (passed, refused)."""
    rng = random.Random(seed)
    t0 = 10**12
    end = t0 + seconds * 10**9
    events = [(t0 + rng.randint(0, int(rt_ms * MS)), i, None) for i in range(clients)]
    heapq.heapify(events)
    passed = refused = 0
    while events:
        t, i, rt = heapq.heappop(events)
        if t > end:
            break
        if rt is None:  # a call starts
            if lim.try_acquire(now_ns=t):
                passed += 1
                rt = rt_ms * (rng.uniform(0.5, 1.5) if jitter else 1.0)
                heapq.heappush(events, (t + int(rt * MS), i, rt))
            else:
                refused += 1
                heapq.heappush(events, (t + int(rt_ms * MS), i, None))
        else:  # a call ends
            lim.release(rt_ms=rt, now_ns=t)
            heapq.heappush(events, (t + rng.randint(0, 2 * MS), i, None))
    return passed, refused


@pytest.mark.parametrize("jitter", [True, False])
@pytest.mark.parametrize("clients", [5, 10, 19])
@pytest.mark.parametrize("algorithm", ["bbr", "gradient"])
def test_a_backend_without_a_capacity_limit_is_never_refused(algorithm, clients, jitter):
    """With fewer callers than the capacity nothing is refused (docs/adaptive.md), here with no
    capacity at all: the RT does not grow with the load. Sentinel's/aegis' bound (max pass x
    min RT) is the AVERAGE level in flight, which a healthy load's instantaneous level
    exceeds half the time; slidewin's bbr enforces it only on evidence of queueing
    (docs/adaptive.md): it refuses none of these calls."""
    lim = AdaptiveLimiter(algorithm=algorithm)
    passed, refused = closed_loop_no_capacity(lim, clients, jitter=jitter)
    assert refused == 0, (passed, refused)
    assert passed > clients * 2000
    assert lim.totals()["block"] == 0


def _bench_adaptive():
    """benchmarks/bench_adaptive.py, whose simulators the tests share (one model of a
    backend, not two)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "benchmarks", "bench_adaptive.py")
    spec = importlib.util.spec_from_file_location("_bench_adaptive_for_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = _bench_adaptive()


@pytest.mark.parametrize("workload", bench.KEEPS_UP, ids=["bimodal", "fast_with_slow_tenth",
                                                          "rare_outliers_of_30s"])
@pytest.mark.parametrize("algorithm", ["bbr", "gradient"])
def test_refuses_nothing_once_warmed_up_when_the_backend_keeps_up(algorithm, workload):
    """Response times that do not grow with the calls in flight are no evidence of queueing,
    whatever their spread (docs/adaptive.md): a backend with no capacity limit whose calls
    are bimodal (a cache in front of a database) or have rare outliers of 30 s: the RT means
    of a probe's first completions (the fast calls) must not read as a queue (a controller
    that took them as one would refuse most calls here)."""
    _, rate, mix = workload
    # long enough to warm up (the 30 s outliers fill the in-flight count for 30 s), short
    # enough to stay fast: about 30,000 arrivals a run (benchmarks/bench_adaptive.py runs
    # 60 s and three seeds)
    seconds = 60 if max(rt for _, rt in mix) > 1000 else 30000 / rate
    for seed in (1, 2):
        res = bench.keeps_up(AdaptiveLimiter(algorithm=algorithm), rate, mix, seconds, seed)
        assert res["refused_late"] <= 0.01, (seed, res)


@pytest.mark.parametrize("algorithm", ["bbr", "gradient"])
def test_follows_a_dependency_10x_slower_within_5s_without_parking_at_min_limit(algorithm):
    """The work of every call grows 10x at the same concurrency capacity (40 in flight): the
    limit must come back to about 40 within 5 s, not park at min_limit (gradient sat at 1 for
    ~15 s, serving 5 calls/s where 40 slots serve 200)."""
    run = bench.slower(AdaptiveLimiter(algorithm=algorithm), seconds=20, at_s=5)
    res = bench.slower_summary(run, at_s=5)
    assert res["follow_s"] is not None and res["follow_s"] <= 5, res
    assert res["at_min_limit_s"] <= 0.5, res


@pytest.mark.parametrize("algorithm", ["bbr", "gradient"])
def test_the_limit_climbs_back_after_a_drop(algorithm):
    lim = AdaptiveLimiter(algorithm=algorithm)
    res = simulate(lim, [(10, 40), (10, 3), (10, 40)], clients=120)
    assert res[-1][3] >= 40, res


@pytest.mark.parametrize("algorithm", ["bbr", "gradient"])
def test_the_limit_stays_within_its_bounds(algorithm):
    lim = AdaptiveLimiter(algorithm=algorithm, min_limit=4, max_limit=25, initial_limit=10)
    seen = []
    simulate(Spy(lim, seen), [(5, 40), (5, 1)], clients=100)
    assert min(seen) >= 4 and max(seen) <= 25
    assert max(seen) == 25


def test_deterministic():
    runs = [simulate(AdaptiveLimiter(algorithm="gradient"), [(5, 30), (5, 15)], clients=60)
            for _ in range(2)]
    assert runs[0] == runs[1]


def test_cold_start_is_initial_limit():
    for algorithm in ("bbr", "gradient"):
        lim = AdaptiveLimiter(algorithm=algorithm, initial_limit=3, min_limit=1, max_limit=10)
        assert lim.limit == 3
        assert [lim.try_acquire(now_ns=1000 * MS) for _ in range(4)] == [True] * 3 + [False]


def test_bbr_cpu_trigger():
    lim = AdaptiveLimiter(algorithm="bbr", cpu_threshold=0.8, initial_limit=2, max_limit=50)
    lim._set_cpu(100)  # below the threshold: no limit
    assert all(lim.try_acquire(now_ns=1000 * MS) for _ in range(50))
    assert lim.limit == 50
    assert not lim.try_acquire(now_ns=1000 * MS)


# ---------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs, exc, param", [
    ({"algorithm": "vegas"}, ValueError, "algorithm"),
    ({"algorithm": 1}, TypeError, "algorithm"),
    ({"min_limit": 0}, ValueError, "min_limit"),
    ({"max_limit": 0}, ValueError, "max_limit"),
    ({"max_limit": 2_000_000}, ValueError, "max_limit"),
    ({"initial_limit": 1001}, ValueError, "initial_limit"),
    ({"min_limit": 30, "initial_limit": 20}, ValueError, "initial_limit"),
    ({"min_limit": 10, "max_limit": 5, "initial_limit": 7}, ValueError, "min_limit"),
    ({"min_limit": 1.5}, TypeError, "min_limit"),
    ({"initial_limit": True}, TypeError, "initial_limit"),
    ({"cpu_threshold": 80}, ValueError, "cpu_threshold"),
    ({"cpu_threshold": "high"}, TypeError, "cpu_threshold"),
    ({"cpu_threshold": float("nan")}, ValueError, "cpu_threshold"),
    ({"interval_ms": 1000, "sample_count": 3}, ValueError, "interval_ms"),
    ({"sample_count": 0}, ValueError, "sample_count"),
    ({"on_block": 5}, TypeError, "on_block"),
])
def test_bad_settings_name_the_parameter(kwargs, exc, param):
    with pytest.raises(exc, match=param):
        AdaptiveLimiter(**kwargs)


def test_bad_release():
    lim = AdaptiveLimiter()
    with pytest.raises(ValueError, match="in flight"):
        lim.release(rt_ms=5)
    assert lim.try_acquire()
    with pytest.raises(ValueError, match="rt_ms"):
        lim.release(rt_ms=-1)
    with pytest.raises(TypeError, match="rt_ms"):
        lim.release(rt_ms="5")
    lim.release(rt_ms=5)
    assert lim.in_flight == 0


def test_update():
    lim = AdaptiveLimiter(algorithm="gradient", max_limit=100)
    lim.update(min_limit=5, max_limit=8, initial_limit=6)
    assert (lim.min_limit, lim.max_limit, lim.initial_limit) == (5, 8, 6)
    assert 5 <= lim.limit <= 8
    with pytest.raises(ValueError, match="interval_ms"):
        lim.update(interval_ms=2000)
    with pytest.raises(ValueError, match="min_limit"):
        lim.update(min_limit=50)
    assert lim.min_limit == 5  # unchanged
    with pytest.raises(TypeError, match="qps"):
        lim.update(qps=3)


@pytest.mark.parametrize("algorithm", ["bbr", "gradient"])
@pytest.mark.parametrize("group", [False, True])
def test_update_max_limit_takes_effect_at_once(algorithm, group):
    lim = AdaptiveLimiter(algorithm=algorithm, min_limit=1, max_limit=1000, initial_limit=100)
    t = 10_000 * MS
    assert lim.try_acquire(now_ns=t)
    lim.release()
    lim.update(max_limit=10, initial_limit=10)
    decide = slidewin.all_of(lim).try_acquire if group else lim.try_acquire
    admitted = sum(decide(now_ns=t + MS) for _ in range(50))
    assert lim.limit == 10
    assert admitted == 10


@pytest.mark.parametrize("algorithm", ["bbr", "gradient"])
def test_shared_region_each_object_decides_with_its_own_bounds(name, algorithm):
    big = AdaptiveLimiter(algorithm=algorithm, min_limit=1, max_limit=1000, initial_limit=200,
                          shared=name)
    small = AdaptiveLimiter(algorithm=algorithm, min_limit=1, max_limit=10, initial_limit=5,
                            shared=name)
    t = 10_000 * MS
    assert big.try_acquire(now_ns=t)  # the region's limit: 200, learned under big's bounds
    big.release()
    admitted = 0
    while admitted < 500 and small.try_acquire(now_ns=t + MS):
        admitted += 1
    assert small.limit <= 10
    assert admitted <= 10
    for _ in range(admitted):
        small.release()
    # and the other way round: small's bounds do not cap big
    more = 0
    while more < 500 and big.try_acquire(now_ns=t + 2 * MS):
        more += 1
    assert more >= 10


# ------------------------------------------------------------------ everywhere a Limiter is

def test_entry_decorator_refusal_and_repr():
    lim = AdaptiveLimiter(min_limit=1, max_limit=1, initial_limit=1, name="one-at-a-time")
    assert repr(lim) == ("AdaptiveLimiter(algorithm='bbr', min_limit=1, max_limit=1, "
                         "initial_limit=1, name='one-at-a-time')")
    assert slidewin.limiters()["one-at-a-time"] is lim

    @lim
    def work():
        return "done"

    with lim.entry():
        with pytest.raises(BlockedError):
            work()
        with pytest.raises(BlockedError):
            with lim.entry():
                pass
        assert not lim.try_acquire()
    assert work() == "done"
    t = lim.totals()
    assert (t["pass"], t["block"], t["success"]) == (2, 3, 2)


def test_asyncio():
    lim = AdaptiveLimiter(algorithm="gradient", min_limit=1, max_limit=1, initial_limit=1)

    @lim
    async def work():
        await asyncio.sleep(0)
        return 1

    async def main():
        async with lim.entry():
            with pytest.raises(BlockedError):
                await work()
        return await work()

    assert asyncio.run(main()) == 1


def test_pickle_shared_by_name(name):
    lim = AdaptiveLimiter(algorithm="gradient", max_limit=50, shared=name)
    twin = pickle.loads(pickle.dumps(lim))
    assert repr(twin) == repr(lim)
    with pytest.raises(TypeError, match="private"):
        pickle.dumps(AdaptiveLimiter())


CHILD = r"""
import sys, slidewin
MS = 1_000_000
lim = slidewin.AdaptiveLimiter(algorithm="gradient", shared=sys.argv[1])
print(lim.limit, lim.in_flight, flush=True)
assert lim.try_acquire(now_ns=10_000 * MS)
print(lim.in_flight, flush=True)
"""


@pytest.mark.procs
def test_shared_across_two_processes(name):
    lim = AdaptiveLimiter(algorithm="gradient", shared=name)
    # teach it in virtual time: 10 s of a capacity of 40 with 120 callers
    simulate(lim, [(10, 40)], clients=120)
    learned = lim.limit
    assert learned >= 40
    assert lim.try_acquire(now_ns=10_000 * MS)  # one held here
    held = lim.in_flight  # with the simulation's calls still running
    out = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.split("\n")[:2]
    # the other process sees the learned limit and what this process holds, then its own
    limit, in_flight = map(int, first.split())
    assert limit == learned
    assert in_flight == held
    assert int(second) == held + 1
    assert lim.in_flight == held  # the child has exited: its count was given back


# ------------------------------------------------------------------ observers, middlewares

def test_wsgi_middleware_answers_a_refusal_with_503_and_the_learned_limit():
    from slidewin.wsgi import LimitMiddleware

    lim = AdaptiveLimiter(min_limit=1, max_limit=500, initial_limit=1)
    inner = []

    def app(environ, start_response):
        if not inner:  # the first request calls the app again while it holds the limit
            inner.append(True)
            status = []
            body = b"".join(mw({"REQUEST_METHOD": "GET", "PATH_INFO": "/"},
                               lambda s, h, exc_info=None: status.append((s, h))))
            inner.append((status[0], body))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    mw = LimitMiddleware(app, lim, headers=True)
    out = []
    assert b"".join(mw({"REQUEST_METHOD": "GET", "PATH_INFO": "/"},
                       lambda s, h, exc_info=None: out.append((s, h)))) == b"ok"
    (status, fields), body = inner[1]
    assert status.startswith("503")
    assert lim.concurrency == lim.limit == 1  # the limit in force, not max_limit
    assert ("RateLimit-Policy", '"default";q=1;qu="concurrent-requests"') in fields


def test_prometheus_gauge_and_top(name):
    prometheus_client = pytest.importorskip("prometheus_client")
    from slidewin import _observe
    from slidewin.prometheus import Collector

    local = AdaptiveLimiter(algorithm="gradient", initial_limit=7, name=f"{name}-local")
    shared = AdaptiveLimiter(algorithm="bbr", initial_limit=9, shared=name)
    assert shared.try_acquire()  # a decision: the region now holds a learned limit
    reg = prometheus_client.CollectorRegistry()
    reg.register(Collector())
    assert reg.get_sample_value("slidewin_adaptive_limit", {"limiter": f"{name}-local"}) == 7
    assert reg.get_sample_value("slidewin_adaptive_limit", {"limiter": name}) == 9
    plain = slidewin.Limiter(concurrency=3, name=f"{name}-plain")
    assert reg.get_sample_value("slidewin_adaptive_limit", {"limiter": f"{name}-plain"}) is None
    rows = {r.name: r for r in _observe.read_all()}
    assert rows[name].source == "region" and rows[name].adaptive_limit == 9
    assert rows[f"{name}-local"].adaptive_limit == 7
    del local, plain


def test_cpu_sampler_feeds_limiters_with_a_threshold():
    from slidewin import _adaptive

    s = _adaptive._CpuSampler()
    values = [s.sample() for _ in range(3)]
    assert all(0.0 <= v <= 1.0 for v in values)
    lim = AdaptiveLimiter(algorithm="bbr", cpu_threshold=0.5)
    assert lim in _adaptive._cpu._lims
    assert AdaptiveLimiter(algorithm="bbr") not in _adaptive._cpu._lims


def test_an_initial_limit_not_given_is_clamped_to_the_bounds():
    # outside test: update(max_limit=5) failed on the default initial_limit=20
    lim = AdaptiveLimiter()
    assert lim.initial_limit == 20
    lim.update(max_limit=5)
    assert lim.max_limit == 5 and lim.initial_limit == 5
    assert AdaptiveLimiter(max_limit=5).initial_limit == 5
    assert AdaptiveLimiter(min_limit=30).initial_limit == 30
    with pytest.raises(ValueError, match="initial_limit"):
        AdaptiveLimiter(max_limit=5, initial_limit=20)   # given: still checked


@pytest.mark.parametrize("kw", ["interval_ms", "sample_count"])
def test_the_window_layout_is_never_none(kw):
    with pytest.raises(TypeError, match="%s must be an int" % kw):
        AdaptiveLimiter(**{kw: None})
