"""Waiting for a slot: entry(n, *, timeout=) in threads and asyncio, and async waiters that are
woken by a release instead of polling.

No timing asserts: the "is it woken, not polling" checks count the decisions the waiters make
(a Limiter subclass counting its _decide calls, through which every asyncio wait decides);
a poll every millisecond would make hundreds of them where a woken waiter makes a handful.
Deadlines only detect hangs.
"""
from __future__ import annotations

import asyncio
import os
import re
import threading
import time

import pytest

from slidewin import BlockedError, KeyedLimiter, Limiter

import shared_workers as W

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Counting(Limiter):
    """A Limiter that counts the decisions its asyncio waits make."""

    __slots__ = ("decisions",)

    def _decide(self, *args):  # type: ignore[no-untyped-def]
        self.decisions = getattr(self, "decisions", 0) + 1
        return super()._decide(*args)


class CountingKeyed(KeyedLimiter):
    """A KeyedLimiter that counts the decisions its asyncio waits make, per key."""

    __slots__ = ("decisions",)

    def _decide(self, key, *args):  # type: ignore[no-untyped-def]
        if not hasattr(self, "decisions"):
            self.decisions = {}
        self.decisions[key] = self.decisions.get(key, 0) + 1
        return super()._decide(key, *args)


def run(coro, deadline=60):
    return asyncio.run(asyncio.wait_for(coro, deadline))


# -- entry(timeout=) --------------------------------------------------------------------------


def test_200_tasks_all_complete_never_more_than_10_inside():
    lim = Limiter(concurrency=10)
    inside = 0
    most = 0

    async def task():
        nonlocal inside, most
        async with lim.entry(timeout=5):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.001)
            inside -= 1

    async def main():
        await asyncio.gather(*(task() for _ in range(200)))

    run(main())
    assert most == 10
    assert lim.in_flight == 0
    assert lim.totals()["success"] == 200
    assert lim.totals()["block"] == 0


def test_entry_without_timeout_still_refuses_at_once():
    # the documented contract (docs/waiting.md): without a timeout, a refusal raises at once
    lim = Limiter(concurrency=1)
    with lim.entry():
        with pytest.raises(BlockedError):
            with lim.entry():
                pass

        async def main():
            async with lim.entry():
                pass

        with pytest.raises(BlockedError):
            run(main())


def test_entry_timeout_bad_values():
    lim = Limiter(concurrency=1)
    with pytest.raises(ValueError, match="timeout"):
        lim.entry(timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        lim.entry(timeout="1")


def test_sync_entry_timeout_honoured():
    lim = Limiter(concurrency=1)
    lim.acquire()
    t0 = time.monotonic()
    with pytest.raises(BlockedError):
        with lim.entry(timeout=0.2):
            pass
    assert time.monotonic() - t0 >= 0.19
    assert lim.totals()["block"] == 1  # one BLOCK for the request, not one per retry
    lim.release()
    with lim.entry(timeout=0.2):
        assert lim.in_flight == 1
    assert lim.in_flight == 0


def test_async_entry_timeout_honoured():
    lim = Counting(concurrency=1)
    lim.acquire()

    async def main():
        t0 = time.monotonic()
        with pytest.raises(BlockedError):
            async with lim.entry(timeout=0.3):
                pass
        return time.monotonic() - t0

    assert run(main()) >= 0.29
    assert lim.totals()["block"] == 1
    assert lim.decisions <= 5, lim.decisions  # a 1 ms poll: ~300


def test_async_rate_wait_sleeps_until_retry_after():
    # reject: the core says when the bucket slides out; the waiter sleeps until then
    lim = Counting(qps=2, interval_ms=1000, sample_count=2)
    assert lim.try_acquire(2)

    async def main():
        async with lim.entry(timeout=5):
            pass

    run(main())
    # a few decisions, not a poll (every 1 ms: hundreds in the ~1 s wait). A waiter may wake
    # a little before the bucket slides (the core's coarse clock runs up to a tick behind;
    # a loaded CI machine saw 5), then sleeps again until the new retry time
    assert lim.decisions <= 10, lim.decisions


def entering_in_turn(lim, order):
    """A coroutine function: waiter(tag) enters lim (a 10 s timeout) and appends its tag to
    order there, then lets the loop run once before it leaves."""
    async def waiter(tag):
        async with lim.entry(timeout=10):
            order.append(tag)
            await asyncio.sleep(0)
    return waiter


def test_cancelled_waiter_leaks_no_slot_and_loses_no_wakeup():
    lim = Limiter(concurrency=1)
    order = []
    waiter = entering_in_turn(lim, order)

    async def main():
        lim.acquire()
        a = asyncio.ensure_future(waiter("a"))
        b = asyncio.ensure_future(waiter("b"))
        c = asyncio.ensure_future(waiter("c"))
        await asyncio.sleep(0.05)
        lim.release()        # wakes a ...
        a.cancel()           # ... which is cancelled before it runs: b must get the slot
        await asyncio.gather(b, c)
        with pytest.raises(asyncio.CancelledError):
            await a

    run(main(), deadline=20)
    assert order == ["b", "c"]
    assert lim.in_flight == 0


def test_waiters_are_served_in_order():
    lim = Limiter(concurrency=1)
    order = []
    waiter = entering_in_turn(lim, order)

    async def main():
        async with lim.entry():
            tasks = []
            for i in range(20):
                tasks.append(asyncio.ensure_future(waiter(i)))
                await asyncio.sleep(0)  # each queues before the next
        await asyncio.gather(*tasks)

    run(main())
    assert order == list(range(20))


def test_many_async_waiters_are_woken_not_polling():
    lim = Counting(concurrency=1)
    lim.acquire()

    async def waiter():
        async with lim.entry(timeout=10):
            pass

    async def main():
        tasks = [asyncio.ensure_future(waiter()) for _ in range(100)]
        await asyncio.sleep(0.5)  # saturated: a 1 ms poll makes ~50 000 decisions here
        before = lim.decisions
        lim.release()
        await asyncio.gather(*tasks)
        return before

    before = run(main())
    # two tries each on arrival (before queuing, and once queued: a release in between is
    # not lost), then about one (and a baton) per admission
    assert before <= 2 * 100 + 5, before
    assert lim.decisions <= 4 * 100 + 10, lim.decisions
    assert lim.in_flight == 0


def test_release_from_another_thread_wakes_an_async_waiter():
    lim = Counting(concurrency=1)
    lim.acquire()

    async def main():
        waiter = asyncio.ensure_future(lim.acquire_async(timeout=30))
        await asyncio.sleep(0.3)
        t = threading.Thread(target=lim.release)
        t.start()
        await waiter
        t.join(10)

    run(main())
    assert lim.decisions <= 4, lim.decisions  # woken once, not polling
    lim.release()
    assert lim.in_flight == 0


def test_update_to_a_higher_concurrency_admits_waiters():
    lim = Counting(concurrency=1)
    lim.acquire()

    async def waiter():
        async with lim.entry(timeout=30):
            await asyncio.sleep(0.05)

    async def main():
        tasks = [asyncio.ensure_future(waiter()) for _ in range(3)]
        await asyncio.sleep(0.2)
        lim.update(concurrency=4)  # three slots more: the three pass without a release
        await asyncio.wait_for(asyncio.gather(*tasks), 0.2 + 30)
        return lim.in_flight

    assert run(main()) == 1
    assert lim.decisions <= 3 * 5, lim.decisions


def test_threads_wait_with_timeout_on_entry():
    lim = Limiter(concurrency=3)
    inside = 0
    most = 0
    mu = threading.Lock()
    errors = []

    def worker():
        nonlocal inside, most
        try:
            for _ in range(20):
                with lim.entry(timeout=10):
                    with mu:
                        inside += 1
                        most = max(most, inside)
                    time.sleep(0.0005)
                    with mu:
                        inside -= 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert errors == []
    assert most <= 3
    assert lim.totals()["success"] == 160 and lim.in_flight == 0


def test_decorator_timeout():
    lim = Limiter(concurrency=2)
    inside = 0
    most = 0

    @lim(timeout=5)
    async def work():
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.001)
        inside -= 1

    @lim(timeout=5)
    def sync_work():
        return 7

    async def main():
        await asyncio.gather(*(work() for _ in range(30)))

    run(main())
    assert most == 2
    assert sync_work() == 7
    assert lim.totals()["success"] == 31


# -- shared ---------------------------------------------------------------------------------


@pytest.mark.procs
def test_shared_release_in_another_process_wakes_an_async_waiter(name):
    with W.held_in_another_process(name) as go:
        lim = Counting(concurrency=1, shared=name)

        async def enter_and_leave():
            async with lim.entry(timeout=30):
                await asyncio.sleep(0)

        async def main():
            first = asyncio.ensure_future(lim.acquire_async(timeout=30))
            # each entry leaves by itself: the test does not depend on the order they pass in
            entries = [asyncio.ensure_future(enter_and_leave()) for _ in range(20)]
            await asyncio.sleep(0.2)
            go.set()
            await first
            lim.release()
            await asyncio.gather(*entries)  # the entries then pass one after the other

        run(main(), deadline=60)
        # woken by the release, not polling (1 ms polls over 0.5 s: ~10 000 decisions)
        assert lim.decisions <= 6 * 21 + 20, lim.decisions
        assert lim.in_flight == 0


def test_shared_many_async_waiters_are_woken(name):
    lim = Counting(concurrency=2, shared=name)
    other = Limiter(concurrency=2, shared=name)
    other.acquire(2)

    async def waiter():
        async with lim.entry(timeout=20):
            await asyncio.sleep(0)

    async def main():
        tasks = [asyncio.ensure_future(waiter()) for _ in range(50)]
        await asyncio.sleep(0.3)
        other.release(2)
        await asyncio.gather(*tasks)

    run(main())
    # about 2 on arrival, 1 when woken, 1 by the baton of the one before, and the first's
    # 0.25 s rechecks; polling at 1 ms over the 0.3 s of waiting alone would make ~15 000
    assert lim.decisions <= 6 * 50 + 20, lim.decisions
    assert lim.in_flight == 0


# -- KeyedLimiter: per-key queues ----------------------------------------------------------


def test_keyed_async_waiters_are_woken_by_their_key_not_polling():
    per = CountingKeyed(concurrency=1)
    per.acquire("alice")
    per.acquire("bob")

    async def waiter(key):
        async with per.entry(key, timeout=10):
            pass

    async def main():
        alice = [asyncio.ensure_future(waiter("alice")) for _ in range(50)]
        bob = [asyncio.ensure_future(waiter("bob")) for _ in range(50)]
        await asyncio.sleep(0.5)  # saturated: a 1 ms poll makes ~50 000 decisions here
        before = dict(per.decisions)
        per.release("alice")
        await asyncio.gather(*alice)
        during = dict(per.decisions)
        assert not any(t.done() for t in bob)  # alice's releases admit none of bob's
        per.release("bob")
        await asyncio.gather(*bob)
        return before, during

    before, during = run(main())
    assert before["alice"] <= 2 * 50 + 5 and before["bob"] <= 2 * 50 + 5, before
    # alice's 50 releases (her entries' exits) woke only alice's queue
    assert during["bob"] == before["bob"], (before, during)
    assert per.decisions["alice"] <= 4 * 50 + 10, per.decisions
    assert per.decisions["bob"] <= 4 * 50 + 10, per.decisions
    assert per.in_flight("alice") == per.in_flight("bob") == 0


def test_keyed_release_from_another_thread_wakes_an_async_waiter():
    per = CountingKeyed(concurrency=1)
    per.acquire("k")

    async def main():
        waiter = asyncio.ensure_future(per.acquire_async("k", timeout=30))
        await asyncio.sleep(0.3)
        t = threading.Thread(target=per.release, args=("k",))
        t.start()
        await waiter
        t.join(10)

    run(main())
    assert per.decisions["k"] <= 4, per.decisions  # woken once, not polling
    per.release("k")
    assert per.in_flight("k") == 0


def test_keyed_update_wakes_every_key():
    per = CountingKeyed(concurrency=1)
    for key in ("a", "b", "c"):
        per.acquire(key)

    async def main():
        tasks = [asyncio.ensure_future(per.acquire_async(key, timeout=30))
                 for key in ("a", "b", "c")]
        await asyncio.sleep(0.2)
        per.update(concurrency=2)  # a slot more for every key, without a release
        await asyncio.wait_for(asyncio.gather(*tasks), 30)

    run(main())
    assert [per.in_flight(k) for k in ("a", "b", "c")] == [2, 2, 2]
    assert sum(per.decisions.values()) <= 3 * 5, per.decisions


@pytest.mark.parametrize("max_keys", [1, 4])
def test_keyed_waiter_for_room_in_a_full_table_is_woken_by_another_keys_release(max_keys):
    # every key of the table in flight: a new key waits for room, which a release of ANY key
    # makes (its own key's queue alone would never be woken)
    per = KeyedLimiter(concurrency=1, max_keys=max_keys)
    held = [per.entry(i) for i in range(max_keys)]
    for e in held:
        e.__enter__()
    assert not per.try_acquire("new")

    async def main():
        waiter = asyncio.ensure_future(per.acquire_async("new", timeout=60))
        await asyncio.sleep(0.1)
        held[0].__exit__(None, None, None)
        await waiter

    run(main(), deadline=20)  # before: woken only at its 60 s timeout
    assert per.in_flight("new") == 1
    per.release("new")
    for e in held[1:]:
        e.__exit__(None, None, None)


def test_keyed_entry_timeout_in_threads_and_bad_values():
    per = KeyedLimiter(concurrency=1)
    assert per.entry("k").timeout is None
    assert per.entry("k", timeout=1.5).timeout == 1.5
    for bad in (-1, float("nan"), "1"):
        with pytest.raises((TypeError, ValueError), match="timeout"):
            per.entry("k", timeout=bad)
    per.acquire("k")
    t0 = time.monotonic()
    with pytest.raises(BlockedError):
        with per.entry("k", timeout=0.2):
            pass
    assert time.monotonic() - t0 >= 0.19  # it waited out its timeout, not refused at once
    assert per.totals()["block"] == 1
    # a release from another thread admits a waiting entry
    t = threading.Timer(0.2, per.release, args=("k",))
    t.start()
    with per.entry("k", timeout=30):
        assert per.in_flight("k") == 1
    t.join(10)
    assert per.in_flight("k") == 0
    assert per.totals()["success"] == 1


def test_keyed_decorator_timeout():
    per = KeyedLimiter(concurrency=1)
    inside = {}
    most = {}

    @per(key=lambda user: user, timeout=10)
    async def work(user):
        inside[user] = inside.get(user, 0) + 1
        most[user] = max(most.get(user, 0), inside[user])
        await asyncio.sleep(0.002)
        inside[user] -= 1

    @per(key=lambda user: user, timeout=10)
    def sync_work(user):
        return user

    async def main():
        await asyncio.gather(*(work(u) for u in ["a"] * 10 + ["b"] * 10))

    run(main())
    assert most == {"a": 1, "b": 1}  # they waited for their key's slot, none refused
    assert sync_work("a") == "a"
    assert per.totals()["success"] == 21 and per.totals()["block"] == 0
    with pytest.raises((TypeError, ValueError), match="timeout"):
        per(key=lambda u: u, timeout=-1)


@pytest.mark.procs
def test_keyed_shared_release_in_another_process_wakes_an_async_waiter(name):
    with W.held_in_another_process(name, "k") as go:
        per = CountingKeyed(concurrency=1, shared=name)

        async def main():
            waiters = [asyncio.ensure_future(per.acquire_async("k", timeout=30))
                       for _ in range(10)]
            await asyncio.sleep(0.2)
            go.set()
            for _ in range(10):  # each admitted one is given back: the next passes
                done, _pending = await asyncio.wait(waiters, return_when="FIRST_COMPLETED")
                for w in done:
                    waiters.remove(w)
                    w.result()
                    per.release("k")

        run(main(), deadline=60)
        # woken by the releases, not polling (1 ms polls over 0.5 s: ~5 000 decisions)
        assert per.decisions["k"] <= 6 * 10 + 20, per.decisions
        assert per.in_flight("k") == 0


# -- docs -----------------------------------------------------------------------------------


def test_docs_waiting_blocks_run():
    with open(os.path.join(ROOT, "docs", "waiting.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, flags=re.S | re.M)
    assert blocks
    for code in blocks:
        exec(compile(code, "docs/waiting.md", "exec"), {"__name__": "__docs__"})
