"""Bad arguments: TypeError for a wrong type, ValueError naming the parameter.

Two tables of cases, run by one test:

- one case per bad argument, for Metric(...), every Metric method, Limiter(...) and every
  Limiter method;
- the edges: values beyond int64 and double, NaN/inf, bool where an int or a number is
  meant, every keyword of Limiter(...) in wrong type and out of range, events= edge cases,
  bad `prioritized`, every Metric read with a bad now_ns, unknown keywords and too many
  positional arguments for every method, BlockedError(...), the decorator's arguments.

``match`` is a regular expression the message must contain: the parameter's name (and, for
a sub-1 window limit, the suggestion "throttle"); out-of-range ValueErrors also show the
offending value. Then: refused calls change nothing, and edge values that are allowed are
accepted.
"""

import asyncio
import inspect
import math

import pytest

from slidewin import BlockedError, Event, KeyedLimiter, Limiter, Metric

NAN = float("nan")
INF = float("inf")
BIG = 2**63  # one past INT64_MAX
HUGE = 10**400  # beyond a double
N = r"\bn\b"  # the parameter n, as a word


def metric():
    return Metric(1000, 2)


def custom():
    return Metric(1000, 2, events=("sent", "dropped"))


def qps_lim():
    return Limiter(qps=10)


def conc_lim():
    return Limiter(concurrency=2)


def run(coro):
    return asyncio.run(coro)


# ==== one case per bad argument ==========================================================

CASES = [
    # ---- Metric(...) -------------------------------------------------------------------
    ("Metric interval 0", lambda: Metric(0, 1), ValueError, "interval_ms"),
    ("Metric interval negative", lambda: Metric(-1000, 2), ValueError, "interval_ms"),
    ("Metric interval float", lambda: Metric(1000.0, 2), TypeError, "interval_ms"),
    ("Metric interval str", lambda: Metric("1000", 2), TypeError, "interval_ms"),
    ("Metric interval kw float", lambda: Metric(interval_ms=1.5), TypeError, "interval_ms"),
    ("Metric sample_count 0", lambda: Metric(1000, 0), ValueError, "sample_count"),
    ("Metric sample_count negative", lambda: Metric(1000, -2), ValueError, "sample_count"),
    ("Metric sample_count float", lambda: Metric(1000, 2.0), TypeError, "sample_count"),
    ("Metric sample_count None", lambda: Metric(1000, None), TypeError, "sample_count"),
    ("Metric not divisible", lambda: Metric(1000, 3), ValueError, "interval_ms|sample_count"),
    ("Metric interval < sample_count", lambda: Metric(5, 10), ValueError,
     "interval_ms|sample_count"),
    ("Metric events int", lambda: Metric(1000, 2, events=5), TypeError, "events"),
    ("Metric events non-str", lambda: Metric(1000, 2, events=("a", 1)), TypeError, "events"),
    ("Metric events duplicate", lambda: Metric(1000, 2, events=("a", "a")), ValueError,
     "events"),
    ("Metric unknown kw", lambda: Metric(1000, 2, interval=5), TypeError, "interval"),
    # ---- Metric.add ------------------------------------------------------------------
    ("add unknown name", lambda: metric().add("nope", now_ns=0), ValueError, "event"),
    ("add index too big", lambda: metric().add(6, now_ns=0), ValueError, "event"),
    ("add index negative", lambda: metric().add(-1, now_ns=0), ValueError, "event"),
    ("add event float", lambda: metric().add(1.0, now_ns=0), TypeError, "event"),
    ("add event None", lambda: metric().add(None, now_ns=0), TypeError, "event"),
    ("add n negative", lambda: metric().add(Event.PASS, -1, now_ns=0), ValueError, N),
    ("add n float", lambda: metric().add(Event.PASS, 1.0, now_ns=0), TypeError, N),
    ("add n str", lambda: metric().add(Event.PASS, "1", now_ns=0), TypeError, N),
    ("add now negative", lambda: metric().add(Event.PASS, now_ns=-1), ValueError, "now_ns"),
    ("add now float", lambda: metric().add(Event.PASS, now_ns=1.0), TypeError, "now_ns"),
    ("add now str", lambda: metric().add(Event.PASS, now_ns="5"), TypeError, "now_ns"),
    ("custom add unknown", lambda: custom().add("pass", now_ns=0), ValueError, "event"),
    ("custom add index", lambda: custom().add(2, now_ns=0), ValueError, "event"),
    # ---- Metric.add_rt ---------------------------------------------------------------
    ("add_rt negative", lambda: metric().add_rt(-1, now_ns=0), ValueError, "rt_ms"),
    ("add_rt float", lambda: metric().add_rt(1.5, now_ns=0), TypeError, "rt_ms"),
    ("add_rt now negative", lambda: metric().add_rt(1, now_ns=-5), ValueError, "now_ns"),
    ("add_rt now float", lambda: metric().add_rt(1, now_ns=5.0), TypeError, "now_ns"),
    ("custom add_rt", lambda: custom().add_rt(1, now_ns=0), ValueError, "(?i)rt|event"),
    # ---- Metric reads ------------------------------------------------------------------
    ("sum unknown", lambda: metric().sum("nope", now_ns=0), ValueError, "event"),
    ("sum index", lambda: metric().sum(6, now_ns=0), ValueError, "event"),
    ("sum event float", lambda: metric().sum(0.0, now_ns=0), TypeError, "event"),
    ("sum now negative", lambda: metric().sum(0, now_ns=-1), ValueError, "now_ns"),
    ("sum now float", lambda: metric().sum(0, now_ns=1e9), TypeError, "now_ns"),
    ("rate unknown", lambda: metric().rate("nope", now_ns=0), ValueError, "event"),
    ("rate now negative", lambda: metric().rate(0, now_ns=-1), ValueError, "now_ns"),
    ("rate now float", lambda: metric().rate(0, now_ns=0.5), TypeError, "now_ns"),
    ("current unknown", lambda: metric().current("x", now_ns=0), ValueError, "event"),
    ("current index", lambda: metric().current(-1, now_ns=0), ValueError, "event"),
    ("current now negative", lambda: metric().current(0, now_ns=-1), ValueError, "now_ns"),
    ("current now float", lambda: metric().current(0, now_ns=0.0), TypeError, "now_ns"),
    ("previous unknown", lambda: metric().previous("x", now_ns=0), ValueError, "event"),
    ("previous index", lambda: metric().previous(99, now_ns=0), ValueError, "event"),
    ("previous now negative", lambda: metric().previous(0, now_ns=-1), ValueError, "now_ns"),
    ("previous now float", lambda: metric().previous(0, now_ns=2.0), TypeError, "now_ns"),
    ("min_rt now negative", lambda: metric().min_rt(now_ns=-1), ValueError, "now_ns"),
    ("min_rt now float", lambda: metric().min_rt(now_ns=1.0), TypeError, "now_ns"),
    ("avg_rt now negative", lambda: metric().avg_rt(now_ns=-1), ValueError, "now_ns"),
    ("avg_rt now float", lambda: metric().avg_rt(now_ns=1.0), TypeError, "now_ns"),
    ("buckets now negative", lambda: metric().buckets(now_ns=-1), ValueError, "now_ns"),
    ("buckets now float", lambda: metric().buckets(now_ns=1.0), TypeError, "now_ns"),
    ("custom min_rt", lambda: custom().min_rt(now_ns=0), ValueError, "(?i)rt|event"),
    ("custom avg_rt", lambda: custom().avg_rt(now_ns=0), ValueError, "(?i)rt|event"),
    ("custom sum unknown", lambda: custom().sum("rt", now_ns=0), ValueError, "event"),
    # ---- Limiter(...) ------------------------------------------------------------------
    ("Limiter neither", lambda: Limiter(), ValueError, "qps|concurrency"),
    ("Limiter both", lambda: Limiter(qps=1, concurrency=1), ValueError, "qps|concurrency"),
    ("Limiter qps negative", lambda: Limiter(qps=-1), ValueError, "qps"),
    ("Limiter qps nan", lambda: Limiter(qps=float("nan")), ValueError, "qps"),
    ("Limiter qps str", lambda: Limiter(qps="10"), TypeError, "qps"),
    ("Limiter concurrency negative", lambda: Limiter(concurrency=-1), ValueError,
     "concurrency"),
    ("Limiter concurrency str", lambda: Limiter(concurrency="2"), TypeError, "concurrency"),
    ("Limiter behavior unknown", lambda: Limiter(qps=10, behavior="nope"), ValueError,
     "behavior"),
    ("Limiter behavior int", lambda: Limiter(qps=10, behavior=3), TypeError, "behavior"),
    ("Limiter behavior with concurrency", lambda: Limiter(concurrency=2, behavior="throttle"),
     ValueError, "behavior|concurrency"),
    ("Limiter warm_up with concurrency", lambda: Limiter(concurrency=2, behavior="warm_up"),
     ValueError, "behavior|concurrency"),
    ("Limiter reject qps<1 per window", lambda: Limiter(qps=0.5), ValueError, "throttle"),
    ("Limiter warm_up qps<1 per window", lambda: Limiter(qps=0.5, behavior="warm_up"),
     ValueError, "throttle"),
    ("Limiter reject short interval", lambda: Limiter(qps=1, interval_ms=500), ValueError,
     "throttle"),
    ("Limiter reject qps<1 names qps", lambda: Limiter(qps=0.5), ValueError,
     "qps|interval_ms"),
    ("Limiter cold_factor 1", lambda: Limiter(qps=10, behavior="warm_up", cold_factor=1),
     ValueError, "cold_factor"),
    ("Limiter cold_factor 0", lambda: Limiter(qps=10, behavior="warm_up", cold_factor=0),
     ValueError, "cold_factor"),
    ("Limiter cold_factor validated for reject", lambda: Limiter(qps=10, cold_factor=1),
     ValueError, "cold_factor"),
    ("Limiter cold_factor str", lambda: Limiter(qps=10, cold_factor="3"), TypeError,
     "cold_factor"),
    ("Limiter warm_up_s negative", lambda: Limiter(qps=10, behavior="warm_up", warm_up_s=-1),
     ValueError, "warm_up_s"),
    ("Limiter warm_up_s str", lambda: Limiter(qps=10, warm_up_s="10"), TypeError, "warm_up_s"),
    ("Limiter max_queueing negative",
     lambda: Limiter(qps=10, behavior="throttle", max_queueing_ms=-1), ValueError,
     "max_queueing_ms"),
    ("Limiter max_queueing validated for reject", lambda: Limiter(qps=10, max_queueing_ms=-1),
     ValueError, "max_queueing_ms"),
    ("Limiter max_queueing str", lambda: Limiter(qps=10, max_queueing_ms="5"), TypeError,
     "max_queueing_ms"),
    ("Limiter occupy negative", lambda: Limiter(qps=10, occupy_timeout_ms=-1), ValueError,
     "occupy_timeout_ms"),
    ("Limiter interval 0", lambda: Limiter(qps=10, interval_ms=0), ValueError, "interval_ms"),
    ("Limiter interval float", lambda: Limiter(qps=10, interval_ms=1000.0), TypeError,
     "interval_ms"),
    ("Limiter sample_count 0", lambda: Limiter(qps=10, sample_count=0), ValueError,
     "sample_count"),
    ("Limiter not divisible", lambda: Limiter(qps=10, sample_count=3), ValueError,
     "interval_ms|sample_count"),
    ("Limiter behavior positional", lambda: Limiter(10, "throttle"), TypeError, None),
    ("Limiter unknown kw", lambda: Limiter(qps=10, burst=5), TypeError, "burst"),
    # ---- Limiter.try_acquire / reserve ---------------------------------------------------
    ("try_acquire n 0", lambda: qps_lim().try_acquire(0, now_ns=0), ValueError, N),
    ("try_acquire n negative", lambda: qps_lim().try_acquire(-1, now_ns=0), ValueError, N),
    ("try_acquire n float", lambda: qps_lim().try_acquire(1.0, now_ns=0), TypeError, N),
    ("try_acquire now negative", lambda: qps_lim().try_acquire(now_ns=-1), ValueError,
     "now_ns"),
    ("try_acquire now float", lambda: qps_lim().try_acquire(now_ns=1.0), TypeError, "now_ns"),
    ("try_acquire conc n 0", lambda: conc_lim().try_acquire(0), ValueError, N),
    ("reserve n 0", lambda: qps_lim().reserve(0, now_ns=0), ValueError, N),
    ("reserve n float", lambda: qps_lim().reserve(2.0, now_ns=0), TypeError, N),
    ("reserve now negative", lambda: qps_lim().reserve(now_ns=-1), ValueError, "now_ns"),
    ("reserve now float", lambda: qps_lim().reserve(now_ns=0.0), TypeError, "now_ns"),
    ("reserve throttle n 0", lambda: Limiter(qps=10, behavior="throttle").reserve(0, now_ns=0),
     ValueError, N),
    # ---- Limiter.acquire / acquire_async -------------------------------------------------
    ("acquire n 0", lambda: qps_lim().acquire(0), ValueError, N),
    ("acquire n float", lambda: qps_lim().acquire(1.5), TypeError, N),
    ("acquire timeout negative", lambda: qps_lim().acquire(timeout=-1), ValueError, "timeout"),
    ("acquire timeout str", lambda: qps_lim().acquire(timeout="1"), TypeError, "timeout"),
    ("acquire_async n 0", lambda: asyncio.run(qps_lim().acquire_async(0)), ValueError, N),
    ("acquire_async timeout negative",
     lambda: asyncio.run(qps_lim().acquire_async(timeout=-0.5)), ValueError, "timeout"),
    ("acquire_async timeout str",
     lambda: asyncio.run(qps_lim().acquire_async(timeout="1")), TypeError, "timeout"),
    # ---- Limiter.release -------------------------------------------------------------------
    ("release beyond in flight", lambda: conc_lim().release(), ValueError, N + "|in flight|"
     "in-flight|release"),
    ("release more than held", lambda: _held(conc_lim(), 1).release(2), ValueError,
     N + "|in flight|in-flight|release"),
    ("release on qps limiter", lambda: qps_lim().release(), ValueError,
     N + "|in flight|in-flight|release"),
    ("release n 0", lambda: _held(conc_lim(), 1).release(0), ValueError, N),
    ("release n float", lambda: _held(conc_lim(), 1).release(1.0), TypeError, N),
    # ---- Limiter.entry / stats ------------------------------------------------------------
    ("entry n 0", lambda: _enter(qps_lim().entry(0)), ValueError, N),
    ("entry n float", lambda: _enter(qps_lim().entry(1.0)), TypeError, N),
    ("stats now negative", lambda: qps_lim().stats(now_ns=-1), ValueError, "now_ns"),
    ("stats now float", lambda: qps_lim().stats(now_ns=1.0), TypeError, "now_ns"),
]


# ---- slidewin.asgi / slidewin.wsgi LimitMiddleware(...), slidewin.client_ip --------------------
def _web_cases():
    from slidewin import asgi, client_ip, wsgi

    def app(*args):
        return None

    for mod in (asgi, wsgi):
        mw = mod.LimitMiddleware
        pre = mod.__name__.split(".")[-1] + " "
        CASES.extend([
            (pre + "app not callable", lambda mw=mw: mw(5, qps_lim()), TypeError, "app"),
            (pre + "limiter not a limiter", lambda mw=mw: mw(app, object()), TypeError,
             "Limiter"),
            (pre + "limiter None", lambda mw=mw: mw(app, None), TypeError, "Limiter"),
            (pre + "key not callable", lambda mw=mw: mw(app, qps_lim(), key="ip"), TypeError,
             "key"),
            (pre + "key with a Limiter", lambda mw=mw: mw(app, qps_lim(), key=lambda s: 1),
             ValueError, "key"),
            (pre + "status 200", lambda mw=mw: mw(app, qps_lim(), status=200), ValueError,
             "status.*200"),
            (pre + "status str", lambda mw=mw: mw(app, qps_lim(), status="429"), TypeError,
             "status"),
            (pre + "status bool", lambda mw=mw: mw(app, qps_lim(), status=True), TypeError,
             "status"),
            (pre + "concurrency_status 600",
             lambda mw=mw: mw(app, conc_lim(), concurrency_status=600), ValueError,
             "concurrency_status.*600"),
            (pre + "concurrency_status float",
             lambda mw=mw: mw(app, conc_lim(), concurrency_status=503.0), TypeError,
             "concurrency_status"),
            (pre + "body int", lambda mw=mw: mw(app, qps_lim(), body=5), TypeError, "body"),
            (pre + "content_type bytes",
             lambda mw=mw: mw(app, qps_lim(), content_type=b"text/plain"), TypeError,
             "content_type"),
            (pre + "headers str", lambda mw=mw: mw(app, qps_lim(), headers="draft"), TypeError,
             "headers"),
            (pre + "exempt int", lambda mw=mw: mw(app, qps_lim(), exempt=5), TypeError,
             "exempt"),
            (pre + "exempt path without slash",
             lambda mw=mw: mw(app, qps_lim(), exempt=["health"]), ValueError, "exempt"),
            (pre + "exempt holds int", lambda mw=mw: mw(app, qps_lim(), exempt=["/a", 1]),
             TypeError, "exempt"),
        ])
    env = {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}
    CASES.extend([
        ("client_ip trusted_proxies bad network",
         lambda: client_ip(env, trusted_proxies=["10.0.0.0/33"]), ValueError, "trusted_proxies"),
        ("client_ip trusted_proxies star", lambda: client_ip(env, trusted_proxies="*"),
         ValueError, "trusted_proxies"),
        ("client_ip trusted_proxies int", lambda: client_ip(env, trusted_proxies=8), TypeError,
         "trusted_proxies"),
        ("client_ip trusted_proxies holds None",
         lambda: client_ip(env, trusted_proxies=[None]), TypeError, "trusted_proxies"),
        ("client_ip not a scope", lambda: client_ip({}), TypeError, "scope"),
    ])


_web_cases()


def case(name, call, exc, match):
    CASES.append((name, call, exc, match))


# ==== the edges ==========================================================================

# ---- Metric reads: now_ns beyond int64, bool, None-like wrong types -----------------------
for meth in ("sum", "rate", "current", "previous"):
    case(f"{meth} now 2**63", lambda meth=meth: getattr(metric(), meth)(0, now_ns=BIG), ValueError,
         r"now_ns.*9223372036854775807.*9223372036854775808")
    case(f"{meth} now huge negative", lambda meth=meth: getattr(metric(), meth)(0, now_ns=-HUGE),
         ValueError, r"now_ns must be >= 0")
    case(f"{meth} now bool", lambda meth=meth: getattr(metric(), meth)(0, now_ns=True), TypeError,
         r"now_ns.*bool")
    case(f"{meth} now str", lambda meth=meth: getattr(metric(), meth)(0, now_ns="1"), TypeError,
         r"now_ns.*str")
    case(f"{meth} event bool", lambda meth=meth: getattr(metric(), meth)(True, now_ns=0), TypeError,
         r"event.*bool")
    case(f"{meth} event bytes", lambda meth=meth: getattr(metric(), meth)(b"pass", now_ns=0),
         TypeError, r"event")
    case(f"{meth} no event", lambda meth=meth: getattr(metric(), meth)(), TypeError, r"event")
    case(f"{meth} too many positional", lambda meth=meth: getattr(metric(), meth)(0, 1), TypeError,
         r"positional")
    case(f"{meth} unknown kw", lambda meth=meth: getattr(metric(), meth)(0, when=1), TypeError,
         r"when")
    case(f"{meth} event twice", lambda meth=meth: getattr(metric(), meth)(0, event=1), TypeError,
         r"event")
for meth in ("min_rt", "avg_rt", "buckets"):
    case(f"{meth} now 2**63", lambda meth=meth: getattr(metric(), meth)(now_ns=BIG), ValueError,
         r"now_ns.*9223372036854775807")
    case(f"{meth} now nan", lambda meth=meth: getattr(metric(), meth)(now_ns=NAN), TypeError,
         r"now_ns.*float")
    case(f"{meth} now bool", lambda meth=meth: getattr(metric(), meth)(now_ns=False), TypeError,
         r"now_ns.*bool")
    case(f"{meth} positional now", lambda meth=meth: getattr(metric(), meth)(0), TypeError,
         r"positional")
    case(f"{meth} unknown kw", lambda meth=meth: getattr(metric(), meth)(now=0), TypeError, r"now")

# ---- Metric.add / add_rt / reset ------------------------------------------------------
case("add n 2**63", lambda: metric().add(0, BIG, now_ns=0), ValueError, N + r".*9223372036854775807")
case("add n huge", lambda: metric().add(0, HUGE, now_ns=0), ValueError, N)
case("add n bool", lambda: metric().add(0, True, now_ns=0), TypeError, N + r".*bool")
case("add n None", lambda: metric().add(0, None, now_ns=0), TypeError, N)
case("add now 2**63", lambda: metric().add(0, now_ns=BIG), ValueError, r"now_ns")
case("add now bool", lambda: metric().add(0, now_ns=True), TypeError, r"now_ns")
case("add event huge", lambda: metric().add(HUGE, now_ns=0), ValueError, r"event")
case("add event bool", lambda: metric().add(False, now_ns=0), TypeError, r"event")
case("add event wrong case", lambda: metric().add("PASS", now_ns=0), ValueError, r"event.*'PASS'")
case("add event list", lambda: metric().add(["pass"], now_ns=0), TypeError, r"event")
case("add 3 positional", lambda: metric().add(0, 1, 2), TypeError, r"positional")
case("add unknown kw", lambda: metric().add(0, count=1), TypeError, r"count")
case("add event twice", lambda: metric().add(0, event=0), TypeError, r"event")
case("add_rt 2**63", lambda: metric().add_rt(BIG, now_ns=0), ValueError, r"rt_ms")
case("add_rt bool", lambda: metric().add_rt(True, now_ns=0), TypeError, r"rt_ms")
case("add_rt None", lambda: metric().add_rt(None), TypeError, r"rt_ms")
case("add_rt missing", lambda: metric().add_rt(), TypeError, r"rt_ms")
case("add_rt 2 positional", lambda: metric().add_rt(1, 2), TypeError, r"positional")
case("add_rt unknown kw", lambda: metric().add_rt(1, rt=2), TypeError, r"\brt\b")
case("add_rt now 2**63", lambda: metric().add_rt(1, now_ns=BIG), ValueError, r"now_ns")
case("reset with an argument", lambda: metric().reset(0), TypeError, r"reset")

# ---- Metric(...) -----------------------------------------------------------------------
case("Metric interval 2**63", lambda: Metric(BIG, 2), ValueError, r"interval_ms")
case("Metric interval above max", lambda: Metric(2**41, 2), ValueError,
     r"interval_ms.*1099511627776")
case("Metric interval bool", lambda: Metric(True, 1), TypeError, r"interval_ms.*bool")
case("Metric sample_count above max", lambda: Metric(1000, 10**6), ValueError,
     r"sample_count.*100000")
case("Metric sample_count bool", lambda: Metric(1000, True), TypeError, r"sample_count")
case("Metric sample_count str", lambda: Metric(1000, "2"), TypeError, r"sample_count")
case("Metric 3 positional", lambda: Metric(1000, 2, ("a",)), TypeError, r"positional")
case("Metric events empty", lambda: Metric(events=()), ValueError, r"events.*1 to 32")
case("Metric events empty list", lambda: Metric(events=[]), ValueError, r"events")
case("Metric events 33", lambda: Metric(events=[f"e{i}" for i in range(33)]), ValueError,
     r"events.*32.*33")
case("Metric events str", lambda: Metric(events="sent"), TypeError, r"events.*string")
case("Metric events bytes", lambda: Metric(events=b"sent"), TypeError, r"events")
case("Metric events set", lambda: Metric(events={"a", "b"}), TypeError, r"events.*set")
case("Metric events frozenset", lambda: Metric(events=frozenset("ab")), TypeError, r"events")
case("Metric events None inside", lambda: Metric(events=("a", None)), TypeError,
     r"events.*NoneType.*index 1")
case("Metric events bytes inside", lambda: Metric(events=("a", b"b")), TypeError,
     r"events.*bytes")
case("Metric events empty name", lambda: Metric(events=("a", "")), ValueError,
     r"events.*empty")
case("Metric events duplicate later", lambda: Metric(events=("a", "b", "a")), ValueError,
     r"events.*duplicate.*'a'")
case("Metric events not iterable", lambda: Metric(events=3.5), TypeError, r"events")
case("Metric 4 positional", lambda: Metric(1000, 2, None, None), TypeError,
     r"at most \d+ (positional )?arguments")
case("Metric custom index past end", lambda: Metric(events=("a",)).add(1, now_ns=0),
     ValueError, r"event.*0\.\.0")
case("Metric custom rt read", lambda: Metric(events=("a",)).avg_rt(), ValueError, r"RT")

# ---- Limiter(...): every keyword, wrong type and out of range --------------------------
for kw in ("qps", "warm_up_s", "cold_factor"):
    base = {} if kw == "qps" else {"qps": 10}
    for bad in (NAN, INF, -INF, -1.0, 1e300, HUGE, -HUGE):
        exp = r"\b%s\b" % kw
        case(f"Limiter {kw}={bad!r:.12}", lambda kw=kw, bad=bad, base=base: Limiter(**base, **{kw: bad}),
             ValueError, exp)
    for bad in ("1", None, True, [1], 1j):
        if kw == "qps" and bad is None:
            continue  # qps=None means "not a qps limiter"
        case(f"Limiter {kw}={bad!r}", lambda kw=kw, bad=bad, base=base: Limiter(**base, **{kw: bad}),
             TypeError, r"\b%s\b" % kw)
case("Limiter rate int", lambda: Limiter(rate=100), TypeError, r"\brate\b.*int")
case("Limiter rate unknown period", lambda: Limiter(rate="100/week"), ValueError,
     r"\brate\b.*100/minute")
case("Limiter rate and qps", lambda: Limiter(rate="1/minute", qps=1), ValueError,
     r"\brate\b.*\bqps=1")
case("Limiter rate and interval_ms", lambda: Limiter(rate="1/minute", interval_ms=1000),
     ValueError, r"\brate\b.*\binterval_ms=1000")
case("Limiter qps just above max", lambda: Limiter(qps=9.1e15), ValueError,
     r"qps.*9000000000000000.*9100000000000000")
case("Limiter warm_up_s above max", lambda: Limiter(qps=10, warm_up_s=2e9), ValueError,
     r"warm_up_s.*1000000000")
case("Limiter cold_factor exactly 1", lambda: Limiter(qps=10, cold_factor=1.0), ValueError,
     r"cold_factor must be a number > 1")
case("Limiter shared int", lambda: Limiter(qps=10, shared=1), TypeError, r"\bshared\b")
case("Limiter shared bytes", lambda: Limiter(qps=10, shared=b"x"), TypeError, r"\bshared\b")
case("Limiter shared bad name", lambda: Limiter(qps=10, shared="a b"), ValueError,
     r"\bshared\b.*not a valid region name")
case("Limiter shared too long", lambda: Limiter(qps=10, shared="a" * 201), ValueError,
     r"\bshared\b")
case("Limiter name int", lambda: Limiter(qps=10, name=5), TypeError, r"\bname\b.*str")
case("Limiter name bytes", lambda: Limiter(qps=10, name=b"x"), TypeError, r"\bname\b")
case("Limiter name empty", lambda: Limiter(qps=10, name=""), ValueError,
     r"\bname\b must be a str of 1 to 200")
case("Limiter name too long", lambda: Limiter(qps=10, name="n" * 201), ValueError,
     r"\bname\b must be a str of 1 to 200")
case("Limiter name lone surrogate", lambda: Limiter(qps=10, name="\ud800"), ValueError,
     r"\bname\b must be encodable")
case("Limiter shadow int", lambda: Limiter(qps=10, shadow=1), TypeError, r"\bshadow\b.*bool")
case("Limiter shadow str", lambda: Limiter(qps=10, shadow="yes"), TypeError, r"\bshadow\b")
case("Limiter shadow None", lambda: Limiter(qps=10, shadow=None), TypeError, r"\bshadow\b")
case("Metric name int", lambda: Metric(name=1), TypeError, r"\bname\b")
case("Metric name empty", lambda: Metric(name=""), ValueError, r"\bname\b")
case("Keyed name int", lambda: KeyedLimiter(qps=1, name=1.5), TypeError, r"\bname\b")
case("Keyed shadow int", lambda: KeyedLimiter(qps=1, shadow=0), TypeError, r"\bshadow\b")
case("update positional", lambda: Limiter(qps=1).update(5), TypeError, r"positional")
case("update unknown", lambda: Limiter(qps=1).update(qpss=5), TypeError, r"qpss")
case("update qps negative", lambda: Limiter(qps=1).update(qps=-1), ValueError, r"\bqps\b")
case("update qps str", lambda: Limiter(qps=1).update(qps="5"), TypeError, r"\bqps\b")
case("update interval_ms", lambda: Limiter(qps=1).update(interval_ms=500), ValueError,
     r"interval_ms cannot change")
case("update sample_count", lambda: Limiter(qps=1).update(sample_count=4), ValueError,
     r"sample_count cannot change")
case("update shared", lambda: Limiter(qps=1).update(shared=True), ValueError,
     r"shared cannot change")
case("update name", lambda: Limiter(qps=1).update(name="x"), ValueError, r"name cannot change")
case("update qps to concurrency", lambda: Limiter(qps=1).update(concurrency=2), ValueError,
     r"between qps and concurrency")
case("update concurrency to qps", lambda: Limiter(concurrency=1).update(qps=2), ValueError,
     r"between qps and concurrency")
case("update concurrency behavior", lambda: Limiter(concurrency=1).update(behavior="throttle"),
     ValueError, r"behavior='throttle' needs qps")
case("update sub-1 window", lambda: Limiter(qps=5).update(qps=0.5), ValueError,
     r"qps.*throttle")
case("update cold_factor", lambda: Limiter(qps=5).update(cold_factor=1), ValueError,
     r"cold_factor")
case("update shadow int", lambda: Limiter(qps=5).update(shadow=1), TypeError, r"shadow")
case("update on_block", lambda: Limiter(qps=5).update(on_block=3), TypeError, r"on_block")
case("Keyed update max_keys", lambda: KeyedLimiter(qps=1).update(max_keys=5), ValueError,
     r"max_keys cannot change")
case("Keyed update warm_up", lambda: KeyedLimiter(qps=1).update(behavior="warm_up"), ValueError,
     r"not supported per key")
case("Keyed update overrides bad", lambda: KeyedLimiter(qps=1).update(overrides={"a": -1}),
     ValueError, r"overrides")
case("Limiter warm-up tokens overflow", lambda: Limiter(qps=1e15, cold_factor=1.0000001),
     ValueError, r"qps.*warm_up_s.*cold_factor")
case("Limiter qps*warm_up_s too large", lambda: Limiter(qps=9e15, warm_up_s=1e9), ValueError,
     r"qps \* warm_up_s")
NONE_IS_DEFAULT = ("concurrency", "interval_ms", "sample_count")
for kw, hi in (("max_queueing_ms", 2**40), ("occupy_timeout_ms", 2**40),
               ("interval_ms", 2**40), ("sample_count", 100000), ("concurrency", 2**53)):
    base = {} if kw == "concurrency" else {"qps": 10}
    case(f"Limiter {kw} above max", lambda kw=kw, hi=hi, base=base: Limiter(**base, **{kw: hi + 1}),
         ValueError, r"\b%s\b.*%d" % (kw, hi))
    case(f"Limiter {kw} 2**63", lambda kw=kw, base=base: Limiter(**base, **{kw: BIG}), ValueError,
         r"\b%s\b.*9223372036854775808" % kw)
    case(f"Limiter {kw} huge negative", lambda kw=kw, base=base: Limiter(**base, **{kw: -HUGE}),
         ValueError, r"\b%s\b" % kw)
    for bad in (1.5, NAN, INF, "1", True) + (() if kw in NONE_IS_DEFAULT else (None,)):
        # (concurrency=None means "not a concurrency limiter"; interval_ms=None and
        # sample_count=None the default)
        case(f"Limiter {kw}={bad!r}", lambda kw=kw, bad=bad, base=base: Limiter(**base, **{kw: bad}),
             TypeError, r"\b%s\b" % kw)
case("Limiter concurrency -5", lambda: Limiter(concurrency=-5), ValueError,
     r"concurrency.*-5")
case("Limiter behavior None", lambda: Limiter(qps=10, behavior=None), TypeError, r"behavior")
case("Limiter behavior bytes", lambda: Limiter(qps=10, behavior=b"throttle"), TypeError,
     r"behavior")
case("Limiter behavior wrong case", lambda: Limiter(qps=10, behavior="Throttle"), ValueError,
     r"behavior.*'Throttle'")
case("Limiter behavior empty", lambda: Limiter(qps=10, behavior=""), ValueError, r"behavior")
case("Limiter 2 positional", lambda: Limiter(10, 2), TypeError, r"positional")
case("Limiter unknown kw rate", lambda: Limiter(rate=10), TypeError, r"\brate\b")
case("Limiter unknown kw with qps", lambda: Limiter(qps=10, timeout=1), TypeError, r"timeout")
case("Limiter on_block not callable", lambda: Limiter(qps=10, on_block="log"), TypeError,
     r"on_block")
case("Limiter warm_up_throttle qps tiny ok but cold_factor bad",
     lambda: Limiter(qps=0.1, behavior="warm_up_throttle", cold_factor=0.5), ValueError,
     r"cold_factor")

# ---- Limiter methods: n, now_ns, prioritized, timeout, arity ---------------------------
for meth in ("try_acquire", "reserve", "acquire", "release", "entry"):
    for mk in (qps_lim, conc_lim):
        who = mk.__name__
        case(f"{who}.{meth} n bool", lambda meth=meth, mk=mk: getattr(mk(), meth)(True),
             TypeError, N + r".*bool")
        case(f"{who}.{meth} n 2**63", lambda meth=meth, mk=mk: getattr(mk(), meth)(BIG),
             ValueError, N + r".*9223372036854775807")
        case(f"{who}.{meth} n -2**70", lambda meth=meth, mk=mk: getattr(mk(), meth)(-(2**70)),
             ValueError, N + r" must be >= 1")
        case(f"{who}.{meth} n None", lambda meth=meth, mk=mk: getattr(mk(), meth)(None),
             TypeError, N)
        case(f"{who}.{meth} n str", lambda meth=meth, mk=mk: getattr(mk(), meth)("2"),
             TypeError, N)
        case(f"{who}.{meth} 2 positional", lambda meth=meth, mk=mk: getattr(mk(), meth)(1, 2),
             TypeError, r"positional")
        case(f"{who}.{meth} unknown kw", lambda meth=meth, mk=mk: getattr(mk(), meth)(count=1),
             TypeError, r"count")
        case(f"{who}.{meth} n twice", lambda meth=meth, mk=mk: getattr(mk(), meth)(1, n=1),
             TypeError, N)
for meth in ("try_acquire", "reserve"):
    case(f"{meth} now 2**63", lambda meth=meth: getattr(qps_lim(), meth)(now_ns=BIG), ValueError,
         r"now_ns.*9223372036854775807")
    case(f"{meth} now bool", lambda meth=meth: getattr(qps_lim(), meth)(now_ns=True), TypeError,
         r"now_ns.*bool")
    case(f"{meth} now positional", lambda meth=meth: getattr(qps_lim(), meth)(1, 0), TypeError,
         r"positional")
for bad in (1, 0, None, "yes", 1.0, [True]):
    case(f"reserve prioritized={bad!r}", lambda bad=bad: qps_lim().reserve(prioritized=bad),
         TypeError, r"prioritized.*bool")
case("try_acquire prioritized", lambda: qps_lim().try_acquire(prioritized=True), TypeError,
     r"prioritized")
case("acquire now_ns", lambda: qps_lim().acquire(now_ns=0), TypeError, r"now_ns")
for bad in (-1e-9, NAN, -INF, -HUGE):
    case(f"acquire timeout={bad!r:.10}", lambda bad=bad: qps_lim().acquire(timeout=bad), ValueError,
         r"timeout")
    case(f"acquire_async timeout={bad!r:.10}",
         lambda bad=bad: run(qps_lim().acquire_async(timeout=bad)), ValueError, r"timeout")
for bad in (True, "1", [1], 1j):
    case(f"acquire timeout={bad!r}", lambda bad=bad: qps_lim().acquire(timeout=bad), TypeError,
         r"timeout")
    case(f"acquire_async timeout={bad!r}",
         lambda bad=bad: run(qps_lim().acquire_async(timeout=bad)), TypeError, r"timeout")
for bad, exc in ((True, TypeError), (0, ValueError), (BIG, ValueError), (1.0, TypeError),
                 ("1", TypeError), (None, TypeError)):
    case(f"acquire_async n={bad!r}", lambda bad=bad: run(conc_lim().acquire_async(bad)), exc, N)
case("acquire_async 2 positional", lambda: run(qps_lim().acquire_async(1, 2)), TypeError,
     r"positional")
case("acquire_async unknown kw", lambda: run(qps_lim().acquire_async(wait=1)), TypeError, r"wait")
case("stats 2 positional", lambda: qps_lim().stats(0, 1), TypeError, r"positional")
case("stats unknown kw", lambda: qps_lim().stats(now=0), TypeError, r"\bnow\b")
case("stats now 2**63", lambda: qps_lim().stats(now_ns=BIG), ValueError, r"now_ns")
case("stats now bool", lambda: qps_lim().stats(now_ns=True), TypeError, r"now_ns")
case("release 2**64 (more than in flight)", lambda: conc_lim().release(2**62), ValueError,
     r"release.*in flight")
case("decorate a non-callable", lambda: qps_lim()(42), TypeError, r"callable")
case("decorator on_block not callable", lambda: qps_lim()(on_block=3)(lambda: None), TypeError,
     r"on_block")

# ---- BlockedError(...) -----------------------------------------------------------------
case("BlockedError retry_after negative", lambda: BlockedError("x", retry_after=-1), ValueError,
     r"retry_after.*-1")
case("BlockedError retry_after nan", lambda: BlockedError("x", retry_after=NAN), ValueError,
     r"retry_after.*nan")
case("BlockedError retry_after inf", lambda: BlockedError("x", retry_after=INF), ValueError,
     r"retry_after")
case("BlockedError retry_after huge", lambda: BlockedError("x", retry_after=HUGE), ValueError,
     r"retry_after")
case("BlockedError retry_after str", lambda: BlockedError("x", retry_after="1"), TypeError,
     r"retry_after")
case("BlockedError retry_after bool", lambda: BlockedError("x", retry_after=True), TypeError,
     r"retry_after")
case("BlockedError retry_after positional", lambda: BlockedError("x", 1.0), TypeError,
     r"positional")
case("BlockedError unknown kw", lambda: BlockedError("x", after=1), TypeError, r"after")


async def _async_on_block(err, *args, **kwargs):
    return "busy"


def _sync_function():
    return 1


def _sync_generator():
    yield 1


case("decorate a sync function with an async on_block",
     lambda: qps_lim()(on_block=_async_on_block)(_sync_function), TypeError,
     r"on_block.*async.*_sync_function")
case("decorate a generator with an async on_block",
     lambda: Limiter(qps=10, on_block=_async_on_block)(_sync_generator), TypeError,
     r"on_block.*async.*_sync_generator")


# ---- KeyedLimiter(...) and its methods ---------------------------------------------------
def keyed():
    return KeyedLimiter(qps=10, max_keys=16)


def _set_overrides(lim, value):
    lim.overrides = value


for bad_key in (1.5, None, (1,), [1], bytearray(b"1"), True, object()):
    for meth in ("try_acquire", "reserve", "acquire", "release", "entry", "in_flight"):
        case(f"Keyed {meth} key {type(bad_key).__name__}",
             lambda meth=meth, k=bad_key: getattr(keyed(), meth)(k), TypeError,
             r"key must be a str, bytes or int")
case("Keyed try_acquire no key", lambda: keyed().try_acquire(), TypeError, r"key")
case("Keyed try_acquire n 0", lambda: keyed().try_acquire("a", 0), ValueError, N)
case("Keyed try_acquire n float", lambda: keyed().try_acquire("a", 1.0), TypeError, N)
case("Keyed try_acquire now negative", lambda: keyed().try_acquire("a", now_ns=-1), ValueError,
     "now_ns")
case("Keyed try_acquire now float", lambda: keyed().try_acquire("a", now_ns=1.0), TypeError,
     "now_ns")
case("Keyed try_acquire unknown kw", lambda: keyed().try_acquire("a", prioritized=True),
     TypeError, "prioritized")
case("Keyed reserve n negative", lambda: keyed().reserve("a", -1), ValueError, N)
case("Keyed acquire timeout negative", lambda: keyed().acquire("a", timeout=-1), ValueError,
     "timeout")
case("Keyed acquire timeout str", lambda: keyed().acquire("a", timeout="1"), TypeError,
     "timeout")
case("Keyed release beyond in flight", lambda: keyed().release("a"), ValueError,
     r"release.*in flight")
case("Keyed stats now negative", lambda: keyed().stats(now_ns=-1), ValueError, "now_ns")
case("Keyed max_keys 0", lambda: KeyedLimiter(qps=1, max_keys=0), ValueError,
     r"max_keys.*\b0\b")
case("Keyed max_keys negative", lambda: KeyedLimiter(qps=1, max_keys=-5), ValueError,
     r"max_keys.*-5")
case("Keyed max_keys too big", lambda: KeyedLimiter(qps=1, max_keys=2**24 + 1), ValueError,
     r"max_keys.*16777217")
case("Keyed max_keys float", lambda: KeyedLimiter(qps=1, max_keys=10.0), TypeError,
     r"max_keys")
case("Keyed max_keys str", lambda: KeyedLimiter(qps=1, max_keys="10"), TypeError, r"max_keys")
case("Keyed overrides bad key", lambda: KeyedLimiter(qps=1, overrides={1.5: 3}), ValueError,
     r"overrides.*1\.5")
case("Keyed overrides None key", lambda: KeyedLimiter(qps=1, overrides={None: 3}), ValueError,
     r"overrides.*None")
case("Keyed overrides negative", lambda: KeyedLimiter(qps=1, overrides={"vip": -1}),
     ValueError, r"overrides\['vip'\].*-1")
case("Keyed overrides nan", lambda: KeyedLimiter(qps=1, overrides={"vip": NAN}), ValueError,
     r"overrides\['vip'\].*nan")
case("Keyed overrides str threshold", lambda: KeyedLimiter(qps=1, overrides={"vip": "5"}),
     ValueError, r"overrides\['vip'\]")
case("Keyed overrides sub-1 window", lambda: KeyedLimiter(qps=1, overrides={b"k": 0.5}),
     ValueError, r"overrides\[b'k'\].*throttle")
case("Keyed overrides concurrency float",
     lambda: KeyedLimiter(concurrency=2, overrides={7: 1.5}), ValueError, r"overrides\[7\]")
case("Keyed overrides not a mapping", lambda: KeyedLimiter(qps=1, overrides=[("a", 1)]),
     TypeError, r"overrides")
case("Keyed overrides setter bad", lambda: _set_overrides(keyed(), {"a": -2}), ValueError,
     r"overrides\['a'\]")
case("Keyed warm_up", lambda: KeyedLimiter(qps=10, behavior="warm_up"), ValueError,
     r"behavior.*warm_up.*not supported")
case("Keyed warm_up_throttle", lambda: KeyedLimiter(qps=10, behavior="warm_up_throttle"),
     ValueError, r"behavior.*warm_up_throttle.*not supported")
case("Keyed qps and concurrency", lambda: KeyedLimiter(qps=1, concurrency=1), ValueError,
     r"qps|concurrency")
case("Keyed sub-1 window", lambda: KeyedLimiter(qps=0.5), ValueError, r"qps.*throttle")
case("Keyed shared bad", lambda: KeyedLimiter(qps=1, shared=5), TypeError, r"shared")
case("Keyed shared bad name", lambda: KeyedLimiter(qps=1, shared="a b"), ValueError, r"shared")
case("Keyed unknown kw", lambda: KeyedLimiter(qps=1, keys=5), TypeError, r"keys")
case("Keyed on_block", lambda: KeyedLimiter(qps=1, on_block=5), TypeError, r"on_block")
case("Keyed decorator without key", lambda: keyed()(lambda: None), TypeError, r"key=")
case("Keyed decorator key not callable", lambda: keyed()(key=5)(lambda: None), TypeError,
     r"key must be callable")



# ---- slidewin.redis: RedisLimiter / RedisKeyedLimiter (constructing contacts no server, and
# every refusal below comes before a decision would; a client on a dead port would otherwise
# answer with on_error="allow", which would fail the case) -----------------------------------
def _redis_cases():
    try:
        import redis
    except ImportError:  # the test extra brings redis-py; without it these rows are skipped
        return
    from slidewin.redis import (AsyncRedisKeyedLimiter, AsyncRedisLimiter, RedisKeyedLimiter,
                                RedisLimiter)

    dead = redis.Redis(port=1, socket_connect_timeout=0.05, socket_timeout=0.05)
    for cls in (RedisLimiter, RedisKeyedLimiter, AsyncRedisLimiter, AsyncRedisKeyedLimiter):
        pre = cls.__name__ + " "
        for label, kw, exc, match in [
            ("client None", dict(client=None), TypeError, r"client"),
            ("name int", dict(name=5), TypeError, r"name.*int"),
            ("name bytes", dict(name=b"api"), TypeError, r"name.*bytes"),
            ("name empty", dict(name=""), ValueError, r"name.*''"),
            ("name with space", dict(name="a b"), ValueError, r"name.*'a b'"),
            # one {hash tag} is allowed ("{acct}.rpm": all_of on Redis Cluster); a lone brace,
            # an empty tag or two tags are not
            ("name with a lone brace", dict(name="a{b"), ValueError, r"name.*hash tag"),
            ("name with an empty tag", dict(name="a{}"), ValueError, r"name.*hash tag"),
            ("name with two tags", dict(name="{a}{b}"), ValueError, r"name.*hash tag"),
            ("name too long", dict(name="a" * 201), ValueError, r"name"),
            ("on_error unknown", dict(on_error="ignore"), ValueError, r"on_error.*'ignore'"),
            ("on_error None", dict(on_error=None), TypeError, r"on_error.*NoneType"),
            ("on_error bool", dict(on_error=True), TypeError, r"on_error.*bool"),
            ("on_error upper case", dict(on_error="ALLOW"), ValueError, r"on_error"),
            ("lease_ms 0", dict(lease_ms=0), ValueError, r"lease_ms.*\b0\b"),
            ("lease_ms negative", dict(lease_ms=-1), ValueError, r"lease_ms.*-1"),
            # renewed every lease_ms / 3: 1 ms busy-loops the renewal thread
            ("lease_ms 1", dict(lease_ms=1), ValueError, r"lease_ms.*\[100, .*\b1$"),
            ("lease_ms 99", dict(lease_ms=99), ValueError, r"lease_ms.*\[100, .*\b99$"),
            ("lease_ms above 2**40", dict(lease_ms=2**40 + 1), ValueError,
             r"lease_ms.*1099511627777"),
            ("lease_ms float", dict(lease_ms=1.5), TypeError, r"lease_ms.*float"),
            ("lease_ms bool", dict(lease_ms=True), TypeError, r"lease_ms.*bool"),
            ("lease_ms str", dict(lease_ms="60000"), TypeError, r"lease_ms.*str"),
            ("qps negative", dict(qps=-1), ValueError, r"qps.*-1"),
            ("qps nan", dict(qps=NAN), ValueError, r"qps"),
            ("qps str", dict(qps="10"), TypeError, r"qps"),
            ("qps and concurrency", dict(qps=1, concurrency=1), ValueError,
             r"qps|concurrency"),
            ("behavior unknown", dict(behavior="nope"), ValueError, r"behavior.*'nope'"),
            ("not divisible", dict(sample_count=3), ValueError, r"interval_ms|sample_count"),
            ("interval_ms float", dict(interval_ms=1000.0), TypeError, r"interval_ms"),
            ("on_block not callable", dict(on_block=5), TypeError, r"on_block"),
            ("unknown kw", dict(shared="x"), TypeError, r"shared"),
        ]:
            args = dict(client=dead, name="api", qps=10)
            if "concurrency" in kw:
                args.pop("qps")
            args.update(kw)
            case(pre + label, lambda cls=cls, args=args: cls(**args), exc, match)
    lim = RedisLimiter(dead, "api", qps=10)
    conc = RedisLimiter(dead, "api-c", concurrency=2)
    per = RedisKeyedLimiter(dead, "per", qps=10)
    per_c = RedisKeyedLimiter(dead, "per-c", concurrency=2)
    for label, call, exc, match in [
        ("try_acquire n 0", lambda: lim.try_acquire(0), ValueError, N),
        ("try_acquire n float", lambda: lim.try_acquire(1.0), TypeError, N),
        ("try_acquire n bool", lambda: lim.try_acquire(True), TypeError, N),
        ("try_acquire now negative", lambda: lim.try_acquire(now_ns=-1), ValueError, r"now_ns"),
        ("try_acquire now 2**62", lambda: lim.try_acquire(now_ns=2**62), ValueError,
         r"now_ns.*2\*\*62"),
        ("try_acquire now float", lambda: lim.try_acquire(now_ns=1.0), TypeError, r"now_ns"),
        ("try_acquire now bool", lambda: lim.try_acquire(now_ns=True), TypeError, r"now_ns"),
        ("reserve n negative", lambda: lim.reserve(-1), ValueError, N),
        ("acquire timeout negative", lambda: lim.acquire(timeout=-1), ValueError, r"timeout"),
        ("acquire timeout str", lambda: lim.acquire(timeout="1"), TypeError, r"timeout"),
        ("release beyond held", lambda: conc.release(), ValueError, r"release|in flight"),
        ("entry n 0", lambda: lim.entry(0), ValueError, N),
        ("stats now negative", lambda: lim.stats(now_ns=-1), ValueError, r"now_ns"),
        ("decorates a coroutine function", lambda: lim(asyncio.sleep), TypeError, r"async"),
        ("decorates a non-callable", lambda: lim(5), TypeError, r"callable"),
        ("Keyed key float", lambda: per.try_acquire(1.5), TypeError, r"key"),
        ("Keyed key None", lambda: per.try_acquire(None), TypeError, r"key"),
        ("Keyed key bool", lambda: per.try_acquire(True), TypeError, r"key"),
        ("Keyed n 0", lambda: per.try_acquire("a", 0), ValueError, N),
        ("Keyed now negative", lambda: per.reserve("a", now_ns=-5), ValueError, r"now_ns"),
        ("Keyed release beyond held", lambda: per_c.release("a"), ValueError,
         r"release|in flight"),
        ("Keyed decorator without key", lambda: per(lambda: None), TypeError, r"key="),
        ("Keyed overrides list", lambda: RedisKeyedLimiter(dead, "p", qps=1,
                                                           overrides=[("a", 1)]),
         TypeError, r"overrides"),
        ("Keyed overrides key float", lambda: RedisKeyedLimiter(dead, "p", qps=1,
                                                                overrides={1.5: 3}),
         TypeError, r"overrides"),
        ("Keyed overrides negative", lambda: RedisKeyedLimiter(dead, "p", qps=1,
                                                               overrides={"vip": -1}),
         ValueError, r"overrides\['vip'\].*qps"),
        ("Keyed overrides str threshold",
         lambda: RedisKeyedLimiter(dead, "p", qps=1, overrides={"vip": "5"}), TypeError,
         r"overrides\['vip'\]"),
        ("Keyed concurrency overrides float",
         lambda: RedisKeyedLimiter(dead, "p", concurrency=2, overrides={7: 1.5}),
         (TypeError, ValueError), r"overrides\[7\]"),
    ]:
        case("Redis " + label, call, exc, match)


_redis_cases()


def _held(lim, n):
    assert lim.try_acquire(n)
    return lim


def _enter(ctx):
    with ctx:
        pass


@pytest.mark.parametrize(("call", "exc", "match"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_case_ids_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


def test_every_limiter_keyword_has_a_wrong_type_and_an_out_of_range_case():
    """The tables cover each keyword of Limiter(...) both ways (on_block and shadow: type
    only; a bool has no out-of-range value)."""
    keywords = [p for p in inspect.signature(Limiter.__new__).parameters
                if p not in ("cls", "qps_or_rate")]  # the first argument: qps's or rate's
    assert "qps" in keywords and "on_block" in keywords
    for kw in keywords:
        kinds = {exc for _, _, exc, match in CASES if match and kw in match}
        assert TypeError in kinds, kw
        if kw not in ("on_block", "shadow"):
            assert ValueError in kinds, kw


def test_every_keyed_limiter_keyword_has_a_bad_input_case():
    """KeyedLimiter's own keywords (max_keys, overrides) both ways; the shared ones as Limiter."""
    for kw in ("max_keys", "overrides"):
        kinds = {exc for name, _, exc, match in CASES if name.startswith("Keyed")
                 and match and kw in match}
        assert TypeError in kinds and ValueError in kinds, kw


def test_value_error_message_names_value():
    """The message names the parameter, the value and what is allowed."""
    with pytest.raises(ValueError) as info:
        Metric(1000, 0)
    assert "sample_count" in str(info.value) and "0" in str(info.value)
    with pytest.raises(ValueError) as info:
        Limiter(qps=10, cold_factor=1)
    assert "cold_factor" in str(info.value) and "1" in str(info.value)


def test_failed_calls_change_nothing():
    m = metric()
    m.add(Event.PASS, 2, now_ns=10**9)
    for bad in (lambda: m.add(Event.PASS, -1, now_ns=10**9), lambda: m.add("x", now_ns=10**9),
                lambda: m.add(Event.PASS, now_ns=-1), lambda: m.add_rt(-3, now_ns=10**9)):
        with pytest.raises((TypeError, ValueError)):
            bad()
    assert m.sum(Event.PASS, now_ns=10**9) == 2
    assert m.sum(Event.RT, now_ns=10**9) == 0
    lim = Limiter(qps=2)
    with pytest.raises(ValueError):
        lim.try_acquire(0, now_ns=10**9)
    with pytest.raises(ValueError):
        lim.release()
    assert lim.metric.sum(Event.PASS, now_ns=10**9) == 0
    assert lim.metric.sum(Event.BLOCK, now_ns=10**9) == 0
    assert lim.try_acquire(2, now_ns=10**9)


def test_accepted_edge_values():
    """Values at the edge of what is allowed are accepted, not refused."""
    Limiter(qps=0.5, behavior="throttle")  # sub-1 per window is fine for throttle
    Limiter(qps=0.5, behavior="warm_up_throttle")
    Limiter(qps=1)  # exactly 1 per window
    Limiter(qps=2, interval_ms=500, sample_count=1)
    Limiter(qps=0)  # kill switch
    Limiter(qps=0, behavior="warm_up")
    Limiter(concurrency=0)
    Limiter(qps=10, max_queueing_ms=0, occupy_timeout_ms=0)
    Limiter(qps=10, behavior="warm_up", cold_factor=2)
    Limiter(qps=1.5, behavior="throttle")
    Limiter(100)  # qps positional
    Metric(1, 1)
    m = Metric(1000, 2)
    m.add(Event.PASS, 0, now_ns=0)
    m.add_rt(0, now_ns=0)
    Limiter(qps=10).try_acquire(now_ns=0)
    Limiter(qps=10).acquire(timeout=0)


def test_no_message_carries_an_unexpanded_format():
    """PyErr_Format has no %g: a message must never show a raw format directive."""
    for name, call, exc, _ in CASES:
        try:
            call()
        except (TypeError, ValueError) as e:
            msg = str(e)
            for bad in ("%g", "%R", "%s", "%lld", "%zd", "%U"):
                assert bad not in msg, (name, msg)


def test_value_errors_show_the_value():
    for call, shown in (
        (lambda: Limiter(qps=NAN), "nan"),
        (lambda: Limiter(qps=-2.5), "-2.5"),
        (lambda: Limiter(qps=10, warm_up_s=INF), "inf"),
        (lambda: Limiter(concurrency=BIG), str(BIG)),
        (lambda: metric().add(0, now_ns=BIG), str(BIG)),
        (lambda: qps_lim().try_acquire(0), "0"),
        (lambda: qps_lim().acquire(timeout=-3), "-3"),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert shown in str(info.value)


def test_refused_calls_count_nothing_and_keep_state():
    lim = Limiter(qps=2)
    conc = Limiter(concurrency=1)
    for call in (lambda: lim.try_acquire(True), lambda: lim.reserve(BIG),
                 lambda: lim.reserve(prioritized=1), lambda: lim.try_acquire(now_ns=BIG),
                 lambda: lim.acquire(timeout=NAN), lambda: conc.acquire(True),
                 lambda: conc.entry(True), lambda: conc.release(True)):
        with pytest.raises((TypeError, ValueError)):
            call()
    for b in lim.metric.buckets(now_ns=0) + conc.metric.buckets(now_ns=0):
        assert b.counts == (0,) * 6
    assert conc.in_flight == 0
    assert lim.try_acquire(2, now_ns=0)


def test_entry_entered_twice_is_refused_sync_and_async():
    lim = Limiter(concurrency=2)
    e = lim.entry()
    with e:
        with pytest.raises(RuntimeError, match="entered only once"):
            e.__enter__()
        assert lim.in_flight == 1
    assert lim.in_flight == 0

    async def twice():
        a = lim.entry()
        await a.__aenter__()
        with pytest.raises(RuntimeError, match="entered only once"):
            await a.__aenter__()
        assert lim.in_flight == 1
        await a.__aexit__(None, None, None)
        with pytest.raises(RuntimeError, match="not entered"):
            await a.__aexit__(None, None, None)

    run(twice())
    assert lim.in_flight == 0  # no in-flight count lost for ever


def test_huge_timeouts_wait_without_end_not_overflow():
    # an int timeout beyond a double is accepted as "no end" by both (not OverflowError)
    lim = Limiter(qps=10**6)
    lim.acquire(timeout=HUGE)
    run(lim.acquire_async(timeout=HUGE))
    lim.acquire(timeout=INF)
    run(lim.acquire_async(timeout=INF))
    assert math.isclose(lim.stats().pass_qps, 4.0)


def test_events_accepts_ordered_iterables():
    assert Metric(events=iter(["a", "b"])).events == ("a", "b")
    assert Metric(events={"x": 1, "y": 2}).events == ("x", "y")  # dict keys keep order
    assert Metric(events=[f"e{i}" for i in range(32)]).add(31, now_ns=0) is None
    custom = Metric(events=("sent", "dropped"))
    custom.add("dropped", 2, now_ns=0)
    assert custom.sum(1, now_ns=0) == 2 and custom.sum(Event.BLOCK, now_ns=0) == 2


# One source of truth: the core's own configuration check says which parameter failed and
# why; the binding only raises it (so the two never disagree at a boundary).
@pytest.mark.parametrize("kwargs", [
    dict(qps=0.01463378941977025, interval_ms=68335, sample_count=1),
    dict(qps=0.013904338153503892, interval_ms=71920, sample_count=1),
    dict(qps=0.0146, interval_ms=68335, sample_count=1),
])
def test_window_limit_boundary_agrees_with_the_core(kwargs):
    try:
        lim = Limiter(**kwargs)
    except ValueError as e:
        msg = str(e)
        assert "invalid Limiter configuration" not in msg
        assert msg.startswith("qps=") and "requests per window" in msg
    else:
        # built: the window admits at least one request, as the core computed
        assert lim.try_acquire(now_ns=10**12)


def test_concurrency_up_to_2_53_and_the_message_promises_it():
    assert Limiter(concurrency=2**53).try_acquire()
    assert Limiter(concurrency=9 * 10**15 + 1).try_acquire()
    with pytest.raises(ValueError, match=r"concurrency.*9007199254740992"):
        Limiter(concurrency=2**53 + 1)


@pytest.mark.parametrize("cf", [-3, 0, 0.5, 1, float("nan"), float("inf"), 2e9])
def test_cold_factor_messages_agree(cf):
    with pytest.raises(ValueError, match=r"^cold_factor must be a number > 1 and at most 1e9"):
        Limiter(qps=10, behavior="warm_up", cold_factor=cf)


@pytest.mark.parametrize("qps", [1e-16, 1e-300, 5e-324])
def test_tiny_qps_message_is_well_defined(qps):
    with pytest.raises(ValueError) as info:
        Limiter(qps=qps)
    msg = str(info.value)
    assert "throttle" in msg and "-9223372036854775808" not in msg
    assert Limiter(qps=qps, behavior="throttle").reserve(now_ns=10**12) == 0


def test_limiter_used_as_a_bare_decorator_hints_at_building_it_first():
    def fn():
        return 1

    for cls in (Limiter, KeyedLimiter):
        with pytest.raises(TypeError, match=r"qps must be an int or float, not function "
                                            r"\(to decorate, build the limiter first: "
                                            r"@%s\(qps=10\)\)" % cls.__name__):
            cls(fn)
