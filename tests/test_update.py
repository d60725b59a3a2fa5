"""``update(**settings)``: new settings in place, the state kept (explicit ``now_ns``).

Sentinel rebuilds its controllers on a rule change (a warm-up limiter goes cold again);
slidewin keeps the windows, the throttle's last slot and the warm-up tokens.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading

import pytest

import slidewin
from slidewin import KeyedLimiter, Limiter

S = 10**9
MS = 10**6


def drive(lims, start, seconds, per_second=60):
    """The same steady traffic into each limiter: `per_second` tries a second. Returns the
    passes of each, per second, and the time after."""
    out = [[] for _ in lims]
    now = start
    for _ in range(seconds):
        got = [0] * len(lims)
        for k in range(per_second):
            t = now + k * (S // per_second)
            for i, lim in enumerate(lims):
                got[i] += lim.try_acquire(now_ns=t)
        for i in range(len(lims)):
            out[i].append(got[i])
        now += S
    return out, now


def test_update_in_the_middle_of_a_warm_up_keeps_the_ramp():
    kw = dict(qps=50, behavior="warm_up", warm_up_s=10, cold_factor=3)
    never, updated = Limiter(**kw), Limiter(**kw)
    (a, b), now = drive([never, updated], 10 * S, 5)
    assert a == b and a[0] < a[-1] < 50  # ramping, not warm yet
    updated.update(max_queueing_ms=100, occupy_timeout_ms=200, qps=50.0)
    fresh = Limiter(**kw)
    (a, b, f), now = drive([never, updated, fresh], now, 5)
    assert a == b  # the tokens carried over: the same ramp as a limiter never updated
    assert sum(f) < sum(b)  # a freshly built limiter (Sentinel's rebuild) starts cold
    assert f[0] < b[0]


def test_raising_qps_during_a_warm_up_continues_from_the_tokens_held():
    kw = dict(qps=50, behavior="warm_up", warm_up_s=10)
    lim = Limiter(**kw)
    (p,), now = drive([lim], 10 * S, 5, per_second=200)
    lim.update(qps=100)
    fresh = Limiter(qps=100, behavior="warm_up", warm_up_s=10)
    (q, f), now = drive([lim, fresh], now, 3, per_second=200)
    assert q[0] >= p[-1]  # no drop back to the cold rate
    assert sum(q) > sum(f)


def test_the_window_carries_over():
    lim = Limiter(qps=5)
    assert sum(lim.try_acquire(now_ns=S) for _ in range(8)) == 5
    lim.update(qps=8)
    assert sum(lim.try_acquire(now_ns=S) for _ in range(8)) == 3  # 8 in the window now
    lim.update(qps=2)
    assert not lim.try_acquire(now_ns=S)
    assert lim.stats(now_ns=S).pass_qps == 8.0
    assert repr(lim) == "Limiter(qps=2.0)" and lim.qps == 2.0


def test_the_throttles_last_slot_carries_over():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=1000)
    assert [lim.reserve(now_ns=S) for _ in range(3)] == [0, 100 * MS, 200 * MS]
    lim.update(qps=5)  # the queue stays: the next slot follows the last one, at the new pace
    assert lim.reserve(now_ns=S) == 400 * MS
    lim.update(max_queueing_ms=300)
    assert lim.reserve(now_ns=S) is None  # 600 ms would exceed the new queue
    fresh = Limiter(qps=5, behavior="throttle", max_queueing_ms=300)
    assert fresh.reserve(now_ns=S) == 0  # what a rebuilt controller would do


def test_behavior_change_and_concurrency_change():
    lim = Limiter(qps=4)
    for _ in range(4):
        assert lim.try_acquire(now_ns=S)
    lim.update(behavior="throttle", max_queueing_ms=0)
    assert lim.behavior == "throttle"
    assert lim.try_acquire(now_ns=2 * S)
    assert not lim.try_acquire(now_ns=2 * S)  # paced at 250 ms
    conc = Limiter(concurrency=1)
    assert conc.try_acquire()
    assert not conc.try_acquire()
    conc.update(concurrency=3)
    assert conc.try_acquire() and conc.try_acquire() and not conc.try_acquire()
    assert conc.in_flight == 3
    conc.update(concurrency=1)  # what is in flight stays in flight
    assert conc.in_flight == 3 and not conc.try_acquire()


def test_update_wakes_a_waiter_when_the_limit_rises():
    lim = Limiter(concurrency=1)
    assert lim.try_acquire()
    done = threading.Event()

    def waiter():
        lim.acquire(timeout=10)
        done.set()

    t = threading.Thread(target=waiter)
    t.start()
    lim.update(concurrency=2)
    assert done.wait(10)
    t.join()


@pytest.mark.parametrize("bad", [
    {"qps": -1}, {"qps": "5"}, {"behavior": "fast"}, {"cold_factor": 1}, {"warm_up_s": -1},
    {"max_queueing_ms": 1.5}, {"interval_ms": 500}, {"concurrency": 2}, {"qps": 0.5},
    {"shadow": 1}, {"qps": 3, "cold_factor": 0.5}, {"nonsense": 1}, {"on_block": 5},
])
def test_an_invalid_update_changes_nothing(bad):
    lim = Limiter(qps=3, cold_factor=2)
    lim.try_acquire(now_ns=S)
    before = (repr(lim), lim.totals(), lim.qps, lim.behavior, lim.cold_factor)
    with pytest.raises((ValueError, TypeError)):
        lim.update(**bad)
    assert (repr(lim), lim.totals(), lim.qps, lim.behavior, lim.cold_factor) == before
    assert lim.try_acquire(now_ns=S) and lim.try_acquire(now_ns=S)
    assert not lim.try_acquire(now_ns=S)


def test_update_on_block_serves_functions_decorated_after_it():
    lim = Limiter(qps=0)

    @lim
    def before():
        return "ran"

    lim.update(on_block=lambda e: "fallback")

    @lim
    def after():
        return "ran"

    with pytest.raises(slidewin.BlockedError):
        before()  # a decorator's handler is fixed when it decorates
    assert after() == "fallback"


def test_keyed_update_keeps_every_key():
    per = KeyedLimiter(qps=2, overrides={"vip": 5})
    assert sum(per.try_acquire("a", now_ns=S) for _ in range(3)) == 2
    assert sum(per.try_acquire("vip", now_ns=S) for _ in range(6)) == 5
    per.update(qps=3)  # the overrides stay, checked again
    assert per.try_acquire("a", now_ns=S) and not per.try_acquire("a", now_ns=S)
    assert per.overrides == {"vip": 5}
    per.update(overrides={"vip": 7})
    assert sum(per.try_acquire("vip", now_ns=S) for _ in range(5)) == 2
    with pytest.raises(ValueError):
        per.update(qps=3, overrides={"x": -1})
    assert per.qps == 3.0 and per.overrides == {"vip": 7}
    with pytest.raises(ValueError):
        per.update(max_keys=10)
    assert len(per) == 2 and per.totals()["pass"] == 2 + 5 + 1 + 2


def _child_decides(name, ready, go, out):
    lim = Limiter(qps=5, shared=name)
    ready.set()
    go.wait(30)
    out.put([lim.qps, sum(lim.try_acquire(now_ns=3 * S) for _ in range(10))])


@pytest.mark.procs
def test_update_on_a_shared_region_changes_only_this_process(name):
    ctx = mp.get_context("fork")
    ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    mine = Limiter(qps=5, shared=name)
    p = ctx.Process(target=_child_decides, args=(name, ready, go, out))
    p.start()
    assert ready.wait(30)
    assert sum(mine.try_acquire(now_ns=3 * S) for _ in range(3)) == 3
    mine.update(qps=100)
    go.set()
    qps, admitted = out.get(timeout=30)
    p.join(30)
    assert qps == 5.0
    assert admitted == 2  # the child decides with its own qps=5 over the shared counts (3)
    assert sum(mine.try_acquire(now_ns=3 * S) for _ in range(10)) == 10  # mine: 100
    t = mine.totals()
    assert (t["pass"], t["block"]) == (3 + 2 + 10, 8)


def test_updates_while_threads_decide():
    lim = Limiter(concurrency=1)
    stop = threading.Event()
    peak = [0]

    def work():
        while not stop.is_set():
            if lim.try_acquire():
                peak[0] = max(peak[0], lim.in_flight)
                lim.release()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(2000):
        lim.update(concurrency=1 + i % 2)
    stop.set()
    for t in threads:
        t.join(30)
    assert peak[0] <= 2 and lim.in_flight == 0



def test_updates_while_threads_refuse_a_full_window_never_mix_two_rules():
    # a full window refuses without the lock, reading the rule there: a refusal that paired
    # the shadow rule's limit (5) with the other rule's flags (no shadow) would refuse a call
    # that neither rule refuses (the shadow one admits all, the other has room for 10**6)
    t = 10**9
    lim = Limiter(qps=5, shadow=True)
    for _ in range(50):  # 5 passes, then shadow refusals (admitted, counted BLOCK)
        assert lim.try_acquire(now_ns=t)
    stop = threading.Event()
    refused = []

    def work():
        for _ in range(20000):
            if not lim.try_acquire(now_ns=t):
                refused.append(1)

    def flip():
        while not stop.is_set():
            lim.update(qps=10**6, shadow=False)
            lim.update(qps=5, shadow=True)

    flipper = threading.Thread(target=flip)
    flipper.start()
    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    stop.set()
    flipper.join(60)
    totals = lim.totals()
    assert refused == [] and totals["block"] == totals["shadow_block"]
    assert totals["pass"] + totals["shadow_block"] == 50 + 4 * 20000

# A driver process: makes the objects, starts a peer that hangs inside a decision holding the
# region's lock (the test hook, 1 s at each step, then SIGSTOP), reads the settings and the
# repr, and leaves with os._exit (a detach could wait for the lock).
_STOPPED_PEER_DRIVER = r"""
import multiprocessing as mp, os, signal, sys, time
import slidewin
from slidewin import _core

def peer(kind, name, ready):
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)  # the test reads the driver's output to its end: not this process's
    lim = (slidewin.KeyedLimiter(qps=5, shared=name) if kind == "keyed"
           else slidewin.Limiter(qps=5, shared=name))
    _core._set_test_hook(1000000)
    ready.set()
    while True:
        if kind == "keyed":
            lim.try_acquire("k")
        else:
            lim.try_acquire()

kind, name = sys.argv[1], sys.argv[2]
if kind == "keyed":
    lim = slidewin.KeyedLimiter(qps=5, shared=name, overrides={"vip": 50})
else:
    lim = slidewin.Limiter(qps=5, shared=name)
ctx = mp.get_context("fork")
ready = ctx.Event()
p = ctx.Process(target=peer, args=(kind, name, ready), daemon=True)
p.start()
print(p.pid, flush=True)
ready.wait(30)
time.sleep(0.3)  # the peer is inside its decision (the lock held 1 s at each step)
os.kill(p.pid, signal.SIGSTOP)
out = [repr(lim), lim.qps, lim.behavior, lim.shadow, lim.interval_ms]
if kind == "keyed":
    out.append(lim.overrides)
print(out, flush=True)
os._exit(0)
"""


@pytest.mark.procs
@pytest.mark.parametrize("kind", ["limiter", "keyed"])
def test_settings_read_while_a_stopped_peer_holds_the_lock(kind, name):
    """Reading settings or repr() of a shared object takes no cross-process lock: a peer
    stopped (SIGSTOP) while holding the region's lock does not block a log line (before:
    `lim.qps` and repr() waited for the region's lock, forever)."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", _STOPPED_PEER_DRIVER, kind, name],
                            stdout=subprocess.PIPE, text=True)
    peer_pid = int(proc.stdout.readline())
    try:
        out, _ = proc.communicate(timeout=60)  # a generous deadline: only a hang fails
    except subprocess.TimeoutExpired:
        out = None
    finally:
        for pid in (peer_pid, proc.pid):
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        proc.communicate()
    assert out is not None, "reading the settings waited for a stopped peer's lock"
    assert "qps=5" in out and "5.0" in out
    if kind == "keyed":
        assert "'vip': 50" in out
