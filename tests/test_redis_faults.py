"""slidewin.redis when Redis fails: killed, back, restarted empty, script cache flushed,
paused. Every test runs its own real redis-server."""

import logging
import threading
import time

import pytest

from redis_servers import need_server, own_server  # noqa: F401 (fixtures)

MS = 1_000_000


def _lim(server, name="f", on_error="allow", **kw):
    from slidewin.redis import RedisLimiter

    c = server.client(socket_timeout=0.3, socket_connect_timeout=0.3)
    kw.setdefault("qps", 2)
    return RedisLimiter(c, name, on_error=on_error, **kw)


def test_server_killed_on_error_within_timeout_then_back(own_server, caplog):
    import redis

    allow, deny, rais = (_lim(own_server, on_error=p) for p in ("allow", "deny", "raise"))
    assert allow.try_acquire() and deny.try_acquire()
    own_server.kill()
    caplog.set_level(logging.WARNING, logger="slidewin.redis")
    t0 = time.monotonic()
    assert [allow.try_acquire() for _ in range(5)] == [True] * 5
    assert deny.try_acquire() is False and deny.reserve() is None
    with pytest.raises(redis.exceptions.ConnectionError):
        rais.try_acquire()
    assert time.monotonic() - t0 < 5  # no hang: each within the client's timeout
    assert (allow.errors, allow.errors_allowed) == (5, 5)
    assert (deny.errors, deny.errors_denied) == (2, 2)
    # logged once per limiter per minute, not per decision
    assert sum("could not reach Redis" in m for m in caplog.messages) == 3
    # the server is back (restarted on the same port with no data): decisions resume,
    # the limiter starts fresh, no error
    own_server.start()
    assert [allow.try_acquire() for _ in range(3)] == [True, True, False]
    assert allow.errors == 5


def test_restart_that_wiped_the_data_starts_fresh(own_server):
    lim = _lim(own_server, on_error="raise", qps=1, interval_ms=60_000, sample_count=1)
    # one fixed instant (on the server's clock, the two calls could straddle the minute's
    # bucket boundary, and the second be admitted by a new bucket: CI saw it once)
    t = (time.time_ns() // 60_000_000_000) * 60_000_000_000 + 30_000_000_000
    assert lim.try_acquire(60, now_ns=t) and not lim.try_acquire(now_ns=t)
    own_server.kill()
    own_server.start()
    # the same instant: a fresh window: no error, no stale script, no stale count
    assert lim.try_acquire(60, now_ns=t)


def test_script_flush_reloads_once(own_server):
    lim = _lim(own_server, on_error="raise", qps=100)
    c = own_server.client()
    assert lim.try_acquire()
    c.script_flush()
    c.config_resetstat()
    assert all(lim.try_acquire() for _ in range(5))
    stats = c.info("commandstats")
    assert stats["cmdstat_eval"]["calls"] == 1  # the one reload (EVAL caches it again)
    assert stats["cmdstat_evalsha"]["calls"] == 5  # 1 NOSCRIPT + 4 cached
    assert stats["cmdstat_evalsha"].get("failed_calls", 1) == 1
    assert lim.stats().pass_qps == 6


def test_paused_server_times_out_without_retry(own_server):
    import redis

    # 1 s buckets over a minute: the pass stays in the window across a minute boundary
    lim = _lim(own_server, on_error="deny", qps=100, interval_ms=60_000, sample_count=60)
    assert lim.try_acquire()
    ctl = own_server.client()
    ctl.config_resetstat()
    # the pause is far longer than the client's socket_timeout (0.3 s): a call that ends
    # well before the pause does was cut by the timeout, however loaded the machine
    ctl.execute_command("CLIENT", "PAUSE", "2500", "ALL")
    t0 = time.monotonic()
    assert lim.try_acquire() is False  # the timeout path: on_error="deny"
    took = time.monotonic() - t0
    assert 0.25 < took < 2.0  # the socket_timeout, not the pause
    assert lim.errors == 1
    ctl.ping()  # answered once the pause has ended (the server holds it until then)
    # the timed-out call was never sent again: applied at most once (its connection was
    # closed, so Redis drops it unread; never twice)
    assert lim.stats().pass_qps * 60 == 1
    assert ctl.info("commandstats")["cmdstat_evalsha"]["calls"] == 1  # stats() only
    rais = _lim(own_server, name="g", on_error="raise")
    ctl.execute_command("CLIENT", "PAUSE", "2500", "ALL")  # past the timeout, however late
    with pytest.raises(redis.exceptions.TimeoutError):
        rais.try_acquire()


def test_server_killed_mid_run_under_threads(own_server):
    lim = _lim(own_server, on_error="allow", qps=1000)
    stop = threading.Event()
    results = []

    def run():
        while not stop.is_set():
            t0 = time.monotonic()
            lim.try_acquire()
            results.append(time.monotonic() - t0)

    ts = [threading.Thread(target=run) for _ in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.2)
    own_server.kill()
    time.sleep(0.5)
    own_server.start()
    time.sleep(0.3)
    stop.set()
    for t in ts:
        t.join(5)
    assert not any(t.is_alive() for t in ts)
    assert max(results) < 1.5  # never a hang
    assert lim.errors > 0
    errors = lim.errors
    lim.try_acquire()
    assert lim.errors == errors  # resumed: answered by Redis again
    assert lim.stats().pass_qps > 0


def test_async_killed_server_on_error(own_server):
    import asyncio

    from slidewin.redis import AsyncRedisLimiter

    async def main():
        c = own_server.async_client(socket_timeout=0.3, socket_connect_timeout=0.3)
        lim = AsyncRedisLimiter(c, "a", qps=5, on_error="deny")
        assert await lim.try_acquire()
        own_server.kill()
        t0 = time.monotonic()
        assert await lim.try_acquire() is False
        assert time.monotonic() - t0 < 2 and lim.errors == 1
        own_server.start()
        assert await lim.try_acquire()
        await lim.aclose()
        await c.aclose()

    asyncio.run(main())


def test_async_script_flush_reloads_once(own_server):
    import asyncio

    from slidewin.redis import AsyncRedisLimiter

    async def main():
        c = own_server.async_client(socket_timeout=0.3, socket_connect_timeout=0.3)
        lim = AsyncRedisLimiter(c, "af", qps=100, on_error="raise")
        assert await lim.try_acquire()
        ctl = own_server.client()
        ctl.script_flush()
        ctl.config_resetstat()
        assert all([await lim.try_acquire() for _ in range(5)])
        stats = ctl.info("commandstats")
        assert stats["cmdstat_eval"]["calls"] == 1  # the one reload
        assert stats["cmdstat_evalsha"]["calls"] == 5
        assert (await lim.stats()).pass_qps == 6
        await lim.aclose()
        await c.aclose()

    asyncio.run(main())


def test_readonly_replica_connection_is_replaced(own_server):
    """A server turned replica (a failover) answers READONLY: the decision gives on_error
    and the connection is closed, so the next decision connects anew (through DNS or
    Sentinel, to the new primary) instead of asking the replica forever."""
    import asyncio

    from redis_servers import Server

    from slidewin.redis import AsyncRedisLimiter, RedisLimiter

    other = Server(kind=own_server.kind).start()
    ctl = own_server.client()

    def names():
        return {x["name"] for x in ctl.client_list()}

    async def main():
        c = own_server.client(socket_timeout=0.3, client_name="sw-sync")
        ac = own_server.async_client(socket_timeout=0.3, client_name="sw-async")
        lim = RedisLimiter(c, "ro", qps=100)
        alim = AsyncRedisLimiter(ac, "aro", qps=100)
        assert lim.try_acquire() and await alim.try_acquire()
        assert {"sw-sync", "sw-async"} <= names()
        ctl.replicaof("127.0.0.1", other.port)
        assert lim.try_acquire() and await alim.try_acquire()  # on_error="allow"
        assert (lim.errors, alim.errors) == (1, 1)
        time.sleep(0.05)
        assert not {"sw-sync", "sw-async"} & names()  # closed, not kept for the next one
        ctl.replicaof("no", "one")
        assert lim.try_acquire() and await alim.try_acquire()
        assert (lim.errors, alim.errors) == (1, 1)
        lim.close()
        c.close()
        await alim.aclose()
        await ac.aclose()

    try:
        asyncio.run(main())
    finally:
        other.stop()


@pytest.mark.parametrize("how", ["try_acquire", "entry"])
def test_decision_timed_out_in_a_stopped_server_holds_no_slot_for_long(own_server, how):
    """SIGSTOP the server while concurrency decisions time out: the server runs them when it
    resumes, after their callers gave up. Those leases belong to nobody; they must not keep
    the limiter shut for long (they did for lease_ms, 60 s by default)."""
    import os
    import signal

    from slidewin import BlockedError

    lim = _lim(own_server, name="stop", on_error="deny", qps=None, concurrency=3)
    barrier = threading.Barrier(5)
    failed = []

    def together(fn):
        ts = [threading.Thread(target=fn) for _ in range(5)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)

    from slidewin.redis import RedisLimiter

    warmer = RedisLimiter(lim.client, "warm", concurrency=5)

    def warm():  # five connections, each in use at once: the client's pool keeps them
        with warmer.entry():
            barrier.wait(10)

    def decide():
        barrier.wait(10)
        if how == "try_acquire":
            failed.append(lim.try_acquire() is False)  # timed out: on_error="deny"
        else:
            try:
                with lim.entry():
                    failed.append(False)
            except BlockedError:
                failed.append(True)

    together(warm)
    assert lim.stats().concurrency == 0
    os.kill(own_server.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        together(decide)
        assert failed == [True] * 5 and lim.errors == 5
        time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
    finally:
        os.kill(own_server.proc.pid, signal.SIGCONT)
    resumed = time.monotonic()
    time.sleep(0.3)
    # the decisions ran once the server resumed (those whose connection the server still
    # read: a closed one may be dropped first): their leases hold up to every slot, never more
    assert lim.stats().concurrency <= 3
    while not lim.try_acquire():
        # lease_ms (5 s) and a margin: a hang or an overheld lease, not a timing assert
        assert time.monotonic() - resumed < lim.lease_ms / 1000 + 1.5, \
            "the late leases still hold every slot"
        time.sleep(0.1)
    lim.release()


def test_held_leases_are_renewed_and_orphans_expire(own_server):
    """A lease lives lease_ms unless its holder renews it: an entry held three times longer
    than lease_ms keeps its slot; a crashed holder's slot comes back within lease_ms."""
    from slidewin.redis import RedisLimiter

    c = own_server.client(socket_timeout=2)
    lim = RedisLimiter(c, "renew", concurrency=1, lease_ms=1000, on_error="raise")
    other = RedisLimiter(c, "renew", concurrency=1, lease_ms=1000, on_error="raise")
    with lim.entry():
        for _ in range(6):
            time.sleep(0.5)
            assert other.try_acquire() is False  # still held: renewed
    assert other.try_acquire()
    other.release()
    assert lim.try_acquire()
    time.sleep(2.5)
    assert other.try_acquire() is False  # held by try_acquire: renewed too
    lim.release()
    assert other.try_acquire()
    other.release()
    # a lease nobody renews (a crashed client): gone within lease_ms
    import subprocess
    import sys

    code = ("import os, redis; from slidewin.redis import RedisLimiter; "
            "lim = RedisLimiter(redis.Redis(port=%d), 'renew', concurrency=1, lease_ms=1000); "
            "assert lim.try_acquire(); os._exit(0)" % own_server.port)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    assert other.try_acquire() is False
    t0 = time.monotonic()
    while not other.try_acquire():
        assert time.monotonic() - t0 < 3
        time.sleep(0.05)


def test_server_errors_are_named_for_what_they_are(own_server, caplog):
    """WRONGTYPE, OOM and READONLY are answers of a reachable server: each is raised as
    what it is (on_error="raise") and logged as what it is, never "could not reach Redis"."""
    import redis

    from slidewin.redis import AsyncRedisLimiter, RedisLimiter, RedisStateError

    caplog.set_level(logging.WARNING, logger="slidewin.redis")
    c = own_server.client(socket_timeout=1)
    rais = RedisLimiter(c, "wt", qps=5, on_error="raise")
    allow = RedisLimiter(c, "wt", qps=5)
    c.hset(rais.key, "f", "v")  # another application's hash under the name
    with pytest.raises(RedisStateError, match=r"slidewin:\{wt\}.*(hash|WRONGTYPE)"):
        rais.try_acquire()
    with pytest.raises(RedisStateError):
        rais.stats()
    assert allow.try_acquire() and allow.errors == 1
    c.delete(rais.key)

    c.config_set("maxmemory", "1")
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            rais.try_acquire()
        oom = RedisLimiter(c, "oom", qps=5, on_error="deny")
        assert oom.try_acquire() is False and oom.errors == 1

        async def amain():
            ac = own_server.async_client(socket_timeout=1)
            alim = AsyncRedisLimiter(ac, "aoom", qps=5, on_error="raise")
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                await alim.try_acquire()
            await ac.aclose()

        import asyncio

        asyncio.run(amain())
    finally:
        c.config_set("maxmemory", "0")

    text = "\n".join(caplog.messages)
    assert "could not reach Redis" not in text
    assert "WRONGTYPE" in text or "holds a hash" in text
    assert "out of memory" in text


def test_readonly_is_logged_as_a_replica(own_server, caplog):
    from redis_servers import Server

    from slidewin.redis import RedisLimiter

    caplog.set_level(logging.WARNING, logger="slidewin.redis")
    other = Server(kind=own_server.kind).start()
    try:
        ctl = own_server.client()
        lim = RedisLimiter(own_server.client(socket_timeout=1), "ro2", qps=5)
        ctl.replicaof("127.0.0.1", other.port)
        assert lim.try_acquire() and lim.errors == 1
        ctl.replicaof("no", "one")
    finally:
        other.stop()
    text = "\n".join(caplog.messages)
    assert "could not reach Redis" not in text and "replica" in text


def test_unreachable_is_still_could_not_reach(own_server, caplog):
    caplog.set_level(logging.WARNING, logger="slidewin.redis")
    lim = _lim(own_server, name="gone")
    own_server.kill()
    assert lim.try_acquire() and lim.errors == 1
    assert any("could not reach Redis" in m for m in caplog.messages)


def test_async_held_leases_are_renewed(own_server):
    import asyncio

    from slidewin.redis import AsyncRedisLimiter

    async def main():
        c = own_server.async_client(socket_timeout=2)
        lim = AsyncRedisLimiter(c, "arenew", concurrency=1, lease_ms=1000, on_error="raise")
        other = AsyncRedisLimiter(c, "arenew", concurrency=1, lease_ms=1000, on_error="raise")
        async with lim.entry():
            for _ in range(6):
                await asyncio.sleep(0.5)
                assert await other.try_acquire() is False  # still held: renewed
        assert await other.try_acquire()
        await asyncio.sleep(2.5)  # held by try_acquire: renewed too
        assert await lim.try_acquire() is False
        await other.release()
        assert await lim.try_acquire()
        await lim.release()
        await c.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_a_stalled_server_does_not_starve_other_servers_renewals(own_server, flavor):
    """Two limiters on two servers; one server stops (SIGSTOP) under a client with no socket
    timeout, so its renewal blocks. The healthy server's lease must still be renewed (it was
    not: one renewal thread served every client in turn, and the other lease expired)."""
    import asyncio
    import os
    import signal

    from redis_servers import Server

    from slidewin.redis import AsyncRedisLimiter, RedisLimiter

    healthy = Server(kind=own_server.kind).start()
    # renewed every lease_ms / 3: a loaded 2-core machine (CI) stalled a renewal thread past
    # a 600 ms lease; a renewer stuck on the stopped server lets any lease run out
    lease_ms = 1500
    try:
        if flavor == "sync":
            stalled = RedisLimiter(own_server.client(), "st", concurrency=1, lease_ms=lease_ms)
            good = RedisLimiter(healthy.client(socket_timeout=2), "ok", concurrency=1,
                                lease_ms=lease_ms)
            other = RedisLimiter(healthy.client(socket_timeout=2), "ok", concurrency=1)
            assert stalled.try_acquire() and good.try_acquire()
            os.kill(own_server.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(2.5 * lease_ms / 1000)
                assert other.try_acquire() is False  # good's slot: still renewed
                assert other.stats().concurrency == 1
            finally:
                os.kill(own_server.proc.pid, signal.SIGCONT)
            good.release()
            stalled.release()
            return

        async def main():
            sc = own_server.async_client()
            hc = healthy.async_client(socket_timeout=2)
            stalled = AsyncRedisLimiter(sc, "ast", concurrency=1, lease_ms=lease_ms)
            good = AsyncRedisLimiter(hc, "aok", concurrency=1, lease_ms=lease_ms)
            other = RedisLimiter(healthy.client(socket_timeout=2), "aok", concurrency=1)
            assert await stalled.try_acquire() and await good.try_acquire()
            os.kill(own_server.proc.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(2.5 * lease_ms / 1000)
                assert other.try_acquire() is False
            finally:
                os.kill(own_server.proc.pid, signal.SIGCONT)
            await good.release()
            await stalled.release()
            await sc.aclose()
            await hc.aclose()

        asyncio.run(main())
    finally:
        healthy.stop()
