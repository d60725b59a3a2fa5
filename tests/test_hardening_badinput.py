"""Bad input, the rest of it: complements tests/test_bad_input.py (which covers one case per
parameter) with the cases it misses -- values beyond int64 and double, NaN/inf, bool where
an int or a number is meant, every keyword of Limiter(...) in wrong type and out of range,
events= edge cases, bad `prioritized`, every Metric read with a bad now_ns, unknown keywords
and too many positional arguments for every method, BlockedError(...).

Each case asserts the exception type and that the message names the parameter (a regular
expression); out-of-range ValueErrors must also show the offending value.
"""

import asyncio
import math

import pytest

from slidewin import BlockedError, Event, Limiter, Metric

NAN = float("nan")
INF = float("inf")
BIG = 2**63  # one past INT64_MAX
HUGE = 10**400  # beyond a double
N = r"\bn\b"


def m():
    return Metric(1000, 2)


def lq():
    return Limiter(qps=10)


def lc():
    return Limiter(concurrency=2)


def run(coro):
    return asyncio.run(coro)


CASES = []


def case(name, call, exc, match):
    CASES.append((name, call, exc, match))


# ---- Metric reads: now_ns beyond int64, bool, None-like wrong types -----------------------
for meth in ("sum", "rate", "current", "previous"):
    case(f"{meth} now 2**63", lambda meth=meth: getattr(m(), meth)(0, now_ns=BIG), ValueError,
         r"now_ns.*9223372036854775807.*9223372036854775808")
    case(f"{meth} now huge negative", lambda meth=meth: getattr(m(), meth)(0, now_ns=-HUGE),
         ValueError, r"now_ns must be >= 0")
    case(f"{meth} now bool", lambda meth=meth: getattr(m(), meth)(0, now_ns=True), TypeError,
         r"now_ns.*bool")
    case(f"{meth} now str", lambda meth=meth: getattr(m(), meth)(0, now_ns="1"), TypeError,
         r"now_ns.*str")
    case(f"{meth} event bool", lambda meth=meth: getattr(m(), meth)(True, now_ns=0), TypeError,
         r"event.*bool")
    case(f"{meth} event bytes", lambda meth=meth: getattr(m(), meth)(b"pass", now_ns=0),
         TypeError, r"event")
    case(f"{meth} no event", lambda meth=meth: getattr(m(), meth)(), TypeError, r"event")
    case(f"{meth} too many positional", lambda meth=meth: getattr(m(), meth)(0, 1), TypeError,
         r"positional")
    case(f"{meth} unknown kw", lambda meth=meth: getattr(m(), meth)(0, when=1), TypeError,
         r"when")
    case(f"{meth} event twice", lambda meth=meth: getattr(m(), meth)(0, event=1), TypeError,
         r"event")
for meth in ("min_rt", "avg_rt", "buckets"):
    case(f"{meth} now 2**63", lambda meth=meth: getattr(m(), meth)(now_ns=BIG), ValueError,
         r"now_ns.*9223372036854775807")
    case(f"{meth} now nan", lambda meth=meth: getattr(m(), meth)(now_ns=NAN), TypeError,
         r"now_ns.*float")
    case(f"{meth} now bool", lambda meth=meth: getattr(m(), meth)(now_ns=False), TypeError,
         r"now_ns.*bool")
    case(f"{meth} positional now", lambda meth=meth: getattr(m(), meth)(0), TypeError,
         r"positional")
    case(f"{meth} unknown kw", lambda meth=meth: getattr(m(), meth)(now=0), TypeError, r"now")

# ---- Metric.add / add_rt / reset ------------------------------------------------------
case("add n 2**63", lambda: m().add(0, BIG, now_ns=0), ValueError, N + r".*9223372036854775807")
case("add n huge", lambda: m().add(0, HUGE, now_ns=0), ValueError, N)
case("add n bool", lambda: m().add(0, True, now_ns=0), TypeError, N + r".*bool")
case("add n None", lambda: m().add(0, None, now_ns=0), TypeError, N)
case("add now 2**63", lambda: m().add(0, now_ns=BIG), ValueError, r"now_ns")
case("add now bool", lambda: m().add(0, now_ns=True), TypeError, r"now_ns")
case("add event huge", lambda: m().add(HUGE, now_ns=0), ValueError, r"event")
case("add event bool", lambda: m().add(False, now_ns=0), TypeError, r"event")
case("add event wrong case", lambda: m().add("PASS", now_ns=0), ValueError, r"event.*'PASS'")
case("add event list", lambda: m().add(["pass"], now_ns=0), TypeError, r"event")
case("add 3 positional", lambda: m().add(0, 1, 2), TypeError, r"positional")
case("add unknown kw", lambda: m().add(0, count=1), TypeError, r"count")
case("add event twice", lambda: m().add(0, event=0), TypeError, r"event")
case("add_rt 2**63", lambda: m().add_rt(BIG, now_ns=0), ValueError, r"rt_ms")
case("add_rt bool", lambda: m().add_rt(True, now_ns=0), TypeError, r"rt_ms")
case("add_rt None", lambda: m().add_rt(None), TypeError, r"rt_ms")
case("add_rt missing", lambda: m().add_rt(), TypeError, r"rt_ms")
case("add_rt 2 positional", lambda: m().add_rt(1, 2), TypeError, r"positional")
case("add_rt unknown kw", lambda: m().add_rt(1, rt=2), TypeError, r"\brt\b")
case("add_rt now 2**63", lambda: m().add_rt(1, now_ns=BIG), ValueError, r"now_ns")
case("reset with an argument", lambda: m().reset(0), TypeError, r"reset")

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
case("Limiter qps just above max", lambda: Limiter(qps=9.1e15), ValueError,
     r"qps.*9000000000000000.*9100000000000000")
case("Limiter warm_up_s above max", lambda: Limiter(qps=10, warm_up_s=2e9), ValueError,
     r"warm_up_s.*1000000000")
case("Limiter cold_factor exactly 1", lambda: Limiter(qps=10, cold_factor=1.0), ValueError,
     r"cold_factor must be > 1")
case("Limiter warm-up tokens overflow", lambda: Limiter(qps=1e15, cold_factor=1.0000001),
     ValueError, r"qps.*warm_up_s.*cold_factor")
case("Limiter qps*warm_up_s too large", lambda: Limiter(qps=9e15, warm_up_s=1e9), ValueError,
     r"qps \* warm_up_s")
for kw, hi in (("max_queueing_ms", 2**40), ("occupy_timeout_ms", 2**40),
               ("interval_ms", 2**40), ("sample_count", 100000), ("concurrency", 2**53)):
    base = {} if kw == "concurrency" else {"qps": 10}
    case(f"Limiter {kw} above max", lambda kw=kw, hi=hi, base=base: Limiter(**base, **{kw: hi + 1}),
         ValueError, r"\b%s\b.*%d" % (kw, hi))
    case(f"Limiter {kw} 2**63", lambda kw=kw, base=base: Limiter(**base, **{kw: BIG}), ValueError,
         r"\b%s\b.*9223372036854775808" % kw)
    case(f"Limiter {kw} huge negative", lambda kw=kw, base=base: Limiter(**base, **{kw: -HUGE}),
         ValueError, r"\b%s\b" % kw)
    for bad in (1.5, NAN, INF, "1", True) + (() if kw == "concurrency" else (None,)):
        # (concurrency=None means "not a concurrency limiter")
        case(f"Limiter {kw}={bad!r}", lambda kw=kw, bad=bad, base=base: Limiter(**base, **{kw: bad}),
             TypeError, r"\b%s\b" % kw)
case("Limiter concurrency negative", lambda: Limiter(concurrency=-5), ValueError,
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
    for mk in (lq, lc):
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
    case(f"{meth} now 2**63", lambda meth=meth: getattr(lq(), meth)(now_ns=BIG), ValueError,
         r"now_ns.*9223372036854775807")
    case(f"{meth} now bool", lambda meth=meth: getattr(lq(), meth)(now_ns=True), TypeError,
         r"now_ns.*bool")
    case(f"{meth} now positional", lambda meth=meth: getattr(lq(), meth)(1, 0), TypeError,
         r"positional")
for bad in (1, 0, None, "yes", 1.0, [True]):
    case(f"reserve prioritized={bad!r}", lambda bad=bad: lq().reserve(prioritized=bad),
         TypeError, r"prioritized.*bool")
case("try_acquire prioritized", lambda: lq().try_acquire(prioritized=True), TypeError,
     r"prioritized")
case("acquire now_ns", lambda: lq().acquire(now_ns=0), TypeError, r"now_ns")
for bad in (-1e-9, NAN, -INF, -HUGE):
    case(f"acquire timeout={bad!r:.10}", lambda bad=bad: lq().acquire(timeout=bad), ValueError,
         r"timeout")
    case(f"acquire_async timeout={bad!r:.10}",
         lambda bad=bad: run(lq().acquire_async(timeout=bad)), ValueError, r"timeout")
for bad in (True, "1", [1], 1j):
    case(f"acquire timeout={bad!r}", lambda bad=bad: lq().acquire(timeout=bad), TypeError,
         r"timeout")
    case(f"acquire_async timeout={bad!r}",
         lambda bad=bad: run(lq().acquire_async(timeout=bad)), TypeError, r"timeout")
for bad, exc in ((True, TypeError), (0, ValueError), (BIG, ValueError), (1.0, TypeError),
                 ("1", TypeError), (None, TypeError)):
    case(f"acquire_async n={bad!r}", lambda bad=bad: run(lc().acquire_async(bad)), exc, N)
case("acquire_async 2 positional", lambda: run(lq().acquire_async(1, 2)), TypeError,
     r"positional")
case("acquire_async unknown kw", lambda: run(lq().acquire_async(wait=1)), TypeError, r"wait")
case("stats 2 positional", lambda: lq().stats(0, 1), TypeError, r"positional")
case("stats unknown kw", lambda: lq().stats(now=0), TypeError, r"\bnow\b")
case("stats now 2**63", lambda: lq().stats(now_ns=BIG), ValueError, r"now_ns")
case("stats now bool", lambda: lq().stats(now_ns=True), TypeError, r"now_ns")
case("release 2**64 (more than in flight)", lambda: lc().release(2**62), ValueError,
     r"release.*in flight")
case("decorate a non-callable", lambda: lq()(42), TypeError, r"callable")
case("decorator on_block not callable", lambda: lq()(on_block=3)(lambda: None), TypeError,
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


@pytest.mark.parametrize(("call", "exc", "match"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_case_ids_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


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
        (lambda: m().add(0, now_ns=BIG), str(BIG)),
        (lambda: lq().try_acquire(0), "0"),
        (lambda: lq().acquire(timeout=-3), "-3"),
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
