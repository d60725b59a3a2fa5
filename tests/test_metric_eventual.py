"""``Metric(..., consistency="eventual")``: adds with no lock.

Checked against the strong (locked) mode on deterministic runs (explicit ``now_ns``), with
threads and processes adding into one bucket (no count lost), across a window's turn (every
add lands in the old or the new bucket), and for its validation and region layout. The race
at a bucket's reset is pinned down deterministically in the C core's tests
(csrc/tests/test_evleap.c).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import threading
import time
import uuid

import pytest

import slidewin
from slidewin import Event, Limiter, Metric

import shared_workers as W

MS = 10**6


@pytest.fixture
def name():
    n = f"swtest-ev-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield n
    slidewin.unlink(n)


def _replay(strong: Metric, eventual: Metric, seed: int, events: tuple[str, ...] | None) -> None:
    rnd = random.Random(seed)
    n_events = len(events) if events else 6
    t = 0
    for _ in range(4000):
        t = max(0, t + rnd.choice([0, 1, 7, 45, 300, 1100, -50, -2000, 61_000]))
        ns = t * MS
        op = rnd.random()
        ev = rnd.randrange(n_events)
        if op < 0.5:
            n = rnd.randrange(5)
            strong.add(ev, n, now_ns=ns)
            eventual.add(ev, n, now_ns=ns)
        elif op < 0.6 and not events:
            rt = rnd.randrange(7000)
            strong.add_rt(rt, now_ns=ns)
            eventual.add_rt(rt, now_ns=ns)
        elif op < 0.99:
            for read in ("sum", "rate", "current", "previous"):
                assert getattr(eventual, read)(ev, now_ns=ns) == getattr(strong, read)(ev, now_ns=ns)
            if not events:
                assert eventual.min_rt(now_ns=ns) == strong.min_rt(now_ns=ns)
                assert eventual.avg_rt(now_ns=ns) == strong.avg_rt(now_ns=ns)
            assert eventual.buckets(now_ns=ns) == strong.buckets(now_ns=ns)
        else:
            strong.reset()
            eventual.reset()


@pytest.mark.parametrize("interval_ms, sample_count, events", [
    (1000, 2, None), (1000, 1, None), (60_000, 60, None), (90, 3, ("sent", "dropped")),
])
def test_eventual_gives_the_strong_answers_in_a_deterministic_run(interval_ms, sample_count,
                                                                  events):
    _replay(Metric(interval_ms, sample_count, events=events),
            Metric(interval_ms, sample_count, events=events, consistency="eventual"),
            seed=interval_ms + sample_count, events=events)


def test_shared_eventual_gives_the_strong_answers_in_a_deterministic_run(name):
    _replay(Metric(1000, 4), Metric(1000, 4, shared=name, consistency="eventual"), seed=3,
            events=None)


def test_consistency_attribute_repr_and_default():
    assert Metric(1000, 2).consistency == "strong"
    assert Metric(1000, 2, consistency="strong").consistency == "strong"
    m = Metric(1000, 2, consistency="eventual")
    assert m.consistency == "eventual"
    assert repr(m) == "Metric(interval_ms=1000, sample_count=2, consistency='eventual')"
    assert repr(Metric(1000, 2)) == "Metric(interval_ms=1000, sample_count=2)"
    with pytest.raises(AttributeError):
        m.consistency = "strong"  # type: ignore[misc]
    # a limiter's statistics are always read under its lock
    assert Limiter(qps=5).metric.consistency == "strong"


@pytest.mark.parametrize("bad", ["weak", "", "Eventual", "strong "])
def test_consistency_other_string_is_value_error(bad):
    with pytest.raises(ValueError, match=r"consistency must be \"strong\".*\"eventual\""):
        Metric(1000, 2, consistency=bad)


@pytest.mark.parametrize("bad", [None, 1, b"eventual", True])
def test_consistency_not_a_string_is_type_error(bad):
    with pytest.raises(TypeError, match="consistency must be a str"):
        Metric(1000, 2, consistency=bad)


def test_a_shared_name_keeps_the_mode_it_was_created_with(name):
    Metric(1000, 2, shared=name, consistency="eventual").add("pass", now_ns=W.T0)
    with pytest.raises(ValueError, match=r"consistency='eventual'.*consistency='strong'.*"
                                         r"slidewin\.unlink"):
        Metric(1000, 2, shared=name)
    again = Metric(1000, 2, shared=name, consistency="eventual")
    assert again.sum("pass", now_ns=W.T0) == 1
    other = name + "-strong"
    try:
        Metric(1000, 2, shared=other)
        with pytest.raises(ValueError, match=r"consistency='strong'.*consistency='eventual'"):
            Metric(1000, 2, shared=other, consistency="eventual")
    finally:
        slidewin.unlink(other)


def test_eventual_user_events_and_no_rt():
    m = Metric(1000, 2, events=("sent", "dropped"), consistency="eventual")
    m.add("dropped", 3, now_ns=W.T0)
    assert m.sum("dropped", now_ns=W.T0) == 3
    assert m.events == ("sent", "dropped")
    with pytest.raises(ValueError, match="no RT"):
        m.add_rt(5, now_ns=W.T0)
    with pytest.raises(ValueError, match="unknown event"):
        m.add("pass", now_ns=W.T0)
    with pytest.raises(ValueError):
        m.add("sent", -1, now_ns=W.T0)


def test_eventual_real_clock_counts():
    m = Metric(60_000, 2, consistency="eventual")
    for _ in range(100):
        m.add(Event.PASS)
    assert m.sum(Event.PASS) == 100


def test_threads_adding_into_one_bucket_lose_no_count():
    m = Metric(1000, 2, consistency="eventual")
    start = threading.Barrier(4)

    def work():
        start.wait()
        for _ in range(5000):
            m.add("pass", now_ns=W.T0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.sum("pass", now_ns=W.T0) == 20_000
    assert m.current("pass", now_ns=W.T0) == 20_000


@pytest.mark.procs
def test_processes_sharing_an_eventual_metric_lose_no_count(name):
    with mp.get_context("fork").Pool(4) as p:
        p.starmap(W.add_many_eventual, [(name, 5000)] * 4)
    m = Metric(1000, 2, shared=name, consistency="eventual")
    assert m.sum("pass", now_ns=W.T0) == 20_000


@pytest.mark.procs
def test_adds_racing_a_window_turn_land_in_the_old_or_the_new_bucket(name):
    """Four processes add at T0 while this one starts the next bucket (T0 + 500 ms, another
    slot: nothing is reset). An add whose time is then behind the newest bucket counts in
    it: whatever the interleaving, the two buckets hold every add exactly once."""
    m = Metric(1000, 2, shared=name, consistency="eventual")
    turn = W.T0 - W.T0 % (500 * MS) + 500 * MS
    with mp.get_context("fork").Pool(4) as p:
        res = p.starmap_async(W.add_many_eventual, [(name, 20_000)] * 4)
        time.sleep(0.05)
        m.add("pass", now_ns=turn)
        res.get(timeout=120)
    old = m.previous("pass", now_ns=turn)
    new = m.current("pass", now_ns=turn)
    assert old + new == 80_001
    assert m.sum("pass", now_ns=turn) == 80_001


@pytest.mark.procs
def test_shared_true_eventual_is_shared_with_forked_children():
    m = Metric(1000, 2, shared=True, consistency="eventual")
    m.add("pass", 4, now_ns=W.T0)
    pid = os.fork()
    if pid == 0:
        m.add("pass", 6, now_ns=W.T0)
        os._exit(0)
    os.waitpid(pid, 0)
    assert m.sum("pass", now_ns=W.T0) == 10


def test_read_region_reports_an_eventual_metric(name):
    m = Metric(1000, 2, shared=name, consistency="eventual")
    m.add("pass", 7, now_ns=W.T0)
    info = slidewin._core.read_region(name, now_ns=W.T0)
    assert info["kind"] == "metric"
    assert info["window"]["pass"] == 7


def test_an_eventual_region_full_of_garbage_counts_wrongly_but_never_crashes(name, tmp_path):
    path = tmp_path / "slidewin-garbage"
    m = Metric(1000, 2, shared=str(path), consistency="eventual")
    m.add("pass", 3, now_ns=W.T0)
    size = path.stat().st_size
    rnd = random.Random(5)
    with open(path, "r+b") as f:          # the ring's counters and starts: the file's tail
        f.seek(size - 800)
        f.write(bytes(rnd.getrandbits(8) for _ in range(800)))
    other = Metric(1000, 2, shared=str(path), consistency="eventual")
    for k in range(200):
        t = W.T0 + rnd.randrange(10**13)
        other.add(rnd.randrange(6), rnd.randrange(5), now_ns=t)
        other.add_rt(rnd.randrange(100), now_ns=t)
        assert other.sum("pass", now_ns=t) >= 0
        assert other.min_rt(now_ns=t) >= 1
        other.buckets(now_ns=t)
        other.previous("block", now_ns=t)
    other.reset()
    other.add("pass", 2, now_ns=W.T0)
    assert other.sum("pass", now_ns=W.T0) == 2
    assert m.sum("pass", now_ns=W.T0) == 2
