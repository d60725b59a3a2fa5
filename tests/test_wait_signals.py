"""Ctrl-C (SIGINT) is noticed promptly during every wait of every behaviour.

A thread sends SIGINT while the main thread waits in acquire(timeout=5) on a saturated
limiter; KeyboardInterrupt must arrive well before the timeout. The signal is sent both to
the main thread (it interrupts the sleep: EINTR) and to the process (the kernel may deliver
it to the sending thread: the waiting thread is never interrupted and must check)."""
import os
import signal
import threading
import time

import pytest

from slidewin import Limiter

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals are handled on the main thread",
)

LATE_S = 0.5  # a generous bound on a loaded 2-core machine; the waits check every 50 ms




def _saturated_qps(kind):
    if kind == "reject":
        lim = Limiter(qps=1, interval_ms=10_000, sample_count=1)
        assert lim.try_acquire(10)
    elif kind == "warm_up":
        lim = Limiter(qps=1, behavior="warm_up", interval_ms=10_000, sample_count=1)
        while lim.try_acquire():
            pass
    else:  # throttle, warm_up_throttle: the next slot is 10 s away
        lim = Limiter(qps=0.1, behavior=kind, max_queueing_ms=0)
        assert lim.try_acquire()
    return lim


def saturated_kept(kind):
    # concurrency: keep the holding entry alive for the whole test
    if kind != "concurrency":
        return _saturated_qps(kind), None
    lim = Limiter(concurrency=1)
    held = lim.entry()
    held.__enter__()
    return lim, held


@pytest.fixture(autouse=True)
def default_sigint():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("target", ["thread", "process"])
@pytest.mark.parametrize(
    "kind", ["reject", "warm_up", "throttle", "warm_up_throttle", "concurrency"]
)
def test_sigint_interrupts_acquire(kind, target):
    main_id = threading.main_thread().ident
    for attempt in range(4):
        lim, held = saturated_kept(kind)
        sent = []
        inside = threading.Event()

        def send():
            # from inside pytest.raises on: a loaded machine may run the main thread late
            inside.wait(30)
            time.sleep(0.1 + 0.037 * attempt)  # land anywhere in the wait's cycle
            sent.append(time.monotonic())
            if target == "thread":
                signal.pthread_kill(main_id, signal.SIGINT)
            else:
                os.kill(os.getpid(), signal.SIGINT)

        t = threading.Thread(target=send)
        t.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                inside.set()
                lim.acquire(timeout=5)
                time.sleep(2)  # (not reached: acquire is saturated for 5 s)
            got = time.monotonic()
        finally:
            t.join()
        assert sent, "the signal was not sent"
        assert got - sent[0] < LATE_S, "%s: KeyboardInterrupt %.3f s late" % (kind, got - sent[0])
        if held is not None:
            held.__exit__(None, None, None)
