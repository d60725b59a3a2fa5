"""os.fork() while other threads hold a limiter's lock or wait in acquire() never hangs the
child: the lock and the wait state are reset in the child (pthread_atfork)."""
import os
import signal
import sys
import sysconfig
import threading
import time
import warnings

import pytest

from slidewin import BlockedError, Limiter, Metric, _core

# forked children (the `procs` group: CONTRIBUTING.md)
pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
              pytest.mark.procs]

FORKS = 200
CHILD_DEADLINE_S = 10.0


def child_body(lims, metric):
    """Use every limiter in the child; any hang is caught by the parent's deadline."""
    try:
        for lim in lims:
            lim.try_acquire()
            _core._try_acquire_nogil(lim)
            try:
                with lim.entry():
                    pass
            except BlockedError:
                pass
            try:
                lim.acquire(timeout=0.005)
                if lim.concurrency is not None:
                    lim.release()
            except BlockedError:
                pass
            lim.stats()
        metric.add(0)
        metric.sum(0)
    except BaseException:
        os._exit(3)
    os._exit(0)


def wait_child(pid):
    deadline = time.monotonic() + CHILD_DEADLINE_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") \
                else (status >> 8)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.002)


@pytest.mark.skipif(
    bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    reason="free-threaded CPython: 1 child in 200 forks hung in the CI job (not yet traced to "
           "slidewin's locks or CPython's own: an open issue); runs on every build with a GIL")
def test_fork_while_threads_hammer_and_wait():
    conc = Limiter(concurrency=2)
    thr = Limiter(qps=2000, behavior="throttle", max_queueing_ms=5)
    rej = Limiter(qps=10**6)
    metric = Metric(1000, 2)
    lims = [conc, thr, rej]
    stop = threading.Event()

    def hammer(lim):
        # the GIL released around the decision: the core lock is held without the GIL
        while not stop.is_set():
            for _ in range(200):
                _core._try_acquire_nogil(lim)
                if lim.concurrency is not None and lim.in_flight:
                    try:
                        lim.release()
                    except ValueError:
                        pass
            metric.add(0)

    def waiter(lim):
        while not stop.is_set():
            try:
                lim.acquire(timeout=0.02)
                if lim.concurrency is not None:
                    time.sleep(0.001)
                    lim.release()
            except BlockedError:
                pass

    threads = [threading.Thread(target=hammer, args=(rej,)),
               threading.Thread(target=hammer, args=(conc,)),
               threading.Thread(target=waiter, args=(conc,)),
               threading.Thread(target=waiter, args=(thr,))]
    for t in threads:
        t.daemon = True
        t.start()
    failed = []
    try:
        with warnings.catch_warnings():
            # 3.12+: forking a multi-threaded process warns; that is the point here
            warnings.simplefilter("ignore", DeprecationWarning)
            for i in range(FORKS):
                pid = os.fork()
                if pid == 0:
                    child_body(lims, metric)
                code = wait_child(pid)
                if code != 0:
                    failed.append((i, code))
                    if len(failed) > 3:
                        break
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not failed, "children that hung (None) or failed: %r" % failed


def test_waiters_are_reset_in_the_child():
    lim = Limiter(concurrency=1)
    held = lim.entry()
    held.__enter__()
    started = threading.Event()

    def waiter():
        started.set()
        try:
            lim.acquire(timeout=2)
            lim.release()
        except BlockedError:
            pass

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    started.wait()
    time.sleep(0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
        if pid == 0:
            try:
                held.__exit__(None, None, None)  # notify: no waiter in the child
                lim.acquire(timeout=0.1)
                lim.release()
            except BaseException:
                os._exit(3)
            os._exit(0)
    code = wait_child(pid)
    held.__exit__(None, None, None)
    t.join(5)
    assert code == 0


def test_a_fork_during_another_threads_adaptive_update_leaves_the_childs_updates_free(
        monkeypatch):
    from slidewin import AdaptiveLimiter, _adaptive
    a, b = AdaptiveLimiter(), AdaptiveLimiter()
    inside, go_on = threading.Event(), threading.Event()
    apply = AdaptiveLimiter._apply

    def held_apply(self, settings):
        inside.set()
        go_on.wait(10)
        apply(self, settings)

    monkeypatch.setattr(_adaptive.AdaptiveLimiter, "_apply", held_apply)
    t = threading.Thread(target=a.update, kwargs={"max_limit": 500})
    t.start()
    assert inside.wait(10)
    monkeypatch.setattr(_adaptive.AdaptiveLimiter, "_apply", apply)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a threaded process
        pid = os.fork()
    if pid == 0:
        try:
            b.update(max_limit=400)  # another limiter's update, in the child
            os._exit(0 if b.max_limit == 400 else 4)
        except BaseException:
            os._exit(3)
    go_on.set()
    t.join()
    assert wait_child(pid) == 0
    assert a.max_limit == 500


def test_a_fork_while_the_cpu_sampler_holds_its_lock_leaves_the_child_free():
    from slidewin import AdaptiveLimiter, _adaptive
    keep = AdaptiveLimiter(cpu_threshold=0.8)  # the sampler runs
    with _adaptive._cpu._mu:  # as its thread does at each sample
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            try:
                AdaptiveLimiter(cpu_threshold=0.5)  # adds itself to the sampler
                os._exit(0)
            except BaseException:
                os._exit(3)
    assert wait_child(pid) == 0
    assert keep.limit >= 1
