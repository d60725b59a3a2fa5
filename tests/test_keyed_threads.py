"""KeyedLimiter's settings under threads.

update(), the overrides setter and getter, repr and the decisions read and swap the settings
(rule, per-key thresholds, the dict given) under the table's lock only, so that no thread frees
what another reads (without the GIL) and no update is lost. Under the GIL these tests check the
logic: counts stay exact while settings change, and an update that runs Python code (a
mapping's items()) while another update lands does not undo it.
"""

from __future__ import annotations

import sys
import threading

from slidewin import KeyedLimiter

T = 10**12


def test_decisions_stay_exact_while_overrides_are_swapped():
    kl = KeyedLimiter(qps=10, overrides={"vip": 50})
    stop = threading.Event()
    errors: list[BaseException] = []
    swaps = [0]

    def swapper():
        try:
            i = 0
            while not stop.is_set():
                i += 1
                extra = {f"x{i % 7}": 3, i: 1}
                if i % 3 == 0:
                    kl.update(overrides={"vip": 50, **extra})
                elif i % 3 == 1:
                    kl.overrides = {"vip": 50, **extra}
                else:
                    kl.update(qps=10, overrides={"vip": 50})
                got = kl.overrides
                assert got["vip"] == 50
                assert "vip" in repr(kl) and kl.qps == 10
                swaps[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    passed = {"vip": 0, "k": 0}
    lock = threading.Lock()

    def decider(n):
        try:
            mine = {"vip": 0, "k": 0}
            for _ in range(n):
                for key in ("vip", "k"):
                    mine[key] += kl.try_acquire(key, now_ns=T)
            with lock:
                for key in mine:
                    passed[key] += mine[key]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        sw = [threading.Thread(target=swapper) for _ in range(2)]
        ds = [threading.Thread(target=decider, args=(20_000,)) for _ in range(4)]
        for t in sw + ds:
            t.start()
        for t in ds:
            t.join(timeout=120)
        stop.set()
        for t in sw:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert swaps[0] > 10
    assert passed == {"vip": 50, "k": 10}  # every key its limit exactly, once


def test_an_update_running_python_code_does_not_undo_another():
    """Thread A's update(overrides=m) runs m.items() (Python code: other threads run) while
    thread B's update(qps=20) lands: A's update is checked again against B's settings and
    both stay (before: A installed the settings it had read before B's)."""
    kl = KeyedLimiter(qps=10)
    entered, go = threading.Event(), threading.Event()

    class Slow:
        calls = 0

        def items(self):
            Slow.calls += 1
            if Slow.calls == 1:
                entered.set()
                assert go.wait(30)
            return [("vip", 40)]

    a = threading.Thread(target=lambda: kl.update(overrides=Slow()))
    a.start()
    assert entered.wait(30)
    kl.update(qps=20)
    go.set()
    a.join(30)
    assert kl.qps == 20
    assert kl.overrides == {"vip": 40}
    assert kl.try_acquire("k", 20, now_ns=T)
    assert not kl.try_acquire("k", now_ns=T)
    assert kl.try_acquire("vip", 40, now_ns=T)


def test_limiter_updates_and_reads_while_deciding():
    """Limiter.update() swaps its rule and settings under the state's lock; the getters and
    repr read them under it: counts stay exact while another thread updates in a loop."""
    from slidewin import Limiter

    lim = Limiter(qps=10)
    stop = threading.Event()
    errors: list[BaseException] = []

    def updater():
        try:
            while not stop.is_set():
                lim.update(qps=10, shadow=False)
                assert lim.qps == 10 and "qps=10" in repr(lim) and lim.shadow is False
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    passed = [0]
    lock = threading.Lock()

    def decider():
        mine = sum(lim.try_acquire(now_ns=T) for _ in range(20_000))
        with lock:
            passed[0] += mine

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        u = threading.Thread(target=updater)
        ds = [threading.Thread(target=decider) for _ in range(4)]
        for t in [u, *ds]:
            t.start()
        for t in ds:
            t.join(timeout=120)
        stop.set()
        u.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert passed[0] == 10
