"""slidewin.redis against a real redis-server: the same decisions as the in-process
Limiter (times shifted to the epoch by a whole number of windows), exact across processes,
per-key independence, leases, layout checks, expiry, entries and the async twins."""

import asyncio
import multiprocessing
import os
import signal
import threading
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from slidewin import BlockedError, Limiter

from redis_servers import need_server, own_server, r, redis_server  # noqa: F401 (fixtures)
from refmodel import LimiterModel

MS = 1_000_000
S = 1_000_000_000
# 1_699_999_200_000 ms: a whole number of hours (every window and whole second below)
SHIFT = (1_700_000_000_000 // 3_600_000) * 3_600_000 * MS

CONFIGS = [
    dict(qps=5),
    dict(qps=3, interval_ms=8000, sample_count=8),
    dict(qps=10, occupy_timeout_ms=500),
    dict(qps=10, behavior="warm_up"),
    dict(qps=2, behavior="warm_up", warm_up_s=3),
    dict(qps=10, behavior="throttle"),
    dict(qps=2500, behavior="throttle", max_queueing_ms=2),
    dict(qps=10, behavior="warm_up_throttle"),
    dict(qps=0.3, behavior="throttle", max_queueing_ms=5000),
    dict(concurrency=3),
    dict(qps=0),
]


def _id(kw):
    return ",".join("%s=%s" % kv for kv in kw.items())


def script(seed, steps=160):
    """A deterministic mix of operations: (op, n, dt_ms, prioritized)."""
    import random

    rnd = random.Random(seed)
    ops = []
    for _ in range(steps):
        op = rnd.choice(["try", "try", "reserve", "reserve", "prio", "release"])
        ops.append((op, rnd.choice([1, 1, 1, 2, 3]), rnd.choice([0, 0, 1, 7, 40, 130, 499,
                                                                  900, 3000])))
    return ops


def replay(lim, ops, shift, release_ok):
    t = 0
    out = []
    for op, n, dt in ops:
        t += dt * MS
        if op == "try":
            out.append(lim.try_acquire(n, now_ns=t + shift))
        elif op == "reserve":
            out.append(lim.reserve(n, now_ns=t + shift))
        elif op == "prio":
            out.append(lim.reserve(n, now_ns=t + shift, prioritized=True))
        elif release_ok[0] >= n:
            lim.release(n)
            release_ok[0] -= n
            out.append("rel")
            continue
        else:
            out.append("skip")
            continue
        if out[-1] is not None and out[-1] is not False and "concurrency" in repr(lim):
            release_ok[0] += n
    return out


@pytest.mark.parametrize("kw", CONFIGS, ids=_id)
@pytest.mark.parametrize("seed", [1, 2])
def test_same_decisions_as_private_limiter(r, kw, seed):
    from slidewin.redis import RedisLimiter

    ops = script(seed)
    mine = Limiter(**kw)
    theirs = RedisLimiter(r, "eq", lease_ms=2**40, **kw)  # leases outlive the scenario
    held_a, held_b = [0], [0]
    a = replay(mine, ops, 0, held_a)
    b = replay(theirs, ops, SHIFT, held_b)
    assert a == b
    end = sum(dt for _, _, dt in ops) * MS
    sa, sb = mine.stats(now_ns=end), theirs.stats(now_ns=end + SHIFT)
    assert sa == sb


def test_warm_up_design_sequence(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "warm", qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    per_second = []
    for sec in range(16):
        per_second.append(sum(lim.try_acquire(now_ns=SHIFT + (sec * 1000 + k * 10) * MS)
                              for k in range(100)))
    assert per_second == [3, 3, 3, 3, 3, 4, 4, 4, 5, 5, 6, 7, 10, 10, 10, 10]


def test_refmodel_agrees_on_throttle_and_prioritized(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "thr", qps=10, behavior="throttle", max_queueing_ms=500)
    model = LimiterModel(10, behavior="throttle", max_queueing_ms=500)
    got = [lim.reserve(now_ns=SHIFT + 5 * MS) for _ in range(7)]
    assert got == [model.reserve(now_ns=5 * MS) for _ in range(7)]
    assert got == [0, 100 * MS, 200 * MS, 300 * MS, 400 * MS, 500 * MS, None]
    lim = RedisLimiter(r, "prio", qps=4)
    model = LimiterModel(4)
    for t in (100, 200, 300, 400):
        assert lim.try_acquire(now_ns=SHIFT + t * MS) == model.try_acquire(now_ns=t * MS)
    # the window is full: a prioritized request borrows from the next bucket (500 ms)
    assert lim.reserve(now_ns=SHIFT + 450 * MS, prioritized=True) is None  # oldest: nothing
    assert lim.reserve(now_ns=SHIFT + 950 * MS, prioritized=True) == model.reserve(
        now_ns=950 * MS, prioritized=True) == 50 * MS
    assert lim.stats(now_ns=SHIFT + 950 * MS).waiting == 1


def test_server_clock_when_now_ns_omitted(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "clock", qps=0.05, interval_ms=60_000, sample_count=60)  # 3 a minute
    assert [lim.try_acquire() for _ in range(5)] == [True] * 3 + [False] * 2
    s = lim.stats()
    assert (s.pass_qps, s.block_qps) == (3 / 60, 2 / 60)


def test_layout_mismatch_raises_at_first_decision(r):
    from slidewin.redis import RedisLimiter

    RedisLimiter(r, "lay", qps=5).try_acquire()
    other = RedisLimiter(r, "lay", qps=5, interval_ms=2000)  # constructing: no error
    with pytest.raises(ValueError, match="interval_ms/sample_count 1000/2"):
        other.try_acquire()
    # other settings with the same layout share the counts (a rolling deploy)
    assert RedisLimiter(r, "lay", qps=50, behavior="throttle").try_acquire()


def test_keys_expire_once_idle(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "idle", qps=5)
    lim.try_acquire()
    ttl = r.pttl(lim.key)
    assert 1000 < ttl <= 2000  # a window and a second
    thr = RedisLimiter(r, "idle2", qps=5, behavior="throttle", max_queueing_ms=700)
    thr.try_acquire()
    assert 2000 < r.pttl(thr.key) <= 2900  # and the queue, and one request's cost (200 ms)


def test_slow_throttle_key_outlives_its_next_slot(r):
    """A throttle slower than one request per window + 1 s (0.2 qps: 5 s apart) keeps
    its key until the next request's slot: expired earlier, it would admit too soon."""
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "slow", qps=0.2, behavior="throttle", max_queueing_ms=0)
    mine = Limiter(qps=0.2, behavior="throttle", max_queueing_ms=0)
    assert lim.try_acquire() and mine.try_acquire(now_ns=0)
    assert r.pttl(lim.key) > 4500
    # the server's clock: the key's expiry is real time. Past a window + 1 s (2 s), long
    # before the next slot (5 s): a loaded machine's delays stay far from either
    time.sleep(2.2)
    assert lim.try_acquire() is mine.try_acquire(now_ns=2200 * MS) is False


def test_concurrency_leases_expire(r):
    from slidewin.redis import RedisLimiter

    a = RedisLimiter(r, "lease", concurrency=1, lease_ms=200)
    b = RedisLimiter(r, "lease", concurrency=1, lease_ms=200)
    assert a.try_acquire(now_ns=SHIFT)
    assert not b.try_acquire(now_ns=SHIFT + 100 * MS)
    # a crashed without release: its lease runs out
    assert b.try_acquire(now_ns=SHIFT + 201 * MS)
    b.release()
    with pytest.raises(ValueError):
        b.release()


def test_acquire_timeout_waits_for_release_in_another_client(r):
    from slidewin.redis import RedisLimiter

    a = RedisLimiter(r, "wait", concurrency=1)
    b = RedisLimiter(r, "wait", concurrency=1)
    a.acquire()
    threading.Timer(0.1, a.release).start()
    t0 = time.monotonic()
    b.acquire(timeout=30)
    # it waited for the release, and was admitted by it: long before its timeout
    assert 0.08 < time.monotonic() - t0 < 15
    with pytest.raises(BlockedError) as info:
        a.acquire(timeout=0.05)
    assert info.value.limiter is a and info.value.retry_after is None
    assert b.stats().block_qps == 1.0  # one BLOCK for the request that finally failed


def test_entry_and_decorator_record_outcomes(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "entry", qps=100, interval_ms=60_000, sample_count=60)
    with lim.entry():
        assert lim.stats().concurrency == 1
        time.sleep(0.02)
    with pytest.raises(KeyError):
        with lim.entry():
            raise KeyError

    @lim
    def f(x):
        return x * 2

    assert f(21) == 42
    s = lim.stats()
    assert s.concurrency == 0
    assert s.success_qps * 60 == 2 and s.exception_qps * 60 == 1
    assert s.avg_rt_ms >= 10 / 2 and 0 <= s.min_rt_ms <= 5
    full = RedisLimiter(r, "entry0", qps=0, on_block=lambda e, x: ("blocked", x))
    assert full(lambda x: x)(1) == ("blocked", 1)


def test_blocked_error_retry_after_reject(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "retry", qps=0.2, interval_ms=10_000, sample_count=2)
    assert lim.try_acquire(2)
    with pytest.raises(BlockedError) as info:
        lim.acquire(timeout=0)
    assert 0 < info.value.retry_after <= 10.0


def test_keyed_independence(r):
    from slidewin.redis import RedisKeyedLimiter

    per = RedisKeyedLimiter(r, "per-user", qps=3, overrides={"vip": 5})
    t = SHIFT + 10 * MS
    for key in ("alice", "bob", 1, b"1", "1"):
        assert [per.try_acquire(key, now_ns=t) for _ in range(4)] == [True] * 3 + [False]
    assert [per.try_acquire("vip", now_ns=t) for _ in range(6)] == [True] * 5 + [False]
    assert per.local_totals() == {"pass": 20, "block": 6}
    keys = r.keys("slidewin:k:*")
    assert len(keys) == 6
    assert max(r.memory_usage(k) for k in keys) <= 133  # the issue: no more than limits' fixed window
    with pytest.raises(TypeError):
        per.try_acquire(1.5)
    thr = RedisKeyedLimiter(r, "per-thr", qps=10, behavior="throttle")
    assert [thr.reserve("a", now_ns=t) for _ in range(3)] == [0, 100 * MS, 200 * MS]
    assert thr.reserve("b", now_ns=t) == 0
    conc = RedisKeyedLimiter(r, "per-conc", concurrency=1)
    assert conc.try_acquire("a") and not conc.try_acquire("a") and conc.try_acquire("b")
    conc.release("a")
    assert conc.try_acquire("a")


def _worker(port, name, t0, per_thread, threads, q):
    import redis

    from slidewin.redis import RedisLimiter

    client = redis.Redis(port=port)
    # a minute's window (limit 300, 500 ms buckets): the key outlives slow starts
    lim = RedisLimiter(client, name, qps=5, interval_ms=60_000, sample_count=120)
    counts = []

    def run(k):
        got = 0
        for i in range(per_thread):
            got += lim.try_acquire(now_ns=t0 + ((k * 7919 + i * 104729) % 400) * MS)
        counts.append(got)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    q.put(sum(counts))


@pytest.mark.procs
def test_four_processes_never_admit_more_than_the_limit(r, redis_server):
    from slidewin.redis import RedisLimiter

    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    t0 = SHIFT + 50 * MS  # every request within one 500 ms bucket of a fresh window
    procs = [ctx.Process(target=_worker, args=(redis_server.port, "multi", t0, 60, 3, q))
             for _ in range(4)]
    for p in procs:
        p.start()
    total = sum(q.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(10)
    assert total == 300  # 720 asked: exactly the limit, never 301
    s = RedisLimiter(r, "multi", qps=5, interval_ms=60_000, sample_count=120).stats(
        now_ns=t0 + 450 * MS)
    assert (s.pass_qps * 60, s.block_qps * 60) == (300, 420)


def test_async_twins(redis_server):
    need_server()
    from slidewin.redis import AsyncRedisKeyedLimiter, AsyncRedisLimiter, RedisLimiter

    async def main():
        c = redis_server.async_client()
        await c.flushall()
        lim = AsyncRedisLimiter(c, "async", qps=10, behavior="throttle")
        got = [await lim.reserve(now_ns=SHIFT) for _ in range(7)]
        assert got == [0, 100 * MS, 200 * MS, 300 * MS, 400 * MS, 500 * MS, None]
        ref = Limiter(qps=10, behavior="throttle")
        assert got == [ref.reserve(now_ns=0) for _ in range(7)]
        conc = AsyncRedisLimiter(c, "async-c", concurrency=1)
        async with conc.entry():
            assert not await conc.try_acquire()
            assert (await conc.stats()).concurrency == 1

        @conc
        async def work():
            return 7

        assert await work() == 7
        assert (await conc.stats()).concurrency == 0
        per = AsyncRedisKeyedLimiter(c, "async-k", qps=2)
        assert [await per.try_acquire("x", now_ns=SHIFT) for _ in range(3)] == [True, True,
                                                                                  False]
        assert await per.try_acquire("y", now_ns=SHIFT)
        await lim.aclose()
        await c.aclose()

    asyncio.run(main())


class SameAsPrivate(RuleBasedStateMachine):
    """A RedisLimiter and a private Limiter given the same operations answer the same."""

    client = None

    @initialize(kw=st.sampled_from(CONFIGS[:10]))
    def setup(self, kw):
        from slidewin.redis import RedisLimiter

        self.client.flushall()
        self.a = Limiter(**kw)
        self.b = RedisLimiter(self.client, "sm", lease_ms=2**40, **kw)
        self.t = 0
        self.held = 0
        self.conc = "concurrency" in kw

    @rule(dt=st.integers(0, 1200))
    def advance(self, dt):
        self.t += dt * MS + dt % 7

    @rule(n=st.integers(1, 3))
    def try_acquire(self, n):
        got = self.a.try_acquire(n, now_ns=self.t)
        assert self.b.try_acquire(n, now_ns=self.t + SHIFT) == got
        if got and self.conc:
            self.held += n

    @rule(n=st.integers(1, 3), prioritized=st.booleans())
    def reserve(self, n, prioritized):
        got = self.a.reserve(n, now_ns=self.t, prioritized=prioritized)
        assert self.b.reserve(n, now_ns=self.t + SHIFT, prioritized=prioritized) == got
        if got is not None and self.conc:
            self.held += n

    @rule()
    def release(self):
        if self.held:
            self.a.release(1)
            self.b.release(1)
            self.held -= 1

    @invariant()
    def same_stats(self):
        if hasattr(self, "a"):
            assert self.a.stats(now_ns=self.t) == self.b.stats(now_ns=self.t + SHIFT)


def test_state_machine(r):
    SameAsPrivate.client = r
    run = SameAsPrivate.TestCase
    run.settings = settings(max_examples=25, stateful_step_count=30, deadline=None,
                            suppress_health_check=list(HealthCheck))
    run().runTest()


KEYED_CONFIGS = [
    dict(qps=5),
    dict(qps=3, interval_ms=8000, sample_count=8),
    dict(qps=10, behavior="warm_up"),
    dict(qps=2, behavior="warm_up", warm_up_s=3),
    dict(qps=10, behavior="throttle"),
    dict(qps=10, behavior="warm_up_throttle"),
]


@pytest.mark.parametrize("kw", KEYED_CONFIGS, ids=_id)
def test_keyed_same_decisions_as_private_keyed_limiter(r, kw):
    """The per-key path (compact state, only what admission needs) against KeyedLimiter."""
    import random

    from slidewin import KeyedLimiter
    from slidewin.redis import RedisKeyedLimiter

    rnd = random.Random(7)
    if "warm_up" in kw.get("behavior", ""):  # KeyedLimiter has no warm-up: a Limiter per key
        per_key = {k: Limiter(**kw) for k in ("a", "b", 3)}
        mine_try = lambda k, n, t: per_key[k].try_acquire(n, now_ns=t)  # noqa: E731
        mine_res = lambda k, n, t: per_key[k].reserve(n, now_ns=t)  # noqa: E731
    else:
        mine = KeyedLimiter(**kw)
        mine_try = lambda k, n, t: mine.try_acquire(k, n, now_ns=t)  # noqa: E731
        mine_res = lambda k, n, t: mine.reserve(k, n, now_ns=t)  # noqa: E731
    theirs = RedisKeyedLimiter(r, "keq", **kw)
    t = 0
    for _ in range(300):
        t += rnd.choice([0, 0, 1, 7, 40, 130, 499, 900, 3000]) * MS + rnd.randrange(7)
        key = rnd.choice(["a", "b", 3])
        n = rnd.choice([1, 1, 2, 3])
        if rnd.random() < 0.5:
            got = (mine_try(key, n, t), theirs.try_acquire(key, n, now_ns=t + SHIFT))
        else:
            got = (mine_res(key, n, t), theirs.reserve(key, n, now_ns=t + SHIFT))
        assert got[0] == got[1], (key, n, t)
    keys = r.keys("slidewin:k:{keq:*")
    assert keys and all(r.get(k)[0] < 0x80 for k in keys)  # the compact form


def test_default_keys_are_compact(r, redis_server):
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    per = RedisKeyedLimiter(r, "cmp", qps=1e9)
    lim = RedisLimiter(r, "cmp1", qps=100)
    for _ in range(300):
        per.try_acquire("user-1")
        lim.try_acquire()
    (key,) = r.keys("slidewin:k:{cmp:*")
    # header, newest bucket's index, two counts below 65536: at most 12 bytes, and an embedded
    # string of one allocation next to the key
    assert len(r.get(key)) <= 12
    # on redis-server, no more than limits' fixed window counter (an integer, INCRBY then
    # EXPIRE) under its key name: an embedded string of one allocation next to the key.
    # (Valkey embeds the key and the expiry in the value's object, and its MEMORY USAGE of a
    # key rewritten in place varies with what the key held before: not compared there.)
    if redis_server.kind == "redis":
        ref = "LIMITS:LIMITER/bench-fw/1000000/1/second"
        r.incrby(ref, 12345)
        r.pexpire(ref, 60_000)
        assert r.memory_usage(key) <= r.memory_usage(ref)
    assert len(r.get(lim.key)) <= 24  # and the BLOCK counts and last second's passes
    assert lim.stats().block_qps > 0


@pytest.mark.parametrize("value", [b"hello", b"\x01", b"\x01\x05", b"", b"\x00\x00",
                                   b"\x41\xcd\x03\xe8\x02", b"\xff\xfe", b"\x81\xa1y\x01",
                                   b"\x7f" * 40, b"\x01\xd3\x80" + b"\x00" * 7 + b"\x01\x01",
                                   # the map form with this layout, a field of another type
                                   # or out of range
                                   b"\x82\xa1y\xa61000/2\xa2nw\xa1x",
                                   b"\x82\xa1y\xa61000/2\xa4Labc\x05",
                                   b"\x82\xa1y\xa61000/2\xa4Labc\x91\x01",
                                   b"\x83\xa1y\xa61000/2\xa2nw\x01\xa2s0\x81\xa1a\x01",
                                   b"\x84\xa1y\xa61000/2\xa2nw\x01\xa2s0\x00\xa2p0\xa2zz",
                                   b"\x82\xa1y\xa61000/2\xa2nw\xcb~7\xe4<\x88\x00u\x9c",
                                   b"\x82\xa1y\xa61000/2\xa2st\xa1q",
                                   b"\x82\xa1y\xa61000/2\xa2nw\xff",
                                   b"\x82\xa1y\xa61000/2\x01\x02"])
@pytest.mark.parametrize("behavior", ["reject", "throttle", "warm_up"])
def test_foreign_or_corrupt_state_is_an_error_never_a_crash(r, value, behavior):
    """A value no client wrote under the key: a clear error (on_error), never a script crash
    or a silently wrong limiter; reset() starts afresh."""
    import redis

    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "bad", qps=5, behavior=behavior, on_error="raise")
    r.set(lim.key, value)
    with pytest.raises(redis.exceptions.ResponseError, match="holds no slidewin state"):
        lim.try_acquire()
    with pytest.raises(redis.exceptions.ResponseError, match="holds no slidewin state"):
        lim.stats()
    allow = RedisLimiter(r, "bad", qps=5, behavior=behavior)
    assert allow.try_acquire() and allow.errors == 1  # on_error="allow"
    lim.reset()
    assert lim.try_acquire()
    r.delete(lim.key)
    r.hset(lim.key, "f", "v")  # another type under the key
    with pytest.raises(redis.exceptions.ResponseError):
        lim.try_acquire()


def test_counts_beyond_the_compact_form(r):
    """A count no compact number holds (n = 2**53, refused but counted as BLOCK) moves the
    state to the map form: the limiter goes on, same as the in-process one."""
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "huge", qps=5, on_error="raise")
    mine = Limiter(qps=5)
    t = SHIFT + 10 * MS
    for n in (1, 2**53, 1, 2**53, 3, 1):
        assert lim.try_acquire(n, now_ns=t) == mine.try_acquire(n, now_ns=t - SHIFT)
    assert r.get(lim.key)[0] >= 0x80  # the map form
    assert lim.stats(now_ns=t) == mine.stats(now_ns=t - SHIFT)
    t += 3 * S  # the big counts leave the window: the compact form again
    assert lim.try_acquire(now_ns=t) == mine.try_acquire(now_ns=t - SHIFT)
    assert r.get(lim.key)[0] < 0x80


def test_n_out_of_range_is_the_in_process_error(r):
    """n as the in-process types take it: 1 to 2**63 - 1, else the same ValueError (never
    a number sent to the script that the doubles cannot hold)."""
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    lim, per, mine = RedisLimiter(r, "n", qps=5), RedisKeyedLimiter(r, "nk", qps=5), Limiter(5)
    for n in (0, -1, 2**63, 2**64):
        with pytest.raises(ValueError) as theirs:
            mine.try_acquire(n)
        for call in (lambda: lim.try_acquire(n), lambda: lim.reserve(n),
                     lambda: lim.acquire(n), lambda: per.try_acquire("a", n)):
            with pytest.raises(ValueError) as got:
                call()
            assert str(got.value) == str(theirs.value)
    assert r.keys("slidewin:*") == []
    assert lim.try_acquire(2**63 - 1) is False and lim.try_acquire()


@pytest.mark.parametrize("behavior", ["throttle", "warm_up_throttle"])
def test_throttle_retry_beyond_int64_is_saturated(r, behavior):
    """A request whose pacing cost overflows int64 ns (n / qps beyond ~292 years): refused
    with a saturated retry, as in process; never a reply Redis mangles (the script's double
    above 2**63 becoming -2**63), which on_error="allow" would have admitted."""
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "sat-" + behavior, qps=333, behavior=behavior)
    mine = Limiter(qps=333, behavior=behavior)
    t = SHIFT + 10 * MS
    assert lim.try_acquire(now_ns=t) and mine.try_acquire(now_ns=t - SHIFT)
    for n in (2**53, 2**62):
        assert lim.try_acquire(n, now_ns=t) is mine.try_acquire(n, now_ns=t - SHIFT) is False
        assert lim.reserve(n, now_ns=t) is mine.reserve(n, now_ns=t - SHIFT) is None
    with pytest.raises(BlockedError) as got:
        lim.acquire(2**60)
    assert got.value.retry_after > 9.2e9  # s: int64 ns, saturated
    assert lim.errors == 0


def test_stats_of_counts_beyond_int64_saturate(r):
    """BLOCK counts summing past 2**63 (refused requests of n near 2**63): stats() gives the
    in-process saturated answer, not an unreadable reply."""
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "sat-stats", qps=5, on_error="raise")
    mine = Limiter(qps=5)
    t = 10 * MS
    for n in (1, 2**62, 2**62, 2**63 - 1, 1):
        assert lim.try_acquire(n, now_ns=t + SHIFT) == mine.try_acquire(n, now_ns=t)
    assert lim.stats(now_ns=t + SHIFT) == mine.stats(now_ns=t)


# -- a clock that steps: recover within one window ----------------------------------------

STEP_BEHAVIORS = ["reject", "warm_up", "throttle", "warm_up_throttle", "concurrency"]


def _stepper(r, behavior, name, **kw):
    from slidewin.redis import RedisLimiter

    if behavior == "concurrency":
        return RedisLimiter(r, name, concurrency=3, lease_ms=5000, **kw)
    return RedisLimiter(r, name, qps=10, behavior=behavior, warm_up_s=1, **kw)


def _admits(lim, t):
    """One decision at t: admitted (a held concurrency slot is given back)."""
    got = lim.reserve(now_ns=t)
    if got is not None and lim.concurrency is not None:
        lim.release()
    return got is not None


def _saturate(lim, t):
    for _ in range(200):
        if lim.reserve(now_ns=t) is None:
            return
    raise AssertionError("never refused")


@pytest.mark.parametrize("behavior", STEP_BEHAVIORS)
def test_server_clock_stepping_back_recovers_within_a_window(r, behavior):
    """A server restarted (or failed over to a replica) whose clock is 10 s behind: the
    window must not stay frozen for those 10 s (it did: every request counted in the newest
    bucket, 10 s ahead). Within one window of the new clock (or lease_ms, for leases taken
    before the step) the limiter admits again."""
    lim = _stepper(r, behavior, "step-" + behavior)
    t = SHIFT + 5 * S
    _saturate(lim, t)
    assert not _admits(lim, t)
    back = t - 10 * S
    _admits(lim, back)  # the first decision after the step (traffic goes on)
    later = lim.lease_ms if behavior == "concurrency" else lim.interval_ms
    assert _admits(lim, back + (later + 1) * MS)
    # and it goes on as a limiter on the new clock: saturated, refused again
    _saturate(lim, back + (later + 2) * MS)
    assert not _admits(lim, back + (later + 2) * MS)


@pytest.mark.parametrize("behavior", STEP_BEHAVIORS)
def test_a_decision_an_hour_ahead_does_not_lock_the_key(r, behavior):
    """One client's now_ns an hour ahead, then traffic on the right clock: the key must not
    stay locked for the hour."""
    lim = _stepper(r, behavior, "ahead-" + behavior)
    t = SHIFT + 5 * S
    _saturate(lim, t + 3600 * S)
    _admits(lim, t)  # traffic on the right clock goes on
    later = lim.lease_ms if behavior == "concurrency" else lim.interval_ms
    assert _admits(lim, t + (later + 1) * MS)
    _saturate(lim, t + (later + 2) * MS)
    assert not _admits(lim, t + (later + 2) * MS)


def test_stats_after_a_step_back_read_the_new_clock(r):
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "step-stats", qps=10)
    t = SHIFT + 5 * S
    _saturate(lim, t)
    assert lim.stats(now_ns=t).pass_qps == 10
    assert lim.stats(now_ns=t - 10 * S).pass_qps == 0  # stale: another clock's window


def test_keyed_clock_step_back(r):
    from slidewin.redis import RedisKeyedLimiter

    per = RedisKeyedLimiter(r, "kstep", qps=2)
    t = SHIFT + 5 * S
    assert [per.try_acquire("u", now_ns=t) for _ in range(3)] == [True, True, False]
    back = t - 10 * S
    per.try_acquire("u", now_ns=back)  # the first decision after the step (traffic goes on)
    assert per.try_acquire("u", now_ns=back + 1001 * MS)


# -- key size -----------------------------------------------------------------------------


def test_key_size_is_capped(r):
    from slidewin.redis import MAX_KEY_BYTES, RedisKeyedLimiter

    per = RedisKeyedLimiter(r, "kcap", qps=2)
    assert MAX_KEY_BYTES == 1024
    assert per.try_acquire("k" * 1024) and per.try_acquire(b"k" * 1024)
    assert per.try_acquire(10**1023) and per.try_acquire("é" * 512)
    for key in ("k" * 1025, b"k" * 1025, "é" * 513, 10**1024, 10**5000):
        with pytest.raises(ValueError, match=r"key .*1024 bytes"):
            per.try_acquire(key)
        with pytest.raises(ValueError, match=r"key .*1024 bytes"):
            per.entry(key)
    with pytest.raises(ValueError, match=r"overrides.*1024 bytes"):
        per.overrides = {"x" * 2000: 5}
    assert r.keys("slidewin:k:{kcap:s" + "k" * 1025 + "*") == []


# -- two clocks apart: the limit holds ---------------------------------------------------

ALTERNATE = ["reject", "warm_up", "throttle", "warm_up_throttle", "keyed"]


@pytest.mark.parametrize("behavior", ALTERNATE)
def test_two_clocks_seconds_apart_keep_the_limit(r, behavior):
    """Decisions alternating between two clocks 3 s apart (two app hosts' now_ns, or the
    server's clock and one host's): the state is always more than a window ahead of one of
    them. That must not switch the limit off (it did: every decision started the window
    afresh, 200 of 200 admitted); at most the limit (+1) per window of the clock ahead."""
    from slidewin.redis import RedisKeyedLimiter

    if behavior == "keyed":
        per = RedisKeyedLimiter(r, "alt-keyed", qps=10)
        decide = lambda t: per.reserve("u", now_ns=t) is not None  # noqa: E731
    else:
        lim = _stepper(r, behavior, "alt-" + behavior)
        decide = lambda t: lim.reserve(now_ns=t) is not None  # noqa: E731
    t0 = SHIFT + 5 * S
    admitted = 0
    for k in range(100):  # 1 s of each clock: 10 ms apart
        t = t0 + k * 10 * MS
        admitted += decide(t + 3 * S)
        admitted += decide(t)
    # two windows touched (each clock's second); a throttle may also queue max_queueing_ms
    bound = 2 * (10 + 1) + (5 if "throttle" in behavior else 0)
    assert admitted <= bound


def test_server_clock_and_a_client_clock_ahead_keep_the_limit(r):
    """The server's clock and now_ns = time.time_ns() + 3 s: 3 s apart."""
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "alt-server", qps=10)
    start = time.monotonic()
    admitted = 0
    for _ in range(50):
        admitted += lim.try_acquire()
        admitted += lim.try_acquire(now_ns=time.time_ns() + 3 * S)
    windows = int(time.monotonic() - start) + 2
    assert admitted <= windows * (10 + 1)


def test_a_step_back_of_less_than_a_window_stays_clamped(r):
    """A decision behind the state by less than a window counts in the newest bucket (the
    clamping of the C core): no fresh window."""
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "alt-small", qps=10)
    t = SHIFT + 5 * S
    _saturate(lim, t)
    assert not lim.try_acquire(now_ns=t - 900 * MS)
    assert not lim.try_acquire(now_ns=t)


# -- forked processes: lease ids are unique ----------------------------------------------


def _fork_run(fn):
    """fn() in a forked child; its exit status (0: fn returned True)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if fn() else 3
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.procs
def test_forked_children_take_lease_ids_of_their_own(r):
    """gunicorn --preload: workers forked from one parent, each with the parent's limiter.
    Child A takes a slot and dies; child B's admission must not name A's lease (it did: the
    same prefix and counter, B's renewals kept A's dead slot alive). After A's lease_ms only
    B's slot is in flight. A child also holds none of its parent's admissions."""
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "fork-leases", concurrency=3, lease_ms=1000)
    assert lim.try_acquire()  # the parent's own slot
    lim.release()
    lim.try_acquire()  # held by the parent: a child must not release it
    ids = []
    read, write = os.pipe()

    def take():
        ok = lim.try_acquire()
        os.write(write, (lim._held[next(iter(lim._held))][-1][0] + "\n").encode())
        return ok

    def take_and_hold():
        if not take():
            os._exit(4)
        time.sleep(2.5)  # renewed meanwhile; A's lease is long gone
        if lim.stats().concurrency != 2:  # the parent's and B's
            os._exit(5)
        try:
            lim.release(2)  # the parent's is not this child's
            os._exit(6)
        except ValueError:
            pass
        lim.release()
        return True

    lim.release()  # the parent's slot free again before the children run
    assert _fork_run(take) == 0  # A: takes a slot and exits without releasing
    lim.try_acquire()
    assert _fork_run(take_and_hold) == 0  # 5: A's dead slot kept; 6: released the parent's
    os.close(write)
    with os.fdopen(read) as f:
        ids = f.read().split()
    assert len(ids) == 2 and ids[0] != ids[1]
    lim.release()


@pytest.mark.procs
def test_a_child_forked_by_c_holds_none_of_its_parents_admissions(r):
    """A fork that runs no at-fork hooks (uWSGI's without py-call-osafterfork, ctypes):
    the child must not release the parent's admission in Redis either."""
    import ctypes

    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "cfork-held", concurrency=1, lease_ms=600)
    assert lim.try_acquire()
    pid = ctypes.PyDLL(None).fork()  # the GIL held through it, as os.fork does
    if pid == 0:
        code = 1
        try:
            lim.release()
            code = 6  # released the parent's
        except ValueError:
            code = 0
        finally:
            os._exit(code)
    assert _wait_killing(pid) == 0
    assert lim.stats().concurrency == 1
    lim.release()
    # the child's own admissions are renewed (the parent's runner is not the child's)
    pid = ctypes.PyDLL(None).fork()  # the GIL held through it, as os.fork does
    if pid == 0:
        code = 1
        try:
            code = 0 if lim.try_acquire() else 4
            time.sleep(2.5 * lim.lease_ms / 1000)
            if code == 0 and lim.try_acquire():
                code = 5  # its lease expired: admitted twice
        finally:
            os._exit(code)
    assert _wait_killing(pid) == 0


def _wait_killing(pid, seconds=30.0):
    """A child's exit code; killed past `seconds` (None): a lock another thread of the
    parent held at the fork hangs a child forked without Python's help."""
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.01)


# -- a throttled entry's lease ------------------------------------------------------------


def test_a_throttled_entry_holds_its_lease_while_it_waits(r):
    """An entry the throttle queues sleeps its wait holding a lease taken by the decision; it
    must be renewed from the decision on (it was renewed only after the wait: a wait above
    two thirds of lease_ms let it expire, and in-flight undercounted)."""
    from slidewin.redis import RedisLimiter

    lim = RedisLimiter(r, "entry-wait", qps=1, behavior="throttle", max_queueing_ms=2000,
                       lease_ms=600)
    a = lim.entry()
    a.__enter__()  # no wait
    seen = []
    b_in = threading.Event()
    done = threading.Event()

    def b_body():
        with lim.entry():  # waits about 1 s (the throttle's pace)
            b_in.set()
            done.wait(10)

    th = threading.Thread(target=b_body)
    th.start()
    try:
        for _ in range(20):  # during the wait and after (0.1 s apart)
            time.sleep(0.1)
            seen.append(lim.stats().concurrency)
        assert b_in.wait(10)
        seen.append(lim.stats().concurrency)
    finally:
        done.set()
        th.join(10)
        a.__exit__(None, None, None)
    assert min(seen) == 2, seen  # A's and B's, during B's wait and after it
    assert lim.stats().concurrency == 0


def test_an_async_throttled_entry_holds_its_lease_while_it_waits(redis_server):
    from slidewin.redis import AsyncRedisLimiter

    async def main():
        client = redis_server.async_client()
        lim = AsyncRedisLimiter(client, "aentry-wait", qps=1, behavior="throttle",
                                max_queueing_ms=2000, lease_ms=600)
        await lim.reset()
        a = lim.entry()
        await a.__aenter__()
        b_in = asyncio.Event()
        done = asyncio.Event()

        async def b_body():
            async with lim.entry():
                b_in.set()
                await done.wait()

        task = asyncio.ensure_future(b_body())
        seen = []
        try:
            for _ in range(20):
                await asyncio.sleep(0.1)
                seen.append((await lim.stats()).concurrency)
            await asyncio.wait_for(b_in.wait(), 10)
        finally:
            done.set()
            await task
            await a.__aexit__(None, None, None)
        assert min(seen) == 2, seen
        await client.aclose()

    asyncio.run(main())


def test_a_throttled_entry_cancelled_in_its_wait_gives_its_lease_back(redis_server):
    """Cancelled while it sleeps the throttle's wait (renewed by then): its slot is given back
    at once, not renewed for ever, nor left to expire."""
    from slidewin.redis import AsyncRedisLimiter

    async def main():
        client = redis_server.async_client()
        lim = AsyncRedisLimiter(client, "aentry-cancel", qps=1, behavior="throttle",
                                max_queueing_ms=5000, lease_ms=60_000)
        await lim.reset()
        a = lim.entry()
        await a.__aenter__()

        async def b_body():
            async with lim.entry():  # waits about 1 s
                raise AssertionError("entered")

        task = asyncio.ensure_future(b_body())
        await asyncio.sleep(0.3)
        assert (await lim.stats()).concurrency == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await lim.stats()).concurrency == 1
        await a.__aexit__(None, None, None)
        assert (await lim.stats()).concurrency == 0
        await client.aclose()

    asyncio.run(main())


def test_reset_deletes_the_state_and_returns_none(redis_server):
    from slidewin.redis import (AsyncRedisKeyedLimiter, AsyncRedisLimiter, RedisKeyedLimiter,
                                RedisLimiter)

    r = redis_server.client()
    lim = RedisLimiter(r, "reset-none", qps=1)
    per = RedisKeyedLimiter(r, "reset-none-k", qps=1)
    assert lim.try_acquire() and not lim.try_acquire()
    assert per.try_acquire("a") and not per.try_acquire("a")
    assert lim.reset() is None and per.reset("a") is None
    assert lim.try_acquire() and per.try_acquire("a")

    async def main():
        client = redis_server.async_client()
        alim = AsyncRedisLimiter(client, "areset-none", qps=1)
        aper = AsyncRedisKeyedLimiter(client, "areset-none-k", qps=1)
        assert await alim.try_acquire() and not await alim.try_acquire()
        assert await aper.try_acquire("a") and not await aper.try_acquire("a")
        assert await alim.reset() is None and await aper.reset("a") is None
        assert await alim.try_acquire() and await aper.try_acquire("a")
        await client.aclose()

    asyncio.run(main())


def test_a_c_forked_childs_threads_make_its_lease_renewer_anew_once(monkeypatch):
    """Two threads of a child forked by C add their first leases together: the renewer is
    made anew once, and both leases are renewed (a second re-init lost the first's)."""
    import types

    from slidewin.redis import _transport

    def slow_getpid():  # widens the window between the pid check and the re-init
        time.sleep(0.001)
        return os.getpid()

    monkeypatch.setattr(_transport, "os", types.SimpleNamespace(getpid=slow_getpid))
    r = _transport._Renewer(False)
    r.pid = -1  # the parent's, as a child forked by C sees it
    cfg = types.SimpleNamespace(lease_ms=10**9)  # never due in this test
    toks = []
    threads = [threading.Thread(target=lambda: toks.append(r.add(None, "k", cfg, "id")[1]))
               for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.0015)
    for t in threads:
        t.join()
    try:
        assert sorted(r.leases) == sorted(toks) and len(toks) == 2
    finally:
        with r.lock:
            r.leases.clear()  # its runner ends
