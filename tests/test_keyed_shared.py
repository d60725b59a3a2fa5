"""KeyedLimiter with shared=: one table for the processes of a host, exact per key.

Every process decides at the same instant (explicit now_ns), so each key admits exactly its
window's limit whatever the interleaving; fork and spawn. A killed process's per-key
in-flight counts come back.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal

import pytest

import slidewin
from slidewin import KeyedLimiter

import keyed_workers as W


KEYS = ["user-1", b"user-1", 1, 2**80, "vip"]


@pytest.mark.procs
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
@pytest.mark.parametrize("kwargs,limits", [
    ({"qps": 7, "overrides": {"vip": 20}}, [7, 7, 7, 7, 20]),
    ({"qps": 10, "behavior": "throttle", "max_queueing_ms": 0}, [1] * 5),
    ({"concurrency": 3, "overrides": {1: 1}}, [3, 3, 1, 3, 3]),
], ids=["reject", "throttle", "concurrency"])
def test_processes_admit_exactly_each_keys_limit(ctx, kwargs, limits, name):
    with mp.get_context(ctx).Pool(3) as p:
        got = p.starmap(W.hammer_keys, [(name, kwargs, KEYS, 12, W.T0)] * 3)
    for k, limit in zip(KEYS, limits):
        assert sum(g[repr(k)] for g in got) == limit, k
    kl = KeyedLimiter(**kwargs, shared=name)
    assert len(kl) == len(KEYS)
    s = kl.stats(now_ns=W.T0)
    assert round(s.pass_qps) == sum(limits)             # no count lost
    assert round(s.block_qps) == 3 * 12 * len(KEYS) - sum(limits)


def test_a_striped_tables_passes_count_in_stats_totals_and_read_region(name):
    """A table of several stripes counts a decision passing at its window's newest bucket
    beside the stripe's lock (not in its statistics' rings): stats(), totals() and an
    observer's read_region() still count every pass, from every object on the region."""
    a = KeyedLimiter(qps=1000, shared=name, max_keys=4096)
    b = KeyedLimiter(qps=1000, shared=name, max_keys=4096)
    for i in range(300):
        assert (a if i % 2 else b).try_acquire("k%d" % (i % 100), now_ns=W.T0)
    for lim in (a, b):
        assert lim.stats(now_ns=W.T0).pass_qps == 300.0
        assert lim.totals()["pass"] == 300
    r = slidewin._core.read_region(name, now_ns=W.T0)
    assert (r["window"]["pass"], r["totals"]["pass"], r["keys"]) == (300, 300, 100)


def test_layout_mismatch_names_max_keys(name):
    KeyedLimiter(qps=5, max_keys=100, shared=name)
    with pytest.raises(ValueError, match=r"max_keys.*100.*200"):
        KeyedLimiter(qps=5, max_keys=200, shared=name)
    with pytest.raises(ValueError, match=r"sample_count"):
        KeyedLimiter(qps=5, max_keys=100, sample_count=4, shared=name)
    with pytest.raises(ValueError):
        slidewin.Limiter(qps=5, shared=name)  # another kind


def test_settings_per_process_counts_shared(name):
    a = KeyedLimiter(qps=2, shared=name)
    b = KeyedLimiter(qps=4, shared=name)
    assert a.try_acquire("k", 2, now_ns=W.T0)
    assert not a.try_acquire("k", now_ns=W.T0)
    assert b.try_acquire("k", 2, now_ns=W.T0)   # its own limit over the shared count
    assert not b.try_acquire("k", now_ns=W.T0)
    assert a.shared == name and "shared=" in repr(a)


def test_named_pickles_to_the_same_region(name):
    kl = KeyedLimiter(qps=3, overrides={"vip": 9}, shared=name)
    kl.try_acquire("x", 3, now_ns=W.T0)
    twin = pickle.loads(pickle.dumps(kl))
    assert twin.overrides == {"vip": 9}
    assert not twin.try_acquire("x", now_ns=W.T0)
    with pytest.raises(TypeError):
        pickle.dumps(KeyedLimiter(qps=3))


@pytest.mark.procs
def test_shared_true_with_forked_children():
    kl = KeyedLimiter(qps=5, shared=True)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=kl.try_acquire, args=("k", 2), kwargs={"now_ns": W.T0})
             for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert kl.stats(now_ns=W.T0).pass_qps == 4.0      # two of the four got 2 in
    assert not kl.try_acquire("k", 2, now_ns=W.T0)


@pytest.mark.procs
def test_a_keyed_entry_inherited_across_fork_is_released_once(name):
    kl = KeyedLimiter(concurrency=2, shared=name)
    assert kl.try_acquire("a")                  # someone else holds 1 of "a"
    with kl.entry("a"):                         # we hold 1: 2 in flight
        pid = os.fork()                         # the child leaves the block too
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert kl.in_flight("a") == 1               # the child counted, did not release
    assert kl.try_acquire("a") and not kl.try_acquire("a")   # room for exactly one more
    assert kl.stats().success_qps == 2          # both exits counted the outcome


@pytest.mark.procs
def test_killed_process_gives_back_its_per_key_in_flight(name):
    ctx = mp.get_context("fork")
    kl = KeyedLimiter(concurrency=1, shared=name)
    ready = ctx.Event()
    p = ctx.Process(target=W.hold_and_hang, args=(name, ["a", b"b", 3], ready))
    p.start()
    assert ready.wait(30)
    assert not kl.try_acquire("a")
    assert kl.in_flight(b"b") == 1
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    # within ~1 s (the reaping period): the keys are free again
    kl.acquire("a", timeout=5)
    assert kl.in_flight(b"b") == 0 and kl.in_flight(3) == 0
    assert kl.stats().concurrency == 1
    kl.release("a")
