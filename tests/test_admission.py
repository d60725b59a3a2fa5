"""`async with lim:` and `with lim:` wait for admission on every limiter type and group, as
asyncio.Semaphore and aiolimiter do; a thread-API call that would sleep inside a running
event loop raises RuntimeError naming the async form instead of blocking the loop."""
import asyncio
import threading
import time

import pytest

import slidewin
from slidewin import (AdaptiveLimiter, BlockedError, Breaker, BreakerOpenError, KeyedLimiter,
                      Limiter, all_of)

S = 10**9


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def _most_at_once(lim, tasks=6, probe=None):
    """Run `tasks` tasks through `async with lim:`; the most in the body at once."""
    inside = most = 0

    async def one(i):
        nonlocal inside, most
        async with lim:
            inside += 1
            most = max(most, inside)
            if probe is not None:
                probe()
            await asyncio.sleep(0.005)
            inside -= 1
        return i

    assert await asyncio.gather(*(one(i) for i in range(tasks))) == list(range(tasks))
    return most


def test_async_with_a_concurrency_limiter_waits_for_a_release_like_a_semaphore():
    lim = Limiter(concurrency=2)
    seen = []
    most = _run(_most_at_once(lim, probe=lambda: seen.append(lim.stats().concurrency)))
    assert most == 2 and max(seen) == 2
    t = lim.totals()
    assert (t["pass"], t["success"], t["block"]) == (6, 6, 0)   # waits counted nothing
    assert lim.stats().concurrency == 0                         # every exit released


def test_async_with_a_rate_limiter_waits_for_the_window():
    lim = Limiter(rate="20/second", sample_count=10)
    for _ in range(20):
        assert lim.try_acquire()

    async def main():
        t0 = time.monotonic()
        async with lim:
            pass
        return time.monotonic() - t0

    assert _run(main()) > 0.01                      # refused at first: it waited, not raised
    assert lim.totals()["block"] == 0 and lim.totals()["success"] == 1


def test_async_with_records_an_exception_and_releases():
    lim = Limiter(concurrency=1)

    async def main():
        with pytest.raises(ZeroDivisionError):
            async with lim:
                1 / 0
        async with lim:
            async with Limiter(concurrency=1):      # other limiters nest freely
                assert lim.stats().concurrency == 1

    _run(main())
    t = lim.totals()
    assert (t["exception"], t["success"], lim.stats().concurrency) == (1, 1, 0)


def test_async_with_a_limiter_that_can_never_admit_raises_at_once():
    async def main():
        with pytest.raises(BlockedError):
            async with Limiter(qps=0):
                pass

    _run(main())


def test_async_with_a_group_waits_for_every_member():
    conc, rate = Limiter(concurrency=1), Limiter(qps=10**6)
    group = all_of(conc, rate)
    assert _run(_most_at_once(group, tasks=4)) == 1
    assert conc.totals()["success"] == rate.totals()["success"] == 4
    assert conc.stats().concurrency == rate.stats().concurrency == 0


def test_async_with_an_adaptive_limiter():
    lim = AdaptiveLimiter(min_limit=1, max_limit=1, initial_limit=1)
    assert _run(_most_at_once(lim, tasks=3)) == 1
    assert lim.totals()["success"] == 3 and lim.stats().concurrency == 0


def test_async_with_a_breaker_admits_while_closed_and_refuses_open():
    br = Breaker(error_count=1, min_requests=1, recovery_s=60)

    async def main():
        async with br:
            pass
        for _ in range(2):
            with pytest.raises(RuntimeError):
                async with br:
                    raise RuntimeError("boom")
        assert br.state == "open"
        with pytest.raises(BreakerOpenError):
            async with br:
                pass

    _run(main())


def test_with_waits_for_admission_in_threads():
    lim = Limiter(concurrency=1)
    group = all_of(Limiter(concurrency=1), Limiter(qps=10**6))
    for target in (lim, group):
        inside, most, lock = [0], [0], threading.Lock()

        def worker():
            for _ in range(5):
                with target:
                    with lock:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    time.sleep(0.001)
                    with lock:
                        inside[0] -= 1

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert most[0] == 1
    assert lim.totals()["success"] == 20 and lim.stats().concurrency == 0
    br = Breaker(error_ratio=0.5)
    with br:
        pass
    assert br.totals()["total"] == 1


def test_a_keyed_limiter_says_with_needs_a_key():
    per_key = KeyedLimiter(qps=5)

    async def main():
        async with per_key:
            pass

    with pytest.raises(TypeError, match=r"entry\(key\)"):
        _run(main())
    with pytest.raises(TypeError, match=r"entry\(key\)"):
        with per_key:
            pass


def test_exit_without_enter_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="did not enter"):
        Limiter(qps=5).__exit__(None, None, None)


# -- the thread API inside a running event loop ---------------------------------------------


def _waits_in_loop(call):
    """`call()` from a coroutine: the RuntimeError it raises."""
    async def main():
        with pytest.raises(RuntimeError) as e:
            call()
        return str(e.value)

    return _run(main())


def _full(lim, *at):
    assert lim.try_acquire(*at)
    return lim


@pytest.mark.parametrize("name,call", [
    ("throttle acquire()", lambda: (lambda lim: (lim.acquire(), lim.acquire()))(
        Limiter(qps=1, behavior="throttle", max_queueing_ms=5000))),
    ("acquire(timeout=)", lambda: _full(Limiter(qps=1)).acquire(timeout=5)),
    ("entry(timeout=) of a full concurrency limit",
     lambda: _full(Limiter(concurrency=1)).entry(timeout=5).__enter__()),
    ("keyed acquire(timeout=)", lambda: _full(KeyedLimiter(qps=1), "k").acquire("k", timeout=5)),
    ("keyed throttle", lambda: (lambda lim: (lim.acquire("k"), lim.acquire("k")))(
        KeyedLimiter(qps=1, behavior="throttle", max_queueing_ms=5000))),
    ("keyed entry(timeout=)",
     lambda: _full(KeyedLimiter(concurrency=1), "k").entry("k", timeout=5).__enter__()),
    ("group acquire(timeout=)", lambda: _full(all_of(Limiter(qps=1))).acquire(timeout=5)),
    ("group entry(timeout=)",
     lambda: _full(all_of(Limiter(concurrency=1))).entry(timeout=5).__enter__()),
    ("group throttle", lambda: (lambda g: (g.acquire(), g.acquire()))(
        all_of(Limiter(qps=1, behavior="throttle", max_queueing_ms=5000)))),
    ("with lim:", lambda: _full(Limiter(concurrency=1)).__enter__()),
])
def test_a_thread_api_wait_inside_a_running_loop_raises_naming_the_async_form(name, call):
    t0 = time.monotonic()
    text = _waits_in_loop(call)
    assert "event loop" in text and "async with" in text, name
    assert "acquire_async" in text or "await" in text, name
    assert time.monotonic() - t0 < 2, name              # it raised instead of waiting


def test_a_shared_limiter_wait_inside_a_running_loop_raises(tmp_path):
    lim = Limiter(concurrency=1, shared=str(tmp_path / "c"))
    assert lim.try_acquire()
    _waits_in_loop(lambda: lim.acquire(timeout=5))
    assert lim.stats().concurrency == 1                  # nothing more held
    lim.release()


def test_a_refused_thread_api_wait_in_a_loop_holds_and_counts_nothing():
    lim = Limiter(concurrency=1)
    assert lim.try_acquire()
    before = dict(lim.totals())
    _waits_in_loop(lambda: lim.entry(timeout=5).__enter__())
    assert lim.totals() == before and lim.stats().concurrency == 1
    lim.release()
    throttle = Limiter(qps=1, behavior="throttle", max_queueing_ms=5000)
    throttle.try_acquire()
    _waits_in_loop(lambda: throttle.entry().__enter__())     # admitted, then must wait
    assert throttle.stats().concurrency == 0                  # its slot was given back


def test_what_admits_at_once_stays_allowed_inside_a_loop():
    lim = Limiter(qps=10**6)
    conc = Limiter(concurrency=2)
    group = all_of(Limiter(qps=10**6))

    async def main():
        assert lim.try_acquire()
        lim.acquire()
        lim.acquire(timeout=5)
        with lim.entry(timeout=5):
            pass
        with conc:
            pass
        group.acquire(timeout=5)
        with group.entry(timeout=5):
            pass
        assert Limiter(qps=1, behavior="throttle").reserve() == 0

    _run(main())


def test_a_worker_thread_without_a_loop_waits_as_before():
    lim = Limiter(qps=20, behavior="throttle")

    def paced():
        for _ in range(3):
            lim.acquire()
        return "done"

    async def main():
        lim.try_acquire()
        return await asyncio.to_thread(paced)

    assert _run(main()) == "done"
    assert lim.totals()["pass"] == 4


# -- Redis: the same protocol on the Redis types --------------------------------------------

from redis_servers import need_server, redis_server  # noqa: E402,F401 (fixtures)


def test_redis_keyed_limiters_say_with_needs_a_key():
    redis = pytest.importorskip("redis")
    from slidewin.redis import AsyncRedisKeyedLimiter, RedisKeyedLimiter

    async def main():
        async with AsyncRedisKeyedLimiter(redis.asyncio.Redis(), "k", qps=1):
            pass

    with pytest.raises(TypeError, match=r"entry\(key\)"):
        _run(main())                     # raised before any round trip: no server needed
    with pytest.raises(TypeError, match=r"entry\(key\)"):
        with RedisKeyedLimiter(redis.Redis(), "k", qps=1):
            pass


def test_redis_async_with_and_with_wait_for_admission(redis_server):
    need_server()
    import slidewin.redis as sr

    async def main():
        c = redis_server.async_client()
        await c.flushall()
        conc = sr.AsyncRedisLimiter(c, "aw-c", concurrency=2)
        assert await _most_at_once(conc, tasks=5) <= 2
        assert (await conc.stats()).concurrency == 0
        members = (sr.AsyncRedisLimiter(c, "{aw}.c", concurrency=1),
                   sr.AsyncRedisLimiter(c, "{aw}.r", qps=1000))
        assert await _most_at_once(sr.all_of(*members), tasks=3) == 1
        for lim in (conc,) + members:
            await lim.aclose()
        await c.aclose()

    _run(main())
    client = redis_server.client()
    lim = sr.RedisLimiter(client, "w-c", concurrency=1)
    with lim:
        assert not lim.try_acquire()
    assert lim.try_acquire()
    lim.release()
    lim.close()
    client.close()


def test_a_sync_redis_wait_inside_a_running_loop_raises(redis_server):
    need_server()
    import slidewin.redis as sr

    lim = sr.RedisLimiter(redis_server.client(), "loop-c", concurrency=1)
    assert lim.try_acquire()
    text = _waits_in_loop(lambda: lim.acquire(timeout=5))
    assert "AsyncRedisLimiter" in text
    lim.release()
    lim.close()
