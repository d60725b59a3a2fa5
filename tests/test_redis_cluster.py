"""slidewin.redis on a real 3-master Redis Cluster started by the test: a keyed limiter's
keys spread over the nodes (one hash tag per key), and MOVED after a slot migration is
followed (the cluster client's slot table is refreshed) with the limiter's state intact."""

import subprocess
import time

import pytest

from redis_servers import CLI, Server, need_server

MS = 1_000_000
SHIFT = (1_700_000_000_000 // 3_600_000) * 3_600_000 * MS


@pytest.fixture(scope="module")
def cluster():
    need_server()
    nodes = [Server("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "2000").start() for _ in range(3)]
    try:
        subprocess.run([CLI, "--cluster", "create"]
                       + ["127.0.0.1:%d" % s.port for s in nodes]
                       + ["--cluster-replicas", "0", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            infos = [s.client().execute_command("CLUSTER", "INFO") for s in nodes]
            if all(b"cluster_state:ok" in i for i in infos):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the cluster did not come up")
        yield nodes
    finally:
        for s in nodes:
            s.stop()


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
    slot = rc.keyslot(lim.key)
    src = next(s for s in cluster if s.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
    dst = next(s for s in cluster if s is not src)
    sc, dc = src.client(), dst.client()
    src_id, dst_id = (c.execute_command("CLUSTER", "MYID").decode() for c in (sc, dc))
    dc.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    sc.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    sc.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", lim.key)
    for s in cluster:
        s.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    assert dc.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 1
    assert sc.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    # the client still sends to the old node: MOVED, followed; the count moved with the key
    assert lim.try_acquire(now_ns=SHIFT) is True
    assert lim.try_acquire(now_ns=SHIFT) is False
    assert lim.errors == 0
    assert rc.get_node_from_key(lim.key).port == dst.port
    lim.close()
    rc.close()
