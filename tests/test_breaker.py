"""slidewin.Breaker: Sentinel's degrade scenarios with explicit now_ns, exactly one probe
among threads and asyncio tasks, outcomes (errors=, cancels, calls admitted before a trip),
listeners, the decorator, bad input, and a hypothesis state machine against a model."""

import asyncio
import gc
import json
import logging
import multiprocessing as mp
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import slidewin
from slidewin import BlockedError, Breaker, BreakerOpenError

S = 1_000_000_000
MS = 1_000_000


class Calls:
    """Sentinel's entryAndSleepFor / entryWithErrorIfPresent on the bare pair, at a clock."""

    def __init__(self, br, t):
        self.br = br
        self.t = t

    def call(self, rt_ms, error=False):
        if not self.br.try_pass(now_ns=self.t):
            return False
        self.t += rt_ms * MS
        self.br.record(rt_ms, error=error, now_ns=self.t)
        return True

    def sleep(self, s):
        self.t += int(s * S)


def test_exception_circuit_breaker_test():
    # ExceptionCircuitBreakerTest.testRecordErrorOrSuccess
    br = Breaker(error_ratio=0.2, interval_ms=20_000, recovery_s=10, min_requests=1)
    c = Calls(br, 100 * S)
    assert c.call(10)
    assert c.call(0, error=True)  # 1/2 > 0.2 -> open
    assert br.state == "open"
    assert not c.call(0, error=True)
    assert not c.call(100)
    c.sleep(5)
    assert not c.call(100)
    c.sleep(5)
    assert c.call(0, error=True)  # -> half -> open
    assert br.state == "open"
    assert not c.call(100)
    assert not c.call(100)
    c.sleep(10)
    assert c.call(100)  # -> half -> closed
    assert br.state == "closed"
    for _ in range(6):
        assert c.call(100)
    assert c.call(0, error=True)  # 1/7: the window was emptied on closing
    assert c.call(100)
    assert br.state == "closed"


def test_strict_greater_than_and_min_requests():
    br = Breaker(error_ratio=0.5, min_requests=2)
    c = Calls(br, S)
    assert c.call(1, error=True)  # 1/1, below min_requests
    assert c.call(1)  # 1/2 == 0.5: not above
    assert br.state == "closed"
    assert c.call(1, error=True)  # 2/3
    assert br.state == "open"
    br = Breaker(error_count=2, min_requests=1)
    c = Calls(br, S)
    assert c.call(1, error=True) and c.call(1, error=True) and c.call(1)
    assert br.state == "closed"  # 2 errors is not above 2
    assert c.call(1, error=True)
    assert br.state == "open"


def test_response_time_circuit_breaker_test_slow_ratio_one():
    # ResponseTimeCircuitBreakerTest.testMaxSlowRatioThreshold
    br = Breaker(slow_rt_ms=10, slow_ratio=1.0, min_requests=3, interval_ms=5000, recovery_s=5)
    c = Calls(br, 10 * S)
    assert c.call(20) and c.call(20) and c.call(20)  # 3/3 slow: == 1.0 opens
    assert br.state == "open"
    assert not c.call(20)
    c.sleep(1)
    assert not c.call(20)
    c.sleep(4)
    assert c.call(20)


def test_slow_request_mode_with_listeners():
    # CircuitBreakingIntegrationTest.testSlowRequestMode
    br = Breaker(slow_rt_ms=50, slow_ratio=0.8, min_requests=10, interval_ms=20_000,
                 recovery_s=5)
    seen = []
    br.on_change(lambda old, new, value: seen.append((old, new, value)))
    c = Calls(br, 1000 * S)
    for i in range(10):
        assert c.call(65 if i < 7 else 35)
    for _ in range(5):  # 8/11 .. 12/15 = 0.8: not above
        assert c.call(65)
        assert br.state == "closed"
    assert c.call(65)  # 13/16
    assert seen == [("closed", "open", pytest.approx(13 / 16))]
    assert not c.call(1)
    c.sleep(1)
    assert not c.call(1)
    c.sleep(5)
    assert c.call(65)  # half-open -> open
    assert seen[1:] == [("open", "half_open", None), ("half_open", "open", 1.0)]
    del seen[:]
    c.sleep(6)
    assert c.call(35)
    assert seen == [("open", "half_open", None), ("half_open", "closed", None)]
    assert c.call(65)
    assert br.state == "closed"


def test_exception_ratio_mode():
    # CircuitBreakingIntegrationTest.testExceptionRatioMode
    br = Breaker(error_ratio=0.5, min_requests=10, interval_ms=25_000, recovery_s=5)
    c = Calls(br, 1000 * S)
    for i in range(9):
        assert c.call(1, error=i < 6)
    assert c.call(1, error=True)  # 7/10
    assert br.state == "open"
    assert not c.call(1)
    c.sleep(2)
    assert not c.call(1)
    c.sleep(5)
    assert c.call(1, error=True)
    assert br.state == "open"
    c.sleep(6)
    assert c.call(1)
    assert br.state == "closed"
    assert c.call(1, error=True)
    assert br.state == "closed"


def test_multiple_half_opened_breakers_cancel_the_probe():
    # CircuitBreakingIntegrationTest.testMultipleHalfOpenedBreakers (#1638): the probe of
    # the first breaker is cancelled when the second refuses; its retry time does not move
    b1 = Breaker(slow_rt_ms=50, slow_ratio=0.8, min_requests=1, interval_ms=20_000,
                 recovery_s=2)
    b2 = Breaker(slow_rt_ms=50, slow_ratio=0.8, min_requests=1, interval_ms=20_000,
                 recovery_s=4)
    t = 500 * S
    assert b1.try_pass(now_ns=t) and b2.try_pass(now_ns=t)
    b1.record(100, now_ns=t + 100 * MS)
    b2.record(100, now_ns=t + 100 * MS)
    assert b1.state == b2.state == "open"
    t += 3 * S
    for _ in range(10):
        assert b1.try_pass(now_ns=t)
        assert not b2.try_pass(now_ns=t)
        b1.cancel(now_ns=t)
        assert b1.state == "open"
        assert b1.retry_after(now_ns=t) == 0.0
        t += 100 * MS
    t += 3 * S
    for _ in range(10):
        assert b1.try_pass(now_ns=t) and b2.try_pass(now_ns=t)
        b1.record(1, now_ns=t + MS)
        b2.record(1, now_ns=t + MS)
    assert b1.state == b2.state == "closed"
    assert b1.totals()["cancelled"] == 10


def test_nested_entries_cancel_the_outer_probe():
    b1 = Breaker(error_count=0, min_requests=1, recovery_s=0)
    b2 = Breaker(error_count=0, min_requests=1, recovery_s=1000)
    for b in (b1, b2):
        with pytest.raises(ValueError):
            with b.entry():
                raise ValueError
    assert b1.state == b2.state == "open"
    with pytest.raises(BreakerOpenError):
        with b1.entry():  # the probe
            assert b1.state == "half_open"
            with b2.entry():
                pass
    assert b1.state == "open"  # cancelled, not failed: probes again at once
    assert b1.retry_after() == 0.0
    assert b1.totals()["cancelled"] == 1
    with b1.entry():
        pass
    assert b1.state == "closed"


@pytest.mark.parametrize("exc", [BlockedError("nested limit"), KeyboardInterrupt(),
                                 asyncio.CancelledError(), GeneratorExit()])
def test_a_probe_ended_by_a_blocked_error_or_base_exception_is_cancelled(exc):
    br = Breaker(error_count=0, min_requests=1, recovery_s=0)
    br.record(1, error=True)
    assert br.state == "open"
    with pytest.raises(type(exc)):
        with br.entry():
            raise exc
    assert br.state == "open"
    assert br.totals()["cancelled"] == 1
    assert br.totals()["errors"] == 1  # the cancel counted nothing


def test_errors_selects_what_counts():
    br = Breaker(error_count=0, min_requests=1, errors=(ConnectionError, TimeoutError))
    with pytest.raises(KeyError):
        with br.entry():
            raise KeyError("not an error of the backend: a success")
    assert br.state == "closed"
    assert br.stats()["errors"] == 0 and br.stats()["total"] == 1
    with pytest.raises(ConnectionResetError):
        with br.entry():
            raise ConnectionResetError
    assert br.state == "open"
    assert "errors=(ConnectionError, TimeoutError)" in repr(br)
    assert Breaker(error_ratio=0.5, errors=OSError).errors == (OSError,)


def test_calls_admitted_before_the_trip_change_no_state():
    br = Breaker(error_count=0, min_requests=1, recovery_s=0.001)
    early_ok, early_err = br.entry(), br.entry()
    early_ok.__enter__()
    early_err.__enter__()
    with pytest.raises(OSError):
        with br.entry():
            raise OSError  # trips
    assert br.state == "open"
    probe = br.entry()
    while True:
        try:
            probe.__enter__()
            break
        except BreakerOpenError:
            pass
    assert br.state == "half_open"
    early_err.__exit__(OSError, OSError(), None)  # counted, decides nothing
    assert br.state == "half_open"
    early_ok.__exit__(None, None, None)
    assert br.state == "half_open"
    probe.__exit__(None, None, None)
    assert br.state == "closed"
    assert br.totals()["total"] == 4


def test_bare_record_after_a_probe_is_the_probes():
    br = Breaker(error_count=0, min_requests=1, recovery_s=1)
    br.record(1, error=True, now_ns=S)
    assert br.try_pass(now_ns=2 * S)
    assert br.state == "half_open"
    assert not br.try_pass(now_ns=2 * S)
    assert br.retry_after(now_ns=2 * S) == 1.0
    br.record(1, now_ns=2 * S)
    assert br.state == "closed"
    assert br.retry_after() is None


def test_breaker_open_error():
    br = Breaker(error_count=0, min_requests=1, recovery_s=30, name="payments")
    br.record(1, error=True)
    with pytest.raises(BreakerOpenError) as info:
        with br.entry():
            pass
    e = info.value
    assert isinstance(e, BlockedError)
    assert 29 < e.retry_after <= 30
    assert e.breaker is br and e.limiter is br
    assert "payments" in str(e)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is BreakerOpenError and back.retry_after == e.retry_after
    assert back.breaker is None


def test_listeners_order_and_a_raising_listener(caplog):
    br = Breaker(error_count=0, min_requests=1, recovery_s=1)
    calls = []

    @br.on_change
    def bad(old, new, value):
        calls.append(("bad", old, new))
        raise RuntimeError("listener bug")

    br.on_change(lambda old, new, value: calls.append(("good", old, new)))
    with caplog.at_level(logging.ERROR, logger="slidewin"):
        br.record(1, error=True, now_ns=S)
    assert calls == [("bad", "closed", "open"), ("good", "closed", "open")]
    assert "listener" in caplog.text
    with pytest.raises(TypeError, match="callable"):
        br.on_change(42)


def test_listener_runs_after_the_lock_is_released():
    br = Breaker(error_count=0, min_requests=1, recovery_s=0)
    seen = []
    # a listener that uses the breaker would deadlock if called under its lock
    br.on_change(lambda old, new, value: seen.append((new, br.stats()["state"],
                                                      br.try_pass())))
    br.record(1, error=True)
    # the listener's own try_pass made the probe, told once the change it was told of has
    # been told (in the order of the changes, never first and nested)
    assert seen == [("open", "open", True), ("half_open", "half_open", False)]


def test_decorator_on_every_kind():
    br = Breaker(error_count=1, min_requests=1, recovery_s=1000)

    @br
    def f(x):
        if x:
            raise ValueError(x)
        return "ok"

    @br
    async def g(x):
        if x:
            raise ValueError(x)
        return "ok"

    @br
    def gen():
        yield 1
        yield 2

    @br
    async def agen():
        yield 1

    async def drain():
        return [i async for i in agen()]

    assert f(0) == "ok" and asyncio.run(g(0)) == "ok"
    assert list(gen()) == [1, 2] and asyncio.run(drain()) == [1]
    assert f.limiter is br
    with pytest.raises(ValueError):
        f(1)
    with pytest.raises(ValueError):
        asyncio.run(g(1))  # 2 errors > 1: open
    assert br.state == "open"
    with pytest.raises(BreakerOpenError):
        f(0)
    with pytest.raises(BreakerOpenError):
        asyncio.run(g(0))
    with pytest.raises(BreakerOpenError):
        list(gen())
    with pytest.raises(BreakerOpenError):
        asyncio.run(drain())

    @br(on_block=lambda e, x: "cached %s" % x)
    def h(x):
        return "live"

    assert h(7) == "cached 7"


def test_update_keeps_the_state_and_window():
    br = Breaker(error_ratio=0.9, min_requests=1)
    c = Calls(br, S)
    assert c.call(1) and c.call(1, error=True)
    br.update(error_ratio=0.4)
    assert br.error_ratio == 0.4 and br.stats(now_ns=c.t)["total"] == 2
    assert c.call(1, error=True)  # 2/3 > 0.4
    assert br.state == "open"
    br.update(slow_rt_ms=100, slow_ratio=0.5, recovery_s=2, errors=OSError)
    assert (br.error_ratio, br.slow_rt_ms, br.slow_ratio, br.recovery_s) == (None, 100, 0.5, 2.0)
    assert br.errors == (OSError,)
    assert br.state == "open"
    with pytest.raises(ValueError, match="interval_ms"):
        br.update(interval_ms=2000)
    with pytest.raises(TypeError, match="bogus"):
        br.update(bogus=1)
    with pytest.raises(ValueError, match="exactly one"):
        br.update(error_ratio=0.5, error_count=3)
    assert br.slow_rt_ms == 100  # unchanged


@pytest.mark.parametrize("kw, exc, param", [
    (dict(error_ratio=1.5), ValueError, "error_ratio"),
    (dict(error_ratio="a"), TypeError, "error_ratio"),
    (dict(error_count=-1), ValueError, "error_count"),
    (dict(error_count=1.5), TypeError, "error_count"),
    (dict(error_count=True), TypeError, "error_count"),
    (dict(slow_rt_ms=-1), ValueError, "slow_rt_ms"),
    (dict(slow_rt_ms=10, slow_ratio=2), ValueError, "slow_ratio"),
    (dict(error_ratio=0.5, slow_ratio=0.5), ValueError, "slow_ratio"),
    (dict(error_ratio=0.5, error_count=1), ValueError, "error_ratio"),
    (dict(), ValueError, "error_ratio"),
    (dict(error_ratio=0.5, min_requests=-1), ValueError, "min_requests"),
    (dict(error_ratio=0.5, recovery_s=-1), ValueError, "recovery_s"),
    (dict(error_ratio=0.5, recovery_s=float("nan")), ValueError, "recovery_s"),
    (dict(error_ratio=0.5, interval_ms=0), ValueError, "interval_ms"),
    (dict(error_ratio=0.5, sample_count=3), ValueError, "interval_ms"),
    (dict(error_ratio=0.5, sample_count=0), ValueError, "sample_count"),
    (dict(error_ratio=0.5, errors="ValueError"), TypeError, "errors"),
    (dict(error_ratio=0.5, errors=(ValueError, 3)), TypeError, "errors"),
    # outside test: accepted, and never counted (a BaseException cancels the call)
    (dict(error_ratio=0.5, errors=(KeyboardInterrupt,)), ValueError, "errors"),
    (dict(error_ratio=0.5, errors=asyncio.CancelledError), ValueError, "errors"),
    (dict(error_ratio=0.5, errors=(ValueError, BlockedError)), ValueError, "errors"),
    (dict(error_ratio=0.5, name=""), ValueError, "name"),
    (dict(error_ratio=0.5, bogus=1), TypeError, "bogus"),
    (dict(error_ratio=0.5, probe_timeout_s=0), ValueError, "probe_timeout_s"),
    (dict(error_ratio=0.5, probe_timeout_s=-1), ValueError, "probe_timeout_s"),
    (dict(error_ratio=0.5, probe_timeout_s=float("nan")), ValueError, "probe_timeout_s"),
    (dict(error_ratio=0.5, probe_timeout_s=-10**400), ValueError, "probe_timeout_s"),
    (dict(error_ratio=0.5, probe_timeout_s="60"), TypeError, "probe_timeout_s"),
    (dict(error_ratio=0.5, probe_timeout_s=True), TypeError, "probe_timeout_s"),
    (dict(error_ratio=0.5, call_timeout_s=0), ValueError, "call_timeout_s"),
    (dict(error_ratio=0.5, call_timeout_s="2"), TypeError, "call_timeout_s"),
    (dict(error_ratio=0.5, errors=3), TypeError, "errors"),
    (dict(error_ratio=0.5, errors=int), TypeError, "errors"),
])
def test_bad_configuration_names_the_parameter(kw, exc, param):
    with pytest.raises(exc, match=param):
        Breaker(**kw)


def test_bad_calls_name_the_parameter():
    br = Breaker(error_ratio=0.5)
    with pytest.raises(ValueError, match="rt_ms"):
        br.record(-1)
    with pytest.raises(ValueError, match="rt_ms"):
        br.record(float("inf"))
    with pytest.raises(TypeError, match="rt_ms"):
        br.record("1")
    with pytest.raises(TypeError, match="rt_ms"):
        br.record()
    with pytest.raises(TypeError, match="error"):
        br.record(1, error="yes")
    with pytest.raises(ValueError, match="now_ns"):
        br.try_pass(now_ns=-1)
    with pytest.raises(TypeError, match="now_ns"):
        br.retry_after(now_ns=1.5)
    with pytest.raises(TypeError):
        br.try_pass(1)
    assert br.totals()["total"] == 0  # nothing counted


def test_properties_repr_and_names():
    br = Breaker(slow_rt_ms=200, slow_ratio=0.5, min_requests=10, recovery_s=30,
                 interval_ms=10_000, sample_count=10, name="backend")
    assert repr(br) == ("Breaker(slow_rt_ms=200, slow_ratio=0.5, min_requests=10, "
                        "recovery_s=30.0, interval_ms=10000, sample_count=10, name='backend')")
    assert (br.error_ratio, br.error_count, br.slow_rt_ms, br.slow_ratio) == (None, None, 200, 0.5)
    assert (br.min_requests, br.recovery_s, br.interval_ms, br.sample_count) == (10, 30.0, 10_000, 10)
    assert br.shared is None and br.name == "backend"
    assert slidewin.limiters()["backend"] is br
    assert repr(Breaker(error_ratio=0.5)) == "Breaker(error_ratio=0.5)"


def test_sliding_window_with_buckets():
    br = Breaker(error_count=2, min_requests=1, interval_ms=1000, sample_count=4)
    c = Calls(br, 10 * S)
    assert c.call(0, error=True) and c.call(0, error=True)
    c.sleep(0.5)
    assert c.call(0, error=True)  # 3 errors in the last second
    assert br.state == "open"
    br2 = Breaker(error_count=2, min_requests=1, interval_ms=1000, sample_count=4)
    c = Calls(br2, 10 * S)
    assert c.call(0, error=True) and c.call(0, error=True)
    c.sleep(1.1)
    assert c.call(0, error=True)  # the first two slid out
    assert br2.state == "closed"


# -- exactly one probe -------------------------------------------------------------------


def test_exactly_one_probe_among_8_threads_repeated():
    br = Breaker(error_count=0, min_requests=1, recovery_s=1)
    n, rounds = 8, 200
    barrier = threading.Barrier(n + 1)
    passed = []
    lock = threading.Lock()
    t = [S]
    br.record(1, error=True, now_ns=t[0])

    def worker():
        for _ in range(rounds):
            barrier.wait()
            ok = br.try_pass(now_ns=t[0])
            if ok:
                with lock:
                    passed.append(1)
            barrier.wait()
            barrier.wait()

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for th in threads:
        th.start()
    counts = []
    for r in range(rounds):
        t[0] += S
        del passed[:]
        barrier.wait(timeout=30)
        barrier.wait(timeout=30)
        counts.append(len(passed))
        if r % 2:
            br.record(1, error=True, now_ns=t[0])  # the probe fails
        else:
            br.cancel(now_ns=t[0])  # the probe is cancelled: the next round probes again
        barrier.wait(timeout=30)
    for th in threads:
        th.join(timeout=30)
    assert counts == [1] * rounds
    assert br.totals()["probes"] == rounds


def test_exactly_one_probe_among_8_threads_with_entries():
    # real entries on the real clock: the probe holds on until the 7 others were refused
    br = Breaker(error_count=0, min_requests=1, recovery_s=0)
    for _ in range(30):
        br.record(1, error=True)
        assert br.state == "open"
        start = threading.Barrier(8)
        release = threading.Event()
        entered, refused = [], []

        def worker():
            start.wait(timeout=30)
            try:
                with br.entry():
                    entered.append(1)
                    release.wait(timeout=30)
                    raise ConnectionError  # the probe fails: open again
            except BreakerOpenError:
                refused.append(1)
            except ConnectionError:
                pass

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for th in threads:
            th.start()
        deadline = time.monotonic() + 30
        while len(refused) < 7 and time.monotonic() < deadline:
            time.sleep(0.001)
        release.set()
        for th in threads:
            th.join(timeout=30)
        assert (len(entered), len(refused)) == (1, 7)
        assert br.state == "open"


def test_exactly_one_probe_among_200_asyncio_tasks_repeated():
    br = Breaker(error_count=0, min_requests=1, recovery_s=0)

    async def one_round():
        br.record(1, error=True)
        entered = []
        refused = []

        async def task():
            try:
                async with br.entry():
                    entered.append(1)
                    await asyncio.sleep(0.01)
                    raise TimeoutError
            except BreakerOpenError:
                refused.append(1)
            except TimeoutError:
                pass

        await asyncio.gather(*(task() for _ in range(200)))
        return len(entered), len(refused)

    for _ in range(20):
        assert asyncio.run(one_round()) == (1, 199)
        assert br.state == "open"


# -- a model of the states ----------------------------------------------------------------


class BreakerModel:
    """The states, tickets, the probe's timeout and a tumbling window (sample_count=1), in
    Python."""

    def __init__(self, grade, threshold, slow_rt_ms, min_requests, recovery_ns, interval_ms,
                 probe_timeout_ns=None):
        self.grade, self.threshold, self.slow_rt_ms = grade, threshold, slow_rt_ms
        self.min_requests, self.recovery_ns, self.interval_ms = (min_requests, recovery_ns,
                                                                 interval_ms)
        self.probe_timeout_ns = probe_timeout_ns  # None: for ever
        self.state, self.gen, self.next_ns, self.opened_ns, self.probe_ns = "closed", 0, 0, 0, 0
        self.probe_bare = False
        self.bucket, self.counts = None, [0, 0, 0]

    def ticket(self):
        return (self.gen, self.state)

    def _move(self, state):
        self.state = state
        self.gen += 1

    def _bucket_of(self, t_ns):
        ms = t_ns // MS
        start = ms - ms % self.interval_ms
        if start != self.bucket:
            self.bucket, self.counts = start, [0, 0, 0]

    def _open(self, t):
        self.opened_ns, self.next_ns = t, t + self.recovery_ns
        self._move("open")

    def expire(self, t):
        """A probe silent for probe_timeout_ns failed: open, from its deadline."""
        if self.state == "half_open" and self.probe_timeout_ns is not None:
            deadline = self.probe_ns + self.probe_timeout_ns
            if t >= deadline:
                self._open(deadline)

    def set_recovery(self, recovery_ns):
        if recovery_ns != self.recovery_ns and self.state == "open":
            self.next_ns = self.opened_ns + recovery_ns  # the next probe moves at once
        self.recovery_ns = recovery_ns

    def try_pass(self, t, bare=False):
        self.expire(t)
        if self.state == "closed":
            return self.ticket()
        if self.state == "open":
            self.next_ns = min(self.next_ns, min(self.opened_ns, t) + self.recovery_ns)
        if self.state == "open" and t >= self.next_ns:
            self.probe_bare, self.probe_ns = bare, t
            self._move("half_open")
            return self.ticket()
        return None

    def record(self, ticket, rt, error, t):
        slow = self.grade == "slow" and rt > self.slow_rt_ms
        self._bucket_of(t)
        self.counts[0] += 1
        self.counts[1] += error
        self.counts[2] += slow
        self.expire(t)
        if ticket is not None and ticket != self.ticket():
            return
        if ticket is None and self.state == "half_open" and not self.probe_bare:
            return  # a bare record() decides only a probe that a bare try_pass() let through
        if self.state == "half_open":
            if error or slow:
                self._open(t)
            else:
                self.bucket, self.counts = None, [0, 0, 0]
                self._move("closed")
        elif self.state == "closed":
            total, errors, slows = self.counts
            if total < self.min_requests:
                return
            value = {"ratio": errors / total, "count": errors, "slow": slows / total}[self.grade]
            if value > self.threshold or (self.grade == "slow" and value == 1.0 == self.threshold):
                self._open(t)

    def cancel(self, ticket, t):
        # the bare cancel gives back only a probe the bare try_pass admitted; a probe past
        # its timeout has failed already
        self.expire(t)
        if self.state == "half_open" and (ticket == self.ticket() or
                                          (ticket is None and self.probe_bare)):
            self._move("open")

    def window(self, t):
        self._bucket_of(t)
        return self.counts


class BreakerMachine(RuleBasedStateMachine):
    @initialize(grade=st.sampled_from(["ratio", "count", "slow"]),
                ratio=st.sampled_from([0.0, 0.25, 0.5, 1.0]), count=st.integers(0, 3),
                min_requests=st.integers(0, 4), recovery_ms=st.sampled_from([0, 10, 100]),
                interval_ms=st.sampled_from([50, 100, 1000]),
                probe_timeout_ms=st.sampled_from([None, 60_000, 100, 1000]))
    def setup(self, grade, ratio, count, min_requests, recovery_ms, interval_ms,
              probe_timeout_ms):
        kw = dict(min_requests=min_requests, recovery_s=recovery_ms / 1000,
                  interval_ms=interval_ms,
                  probe_timeout_s=None if probe_timeout_ms is None else probe_timeout_ms / 1000)
        if grade == "ratio":
            self.br, threshold = Breaker(error_ratio=ratio, **kw), ratio
        elif grade == "count":
            self.br, threshold = Breaker(error_count=count, **kw), count
        else:
            self.br, threshold = Breaker(slow_rt_ms=20, slow_ratio=ratio, **kw), ratio
        self.model = BreakerModel(grade, threshold, 20, min_requests, recovery_ms * MS,
                                  interval_ms,
                                  None if probe_timeout_ms is None else probe_timeout_ms * MS)
        self.t = 10 * S
        self.open_calls = []  # (real ticket, model ticket)

    @rule(dt=st.sampled_from([0, 1, 5, 20, 60, 150, 1200]))
    def advance(self, dt):
        self.t += dt * MS

    @rule()
    def try_pass(self):
        real = self.br._pass(now_ns=self.t)
        model = self.model.try_pass(self.t)
        assert (real is None) == (model is None)
        if real is not None:
            self.open_calls.append((real, model))

    @precondition(lambda self: self.open_calls)
    @rule(i=st.integers(0, 100), rt=st.sampled_from([0, 5, 20, 21, 100]), error=st.booleans())
    def record(self, i, rt, error):
        real, model = self.open_calls.pop(i % len(self.open_calls))
        self.br._record(real, rt, error, self.t)
        self.model.record(model, rt, error, self.t)

    @precondition(lambda self: self.open_calls)
    @rule(i=st.integers(0, 100))
    def cancel(self, i):
        real, model = self.open_calls.pop(i % len(self.open_calls))
        self.model.expire(self.t)
        assert self.br._cancel(real, self.t) == (self.model.state == "half_open" and
                                                  model == self.model.ticket())
        self.model.cancel(model, self.t)

    @rule()
    def bare_try_pass(self):
        real = self.br.try_pass(now_ns=self.t)
        assert real == (self.model.try_pass(self.t, bare=True) is not None)

    @rule(rt=st.sampled_from([0, 21]), error=st.booleans())
    def bare_record(self, rt, error):
        self.br.record(rt, error=error, now_ns=self.t)
        self.model.record(None, rt, error, self.t)

    @rule()
    def bare_cancel(self):
        self.br.cancel(now_ns=self.t)
        self.model.cancel(None, self.t)

    @rule(recovery_ms=st.sampled_from([0, 10, 100, 1000]))
    def update_recovery(self, recovery_ms):
        self.br.update(recovery_s=recovery_ms / 1000)
        self.model.set_recovery(recovery_ms * MS)

    @invariant()
    def same_retry_after(self):
        if not hasattr(self, "br"):
            return
        m = self.model
        if m.state == "closed":
            want = None
        elif m.state == "half_open" and (m.probe_timeout_ns is None or
                                         self.t < m.probe_ns + m.probe_timeout_ns):
            want = m.recovery_ns
        else:
            if m.state == "half_open":  # timed out: what the next caller meets
                opened = m.probe_ns + m.probe_timeout_ns
                nxt = opened + m.recovery_ns
            else:
                nxt = min(m.next_ns, min(m.opened_ns, self.t) + m.recovery_ns)
            want = min(max(0, nxt - self.t), m.recovery_ns)
        got = self.br.retry_after(now_ns=self.t)
        assert got == (None if want is None else want / 1e9)

    @invariant()
    def same_state(self):
        if not hasattr(self, "br"):
            return
        assert self.br.state == self.model.state
        s = self.br.stats(now_ns=self.t)
        assert [s["total"], s["errors"], s["slow"]] == self.model.window(self.t)


TestBreakerModel = BreakerMachine.TestCase
TestBreakerModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])


# -- shared="name": one breaker for the processes of a host ---------------------------------


@pytest.fixture
def shm_name():
    n = "swbrk-%d-%s" % (os.getpid(), uuid.uuid4().hex[:10])
    yield n
    slidewin.unlink(n)


BRK = dict(error_count=0, min_requests=1, recovery_s=1)


def _probe_rounds(name, rounds, barrier, passed, t0):
    br = Breaker(**BRK, shared=name)
    for r in range(rounds):
        barrier.wait(30)
        if br.try_pass(now_ns=t0 + (r + 1) * S):
            with passed.get_lock():
                passed.value += 1
        barrier.wait(30)
        barrier.wait(30)


@pytest.mark.procs
def test_shared_exactly_one_probe_among_4_processes_repeated(shm_name):
    ctx = mp.get_context("fork")
    rounds, t0 = 100, 10 * S
    br = Breaker(**BRK, shared=shm_name)
    br.record(1, error=True, now_ns=t0)
    barrier = ctx.Barrier(5)
    passed = ctx.Value("i", 0)
    procs = [ctx.Process(target=_probe_rounds, args=(shm_name, rounds, barrier, passed, t0))
             for _ in range(4)]
    for p in procs:
        p.start()
    counts = []
    try:
        for r in range(rounds):
            passed.value = 0
            barrier.wait(30)
            barrier.wait(30)
            counts.append(passed.value)
            assert br.state == "half_open"
            if r % 2:
                br.record(1, error=True, now_ns=t0 + (r + 1) * S)  # another process's probe
            else:
                br.cancel(now_ns=t0 + (r + 1) * S)
            assert br.state == "open"
            barrier.wait(30)
    finally:
        for p in procs:
            p.join(30)
    assert counts == [1] * rounds
    assert [p.exitcode for p in procs] == [0] * 4
    assert br.totals()["probes"] == rounds


def _take_the_probe_and_hang(name, ready):
    br = Breaker(**BRK, shared=name)
    assert br.try_pass()
    assert br.state == "half_open"
    ready.set()
    time.sleep(600)


@pytest.mark.procs
def test_shared_probe_of_a_killed_process_is_cancelled(shm_name):
    ctx = mp.get_context("fork")
    br = Breaker(**dict(BRK, recovery_s=0), shared=shm_name)
    for _ in range(3):
        br.record(1, error=True)
        assert br.state == "open"
        ready = ctx.Event()
        p = ctx.Process(target=_take_the_probe_and_hang, args=(shm_name, ready))
        p.start()
        assert ready.wait(30)
        assert not br.try_pass()  # the other process holds the probe
        os.kill(p.pid, signal.SIGKILL)
        killed = time.monotonic()
        p.join(10)
        # a refused caller looks whether the probe's owner lives (at most every 100 ms); the
        # bound only ends a hang
        while not br.try_pass():
            assert time.monotonic() - killed < 15, "a dead process's probe was never cancelled"
            time.sleep(0.01)
        assert br.state == "half_open"  # this process is the probe now
        br.record(1)
        assert br.state == "closed"
    assert br.totals()["cancelled"] == 3


def test_shared_state_and_settings_per_process(shm_name):
    a = Breaker(error_ratio=0.5, min_requests=1, shared=shm_name)
    b = Breaker(error_count=5, min_requests=1, shared=shm_name, name="other")
    assert a.name == shm_name and b.name == "other"
    a.record(1, error=True, now_ns=S)  # 1/1 > 0.5 for a
    assert b.state == "open" and b.stats(now_ns=S)["errors"] == 1
    with pytest.raises(ValueError, match="interval_ms"):
        Breaker(error_ratio=0.5, interval_ms=2000, shared=shm_name)
    with pytest.raises(ValueError, match="Breaker"):
        slidewin.Limiter(qps=5, shared=shm_name)


def _state_offset(path):
    with open(path, "rb") as f:
        head = f.read(80)
    return struct.unpack_from("<Q", head, 72)[0]


@pytest.mark.parametrize("field, offset, value", [
    ("magic", 0, b"\0\0\0\0"),
    ("size", 4, b"\1\0\0\0"),
    ("state word", 24, (3).to_bytes(8, "little")),
    ("ring", None, (99).to_bytes(4, "little")),  # the ring's window_ms
])
def test_a_crafted_shared_region_is_refused(shm_name, field, offset, value):
    Breaker(error_ratio=0.5, shared=shm_name)
    gc.collect()
    path = os.path.join(os.environ.get("SLIDEWIN_SHM_DIR", "/dev/shm"), "slidewin-" + shm_name)
    off = _state_offset(path)
    with open(path, "r+b") as f:
        if offset is None:
            f.seek(off + 8)
            offset = struct.unpack("<I", f.read(4))[0] + 8  # off_leap: the ring's window_ms
        f.seek(off + offset)
        f.write(value)
    with pytest.raises(ValueError):
        Breaker(error_ratio=0.5, shared=shm_name)


# -- the web middlewares ------------------------------------------------------------------


def _asgi_call(app):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [],
             "client": ("127.0.0.1", 1234), "query_string": b""}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}


def test_asgi_middleware_answers_an_open_breaker_with_503_and_retry_after():
    from slidewin.asgi import LimitMiddleware

    br = Breaker(error_count=0, min_requests=1, recovery_s=30)
    fail = [True]

    async def app(scope, receive, send):
        if fail[0]:
            raise ConnectionError("backend down")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = LimitMiddleware(app, br)
    with pytest.raises(ConnectionError):
        _asgi_call(mw)  # the app's error is the breaker's: it opens
    assert br.state == "open"
    fail[0] = False
    status, headers = _asgi_call(mw)
    assert status == 503
    assert 29 <= int(headers["retry-after"]) <= 30


def test_wsgi_middleware_answers_an_open_breaker_with_503_and_retry_after():
    from slidewin.wsgi import LimitMiddleware

    br = Breaker(error_count=0, min_requests=1, recovery_s=30)
    br.record(1, error=True)

    def app(environ, start_response):
        start_response("200 OK", [])
        return [b"ok"]

    seen = []
    body = LimitMiddleware(app, br)({"REQUEST_METHOD": "GET", "PATH_INFO": "/",
                                     "REMOTE_ADDR": "127.0.0.1"},
                                    lambda status, headers, exc_info=None: seen.append(
                                        (status, dict(headers))))
    b"".join(body)
    status, headers = seen[0]
    assert status.startswith("503")
    assert 29 <= int(headers["Retry-After"]) <= 30


# -- observers: read_region, Prometheus, top -----------------------------------------------


def test_read_region_of_a_shared_breaker(shm_name):
    br = Breaker(error_count=0, min_requests=1, recovery_s=5, shared=shm_name)
    br.record(1, error=True, now_ns=S)
    path = os.path.join(os.environ.get("SLIDEWIN_SHM_DIR", "/dev/shm"), "slidewin-" + shm_name)
    r = slidewin._core.read_region(path, now_ns=S)
    assert r["kind"] == "breaker" and r["state"] == "open" and r["name"] == shm_name
    assert r["window"] == {"total": 1, "errors": 1, "slow": 0}
    assert r["totals"] == br.totals()


def test_prometheus_breaker_series(shm_name):
    prometheus_client = pytest.importorskip("prometheus_client")
    from slidewin.prometheus import Collector

    shared = Breaker(error_count=0, min_requests=1, recovery_s=0, shared=shm_name)
    private = Breaker(error_ratio=0.5, name="brk-private-%s" % shm_name)
    shared.record(1, error=True)
    assert shared.try_pass()  # half-open
    reg = prometheus_client.CollectorRegistry()
    reg.register(Collector())

    def value(name, **labels):
        return reg.get_sample_value(name, labels)

    assert value("slidewin_breaker_state", breaker=shm_name) == 2
    assert value("slidewin_breaker_state", breaker=private.name) == 0
    assert value("slidewin_breaker_transitions_total", breaker=shm_name, to="open") == 1
    assert value("slidewin_breaker_transitions_total", breaker=shm_name, to="half_open") == 1
    assert value("slidewin_breaker_transitions_total", breaker=shm_name, to="closed") == 0
    shared.record(1)
    assert value("slidewin_breaker_state", breaker=shm_name) == 0
    assert value("slidewin_breaker_transitions_total", breaker=shm_name, to="closed") == 1


def test_prometheus_breaker_calls_carry_the_timeout_totals(shm_name):
    prometheus_client = pytest.importorskip("prometheus_client")
    from slidewin.prometheus import Collector

    br = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=30,
                 call_timeout_s=1, shared=shm_name)
    br._record_timeout(br._pass(now_ns=1 * S), 1500, 2 * S)  # a call past call_timeout_s
    assert br.try_pass(now_ns=12 * S)                        # the probe, silent
    assert not br.try_pass(now_ns=45 * S)                    # it timed out at 42 s
    br.cancel(now_ns=46 * S)
    reg = prometheus_client.CollectorRegistry()
    reg.register(Collector())
    t = br.totals()
    for outcome in ("timed_out", "probes_timed_out", "probes", "cancelled"):
        got = reg.get_sample_value("slidewin_breaker_calls_total",
                                   {"breaker": shm_name, "outcome": outcome})
        assert got == t[outcome], outcome
    assert (t["timed_out"], t["probes_timed_out"]) == (1, 1)


def test_top_shows_breakers(shm_name):
    from slidewin import _top

    # a window of a minute: the error is still in it when a loaded machine gets to the read
    br = Breaker(error_count=0, min_requests=1, recovery_s=60, interval_ms=60_000,
                 shared=shm_name)
    br.record(1, error=True)
    sampler = _top.Sampler(None)
    sampler.sample()
    rows, rates = sampler.sample()  # a breaker row has no pass/block totals: no KeyError
    lines = _top.table([r for r in rows if r.name == shm_name], rates, live=True)
    assert "breaker" in lines[1] and "state=open" in lines[1] and "errors=1" in lines[1]
    out = subprocess.run([sys.executable, "-m", "slidewin", "top", "--once", "--json"],
                         stdout=subprocess.PIPE, universal_newlines=True, timeout=60).stdout
    row = [r for r in json.loads(out) if r["name"] == shm_name][0]
    assert row["kind"] == "breaker" and row["state"] == "open"


# -- leaks ---------------------------------------------------------------------------------


LEAK_SCRIPT = r'''
import asyncio, gc, json, sys, tracemalloc
import slidewin
from slidewin import Breaker, BreakerOpenError, _core

def workload(k):
    for i in range(k):
        br = Breaker(error_count=0, min_requests=1, recovery_s=0,
                     errors=(ValueError,), name="leak-%d" % (i % 3))
        br.on_change(lambda old, new, value: None)
        br.try_pass(now_ns=i)
        br.record(1.5, now_ns=i)
        @br
        def f(x):
            if x:
                raise ValueError(x)
        f(0)
        try:
            f(1)
        except ValueError:
            pass
        try:
            with br.entry():
                pass                      # the probe
            f(1)
            f(0)
        except (BreakerOpenError, ValueError) as e:
            pass
        try:
            with br.entry():
                raise slidewin.BlockedError("nested")
        except slidewin.BlockedError:
            pass
        br.stats(); br.totals(); br.retry_after(); repr(br); br.update(error_count=1)
        ticket = br._pass()
        if ticket is not None:
            br._record(ticket, 2, True)
        try:
            Breaker(error_ratio=2)
        except ValueError:
            pass

types = [Breaker, BreakerOpenError, _core.Breaker, _core.BlockedError]
workload(200)
gc.collect()
r0 = [sys.getrefcount(t) for t in types]
tracemalloc.start()
workload(200)
gc.collect()
m0 = tracemalloc.get_traced_memory()[0]
workload(2000)
gc.collect()
m1 = tracemalloc.get_traced_memory()[0]
r1 = [sys.getrefcount(t) for t in types]
print(json.dumps({"refs": [b - a for a, b in zip(r0, r1)], "traced": m1 - m0}))
'''


def test_no_leak():
    out = subprocess.run([sys.executable, "-c", LEAK_SCRIPT], stdout=subprocess.PIPE,
                         universal_newlines=True, timeout=300, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["refs"] == [0, 0, 0, 0], res
    assert res["traced"] < 64 * 1024, res  # 2000 rounds: a leak of one object a round shows


# -- a stuck lock word, crafted states, fork, listeners, the bare cancel -------------------

STUCK_LOCK = r'''
import os, signal, struct, sys, time, slidewin
name, token = sys.argv[1], int(sys.argv[2])
path = os.path.join(os.environ.get("SLIDEWIN_SHM_DIR", "/dev/shm"), "slidewin-" + name)
mk = lambda: slidewin.Breaker(error_count=0, min_requests=1, recovery_s=60, shared=name)
br = mk()
e = br.entry()
e.__enter__()
def lock_word(v):
    with open(path, "r+b") as f:
        off = struct.unpack_from("<Q", f.read(80), 72)[0]
        f.seek(off + 16)
        f.write(struct.pack("<Q", v))
lock_word(token)
class Alarm(Exception):
    pass
def on_alarm(*a):
    raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.3)
try:
    br.record(1, error=True)
    print("record returned")
except Alarm:
    print("record alarm")
for what, call in [("record", lambda: br.record(1, error=True)),
                   ("exit", lambda: e.__exit__(None, None, None)),
                   ("attach", mk), ("stats", br.stats)]:
    try:
        call()
        print(what, "returned", flush=True)
    except OSError as err:
        print(what, "OSError", err, flush=True)
lock_word(0)
print("total", br.totals()["total"], br.state, flush=True)
e.__exit__(None, None, None)   # the exit that gave up stays entered: retried
print("total", br.totals()["total"], br.state, flush=True)
'''


@pytest.mark.procs
def test_a_stuck_lock_word_naming_a_live_process_gives_up(shm_name):
    Breaker(**BRK, shared=shm_name)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        with open(f"/proc/{sleeper.pid}/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        token = sleeper.pid << 32 | (start & 0xffffffff)
        # record() gives up on the stuck word: no endless wait, signal handlers run
        out = subprocess.run([sys.executable, "-c", STUCK_LOCK, shm_name, str(token)],
                             capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, SLIDEWIN_TEST_LOCK_STUCK_MS="1000"))
    finally:
        sleeper.kill()
        sleeper.wait()
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stderr[-2000:]
    assert lines[0] == "record alarm"
    for what, line in zip(["record", "exit", "attach", "stats"], lines[1:5]):
        assert line.startswith(what + " OSError"), line
        assert f"live pid {sleeper.pid}" in line, line
    assert lines[5:] == ["total 0 closed", "total 1 closed"]


_HDR = 80  # the region header's first bytes, the state's offset at 72


def _poke(name, offset, fmt, value):
    path = os.path.join(os.environ.get("SLIDEWIN_SHM_DIR", "/dev/shm"), "slidewin-" + name)
    off = _state_offset(path)
    with open(path, "r+b") as f:
        f.seek(off + offset)
        f.write(struct.pack(fmt, value))


@pytest.mark.parametrize("case", ["owner_private", "owner_pid0", "next_max"])
@pytest.mark.parametrize("when", ["attach", "live"])
def test_a_crafted_probe_owner_or_retry_time_does_not_keep_it_refusing(shm_name, case, when):
    br = Breaker(error_count=0, min_requests=1, recovery_s=0.05, shared=shm_name)
    if when == "attach":
        del br
        gc.collect()

    def craft():
        if case == "next_max":
            _poke(shm_name, 24, "<Q", 7 << 2 | 1)
            _poke(shm_name, 32, "<q", 2**63 - 1)
        else:
            _poke(shm_name, 24, "<Q", 7 << 2 | 2)
            _poke(shm_name, 40, "<Q", 1 if case == "owner_private" else 12345)
    craft()
    if when == "attach":
        try:
            br = Breaker(error_count=0, min_requests=1, recovery_s=0.05, shared=shm_name)
        except ValueError as e:
            assert "damaged" in str(e)
            return
    retry = br.retry_after()
    assert retry is None or retry <= 0.05
    deadline = time.monotonic() + 5  # a hang detector: never refusing for ever
    while not br.try_pass():
        assert time.monotonic() < deadline, (br.state, br.totals())
        time.sleep(0.01)
    assert br.state == "half_open"
    br.record(1)
    assert br.state == "closed"


def in_a_fork(child, most=1000):
    """child() run in a forked child; the bytes it returns, read here (at most `most`; none
    when it raised)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, child())
        finally:
            os._exit(0)
    os.close(w)
    try:
        return os.read(r, most)
    finally:
        os.close(r)
        os.waitpid(pid, 0)


@pytest.mark.procs
def test_fork_while_another_thread_holds_a_private_probe():
    br = Breaker(error_count=0, min_requests=1, recovery_s=0.05)
    br.record(1, error=True)
    time.sleep(0.06)
    held, done = threading.Event(), threading.Event()

    def probe():
        with br.entry():
            held.set()
            done.wait(30)
    t = threading.Thread(target=probe)
    t.start()
    assert held.wait(30)

    def child():
        deadline = time.monotonic() + 3  # the child is never half-open for ever
        while time.monotonic() < deadline:
            if br.try_pass():
                return b"1"
            time.sleep(0.01)
        return b"0"
    try:
        got = in_a_fork(child, 1)
    finally:
        done.set()
        t.join(30)
    assert got == b"1"
    assert br.state == "closed"  # the parent's probe ended as usual


def test_listeners_all_run_and_a_keyboard_interrupt_is_not_lost():
    br = Breaker(error_count=0, min_requests=1, recovery_s=1)
    calls = []
    br.on_change(lambda o, n, v: calls.append(1))

    @br.on_change
    def interrupt(old, new, value):
        calls.append(2)
        raise KeyboardInterrupt

    br.on_change(lambda o, n, v: calls.append(3))
    with pytest.raises(KeyboardInterrupt):
        br.record(1, error=True, now_ns=S)
    assert calls == [1, 2, 3]
    assert br.state == "open" and br.totals()["total"] == 1


def test_a_bare_cancel_does_not_cancel_an_entrys_probe():
    br = Breaker(error_count=0, min_requests=1, recovery_s=1)
    assert br.try_pass(now_ns=S)       # a bare call admitted while closed
    br.record(1, error=True, now_ns=S)  # someone trips it
    p = br.entry()
    p.__enter__()                       # an entry's probe (the real clock is past S + 1 s)
    br.cancel()                         # the bare call did not run
    assert br.state == "half_open"      # still the entry's probe: no second probe passes
    assert not br.try_pass()
    p.__exit__(None, None, None)
    assert br.state == "closed"
    # a bare probe is still cancelled by the bare cancel
    br.record(1, error=True)
    assert br.try_pass(now_ns=2**62) and br.state == "half_open"
    br.cancel()
    assert br.state == "open" and br.totals()["cancelled"] == 1


# -- listeners in the order of the changes; update() beside readers -----------------------


def _chain_broken_at(events):
    """The first index whose `old` is not the previous event's `new` (None: a valid chain
    from the initial "closed")."""
    prev = "closed"
    for i, (old, new) in enumerate(events):
        if old != prev:
            return i
        prev = new
    return None


def _transitions(br):
    t = br.totals()
    return t["opened"] + t["half_opened"] + t["closed"]


def _drive(br, n_threads, seconds, seed):
    """Threads trip, probe, close and cancel the breaker on the real clock (recovery_s=0)."""
    import random
    stop = time.monotonic() + seconds

    def worker(k):
        rnd = random.Random(seed * 100 + k)
        while time.monotonic() < stop:
            for _ in range(50):
                r = rnd.random()
                if r < 0.1:
                    br.cancel()
                elif br.try_pass():
                    br.record(0.1, error=r < 0.55)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)


@pytest.mark.parametrize("where", ["private", "shared"])
def test_listeners_see_the_changes_in_order_under_many_threads(where, shm_name):
    # changes are numbered under the lock and told in that order, whichever thread made them:
    # Python code run after the lock is released may be interrupted by a thread switch (a
    # short switch interval makes that frequent)
    br = Breaker(error_count=0, min_requests=1, recovery_s=0,
                 shared=shm_name if where == "shared" else None)
    events = []
    br.on_change(lambda old, new, value: events.append((old, new)))
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for seed in range(3):
            _drive(br, 8, 1.0, seed)
            broken = _chain_broken_at(events)
            assert broken is None, (len(events), events[max(0, broken - 3):broken + 3])
    finally:
        sys.setswitchinterval(old_interval)
    assert len(events) > 100
    assert len(events) == _transitions(br)  # each change told once


def test_a_listener_that_changes_the_state_does_not_reorder_the_others():
    # a listener's own change is told after the change it was told of, to every listener:
    # the second listener sees closed -> open before open -> half_open
    br = Breaker(error_count=0, min_requests=1, recovery_s=0)
    seen = []

    @br.on_change
    def probe_at_once(old, new, value):
        if new == "open" and br.try_pass():  # recovery_s=0: the probe passes at once
            br.record(1)                     # ... and closes it

    @br.on_change
    def buggy(old, new, value):
        raise RuntimeError("a listener bug stops no delivery")

    br.on_change(lambda old, new, value: seen.append((old, new, threading.get_ident())))
    br.record(1, error=True)
    assert [(o, n) for o, n, _ in seen] == [("closed", "open"), ("open", "half_open"),
                                            ("half_open", "closed")]
    assert {t for _, _, t in seen} == {threading.get_ident()}  # the caller's thread
    assert br.state == "closed"


def test_listeners_in_order_among_asyncio_tasks():
    br = Breaker(error_count=0, min_requests=1, recovery_s=0)
    events = []

    @br.on_change
    def reprobe(old, new, value):  # a listener that uses the breaker: it probes at once
        if new == "open" and len(events) % 3 == 0 and br.try_pass():
            br.record(1, error=len(events) % 2 == 0)

    br.on_change(lambda old, new, value: events.append((old, new)))

    async def task(k):
        for i in range(20):
            try:
                async with br.entry():
                    await asyncio.sleep(0)
                    if (k + i) % 2:
                        raise TimeoutError
            except (BreakerOpenError, TimeoutError):
                pass
            await asyncio.sleep(0)

    async def main():
        await asyncio.gather(*(task(k) for k in range(200)))

    for _ in range(3):
        asyncio.run(main())
    assert len(events) > 10 and len(events) == _transitions(br)
    assert _chain_broken_at(events) is None, events[:20]


def _tell_changes(name, q, seconds):
    br = Breaker(error_count=0, min_requests=1, recovery_s=0, shared=name)
    events = []
    br.on_change(lambda old, new, value: events.append((old, new)))
    _drive(br, 4, seconds, os.getpid())
    q.put(len(events))


@pytest.mark.procs
def test_shared_each_change_is_told_once_in_the_process_that_made_it(shm_name):
    ctx = mp.get_context("fork")
    br = Breaker(error_count=0, min_requests=1, recovery_s=0, shared=shm_name)
    mine = []
    br.on_change(lambda old, new, value: mine.append((old, new)))
    q = ctx.Queue()
    procs = [ctx.Process(target=_tell_changes, args=(shm_name, q, 1.0)) for _ in range(2)]
    for p in procs:
        p.start()
    told = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0]
    assert mine == [] and min(told) > 0
    assert sum(told) == _transitions(br)


UPDATE_BESIDE_READERS = r'''
import faulthandler, mmap, os, struct, sys, threading, time
import slidewin
faulthandler.dump_traceback_later(40, exit=True)  # a hang: the stacks, then exit
name, token = sys.argv[1], int(sys.argv[2])
br = slidewin.Breaker(error_ratio=0.5, min_requests=1000, shared=name)
path = os.path.join(os.environ.get("SLIDEWIN_SHM_DIR", "/dev/shm"), "slidewin-" + name)
f = open(path, "r+b")
m = mmap.mmap(f.fileno(), 0)
at = struct.unpack_from("<Q", m, 72)[0] + 16   # the state's lock word
stop = False
counts = {}

def loop(what, fn):
    n = 0
    while not stop:
        fn(n)
        n += 1
    counts[what] = n

def upd(n):
    br.update(error_ratio=(n % 10) / 10, recovery_s=1 + n % 3)

def read(n):
    (br.error_ratio, br.recovery_s, br.min_requests, br.slow_ratio, repr(br), br.stats(),
     br.totals(), br.state, br.retry_after())

def call(n):
    if br.try_pass():
        br.record(1.0, error=n % 7 == 0)

threads = [threading.Thread(target=loop, args=(w, fn)) for w, fn in
           [("update", upd), ("read1", read), ("read2", read), ("call1", call),
            ("call2", call)]]
for t in threads:
    t.start()
end = time.monotonic() + float(sys.argv[3])
held = 0
while time.monotonic() < end:
    # a peer holds the region's lock a while (as one stopped or descheduled in a decision):
    # mmap stores keep the GIL, so no thread of this process is between its CAS and its store
    if struct.unpack_from("<Q", m, at)[0] == 0:
        struct.pack_into("<Q", m, at, token)
        held += 1
    time.sleep(0.02)
    if struct.unpack_from("<Q", m, at)[0] == token:
        struct.pack_into("<Q", m, at, 0)
    time.sleep(0.005)
stop = True
for t in threads:
    t.join()
print("ok", held, sorted(counts.items()), flush=True)
'''


@pytest.mark.procs
def test_update_in_a_loop_beside_readers_and_calls_never_deadlocks(shm_name):
    # update() never holds its settings mutex while it waits for the region's lock with the
    # GIL released: a reader holding the GIL and waiting for that mutex would hang the
    # process (killed by the timeout below)
    Breaker(error_ratio=0.5, shared=shm_name)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        with open(f"/proc/{sleeper.pid}/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        token = sleeper.pid << 32 | (start & 0xffffffff)
        try:
            out = subprocess.run([sys.executable, "-c", UPDATE_BESIDE_READERS, shm_name,
                                  str(token), "3"], capture_output=True, text=True, timeout=90)
        except subprocess.TimeoutExpired as e:
            pytest.fail("update() beside readers hung: %s" % (e.stderr or b"")[-3000:])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok"), out.stdout


@pytest.mark.procs
def test_a_child_forked_while_another_thread_tells_a_change_tells_its_own():
    # the queue of a parent thread's delivery is the parent's: the child's own changes are
    # told in the child (without the reset its listeners would wait for a parent's thread)
    br = Breaker(error_count=0, min_requests=1, recovery_s=0)
    telling, done = threading.Event(), threading.Event()
    seen = []

    @br.on_change
    def slow(old, new, value):
        seen.append((old, new))
        if os.getpid() == parent:
            telling.set()
            done.wait(30)

    parent = os.getpid()
    t = threading.Thread(target=lambda: br.record(1, error=True))
    t.start()
    assert telling.wait(30)

    def child():
        del seen[:]
        br.try_pass()          # the child's own change: open -> half_open
        br.record(1)           # half_open -> closed
        return repr(seen).encode()
    try:
        got = in_a_fork(child).decode()
    finally:
        done.set()
        t.join(30)
    assert got == repr([("open", "half_open"), ("half_open", "closed")])
    assert seen == [("closed", "open")]


# ------------------------------------ listeners raising, late bare outcomes

@pytest.mark.parametrize("how", ["entry", "try_pass"])
def test_a_keyboard_interrupt_from_a_listener_at_the_probe_gives_the_probe_back(how):
    # a listener told of "half_open" raises out of the admission: the probe is given back,
    # so the breaker does not stay half-open (refusing) for good
    br = Breaker(error_count=0, min_requests=1, recovery_s=1)
    armed = [True]

    @br.on_change
    def interrupt(old, new, value):
        if new == "half_open" and armed:
            armed.clear()
            raise KeyboardInterrupt

    br.record(1, error=True, now_ns=S)
    assert br.state == "open"
    with pytest.raises(KeyboardInterrupt):
        if how == "entry":
            with br.entry():
                pytest.fail("the body ran")
        else:
            br.try_pass(now_ns=S + 2 * 10**9)
    assert br.state == "open"              # the probe was given back: open again
    with br.entry():                       # the next caller probes
        pass
    assert br.state == "closed"


def test_a_late_bare_record_does_not_decide_an_entrys_probe():
    # a bare call admitted while closed finishes after an entry became the probe: its
    # record() decides nothing, the probe's outcome does
    br = Breaker(error_count=0, min_requests=1, recovery_s=0)
    assert br.try_pass()                   # a bare call, still running
    br.record(1, error=True)               # another call fails: open
    e = br.entry()
    e.__enter__()                          # the probe
    assert br.state == "half_open"
    br.record(5)                           # the old bare call ends well: decides nothing
    assert br.state == "half_open"
    e.__exit__(RuntimeError, RuntimeError("still down"), None)
    assert br.state == "open"              # the probe's failure reopens it


# -- update() while open; a probe that never reports; a caller's time limit; errors= -------


def test_update_shorter_recovery_moves_next_probe_at_once():
    br = Breaker(error_count=0, min_requests=1, recovery_s=60)
    br.record(1, error=True, now_ns=1 * S)          # open until 61 s
    br.update(recovery_s=5)
    assert br.retry_after(now_ns=3 * S) == 3.0
    assert not br.try_pass(now_ns=3 * S)            # refused ...
    assert br.retry_after(now_ns=3 * S) == 3.0      # ... and told the same wait, not 5 s more
    assert br.try_pass(now_ns=6 * S) and br.state == "half_open"


def test_update_longer_recovery_moves_next_probe_later():
    br = Breaker(error_count=0, min_requests=1, recovery_s=5)
    br.record(1, error=True, now_ns=1 * S)          # open until 6 s
    br.update(recovery_s=30)
    assert br.retry_after(now_ns=3 * S) == 28.0
    assert not br.try_pass(now_ns=6 * S)
    assert br.try_pass(now_ns=31 * S)


def test_update_of_other_settings_leaves_the_next_probe():
    br = Breaker(error_count=0, min_requests=1, recovery_s=5)
    br.record(1, error=True, now_ns=1 * S)
    assert br.try_pass(now_ns=6 * S)
    br.cancel(now_ns=6 * S)                         # given back: the next caller probes at once
    br.update(min_requests=2)
    assert br.retry_after(now_ns=7 * S) == 0.0
    assert br.try_pass(now_ns=7 * S)


def test_shared_update_shorter_recovery_moves_next_probe_for_every_process(shm_name):
    a = Breaker(error_count=0, min_requests=1, recovery_s=60, shared=shm_name)
    b = Breaker(error_count=0, min_requests=1, recovery_s=60, shared=shm_name)  # a worker
    a.record(1, error=True, now_ns=1 * S)           # open until 61 s
    a.update(recovery_s=5)                          # moves the region's next probe
    assert b.retry_after(now_ns=3 * S) == 3.0
    assert not b.try_pass(now_ns=3 * S)
    assert b.try_pass(now_ns=6 * S)


def test_probe_timeout_defaults_to_60_s_then_the_silent_probe_failed():
    br = Breaker(error_count=0, min_requests=1, recovery_s=10)
    assert br.probe_timeout_s == 60.0
    br.record(1, error=True, now_ns=1 * S)          # open until 11 s
    assert br.try_pass(now_ns=11 * S)               # the probe, never heard of again
    assert not br.try_pass(now_ns=70 * S)           # 59 s silent: still out
    assert not br.try_pass(now_ns=71 * S)           # 60 s: failed, open again until 81 s
    assert br.state == "open"
    assert br.try_pass(now_ns=81 * S) and br.state == "half_open"


def test_a_silent_probe_times_out_and_reopens_for_recovery_s():
    br = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=30)
    seen = []
    br.on_change(lambda old, new, value: seen.append((old, new, value)))
    br.record(1, error=True, now_ns=1 * S)          # open until 11 s
    assert br.try_pass(now_ns=11 * S)
    assert br.retry_after(now_ns=40 * S) == 10.0    # the probe is out: recovery_s if it fails
    assert br.retry_after(now_ns=45 * S) == 6.0     # it failed at 41 s: open until 51 s
    assert not br.try_pass(now_ns=45 * S)
    assert br.state == "open"
    assert seen[-1] == ("half_open", "open", 1.0)   # a failed probe
    assert not br.try_pass(now_ns=50 * S)
    assert br.try_pass(now_ns=51 * S) and br.state == "half_open"
    t = br.totals()
    assert (t["probes_timed_out"], t["cancelled"], t["probes"]) == (1, 0, 2)


def test_a_probe_timeout_below_a_nanosecond_still_lets_a_prompt_probe_close_it():
    br = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=1e-10)
    br.record(1, error=True, now_ns=1 * S)          # open until 11 s
    assert br.try_pass(now_ns=11 * S)
    br.record(1, now_ns=11 * S)                     # the probe's success, at once
    assert br.state == "closed"


def test_a_late_bare_record_after_a_probe_timeout_does_not_close_it():
    br = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=30)
    br.record(1, error=True, now_ns=1 * S)
    assert br.try_pass(now_ns=11 * S)               # a bare probe
    br.record(5, now_ns=45 * S)                     # its success, after its timeout
    assert br.state == "open"
    assert br.retry_after(now_ns=45 * S) == 6.0     # failed at 41 s, not closed
    br.cancel(now_ns=46 * S)                        # nor does a late cancel make it probe now
    assert br.retry_after(now_ns=46 * S) == 5.0
    assert br.stats(now_ns=45 * S)["total"] == 1    # the late outcome is counted


def test_a_late_entry_outcome_after_a_probe_timeout_changes_no_state():
    br = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=30)
    br.record(1, error=True, now_ns=1 * S)
    ticket = br._pass(now_ns=11 * S)                # what an entry holds: the probe's ticket
    assert ticket is not None
    assert br.try_pass(now_ns=51 * S)               # timed out at 41 s; this caller probes
    br._record(ticket, 5, False, 52 * S)            # the first probe's success, late
    assert br.state == "half_open"                  # the second probe decides
    assert not br._cancel(ticket, 52 * S)
    assert br.state == "half_open"
    br.record(1, error=True, now_ns=53 * S)
    assert br.state == "open"


def test_a_hung_entry_probe_times_out_on_the_real_clock():
    br = Breaker(error_count=0, min_requests=1, recovery_s=0, probe_timeout_s=0.05)
    br.record(1, error=True)
    probe = br.entry()
    probe.__enter__()                               # the probe hangs
    assert br.state == "half_open"
    time.sleep(0.1)
    assert br.try_pass()                            # it failed; this caller probes
    probe.__exit__(None, None, None)                # the hung call returns: decides nothing
    assert br.state == "half_open"
    br.record(1)
    assert br.state == "closed"


def test_probe_timeout_none_waits_for_ever():
    br = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=None)
    assert br.probe_timeout_s is None
    br.record(1, error=True, now_ns=1 * S)
    assert br.try_pass(now_ns=11 * S)
    assert not br.try_pass(now_ns=2**62)
    assert br.state == "half_open"
    assert Breaker(error_ratio=0.5, probe_timeout_s=float("inf")).probe_timeout_s is None


def test_update_probe_timeout_applies_to_the_probe_out():
    br = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=None)
    br.record(1, error=True, now_ns=1 * S)
    assert br.try_pass(now_ns=11 * S)
    br.update(probe_timeout_s=5)
    assert not br.try_pass(now_ns=16 * S)           # failed at 16 s: open until 26 s
    assert br.state == "open"
    assert br.try_pass(now_ns=26 * S)
    with pytest.raises(ValueError, match="probe_timeout_s"):
        br.update(probe_timeout_s=0)
    with pytest.raises(TypeError, match="probe_timeout_s"):
        br.update(probe_timeout_s="5")
    assert br.probe_timeout_s == 5.0


def test_shared_a_silent_probe_of_a_live_process_frees_the_host(shm_name):
    a = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=30,
                shared=shm_name)
    b = Breaker(error_count=0, min_requests=1, recovery_s=10, probe_timeout_s=30,
                shared=shm_name)
    a.record(1, error=True, now_ns=1 * S)
    assert a.try_pass(now_ns=11 * S)                # a's probe: a lives on, never reports
    assert not b.try_pass(now_ns=40 * S)
    assert not b.try_pass(now_ns=41 * S)            # failed: open until 51 s
    assert b.state == "open" and a.state == "open"
    ticket = b._pass(now_ns=51 * S)                 # another worker probes
    assert ticket is not None
    a.record(1, now_ns=52 * S)                      # a's late bare record: not b's probe's
    assert b.state == "half_open"
    b._record(ticket, 1, False, 53 * S)
    assert a.state == "closed"
    assert a.totals()["probes_timed_out"] == 1


async def _hung():
    await asyncio.sleep(10)


def test_call_timeout_turns_a_hung_async_call_into_a_timeout_failure():
    br = Breaker(error_count=4, min_requests=1, call_timeout_s=0.01, interval_ms=60_000)

    async def main():
        for _ in range(5):
            with pytest.raises(TimeoutError):
                async with br.entry():
                    await _hung()

    asyncio.run(main())
    assert br.state == "open"
    t = br.totals()
    assert (t["errors"], t["timed_out"]) == (5, 5)


def test_call_timeout_on_a_decorated_coroutine_counts_whatever_errors_says():
    br = Breaker(error_count=0, min_requests=1, call_timeout_s=0.01, errors=ValueError)

    @br
    async def fetch():
        await _hung()

    async def main():
        with pytest.raises(TimeoutError) as err:
            await fetch()
        assert type(err.value) is TimeoutError     # the builtin one
        assert "call_timeout_s" in str(err.value)

    asyncio.run(main())
    assert br.state == "open"


def test_a_timed_out_call_is_slow_for_the_slow_grade():
    br = Breaker(slow_rt_ms=60_000, slow_ratio=0.5, min_requests=1, call_timeout_s=0.01)

    async def main():
        with pytest.raises(TimeoutError):
            async with br.entry():
                await _hung()

    asyncio.run(main())
    s = br.stats()
    assert (s["total"], s["errors"], s["slow"], br.state) == (1, 1, 1, "open")


def test_a_timeout_outside_the_breaker_is_a_cancel_and_call_timeout_s_is_not():
    br = Breaker(error_count=0, min_requests=1)
    wrapped = Breaker(error_count=0, min_requests=1, call_timeout_s=0.01)

    async def call(b):
        async with b.entry():
            await _hung()

    async def main():
        for b in (br, wrapped):
            # asyncio.TimeoutError is the builtin from 3.11; wait_for raises it before
            with pytest.raises((TimeoutError, asyncio.TimeoutError)):
                await asyncio.wait_for(call(b), 0.02 if b is br else 1)

    asyncio.run(main())
    assert br.state == "closed" and br.totals()["total"] == 0   # the caller's own timeout
    assert wrapped.state == "open"


def test_an_outer_cancel_of_a_call_with_call_timeout_s_stays_a_cancel():
    br = Breaker(error_count=0, min_requests=1, call_timeout_s=10)

    async def main():
        task = asyncio.create_task(_called(br))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert br.state == "closed" and br.totals()["total"] == 0


async def _called(br):
    async with br.entry():
        await _hung()


def test_call_timeout_leaves_a_call_that_finished_in_time_alone():
    br = Breaker(error_count=0, min_requests=1, call_timeout_s=0.3)

    @br
    async def quick():
        return 7

    async def main():
        async with br.entry():
            await asyncio.sleep(0)
        got = await quick()
        await asyncio.sleep(0.35)                   # past both deadlines: nothing cancelled
        return got

    assert asyncio.run(main()) == 7
    assert br.state == "closed" and br.totals()["timed_out"] == 0


def test_call_timeout_counts_a_sync_call_that_ran_longer_as_a_failure_when_it_returns():
    br = Breaker(error_count=0, min_requests=1, call_timeout_s=0.01)

    @br
    def slow():
        time.sleep(0.03)
        return "result"

    assert slow() == "result"                       # not interrupted: the result stands
    assert br.state == "open"
    assert br.totals()["timed_out"] == 1


def test_call_timeout_s_validation_update_and_repr():
    br = Breaker(error_ratio=0.5, call_timeout_s=2)
    assert br.call_timeout_s == 2.0
    br.update(call_timeout_s=0.5)
    assert br.call_timeout_s == 0.5
    br.update(call_timeout_s=None)
    assert br.call_timeout_s is None
    for bad, exc in ((0, ValueError), (-1, ValueError), (float("nan"), ValueError),
                     ("1", TypeError), (True, TypeError)):
        with pytest.raises(exc, match="call_timeout_s"):
            br.update(call_timeout_s=bad)
        with pytest.raises(exc, match="call_timeout_s"):
            Breaker(error_ratio=0.5, call_timeout_s=bad)
    assert br.call_timeout_s is None
    assert Breaker(error_ratio=0.5, call_timeout_s=float("inf")).call_timeout_s is None
    br = Breaker(error_ratio=0.5, probe_timeout_s=5, call_timeout_s=2, name="api")
    assert repr(br) == ("Breaker(error_ratio=0.5, probe_timeout_s=5.0, name='api', "
                        "call_timeout_s=2.0)")
    assert "probe_timeout_s=None" in repr(Breaker(error_ratio=0.5, probe_timeout_s=None))


class _HTTPError(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status


def test_errors_predicate_classifies_by_the_exception():
    br = Breaker(error_count=1, min_requests=1, interval_ms=60_000,
                 errors=lambda exc: getattr(exc, "status", 0) >= 500)
    for status in (404, 429, 404):
        with pytest.raises(_HTTPError):
            with br.entry():
                raise _HTTPError(status)
    assert br.state == "closed" and br.stats()["errors"] == 0

    @br
    async def call(status):
        raise _HTTPError(status)

    for _ in range(2):
        with pytest.raises(_HTTPError):
            asyncio.run(call(503))
    assert br.state == "open" and br.stats()["errors"] == 2


def test_a_raising_errors_predicate_counts_a_failure_and_logs(caplog):
    def broken(exc):
        raise KeyError("no status")

    br = Breaker(error_count=0, min_requests=1, errors=broken)
    with caplog.at_level(logging.ERROR, logger="slidewin"):
        with pytest.raises(ValueError, match="backend"):  # the call's own exception
            with br.entry():
                raise ValueError("backend")
    assert br.state == "open"
    assert "errors predicate" in caplog.text and "KeyError" in caplog.text


def test_errors_predicate_never_sees_a_cancel_and_is_shown():
    seen = []

    def is_failure(exc):
        seen.append(exc)
        return True

    br = Breaker(error_count=0, min_requests=1, errors=is_failure)
    assert br.errors is is_failure
    assert repr(br) == "Breaker(error_count=0, min_requests=1, errors=is_failure)"
    with pytest.raises(BlockedError):
        with br.entry():
            raise BlockedError("a nested limit")
    assert seen == [] and br.state == "closed"
    br.update(errors=(OSError,))
    assert br.errors == (OSError,)
    with pytest.raises(TypeError, match="errors"):
        br.update(errors=3)
    with pytest.raises(TypeError, match="errors"):
        Breaker(error_ratio=0.5, errors=int)
    with pytest.raises(TypeError, match="errors"):
        Breaker(error_ratio=0.5, errors=(ValueError, is_failure))


def _take_the_probe_and_stay(name, ready):
    br = Breaker(error_count=0, min_requests=1, recovery_s=0, probe_timeout_s=0.2, shared=name)
    assert br.try_pass()                            # the probe: this process lives on, silent
    ready.set()
    time.sleep(600)


@pytest.mark.procs
def test_shared_a_live_process_silent_with_the_probe_does_not_block_the_host(shm_name):
    ctx = mp.get_context("fork")
    br = Breaker(error_count=0, min_requests=1, recovery_s=0, probe_timeout_s=0.2,
                 shared=shm_name)
    br.record(1, error=True)
    ready = ctx.Event()
    p = ctx.Process(target=_take_the_probe_and_stay, args=(shm_name, ready))
    p.start()
    try:
        assert ready.wait(30)
        assert br.state == "half_open"              # the live child holds the probe
        time.sleep(0.3)
        assert br.try_pass()                        # its probe timed out: this one probes
        br.record(1)
        assert br.state == "closed"
        assert br.totals()["probes_timed_out"] == 1
        assert p.is_alive()                         # not reaped: timed out
    finally:
        p.kill()
        p.join(10)


def test_call_timeout_never_cancels_an_async_generators_consumer():
    br = Breaker(error_count=0, min_requests=1, call_timeout_s=0.01)

    @br
    async def items():
        for i in range(3):
            yield i

    async def main():
        got = []
        async for i in items():
            got.append(i)
            await asyncio.sleep(0.02)               # the consumer's own work, past the limit
        return got

    assert asyncio.run(main()) == [0, 1, 2]         # never cancelled
    assert br.totals()["timed_out"] == 1            # the iteration ran longer: a failure
    assert br.state == "open"


def test_a_cancel_that_came_late_stays_a_cancel():
    br = Breaker(error_count=0, min_requests=1, call_timeout_s=0.01)
    with pytest.raises(BlockedError):
        with br.entry():
            time.sleep(0.03)
            raise BlockedError("a nested limit refused, late")
    assert br.state == "closed" and br.totals()["total"] == 0
