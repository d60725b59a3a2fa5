"""Thread stress: exact counts and never more than the threshold (docs/design.md §7).

Every thread is joined with a timeout and the test asserts it finished, so a deadlock
fails the test instead of hanging the suite.
"""

import threading
import time

from slidewin import Event, Limiter, Metric

MS = 1_000_000
JOIN_TIMEOUT = 60


def run_threads(target, nthreads, args=()):
    barrier = threading.Barrier(nthreads)
    errors = []

    def wrapper(i):
        try:
            barrier.wait(JOIN_TIMEOUT)
            target(i, *args)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrapper, args=(i,), daemon=True) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock?)"
    if errors:
        raise errors[0]


def test_metric_add_exact_total():
    m = Metric(1000, 2)
    now = 5 * 10**9
    per_thread = 200_000

    def work(i):
        add = m.add
        for _ in range(per_thread):
            add(Event.PASS, 1, now_ns=now)

    run_threads(work, 4)
    assert m.sum(Event.PASS, now_ns=now) == 4 * per_thread


def test_metric_add_exact_total_mixed_events_and_times():
    m = Metric(10_000, 10)
    base = 3 * 10**9
    per_thread = 50_000

    def work(i):
        for k in range(per_thread):
            # times spread over the window and sometimes behind the newest bucket
            m.add(i % 3, 2, now_ns=base + ((k * 7919) % 9000) * MS)

    run_threads(work, 6)
    total = sum(m.sum(e, now_ns=base + 9000 * MS) for e in range(3))
    assert total == 6 * per_thread * 2
    assert m.sum(0, now_ns=base + 9000 * MS) == 2 * per_thread * 2


def test_metric_add_rt_exact_under_threads():
    m = Metric(1000, 2)
    now = 10**9

    def work(i):
        for k in range(20_000):
            m.add_rt(1 + (k % 50) + i, now_ns=now)

    run_threads(work, 4)
    assert m.sum(Event.RT, now_ns=now) == sum(1 + (k % 50) + i for i in range(4) for k in range(20_000))
    assert m.min_rt(now_ns=now) == 1


def test_try_acquire_fixed_now_admits_exactly_threshold():
    lim = Limiter(qps=1000)
    now = 7 * 10**9
    admitted = [0] * 4

    def work(i):
        n = 0
        for _ in range(5000):
            n += lim.try_acquire(now_ns=now)
        admitted[i] = n

    run_threads(work, 4)
    assert sum(admitted) == 1000
    assert lim.metric.sum(Event.PASS, now_ns=now) == 1000
    assert lim.metric.sum(Event.BLOCK, now_ns=now) == 20_000 - 1000


def test_reserve_throttle_fixed_now_admits_exactly_queue():
    lim = Limiter(qps=1000, behavior="throttle", max_queueing_ms=500)
    now = 9 * 10**9
    waits = [[] for _ in range(4)]

    def work(i):
        for _ in range(1000):
            w = lim.reserve(now_ns=now)
            if w is not None:
                waits[i].append(w)

    run_threads(work, 4)
    all_waits = sorted(w for ws in waits for w in ws)
    # waits 0, 1 ms, ..., 500 ms: each slot handed out exactly once
    assert all_waits == [k * MS for k in range(501)]
    assert lim.metric.sum(Event.PASS, now_ns=now) == 501


def test_prioritized_occupy_under_threads_never_over_borrows():
    lim = Limiter(qps=100)  # 2 x 500 ms
    lim.try_acquire(100, now_ns=100 * MS)  # bucket 0 full
    now = 700 * MS  # bucket 0 slides out in 300 ms
    grants = [0] * 4

    def work(i):
        for _ in range(500):
            w = lim.reserve(now_ns=now, prioritized=True)
            if w is not None:
                assert w == 300 * MS
                grants[i] += 1

    run_threads(work, 4)
    assert sum(grants) == 100
    assert lim.stats(now_ns=now).waiting == 100
    assert lim.metric.sum(Event.OCCUPIED_PASS, now_ns=now) == 100
    assert lim.metric.current(Event.PASS, now_ns=1000 * MS) == 100


def test_real_clock_never_exceeds_threshold_in_any_window():
    qps = 200
    lim = Limiter(qps=qps, interval_ms=1000, sample_count=10)  # 10 x 100 ms buckets
    stop = threading.Event()
    seen = {}  # bucket start -> highest PASS seen

    def work(i):
        while not stop.is_set():
            lim.try_acquire()
            if i == 0:
                lim.try_acquire(3)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for b in lim.metric.buckets():
                seen[b.start_ms] = max(seen.get(b.start_ms, 0), b.counts[Event.PASS])
            time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join(JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads)
    for b in lim.metric.buckets():
        seen[b.start_ms] = max(seen.get(b.start_ms, 0), b.counts[Event.PASS])
    starts = sorted(seen)
    assert len(starts) >= 10
    assert sum(seen.values()) > qps  # the run admitted more than one window's worth
    # every window (10 consecutive buckets) admitted at most the threshold
    for s in starts:
        window = sum(seen.get(s - k * 100, 0) for k in range(10))
        assert window <= qps, (s, window)


def test_concurrency_never_exceeds_limit():
    limit_ = 3
    lim = Limiter(concurrency=limit_)
    lock = threading.Lock()
    state = {"in": 0, "max": 0, "admitted": 0, "seen": 0}

    def work(i):
        for _ in range(3000):
            if lim.try_acquire():
                with lock:
                    state["in"] += 1
                    state["admitted"] += 1
                    state["max"] = max(state["max"], state["in"])
                    state["seen"] = max(state["seen"], lim.stats().concurrency)
                with lock:
                    state["in"] -= 1
                lim.release()

    run_threads(work, 8)
    assert state["admitted"] > 0
    assert state["max"] <= limit_
    assert state["seen"] <= limit_
    assert lim.stats().concurrency == 0


def test_entry_counts_exactly_under_threads():
    lim = Limiter(qps=10**6, interval_ms=60_000, sample_count=60)
    per_thread = 2000

    def work(i):
        for k in range(per_thread):
            if k % 10 == 0:
                try:
                    with lim.entry():
                        raise ValueError
                except ValueError:
                    pass
            else:
                with lim.entry():
                    pass

    run_threads(work, 4)
    total = 4 * per_thread
    assert lim.metric.sum(Event.PASS) == total
    assert lim.metric.sum(Event.EXCEPTION) == total // 10
    assert lim.metric.sum(Event.SUCCESS) == total - total // 10
    assert lim.stats().concurrency == 0


def test_acquire_timeout_threads_share_slots():
    lim = Limiter(concurrency=2)
    lock = threading.Lock()
    state = {"in": 0, "max": 0, "done": 0}

    def work(i):
        for _ in range(10):
            lim.acquire(timeout=30)
            try:
                with lock:
                    state["in"] += 1
                    state["max"] = max(state["max"], state["in"])
                time.sleep(0.002)
                with lock:
                    state["in"] -= 1
                    state["done"] += 1
            finally:
                lim.release()

    run_threads(work, 6)
    assert state["done"] == 60
    assert state["max"] <= 2
    assert lim.stats().concurrency == 0


def test_acquire_releases_the_gil_while_asleep():
    lim = Limiter(qps=1, behavior="throttle", max_queueing_ms=2000)  # 1 s apart
    lim.acquire()
    asleep = []  # the worker's times around its acquire()
    done = []

    def worker():
        asleep.append(time.monotonic())
        lim.acquire()  # sleeps ~1 s
        asleep.append(time.monotonic())
        done.append(True)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    ran = []  # this thread's times while the worker sleeps (a few are enough)
    while not done and t.is_alive():
        now = time.monotonic()
        if asleep and now > asleep[0] + 0.1 and len(ran) < 1000:
            ran.append(now)
    t.join(JOIN_TIMEOUT)
    assert not t.is_alive()
    assert done == [True]
    begin, end = asleep
    assert end - begin >= 0.5  # the worker did wait
    # with the GIL held during its sleep this thread could not run at all from just after
    # the sleep began until it ended: it ran in the middle of it
    assert any(begin + 0.1 < x < end - 0.1 for x in ran), (begin, end, ran[:3])
