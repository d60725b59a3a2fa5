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
    assert lim.try_acquire(60) and not lim.try_acquire()
    own_server.kill()
    own_server.start()
    assert lim.try_acquire(60)  # a fresh window: no error, no stale script, no stale count


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
    ctl.execute_command("CLIENT", "PAUSE", "800", "ALL")
    t0 = time.monotonic()
    assert lim.try_acquire() is False  # the timeout path: on_error="deny"
    took = time.monotonic() - t0
    assert 0.25 < took < 0.7  # the client's socket_timeout (0.3 s), not the pause
    assert lim.errors == 1
    ctl.ping()  # answered once the pause has ended (the server holds it until then)
    # the timed-out call was never sent again: applied at most once (its connection was
    # closed, so Redis drops it unread; never twice)
    assert lim.stats().pass_qps * 60 == 1
    assert ctl.info("commandstats")["cmdstat_evalsha"]["calls"] == 1  # stats() only
    rais = _lim(own_server, name="g", on_error="raise")
    ctl.execute_command("CLIENT", "PAUSE", "500", "ALL")
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
