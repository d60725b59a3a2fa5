"""slidewin.redis on a real 3-master Redis Cluster started by the test: a keyed limiter's
keys spread over the nodes (one hash tag per key), and MOVED after a slot migration is
followed (the cluster client's slot table is refreshed) with the limiter's state intact."""

import time

import pytest

from redis_servers import cluster, start_cluster  # noqa: F401 (fixture)

# a cluster of servers started by a fixture (the `server` group: CONTRIBUTING.md)
pytestmark = pytest.mark.server

MS = 1_000_000
SHIFT = (1_700_000_000_000 // 3_600_000) * 3_600_000 * MS


def _migrate(cluster, rc, key):
    """Move the slot of key (and key) to another master, behind the clients' backs."""
    slot = rc.keyslot(key)
    src = next(s for s in cluster if s.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
    dst = next(s for s in cluster if s is not src)
    sc, dc = src.client(), dst.client()
    src_id, dst_id = (c.execute_command("CLUSTER", "MYID").decode() for c in (sc, dc))
    dc.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    sc.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    sc.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", key)
    for s in cluster:
        s.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    return slot, src, dst, sc, dc


def test_keyed_limiter_spreads_keys_and_follows_moved(cluster):
    import redis

    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    rc = redis.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    per = RedisKeyedLimiter(rc, "per-user", qps=2)
    for k in range(30):
        assert [per.try_acquire("user-%d" % k, now_ns=SHIFT) for _ in range(3)] == [
            True, True, False]
    held = [s.client().dbsize() for s in cluster]
    assert sum(held) == 30 and sum(1 for h in held if h) == 3  # every node holds keys

    lim = RedisLimiter(rc, "api", qps=3)
    assert lim.try_acquire(2, now_ns=SHIFT)
    # migrate the slot of the limiter's key to another master, behind the client's back
    slot, src, dst, sc, dc = _migrate(cluster, rc, lim.key)
    assert dc.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 1
    assert sc.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    # the client still sends to the old node: MOVED, followed; the count moved with the key
    assert lim.try_acquire(now_ns=SHIFT) is True
    assert lim.try_acquire(now_ns=SHIFT) is False
    assert lim.errors == 0
    assert rc.get_node_from_key(lim.key).port == dst.port
    lim.close()
    rc.close()


def test_async_cluster_timeout_is_not_retried(cluster):
    """A decision on a redis.asyncio RedisCluster that times out gives on_error within the
    client's socket_timeout: the cluster client's own retries (on TimeoutError) would send
    it again, and could apply it twice."""
    import asyncio

    import redis
    import redis.asyncio

    from slidewin.redis import AsyncRedisLimiter

    async def main():
        rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster[0].port,
                                        socket_timeout=0.3, socket_connect_timeout=0.3)
        lim = AsyncRedisLimiter(rc, "async-t", qps=100, interval_ms=60_000, sample_count=60,
                                on_error="deny")
        assert await lim.try_acquire()
        slot = redis.RedisCluster(host="127.0.0.1", port=cluster[0].port).keyslot(lim.key)
        owner = next(s for s in cluster
                     if s.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
        ctl = owner.client()
        ctl.execute_command("CLIENT", "PAUSE", "1500", "WRITE")
        t0 = time.monotonic()
        assert await lim.try_acquire() is False  # on_error="deny": it timed out
        assert time.monotonic() - t0 < 1.0  # one socket_timeout, not one per retry
        assert lim.errors == 1
        time.sleep(1.6)
        ctl.ping()
        assert await lim.try_acquire() is True  # back: the cluster client works again
        assert lim.errors == 1
        # MOVED after a slot migration is followed (the node named is the one asked first)
        m = AsyncRedisLimiter(rc, "async-m", qps=3, on_error="raise")
        assert await m.try_acquire(2, now_ns=SHIFT)
        _migrate(cluster, redis.RedisCluster(host="127.0.0.1", port=cluster[0].port), m.key)
        assert await m.try_acquire(now_ns=SHIFT) is True
        assert await m.try_acquire(now_ns=SHIFT) is False  # the count moved with the key
        await rc.aclose()

    asyncio.run(main())


def test_master_failover_is_followed():
    """The master holding a limiter's key dies and its replica takes over: after the
    decisions that met the dead node (on_error), the cluster client's slot table is read
    again and decisions go to the new master, sync and async alike."""
    import asyncio

    import redis
    import redis.asyncio

    from slidewin.redis import AsyncRedisLimiter, RedisLimiter

    nodes = start_cluster(3, 1, 1000, "--cluster-replica-validity-factor", "0")
    try:
        kw = dict(socket_timeout=0.5, socket_connect_timeout=0.5)
        rc = redis.RedisCluster(host="127.0.0.1", port=nodes[0].port, **kw)
        lim = RedisLimiter(rc, "fo", qps=1000)

        async def main():
            arc = redis.asyncio.RedisCluster(host="127.0.0.1", port=nodes[0].port, **kw)
            alim = AsyncRedisLimiter(arc, "fo", qps=1000)
            assert lim.try_acquire() and await alim.try_acquire()
            owner = rc.get_node_from_key(lim.key)
            next(s for s in nodes if s.port == owner.port).kill()
            deadline = time.monotonic() + 30
            done = set()
            while len(done) < 2:
                assert time.monotonic() < deadline, "not followed: %s" % done
                for name, before, decide in (
                        ("sync", lim.errors, lambda: lim.try_acquire()),
                        ("async", alim.errors, alim.try_acquire)):
                    got = decide()
                    if asyncio.iscoroutine(got):
                        got = await got
                    if (lim if name == "sync" else alim).errors == before:
                        done.add(name)  # answered by Redis again
                time.sleep(0.1)
            assert lim.errors > 0 and alim.errors > 0
            assert rc.get_node_from_key(lim.key).port != owner.port
            # the whole cluster gone: on_error, not the cluster client's own exception
            for s in nodes:
                s.kill()
            for _ in range(3):
                errors = (lim.errors, alim.errors)
                assert lim.try_acquire() and await alim.try_acquire()  # on_error="allow"
                assert (lim.errors, alim.errors) == (errors[0] + 1, errors[1] + 1)
            try:
                await arc.aclose()
            except Exception:  # noqa: S110 (closing a client of a dead cluster)
                pass

        asyncio.run(main())
        lim.close()
        rc.close()
    finally:
        for s in nodes:
            s.stop()
