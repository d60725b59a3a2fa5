"""A shared limiter's leases of the head bucket (docs/shared-memory.md, "Leases"): a process
that admits under the region's lock takes a few more permits of the same bucket at once,
counted as passes then, and decides its next calls on them without the lock. These tests hold
the promises that come with it: never more admitted than the limit, no refusal while the
window has room (a refusal first takes every lease back, a dead process's included), counts
and totals that hold only the permits used, and settings that apply from the next call.
Decisions here use the real clock (a lease is taken only then)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

from slidewin import Limiter

# the processes: the `procs` group (CONTRIBUTING.md)
pytestmark = pytest.mark.procs

LIMIT = 20000
RATE = f"{LIMIT}/60s"  # one window longer than any test: every admission stays in it


def hammer(name: str, seconds: float, q) -> None:
    lim = Limiter(rate=RATE, shared=name)
    got = calls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(200):
            got += lim.try_acquire()
        calls += 200
    q.put((got, calls))


def test_processes_deciding_together_admit_exactly_the_limit(name, forked):
    """Two processes whose demand is far above the limit admit exactly the limit in all: the
    permits leased and not used are taken back by the first refusal."""
    lim = Limiter(rate=RATE, shared=name)
    q = mp.get_context("fork").Queue()
    for _ in range(2):
        forked(hammer, name, 0.6, q)
    got = [q.get(timeout=60) for _ in range(2)]
    assert sum(g for g, _ in got) == LIMIT
    assert all(calls > LIMIT for _, calls in got)  # demand above the limit in each
    assert lim.totals()["pass"] == LIMIT
    assert not lim.try_acquire()


def take_and_stop(name: str, q) -> None:
    lim = Limiter(rate=RATE, shared=name)
    q.put(sum(lim.try_acquire() for _ in range(3)))  # the second takes a lease
    time.sleep(600)


def test_a_killed_processs_lease_is_taken_back_by_the_next_refusal(name, forked):
    """A process killed with a lease in hand: its permits left count as passes until a
    refusal would be made, which takes them back, so the others still reach the limit."""
    q = mp.get_context("fork").Queue()
    p = forked(take_and_stop, name, q)
    used = q.get(timeout=60)
    assert used == 3
    lim = Limiter(rate=RATE, shared=name)
    assert lim.totals()["pass"] == used  # the read takes the lease back, a live one too
    # the dead one's lease: taken again (a live holder's next take finds it gone) ...
    lim2 = Limiter(rate=RATE, shared=name)
    del lim2
    p2 = forked(take_and_stop, name, q)
    assert q.get(timeout=60) == 3
    os.kill(p2.pid, signal.SIGKILL)
    p2.join()
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    # ... and given back here by the refusal that would otherwise be made
    admitted = 0
    while lim.try_acquire():
        admitted += 1
        assert admitted <= LIMIT
    assert admitted == LIMIT - 6
    assert lim.totals()["pass"] == LIMIT


def test_counts_hold_only_the_permits_used(name):
    lim = Limiter(qps=10**6, shared=name)
    assert all(lim.try_acquire() for _ in range(10))  # a lease is in hand after the second
    assert lim.totals()["pass"] == 10
    assert lim.stats().pass_qps == 10.0
    assert lim.try_acquire()
    assert lim.totals()["pass"] == 11


def test_an_update_applies_to_the_next_call_despite_a_lease(name):
    lim = Limiter(qps=10**6, shared=name)
    assert all(lim.try_acquire() for _ in range(3))  # a lease of up to 64 in hand
    lim.update(qps=5)
    assert [lim.try_acquire() for _ in range(4)] == [True, True, False, False]
    lim.update(qps=10**6, shadow=True)
    assert lim.try_acquire()
    assert lim.totals()["pass"] == 6


def test_another_object_of_the_process_decides_with_its_own_settings(name):
    """The process's slot is shared by its objects on a region: a lease is the object's it was
    granted to, and another with a lower limit never admits on it."""
    big = Limiter(qps=10**6, shared=name)
    assert all(big.try_acquire() for _ in range(3))
    small = Limiter(qps=5, shared=name)
    assert [small.try_acquire() for _ in range(3)] == [True, True, False]
    assert big.try_acquire()
    assert big.totals()["pass"] == 6


def test_explicit_times_decide_under_the_lock(name):
    """A decision at an explicit now_ns takes no lease: the counts at that time are exact
    after every call, as for a private limiter."""
    lim = Limiter(qps=100, shared=name)
    t = 10**12
    assert sum(lim.try_acquire(now_ns=t) for _ in range(150)) == 100
    assert lim.stats(now_ns=t).pass_qps == 100.0


def test_a_new_object_never_decides_on_a_dropped_ones_lease(name):
    """The process's slot outlives an object: a lease left by a dropped object belongs to it
    (its tag), so a new object of the process with a lower limit decides under the lock."""
    big = Limiter(qps=10**6, shared=name)
    assert all(big.try_acquire() for _ in range(3))  # a lease of up to 64 left in the slot
    del big
    small = Limiter(qps=5, shared=name)
    assert sum(small.try_acquire() for _ in range(100)) == 2
    assert small.totals()["pass"] == 5


def test_a_group_is_not_refused_while_a_lease_holds_the_room(name):
    """A lease counts its permits at once; a group deciding over the limiter takes it back
    before refusing, so the group gets every permit the lease left unused."""
    from slidewin import all_of

    lim = Limiter(qps=100, shared=name)
    assert all(lim.try_acquire() for _ in range(3))  # a lease of (100 - 2) / 8 = 12, 1 used
    other = Limiter(qps=100, shared=name)              # another object: under the lock
    group = all_of(other, Limiter(qps=10**6))
    admitted = 0
    while group.try_acquire() and admitted <= 100:
        admitted += 1
    assert admitted == 97
    assert not lim.try_acquire()                        # its lease was taken back
    assert lim.totals()["pass"] == 100
