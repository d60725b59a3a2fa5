"""KeyedLimiter: one limit per key in a bounded table (README, "Per key: KeyedLimiter")."""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc

import pytest

import slidewin
from slidewin import BlockedError, KeyedLimiter, Limiter

T = 10**12
MS = 10**6


def test_three_keys_str_bytes_int():
    kl = KeyedLimiter(qps=1)
    assert kl.try_acquire("1", now_ns=T)
    assert kl.try_acquire(b"1", now_ns=T)
    assert kl.try_acquire(1, now_ns=T)
    assert len(kl) == 3
    assert not kl.try_acquire("1", now_ns=T)
    assert not kl.try_acquire(b"1", now_ns=T)
    assert not kl.try_acquire(1, now_ns=T)


def test_keys_of_every_supported_form():
    kl = KeyedLimiter(qps=1)
    keys = ["", b"", 0, -1, 2**63, -(2**63) - 1, 2**200, "é\U0001f600", "\udc80", "x" * 100_000,
            b"y" * 70_000, 2**63 - 1, -(2**63)]
    for k in keys:
        assert kl.try_acquire(k, now_ns=T), k
    for k in keys:
        assert not kl.try_acquire(k, now_ns=T), k
    assert len(kl) == len(keys)

    class S(str):
        pass

    assert not kl.try_acquire(S(""), now_ns=T)  # a str subclass is its string


@pytest.mark.parametrize("bad", [1.0, None, (1,), bytearray(b"1"), memoryview(b"1"), True, []])
def test_unsupported_keys_are_type_errors(bad):
    kl = KeyedLimiter(qps=1)
    with pytest.raises(TypeError, match="key must be a str, bytes or int"):
        kl.try_acquire(bad)
    assert len(kl) == 0


def test_each_key_is_a_private_limiter():
    kl = KeyedLimiter(qps=3)
    twins = {"a": Limiter(qps=3), "b": Limiter(qps=3)}
    for i in range(40):
        t = T + i * 130 * MS
        for key, n in (("a", 1), ("b", 1 + i % 2), ("a", 2)):
            assert kl.try_acquire(key, n, now_ns=t) == twins[key].try_acquire(n, now_ns=t)


def test_throttle_waits_and_reserve():
    kl = KeyedLimiter(qps=10, behavior="throttle", max_queueing_ms=300)
    assert [kl.reserve("a", now_ns=T) for _ in range(5)] == [0, 100 * MS, 200 * MS, 300 * MS,
                                                             None]
    assert kl.reserve("b", now_ns=T) == 0
    assert not kl.try_acquire("a", now_ns=T)
    assert repr(kl) == "KeyedLimiter(qps=10.0, behavior='throttle', max_queueing_ms=300)"


def test_blocked_error_names_the_key_and_retry_after():
    kl = KeyedLimiter(qps=2)
    kl.acquire("u")
    kl.acquire("u")
    with pytest.raises(BlockedError) as info:
        kl.acquire("u")
    assert "'u'" in str(info.value)
    assert info.value.limiter is kl
    assert info.value.retry_after is not None and 0 <= info.value.retry_after <= 1.0
    with pytest.raises(BlockedError) as info:
        kl.acquire("u", 3)            # above the window's limit: can never pass
    assert info.value.retry_after is None
    with pytest.raises(BlockedError):
        kl.acquire("u", timeout=0)
    kl.acquire("v")                   # another key is not affected


def test_overrides_hot_items():
    kl = KeyedLimiter(qps=1, overrides={"vip": 3, 7: 0})
    assert kl.overrides == {"vip": 3, 7: 0}
    assert [kl.try_acquire("vip", now_ns=T) for _ in range(4)] == [True, True, True, False]
    assert not kl.try_acquire(7, now_ns=T)   # 0: a kill switch for this key
    d = kl.overrides
    d["x"] = 5                               # a copy
    assert "x" not in kl.overrides
    kl.overrides = {"vip": 4}
    assert kl.try_acquire("vip", now_ns=T)   # the new threshold over the kept count
    assert kl.try_acquire(7, now_ns=T)
    with pytest.raises(ValueError, match=r"overrides\['vip'\]"):
        kl.overrides = {"vip": -1}
    assert kl.overrides == {"vip": 4}        # unchanged by a refused assignment
    kl.overrides = None
    assert kl.overrides == {}


def test_concurrency_per_key_and_release():
    kl = KeyedLimiter(concurrency=2)
    assert kl.try_acquire("a") and kl.try_acquire("a") and not kl.try_acquire("a")
    assert kl.try_acquire("b")
    assert kl.in_flight("a") == 2 and kl.stats().concurrency == 3
    kl.release("a")
    assert kl.try_acquire("a")
    with pytest.raises(ValueError, match="in flight"):
        kl.release("b", 2)
    with pytest.raises(ValueError):
        kl.release("zzz")


def test_entry_counts_success_exception_and_rt():
    kl = KeyedLimiter(qps=100)
    with kl.entry("a") as e:
        assert e.key == "a" and e.n == 1 and e.limiter is kl
        assert kl.in_flight("a") == 1
    with pytest.raises(KeyError):
        with kl.entry("a"):
            raise KeyError
    s = kl.stats()
    assert s.success_qps == 1.0 and s.exception_qps == 1.0 and s.concurrency == 0
    e = kl.entry("b")
    with e:
        pass
    with pytest.raises(RuntimeError, match="only once"):
        with e:
            pass


def test_eviction_bounds_memory_and_counts():
    kl = KeyedLimiter(qps=5, max_keys=100)
    for i in range(1000):
        assert kl.try_acquire(i, now_ns=T + i * MS)
    assert len(kl) == 100
    assert kl.stats(now_ns=T + 1000 * MS).evicted == 900
    assert Limiter(qps=1).stats().evicted == 0


def test_in_flight_keys_are_never_evicted_and_a_full_table_refuses():
    kl = KeyedLimiter(concurrency=1, max_keys=2)
    with kl.entry("a"), kl.entry("b"):
        assert not kl.try_acquire("c")        # every key in flight: refused, counted
        assert kl.stats().block_qps == 1.0
        with pytest.raises(BlockedError):
            kl.acquire("c")
    assert kl.try_acquire("c")
    assert kl.stats().evicted == 1


def test_threads_exact_per_key():
    kl = KeyedLimiter(qps=500)
    keys = ["a", b"a", 1, 2**70]
    counts = [dict.fromkeys(range(4), 0) for _ in range(4)]

    def work(c):
        for i in range(2000):
            j = i % 4
            c[j] += kl.try_acquire(keys[j], now_ns=T)

    threads = [threading.Thread(target=work, args=(c,)) for c in counts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for j in range(4):
        assert sum(c[j] for c in counts) == 500
    assert kl.stats(now_ns=T).pass_qps == 2000.0


def test_acquire_waits_for_a_release_in_another_thread():
    kl = KeyedLimiter(concurrency=1)
    kl.acquire("k")
    threading.Timer(0.05, kl.release, args=("k",)).start()
    kl.acquire("k", timeout=10)
    assert kl.in_flight("k") == 1


def test_decorator_sync_and_async_with_on_block():
    kl = KeyedLimiter(qps=1)

    @kl(key=lambda user, *a, **kw: user)
    def handle(user, x=0):
        return user, x

    assert handle("a", x=1) == ("a", 1)
    assert handle("b") == ("b", 0)
    with pytest.raises(BlockedError):
        handle("a")
    assert handle.limiter is kl

    @kl(key=lambda user: user, on_block=lambda exc, user: "slow down " + user)
    async def ahandle(user):
        return "hi " + user

    async def main():
        return [await ahandle("c"), await ahandle("c")]

    assert asyncio.run(main()) == ["hi c", "slow down c"]

    with pytest.raises(TypeError, match="generator"):
        @kl(key=lambda: 1)
        def gen():
            yield 1


def test_acquire_async_and_async_entry():
    kl = KeyedLimiter(qps=10, behavior="throttle", max_queueing_ms=1000)

    async def main():
        t0 = time.monotonic()
        await kl.acquire_async("k")
        await kl.acquire_async("k")         # paced: 100 ms later
        async with kl.entry("k"):
            assert kl.in_flight("k") == 1
        return time.monotonic() - t0

    assert asyncio.run(main()) >= 0.15
    assert kl.in_flight("k") == 0
    blocked = KeyedLimiter(qps=0)

    async def refuse():
        await blocked.acquire_async("x", timeout=0)

    with pytest.raises(BlockedError):
        asyncio.run(refuse())


def test_repr_and_attributes():
    kl = KeyedLimiter(concurrency=3, max_keys=10, overrides={"a": 1})
    assert repr(kl) == "KeyedLimiter(concurrency=3, max_keys=10, overrides={'a': 1})"
    assert (kl.concurrency, kl.qps, kl.max_keys, kl.shared) == (3, None, 10, None)
    assert repr(KeyedLimiter(qps=10)) == "KeyedLimiter(qps=10.0)"
    assert KeyedLimiter(qps=10).max_keys == 65536
    assert "KeyedLimiter" in slidewin.__all__


def test_bytes_per_key_at_max_keys():
    """The table's own memory (traced) at max_keys for the default reject limiter."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kl = KeyedLimiter(qps=10, max_keys=65536)
    for i in range(65536):
        kl.try_acquire(i, now_ns=T)
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(kl) == 65536
    assert size / 65536 <= 64, size / 65536


@pytest.mark.parametrize("kind", ["Limiter", "KeyedLimiter"])
def test_async_entry_cancelled_while_queued_gives_its_slot_back(kind):
    """Both kinds share this path: an entry a throttle queues holds its slot while it sleeps;
    cancelled then, it holds nothing, counts nothing more, and may be entered again."""
    lim = getattr(slidewin, kind)(qps=2, behavior="throttle", max_queueing_ms=5000)
    args = ("k",) if kind == "KeyedLimiter" else ()

    def in_flight():
        return lim.in_flight("k") if args else lim.in_flight

    async def main():
        async with lim.entry(*args):  # passes at once; the next waits its turn (~0.5 s)
            pass
        queued = lim.entry(*args)
        task = asyncio.ensure_future(queued.__aenter__())
        await asyncio.sleep(0.05)
        assert in_flight() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert in_flight() == 0
        assert lim.totals()["success"] == 1
        async with queued:  # idle again
            assert in_flight() == 1
        assert in_flight() == 0
        assert lim.totals()["success"] == 2

    asyncio.run(main())
