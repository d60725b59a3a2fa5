"""The cases: floors, slidewin, and its peers from PyPI, each making one decision.

Every limiter is configured far above the load (10**9 per second) unless the case says
otherwise, so each call takes the "admit" path: the work a real request pays for. Each
peer is called the way its documentation shows, bound method cached in a local.
A peer that is not installed is reported and skipped (``pip install -e .[bench]``).
"""

from __future__ import annotations

import importlib
from typing import Dict, List, Tuple

from common import Case, PyTwoBucketWindow

BIG = 10 ** 9  # a limit far above any load a benchmark can produce

# Names of the PyPI distributions, for messages; the versions are pinned in the
# ``bench`` extra of pyproject.toml.
PEER_DISTS = {
    "limits": "limits",
    "pyrate_limiter": "pyrate-limiter",
    "throttled": "throttled-py",
    "token_bucket": "token-bucket",
    "ratelimit": "ratelimit",
    "aiolimiter": "aiolimiter",
}


def _version(mod) -> str:
    try:
        from importlib.metadata import version

        return version(PEER_DISTS.get(mod.__name__, mod.__name__))
    except Exception:  # pragma: no cover - metadata missing
        return getattr(mod, "__version__", "?")


def peer_versions() -> Dict[str, str]:
    out = {}
    for mod_name, dist in PEER_DISTS.items():
        try:
            out[dist] = _version(importlib.import_module(mod_name))
        except ImportError:
            out[dist] = "not installed"
    return out


# ----------------------------------------------------------------------- slidewin

def slidewin_available() -> Tuple[bool, str]:
    try:
        import slidewin

        slidewin.Limiter
        slidewin.Metric
    except Exception as e:  # ImportError, or a half-built package
        return False, f"{type(e).__name__}: {e}"
    return True, getattr(slidewin, "__version__", "?")


def has_noop() -> bool:
    import slidewin

    return hasattr(slidewin._core, "_noop")


def has_nogil() -> bool:
    import slidewin

    return hasattr(slidewin._core, "_try_acquire_nogil")


def floor_cases() -> List[Case]:
    out = []
    if has_noop():
        def noop():
            import slidewin

            return {"f": slidewin._core._noop}

        out.append(Case("floor.noop", "_core._noop() (do-nothing C function)", "floor", noop,
                        "f()", ok="True"))

    def pyfunc():
        def f():
            return True

        return {"f": f}

    out.append(Case("floor.pyfunc", "empty Python function call", "floor", pyfunc, "f()"))

    def py2():
        return {"f": PyTwoBucketWindow(BIG).try_acquire}

    out.append(Case("floor.py2bucket", "pure-Python 2-bucket sliding window", "floor", py2,
                    "f()"))
    return out


def slidewin_cases() -> List[Case]:
    import slidewin
    from slidewin import Event, Limiter, Metric

    def lim_ns(attr="try_acquire", **kw):
        def factory():
            lim = Limiter(**kw)
            return {"f": getattr(lim, attr), "lim": lim}

        return factory

    def nogil():
        from slidewin import _core

        return {"f": _core._try_acquire_nogil, "lim": Limiter(qps=BIG)}

    def refusing():
        lim = Limiter(qps=1)
        assert lim.try_acquire()
        assert not lim.try_acquire()
        return {"f": lim.try_acquire, "lim": lim}

    def metric_add():
        return {"f": Metric(1000, 2).add, "ev": Event.PASS}

    def metric_sum():
        m = Metric(1000, 2)
        m.add(Event.PASS, 5)
        return {"f": m.sum, "ev": Event.PASS}

    def fixed_now():
        import time

        lim = Limiter(qps=BIG)
        return {"f": lim.try_acquire, "t": time.monotonic_ns()}

    def conc_pair():
        lim = Limiter(concurrency=BIG)
        return {"f": lim.try_acquire, "rel": lim.release}

    def entry():
        lim = Limiter(qps=BIG)
        return {"entry": lim.entry, "lim": lim}

    def decorated():
        lim = Limiter(qps=BIG)

        @lim
        def handler():
            return True

        return {"f": handler, "lim": lim}

    C = Case
    cases = [
        C("sw.metric_add", "Metric.add(Event.PASS)", "slidewin", metric_add, "f(ev)", ok="True"),
        C("sw.metric_sum", "Metric.sum(Event.PASS)", "slidewin", metric_sum, "f(ev)", ok="True"),
        C("sw.reject", "try_acquire() reject, qps, admitting", "slidewin",
          lim_ns(qps=BIG), "f()"),
        C("sw.reject_refusing", "try_acquire() reject, at the limit (refusing)", "slidewin",
          refusing, "f()", ok="not _r"),
        C("sw.reject_now", "try_acquire(now_ns=t) reject (no clock read)", "slidewin",
          fixed_now, "f(now_ns=t)"),
        C("sw.concurrency", "try_acquire() concurrency", "slidewin",
          lim_ns(concurrency=BIG), "f()"),
        C("sw.concurrency_pair", "try_acquire() + release() concurrency", "slidewin",
          conc_pair, "f(); rel()", ok=None),
        C("sw.warm_up", "try_acquire() warm_up", "slidewin",
          lim_ns(qps=BIG, behavior="warm_up"), "f()"),
        C("sw.throttle", "try_acquire() throttle", "slidewin",
          lim_ns(qps=BIG, behavior="throttle"), "f()"),
        C("sw.warm_up_throttle", "try_acquire() warm_up_throttle", "slidewin",
          lim_ns(qps=BIG, behavior="warm_up_throttle"), "f()"),
        C("sw.reserve", "reserve() reject", "slidewin",
          lim_ns("reserve", qps=BIG), "f()", ok="_r is not None"),
        C("sw.reserve_throttle", "reserve() throttle", "slidewin",
          lim_ns("reserve", qps=BIG, behavior="throttle"), "f()", ok="_r is not None"),
        C("sw.entry", "with lim.entry(): pass", "slidewin", entry,
          "with entry():\n    pass", ok=None),
        C("sw.decorator", "@lim decorated function call", "slidewin", decorated, "f()"),
    ]
    if has_nogil():
        cases.insert(4, C("sw.reject_nogil", "_try_acquire_nogil() reject (GIL released)",
                          "slidewin", nogil, "f(lim)"))
    del slidewin
    return cases


# Window sizes for the cost-by-sample_count rows (issue: decisions O(1) in sample_count).
SCALE_SAMPLES = (2, 60, 1000, 100000)
SCALE_INTERVAL_MS = 300_000  # divisible by every SCALE_SAMPLES: buckets of 150 s .. 3 ms


def scale_cases() -> List[Case]:
    """try_acquire() admitting and refusing, and stats(), at sample_count 2 .. 100000 over
    one interval: the cost must stay flat (running totals, not a re-sum of the ring)."""
    from slidewin import Limiter

    iv = SCALE_INTERVAL_MS

    def admitting(sc):
        def factory():
            lim = Limiter(qps=BIG, interval_ms=iv, sample_count=sc)
            return {"f": lim.try_acquire, "lim": lim}

        return factory

    def refusing(sc):
        def factory():
            lim = Limiter(qps=1, interval_ms=iv, sample_count=sc)  # 300 per window
            while lim.try_acquire():
                pass
            return {"f": lim.try_acquire, "lim": lim}

        return factory

    def stats(sc):
        def factory():
            lim = Limiter(qps=BIG, interval_ms=iv, sample_count=sc)
            for _ in range(3):
                with lim.entry():
                    pass
            return {"f": lim.stats, "lim": lim}

        return factory

    out = []
    for sc in SCALE_SAMPLES:
        out += [
            Case(f"scale.admit.{sc}", f"try_acquire() admitting, sample_count={sc}", "scale",
                 admitting(sc), "f()", meta={"sample_count": sc}),
            Case(f"scale.refuse.{sc}", f"try_acquire() refusing, sample_count={sc}", "scale",
                 refusing(sc), "f()", ok="not _r", meta={"sample_count": sc}),
            Case(f"scale.stats.{sc}", f"stats(), sample_count={sc}", "scale",
                 stats(sc), "f()", ok=None, meta={"sample_count": sc}),
        ]
    return out


def slidewin_async_cases() -> List[Case]:
    from slidewin import Limiter

    def acq():
        return {"acq": Limiter(qps=BIG).acquire_async}

    def entry():
        return {"entry": Limiter(qps=BIG).entry}

    return [
        Case("swa.acquire_async", "await lim.acquire_async()", "async-slidewin", acq,
             "await acq()", ok=None, is_async=True),
        Case("swa.entry", "async with lim.entry(): pass", "async-slidewin", entry,
             "async with entry():\n    pass", ok=None, is_async=True),
    ]


def async_floor_cases() -> List[Case]:
    def coro():
        async def noop():
            return None

        return {"co": noop}

    return [Case("afloor.coro", "await empty coroutine", "async-floor", coro, "await co()",
                 ok=None, is_async=True)]


# -------------------------------------------------------------------------- peers

def peer_cases(skipped: List[str]) -> List[Case]:
    """Every peer that imports; the others are named in ``skipped``."""
    out: List[Case] = []

    # limits: one RateLimitItem, one strategy over MemoryStorage, hit(item, key).
    try:
        from limits import RateLimitItemPerSecond, storage, strategies

        def limits_factory(cls):
            def factory():
                st = storage.MemoryStorage()
                s = cls(st)
                # MemoryStorage runs a threading.Timer for expiry; cancel it after the run
                return {"hit": s.hit, "item": RateLimitItemPerSecond(BIG),
                        "__teardown__": lambda: st.timer.cancel()}

            return factory

        for key, label, cls in (
            ("fixed", "fixed window", strategies.FixedWindowRateLimiter),
            ("moving", "moving window", strategies.MovingWindowRateLimiter),
            ("sliding", "sliding window counter", strategies.SlidingWindowCounterRateLimiter),
        ):
            note = ""
            if key == "moving":
                note = ("a log: each hit inserts at the front of a list, cost grows with "
                        "the entries in the window")
            out.append(Case(f"peer.limits.{key}", f"limits {label} (MemoryStorage)", "peer",
                            limits_factory(cls), "hit(item, 'k')", note=note))
    except ImportError:
        skipped.append("limits")

    # pyrate-limiter: Limiter over the default InMemoryBucket, try_acquire(name).
    try:
        import pyrate_limiter as pr

        def pyrate_factory():
            lim = pr.Limiter(pr.Rate(BIG, pr.Duration.SECOND))

            def teardown():
                close = getattr(lim, "close", None)
                if close:
                    close()

            return {"acq": lim.try_acquire, "__teardown__": teardown}

        out.append(Case("peer.pyrate", "pyrate-limiter InMemoryBucket", "peer", pyrate_factory,
                        "acq('k')"))
        out.append(Case("peer.pyrate_nb", "pyrate-limiter InMemoryBucket, blocking=False", "peer",
                        pyrate_factory, "acq('k', blocking=False)",
                        note="blocking=False also returns False when another thread holds "
                             "the limiter's lock, below the limit"))
    except ImportError:
        skipped.append("pyrate-limiter")

    # throttled-py: Throttled(key, using=algorithm, quota, store=MemoryStore()).limit()
    try:
        from throttled import MemoryStore, RateLimiterType, Throttled, per_sec

        def thr_factory(using):
            def factory():
                t = Throttled(key="k", using=using, quota=per_sec(BIG), store=MemoryStore())
                return {"limit": t.limit}

            return factory

        for using in RateLimiterType.choice():
            out.append(Case(f"peer.throttled.{using}", f"throttled-py {using} (MemoryStore)",
                            "peer", thr_factory(using), "limit()", ok="not _r.limited"))
    except ImportError:
        skipped.append("throttled-py")

    # token-bucket: Limiter(rate, capacity, MemoryStorage()).consume(key)
    try:
        import token_bucket

        def tb_factory():
            lim = token_bucket.Limiter(float(BIG), BIG, token_bucket.MemoryStorage())
            return {"consume": lim.consume}

        out.append(Case("peer.token_bucket", "token-bucket (MemoryStorage)", "peer", tb_factory,
                        "consume('k')"))
    except ImportError:
        skipped.append("token-bucket")

    # ratelimit: a decorator; raise_on_limit=False returns None when refused.
    try:
        from ratelimit import limits as rl_limits

        def rl_factory():
            @rl_limits(calls=BIG, period=1, raise_on_limit=False)
            def f():
                return True

            return {"f": f}

        out.append(Case("peer.ratelimit", "ratelimit @limits decorated call", "peer", rl_factory,
                        "f()"))
    except ImportError:
        skipped.append("ratelimit")
    return out


def peer_async_cases(skipped: List[str]) -> List[Case]:
    out: List[Case] = []
    try:
        from aiolimiter import AsyncLimiter

        def al_factory():
            return {"lim": AsyncLimiter(BIG, 1)}

        out.append(Case("apeer.aiolimiter", "aiolimiter async with", "async-peer", al_factory,
                        "async with lim:\n    pass", ok=None, is_async=True))

        def al_acq():
            return {"acq": AsyncLimiter(BIG, 1).acquire}

        out.append(Case("apeer.aiolimiter_acquire", "aiolimiter await acquire()", "async-peer",
                        al_acq, "await acq()", ok=None, is_async=True))
    except ImportError:
        skipped.append("aiolimiter")
    return out


# Peers that are thread-safe and used in the threads section (label, key).
THREAD_PEERS = [
    "peer.limits.fixed",
    "peer.limits.sliding",
    "peer.pyrate",
    "peer.pyrate_nb",
    "peer.throttled.token_bucket",
    "peer.throttled.gcra",
    "peer.token_bucket",
    "peer.ratelimit",
]
