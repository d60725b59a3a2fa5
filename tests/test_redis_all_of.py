"""slidewin.redis.all_of against a real redis-server and a real 3-master Redis Cluster: one
round trip decides every member; admitted by all, or charged nothing (no PASS, no lease, no
throttle slot, no warm-up tokens) with BLOCK counted on the refusers only and retry_after the
largest of theirs. The model: each member decided alone on a copy of its state (COPY), with
the same now_ns: the group admits when every copy admits, and then leaves each member's state
byte for byte as its copy's; refused, the admitting members' states are untouched and the
refusers' are their copies'."""

import asyncio
import random
import re
import threading

import pytest

from slidewin import BlockedError

from redis_servers import cluster, need_server, r, redis_server  # noqa: F401 (fixtures)

MS = 1_000_000
T0 = 1_700_000_000_000 * MS


def counts(lim, now_ns=None):
    s = lim.stats(now_ns) if now_ns is not None else lim.stats()
    sec = lim.interval_ms / 1000
    return round(s.pass_qps * sec), round(s.block_qps * sec)


def evalsha_calls(r):
    stats = r.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


# -- the model: each member alone on a copy of its state ------------------------------------

MIX = [
    dict(qps=4),
    dict(qps=3, behavior="throttle", max_queueing_ms=900),
    dict(qps=6, behavior="warm_up", warm_up_s=2),
    dict(qps=5, behavior="warm_up_throttle", warm_up_s=2, max_queueing_ms=600),
    dict(concurrency=3),
]


def _members(r, pick, tag):
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    out, twins = [], []
    for i in pick:
        kw = MIX[i]
        out.append(RedisLimiter(r, "{%s}.m%d" % (tag, i), **kw))
        twins.append(RedisLimiter(r, "{%s}.twin%d" % (tag, i), **kw))
    per = RedisKeyedLimiter(r, "{%s}.per" % tag, qps=5)
    out.append((per, "u1"))
    twins.append((RedisKeyedLimiter(r, "{%s}.pertwin" % tag, qps=5), "u1"))
    return out, twins


def _rkey(m):
    return m[0]._rkey(m[1]) if isinstance(m, tuple) else m.key


@pytest.mark.parametrize("seed", range(6))
def test_the_group_is_its_members_decided_alone_on_copies(r, seed):
    from slidewin.redis import all_of

    rnd = random.Random(seed)
    pick = rnd.sample(range(len(MIX)), rnd.randint(1, 3))
    members, twins = _members(r, pick, "s%d" % seed)
    group = all_of(*members)
    now = T0
    admitted = refused = 0
    for step in range(60):
        now += rnd.choice([0, 1, 50, 170, 400, 1300]) * MS
        ns = [rnd.choice([1, 1, 2, 3]) for _ in members]
        op = rnd.choice(["try", "reserve"])
        before = {}
        alone = []
        for m, t, n in zip(members, twins, ns):
            k, tk = _rkey(m), _rkey(t)
            before[k] = r.get(k)
            if before[k] is None:
                r.delete(tk)
            else:
                r.copy(k, tk, replace=True)
            lim, key = (t[0], (t[1],)) if isinstance(t, tuple) else (t, ())
            if op == "try":
                alone.append(lim.try_acquire(*key, n, now_ns=now))
            else:
                alone.append(lim.reserve(*key, n, now_ns=now))
        if op == "try":
            got = group.try_acquire(*ns, now_ns=now)
            want = all(alone)
        else:
            got = group.reserve(*ns, now_ns=now)
            want = None if any(x is None for x in alone) else max(alone)
        assert got == want, (step, op, ns, alone)
        ok = all(x is not None and x is not False for x in alone)
        admitted += ok
        refused += not ok
        for m, t, a in zip(members, twins, alone):
            k, tk = _rkey(m), _rkey(t)
            conc = not isinstance(m, tuple) and m.concurrency is not None
            passed = a is not None and a is not False
            if ok or not passed:  # written: as the copy decided alone
                if conc:  # the lease ids differ: the counts agree
                    assert m.stats(now).concurrency == t.stats(now).concurrency
                else:
                    assert r.get(k) == r.get(tk), (step, k)
            else:  # would have admitted, the group refused: untouched
                assert r.get(k) == before[k], (step, k)
    # the scenario exercises both outcomes
    assert admitted and refused


def test_a_refused_request_charges_nothing_and_blocks_the_refusers(r):
    from slidewin.redis import all_of, RedisLimiter

    rpm = RedisLimiter(r, "{acct}.rpm", rate="3/minute")
    tpm = RedisLimiter(r, "{acct}.tpm", rate="100/minute")
    both = all_of(rpm, tpm)
    assert [both.try_acquire(1, 40) for _ in range(3)] == [True, True, False]
    assert counts(rpm) == (2, 0)  # the third charged nothing
    assert counts(tpm) == (80, 40)  # its refusal counted on the refuser only
    with pytest.raises(BlockedError) as err:
        both.acquire(1, 40)
    assert "{acct}.tpm" in str(err.value) and "{acct}.rpm" not in str(err.value)
    assert 0 < err.value.retry_after <= 60 and err.value.limiter is both
    assert both.reserve(1, 20) == 0 and counts(rpm) == (3, 0) and counts(tpm) == (100, 80)
    assert both.try_acquire(1, 0 + 1) is False and counts(rpm) == (3, 1)


def test_retry_after_is_the_largest_refusers(r):
    from slidewin.redis import all_of, RedisLimiter

    a = RedisLimiter(r, "ra", qps=1, interval_ms=10_000, sample_count=10)   # 10 a window
    b = RedisLimiter(r, "rb", qps=1, interval_ms=60_000, sample_count=60)   # 60 a window
    c = RedisLimiter(r, "rc", qps=100)
    g = all_of(c, a, b)
    assert g.try_acquire(1, 10, 60)  # a and b full
    with pytest.raises(BlockedError) as e:
        g.acquire(1, 1, 1)
    ra = e.value.retry_after
    assert ra is not None and 10 < ra <= 60  # b's (a window of 60 s), not a's (10 s)
    assert counts(c) == (1, 0)  # c would admit: charged nothing for the refusal


def test_a_member_that_can_never_pass_gives_no_retry_after(r):
    from slidewin.redis import all_of, RedisLimiter

    g = all_of(RedisLimiter(r, "nv1", qps=5), RedisLimiter(r, "nv2", qps=100))
    with pytest.raises(BlockedError) as e:
        g.acquire(6, 1, timeout=5)  # 6 > 5: never; no wait
    assert e.value.retry_after is None


def test_ns_all_one_or_one_per_member(r):
    from slidewin.redis import all_of, RedisLimiter

    a, b = RedisLimiter(r, "na", qps=10), RedisLimiter(r, "nb", qps=10)
    g = all_of(a, b)
    assert g.try_acquire() and g.try_acquire(3) and g.try_acquire(1, 4)
    assert counts(a) == (5, 0) and counts(b) == (8, 0)
    with pytest.raises(TypeError, match="one n for all members or one per member"):
        g.try_acquire(1, 2, 3)
    with pytest.raises(ValueError, match="n must be >= 1"):
        g.try_acquire(1, 0)
    with pytest.raises(TypeError, match="n must be an int"):
        g.try_acquire(1.5)
    assert counts(a) == (5, 0) and counts(b) == (8, 0)


def test_one_round_trip_per_decision(r):
    from slidewin.redis import all_of, RedisKeyedLimiter, RedisLimiter

    g = all_of(RedisLimiter(r, "o1", qps=10), RedisLimiter(r, "o2", qps=10, behavior="throttle"),
               (RedisKeyedLimiter(r, "o3", qps=10), "k"))
    g.try_acquire()  # loads the script (NOSCRIPT then EVAL)
    r.config_resetstat()
    for _ in range(5):
        g.try_acquire()
    assert evalsha_calls(r) == 5


def test_bad_members(r, redis_server):
    from slidewin import Limiter
    from slidewin.redis import AsyncRedisLimiter, all_of, RedisKeyedLimiter, RedisLimiter

    a = RedisLimiter(r, "ba", qps=5)
    per = RedisKeyedLimiter(r, "bper", qps=5)
    with pytest.raises(ValueError, match="twice"):
        all_of(a, RedisLimiter(r, "ba", qps=5))
    with pytest.raises(ValueError, match="twice"):
        all_of((per, "x"), (per, "x"))
    assert all_of((per, "x"), (per, "y"), a).try_acquire()
    with pytest.raises(TypeError, match=r"\(limiter, key\)"):
        all_of(a, per)
    with pytest.raises(TypeError, match="slidewin.all_of"):
        all_of(a, Limiter(qps=5))
    with pytest.raises(TypeError, match="key"):
        all_of((per, 1.5))
    with pytest.raises(TypeError, match="at least one"):
        all_of()

    async def mixed():  # (redis-py's asyncio client is made in a loop: 3.9 binds its locks)
        with pytest.raises(TypeError, match="not a mix"):
            all_of(a, AsyncRedisLimiter(redis_server.async_client(), "bb", qps=5))

    asyncio.run(mixed())
    with pytest.raises(ValueError, match="one Redis client"):
        all_of(a, RedisLimiter(redis_server.client(), "bc", qps=5))


def test_another_layout_writes_nothing(r):
    from slidewin.redis import all_of, RedisLimiter

    a = RedisLimiter(r, "la", qps=5)
    RedisLimiter(r, "lb", qps=5, interval_ms=60_000, sample_count=60).try_acquire()
    b = RedisLimiter(r, "lb", qps=5)  # another client's layout for the same name
    before = r.get(a.key)
    with pytest.raises(ValueError, match="interval_ms/sample_count 60000/60"):
        all_of(a, b).try_acquire()
    assert r.get(a.key) == before


def test_a_foreign_value_is_a_state_error_and_writes_nothing(r):
    from slidewin.redis import all_of, RedisLimiter, RedisStateError

    a = RedisLimiter(r, "fa", qps=5, on_error="raise")
    b = RedisLimiter(r, "fb", qps=5, on_error="raise")
    r.set(b.key, b"\x05not ours")
    with pytest.raises(RedisStateError):
        all_of(a, b).try_acquire()
    assert r.get(a.key) is None


def test_on_error_is_each_members():
    import redis

    from slidewin.redis import all_of, RedisLimiter

    dead = redis.Redis(port=1, socket_connect_timeout=0.05, socket_timeout=0.05)
    allow = RedisLimiter(dead, "ea", qps=5)
    deny = RedisLimiter(dead, "ed", qps=5, on_error="deny")
    assert all_of(allow, RedisLimiter(dead, "eb", qps=5)).try_acquire()
    assert all_of(allow, deny).try_acquire() is False
    with pytest.raises(redis.ConnectionError):
        all_of(allow, RedisLimiter(dead, "er", qps=5, on_error="raise")).try_acquire()
    assert allow.errors == 3 and deny.errors_denied == 1


def test_entry_holds_every_members_lease_and_records_outcomes(r):
    from slidewin.redis import all_of, RedisKeyedLimiter, RedisLimiter

    conc = RedisLimiter(r, "ec", concurrency=1, interval_ms=60_000, sample_count=60)
    rate = RedisLimiter(r, "er", qps=100, interval_ms=60_000, sample_count=60)
    per = RedisKeyedLimiter(r, "eper", concurrency=2)
    g = all_of(conc, rate, (per, "u"))
    with g.entry():
        assert conc.stats().concurrency == 1 and rate.stats().concurrency == 1
        assert per.stats("u").concurrency == 1
        with pytest.raises(BlockedError):
            with g.entry():
                pass
        assert rate.stats().concurrency == 1  # the refused entry took nothing
    assert conc.stats().concurrency == 0 and per.stats("u").concurrency == 0
    with pytest.raises(KeyError):
        with g.entry():
            raise KeyError("x")
    s = rate.stats()
    assert (round(s.success_qps * 60), round(s.exception_qps * 60)) == (1, 1)
    assert counts(conc) == (2, 1) and counts(rate) == (2, 0)

    @g
    def call(x):
        return x * 2

    @g(on_block=lambda err, x: ("busy", x))
    def call2(x):
        with g.entry():  # the first holds conc's one slot: refused inside
            pass

    assert call(4) == 8
    with pytest.raises(BlockedError):
        call2(1)
    assert conc.stats().concurrency == 0

    async def co():
        return 1

    with pytest.raises(TypeError, match="async"):
        g(co)


def test_try_acquire_of_a_concurrency_member_is_held_until_its_release(r):
    from slidewin.redis import all_of, RedisLimiter

    conc = RedisLimiter(r, "hc", concurrency=2)
    other = RedisLimiter(r, "ho", qps=1000)
    g = all_of(conc, other)
    assert g.try_acquire() and g.try_acquire() and not g.try_acquire()
    assert conc.stats().concurrency == 2
    conc.release(2)
    assert conc.stats().concurrency == 0 and g.try_acquire()
    conc.release()


def test_acquire_with_a_timeout_waits_for_a_release(r, redis_server):
    from slidewin.redis import all_of, RedisLimiter

    conc = RedisLimiter(r, "wc", concurrency=1, interval_ms=60_000, sample_count=60)
    rate = RedisLimiter(r, "wr", qps=100, interval_ms=60_000, sample_count=60)
    g = all_of(rate, conc)
    holder = RedisLimiter(redis_server.client(), "wc", concurrency=1, interval_ms=60_000,
                          sample_count=60)
    assert holder.try_acquire()
    threading.Timer(0.2, holder.release).start()
    g.acquire(timeout=30)
    assert counts(rate) == (1, 0) and conc.stats().concurrency == 1
    with pytest.raises(BlockedError):
        g.acquire(timeout=0.05)
    assert counts(conc) == (2, 1) and counts(rate) == (1, 0)  # one BLOCK, on the refuser
    conc.release()


def _hammer(port, names, order, rounds, results, i):
    import redis

    from slidewin.redis import all_of, RedisKeyedLimiter, RedisLimiter

    c = redis.Redis(host="127.0.0.1", port=port)
    lims = [RedisLimiter(c, names[0], rate="50/minute"),
            RedisLimiter(c, names[1], rate="70/minute"),
            (RedisKeyedLimiter(c, names[2], rate="180/minute"), "k")]
    ns = [1, 2, 1]
    group = all_of(*[lims[j] for j in order])
    got = 0
    for _ in range(rounds):
        got += group.try_acquire(*[ns[j] for j in order])
    results[i] = got
    c.close()


def test_concurrent_clients_in_opposite_orders_exact_counts(r, redis_server):
    """8 threads, each its own client, half with the group in the opposite order: exactly
    the tightest member's worth is admitted; each member counts exactly its share."""
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    names = ["{h}.a", "{h}.b", "{h}.k"]
    # a: 50 a window (n=1), b: 70 (n=2: 35 requests), the key: 180 (n=1)
    results = [0] * 8
    ts = [threading.Thread(target=_hammer, args=(redis_server.port, names,
                                                 [0, 1, 2] if i % 2 else [2, 1, 0], 20,
                                                 results, i)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert sum(results) == 35
    a = RedisLimiter(r, names[0], rate="50/minute")
    b = RedisLimiter(r, names[1], rate="70/minute")
    per = RedisKeyedLimiter(r, names[2], rate="180/minute")
    assert counts(a) == (35, 0)  # never the refuser: no BLOCK
    assert counts(b) == (70, 2 * (160 - 35))  # every refusal is b's (n=2)
    assert round(per.stats("k").pass_qps * 60) == 35


def test_names_with_a_hash_tag_are_their_own_keys(r):
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    tagged = RedisLimiter(r, "{a}", qps=1)
    plain = RedisLimiter(r, "a", qps=1)
    assert tagged.key != plain.key and tagged.key == "slidewin:t:{a}"
    assert tagged.try_acquire() and plain.try_acquire()
    per = RedisKeyedLimiter(r, "{acct}.per", qps=1)
    assert per._rkey("x").startswith(b"slidewin:k:t:{acct}.per:")
    assert per.try_acquire("x") and not per.try_acquire("x") and per.try_acquire("y")


def test_async_group(redis_server):
    from slidewin.redis import AsyncRedisGroup, AsyncRedisKeyedLimiter, AsyncRedisLimiter, all_of

    async def main():
        c = redis_server.async_client()
        await c.flushall()
        rpm = AsyncRedisLimiter(c, "{x}.rpm", rate="3/minute")
        tpm = AsyncRedisLimiter(c, "{x}.tpm", rate="100/minute")
        conc = AsyncRedisLimiter(c, "{x}.c", concurrency=1)
        per = AsyncRedisKeyedLimiter(c, "{x}.per", qps=100)
        g = all_of(rpm, tpm)
        assert isinstance(g, AsyncRedisGroup)
        assert [await g.try_acquire(1, 40) for _ in range(3)] == [True, True, False]
        s = await rpm.stats()
        assert round(s.pass_qps * 60) == 2 and round(s.block_qps * 60) == 0
        with pytest.raises(BlockedError) as e:
            await g.acquire_async(1, 40)
        assert e.value.retry_after > 0
        assert await g.reserve(1, 20) == 0
        g2 = all_of(conc, (per, "u"))
        async with g2.entry():
            assert (await conc.stats()).concurrency == 1
            assert await g2.try_acquire() is False
        assert (await conc.stats()).concurrency == 0

        @g2
        async def call(x):
            return x

        @g2(on_block=lambda err: "busy")
        async def inner():
            return 1

        assert await call(3) == 3
        async with g2.entry():
            assert await inner() == "busy"  # conc's one slot is held
        assert per.local_totals() == {"pass": 3, "block": 0}  # never the refuser
        with pytest.raises(TypeError):
            g2(lambda: 1)
        await c.aclose()

    asyncio.run(main())


# -- Redis Cluster ------------------------------------------------------------------------------


def test_cluster_members_share_a_slot_else_a_clear_error(cluster):  # noqa: F811
    import redis

    from slidewin.redis import all_of, RedisKeyedLimiter, RedisLimiter

    rc = redis.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    rpm = RedisLimiter(rc, "{acct}.rpm", rate="3/minute")
    tpm = RedisLimiter(rc, "{acct}.tpm", rate="100/minute")
    per = RedisKeyedLimiter(rc, "{acct}.per-user", qps=100)
    g = all_of(rpm, tpm, (per, "alice"))
    assert [g.try_acquire(1, 40, 1) for _ in range(3)] == [True, True, False]
    assert counts(rpm) == (2, 0) and counts(tpm) == (80, 40)
    assert per.local_totals() == {"pass": 2, "block": 0}
    with g.entry(1, 10, 1):
        assert tpm.stats().concurrency == 10 and rpm.stats().concurrency == 1
    for a, b in (("rpm", "tpm"), ("{a}.rpm", "{b}.tpm")):
        x, y = RedisLimiter(rc, a, qps=1), RedisLimiter(rc, b, qps=1)
        assert rc.keyslot(x.key) != rc.keyslot(y.key)  # for these names
        with pytest.raises(ValueError, match="hash slot.*hash tag.*'{acct}.rpm'"):
            all_of(x, y)
    other = RedisKeyedLimiter(rc, "per-user", qps=1)
    assert rc.keyslot(other._rkey("alice")) != rc.keyslot(rpm.key)
    with pytest.raises(ValueError, match="hash tag"):
        all_of(rpm, (other, "alice"))
    rc.close()


def test_async_cluster_group(cluster):  # noqa: F811
    import redis.asyncio

    from slidewin.redis import AsyncRedisLimiter, all_of

    async def main():
        rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster[0].port)
        a = AsyncRedisLimiter(rc, "{z}.a", rate="5/minute")
        b = AsyncRedisLimiter(rc, "{z}.b", rate="60/minute")
        g = all_of(a, b)
        got = [await g.try_acquire(1, 30) for _ in range(3)]
        assert got == [True, True, False]
        s = await a.stats()
        assert round(s.pass_qps * 60) == 2 and round(s.block_qps * 60) == 0
        await rc.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("bad_value", ["string", "hash"])
def test_a_bad_state_names_the_key_of_the_member_that_holds_it(r, redis_server, bad_value):
    """Garbage (a foreign string, or another type: WRONGTYPE) under the SECOND member's key:
    the error names that key, not the first (healthy) member's, and writes nothing."""
    from slidewin.redis import (AsyncRedisKeyedLimiter, AsyncRedisLimiter, RedisKeyedLimiter,
                                RedisLimiter, RedisStateError, all_of)

    def spoil(key):
        if bad_value == "hash":
            r.hset(key, "f", "v")
        else:
            r.set(key, b"\x05not ours")

    good = RedisLimiter(r, "{n}.good", qps=5, on_error="raise")
    bad = RedisLimiter(r, "{n}.bad", qps=5, on_error="raise")
    assert good.try_acquire()
    before = r.get(good.key)
    spoil(bad.key)
    with pytest.raises(RedisStateError) as e:
        all_of(good, bad).try_acquire()
    assert repr(bad.key) in str(e.value) and good.key not in str(e.value), str(e.value)
    assert r.get(good.key) == before

    per = RedisKeyedLimiter(r, "{n}.per", qps=5, on_error="raise")
    spoil(per._rkey("u2"))
    with pytest.raises(RedisStateError) as e:
        all_of(good, (per, "u1"), (per, "u2")).try_acquire()
    assert repr(per._rkey("u2").decode()) in str(e.value), str(e.value)
    assert per._rkey("u1").decode() not in str(e.value) and good.key not in str(e.value)

    async def main():
        c = redis_server.async_client()
        agood = AsyncRedisLimiter(c, "{n}.good", qps=5, on_error="raise")
        abad = AsyncRedisLimiter(c, "{n}.bad", qps=5, on_error="raise")
        with pytest.raises(RedisStateError) as e:
            await all_of(agood, abad).try_acquire()
        assert repr(abad.key) in str(e.value) and agood.key not in str(e.value), str(e.value)
        await c.aclose()

    asyncio.run(main())


# -- charge: what a request used beyond its admission ------------------------------------------

def test_limiter_charge_counts_in_the_window_and_moves_a_throttle(r):
    """As the in-process test_all_of's: charge(n) counts n PASS now, never refuses; a
    throttle's queue moves by the cost of n; a concurrency limiter is charged 0 only."""
    from slidewin import KeyedLimiter, Limiter
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    now = T0
    tpm = RedisLimiter(r, "c.tpm", qps=10)
    assert tpm.reserve(4, now_ns=now) == 0
    assert tpm.charge(5, now_ns=now) is None             # 9 of 10 used
    assert tpm.try_acquire(2, now_ns=now) is False
    assert counts(tpm, now) == (9, 2)
    tpm.charge(3, now_ns=now)                             # never refuses: 12 of 10
    assert counts(tpm, now) == (12, 2)
    r.config_resetstat()
    tpm.charge(0, now_ns=now)                             # nothing: no round trip
    assert evalsha_calls(r) == 0
    for bad, err in ((-1, ValueError), (1.5, TypeError), (True, TypeError), ("1", TypeError),
                     (2**63, ValueError)):
        with pytest.raises(err):
            tpm.charge(bad)
    with pytest.raises(TypeError):
        tpm.charge()
    with pytest.raises(TypeError):
        tpm.charge(1, now_ns=1.5)
    assert counts(tpm, now) == (12, 2)
    pace = RedisLimiter(r, "c.pace", qps=10, behavior="throttle")
    twin = Limiter(qps=10, behavior="throttle")
    for lim in (pace, twin):
        assert lim.reserve(now_ns=now) == 0
        lim.charge(2, now_ns=now)
    assert pace.reserve(now_ns=now) == twin.reserve(now_ns=now) == 300 * MS
    with pytest.raises(ValueError, match="concurrency"):
        RedisLimiter(r, "c.conc", concurrency=3).charge(1)
    RedisLimiter(r, "c.conc", concurrency=3).charge(0)
    assert r.get(RedisLimiter(r, "c.conc", concurrency=3).key) is None
    per_user = RedisKeyedLimiter(r, "c.per", qps=10)
    per_user.charge("u", 10, now_ns=now)
    assert per_user.try_acquire("u", now_ns=now) is False
    assert per_user.try_acquire("v", now_ns=now) is True
    assert per_user.local_totals() == {"pass": 11, "block": 1}  # as KeyedLimiter's totals
    with pytest.raises(ValueError, match="concurrency"):
        RedisKeyedLimiter(r, "c.perc", concurrency=2).charge("u", 1)
    with pytest.raises(TypeError):
        per_user.charge(1.5, 1)
    with pytest.raises(TypeError):
        per_user.charge("u")
    kl = KeyedLimiter(qps=10)
    kl.charge("u", 10, now_ns=now)
    assert kl.try_acquire("u", now_ns=now) is False


def test_charges_saturate_and_a_throttle_pace_is_kept_at_most_a_queue_ahead(r):
    from slidewin import Limiter
    from slidewin.redis import RedisLimiter, all_of

    a = RedisLimiter(r, "{sat}.a", qps=10)
    w = RedisLimiter(r, "{sat}.w", qps=10, behavior="warm_up_throttle")
    for _ in range(2):
        all_of(a, w).charge(2**63 - 1, now_ns=T0)
    assert a.stats(T0).pass_qps == float(2**63 - 1)   # the core's int64 maximum
    assert a.try_acquire(now_ns=T0) is False and a.reserve(now_ns=T0 + 2000 * MS) == 0
    # a busy pace moves by the cost of n, but at most max_queueing_ms + one interval ahead
    # (further ahead it would read as another clock's and be dropped): refused for that long
    pace = RedisLimiter(r, "{sat}.p", qps=10, behavior="throttle", max_queueing_ms=500)
    twin = Limiter(qps=10, behavior="throttle", max_queueing_ms=500)
    for lim in (pace, twin):
        assert lim.reserve(now_ns=T0) == 0
        lim.charge(10**6, now_ns=T0)
        assert lim.reserve(now_ns=T0) is None and lim.reserve(now_ns=T0 + 900 * MS) is None
    assert pace.reserve(now_ns=T0 + 1500 * MS) == 100 * MS  # the pace kept: 1.5 s ahead
    assert twin.reserve(now_ns=T0 + 1500 * MS) is None      # in process: 10**5 s ahead


CHARGED = [dict(qps=4), dict(qps=3, behavior="throttle", max_queueing_ms=900)]


@pytest.mark.parametrize("seed", range(4))
def test_a_charge_leaves_the_state_an_admitted_request_leaves(r, seed):
    """The model: charging n leaves a member's key byte for byte as an admitted request of n
    would (reject, throttle, a keyed key), when one would be admitted; a charge that one
    would refuse counts all the same (never refuses)."""
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter, all_of

    rnd = random.Random(seed)
    tag = "cm%d" % seed
    members = [RedisLimiter(r, "{%s}.m%d" % (tag, i), **kw) for i, kw in enumerate(CHARGED)]
    twins = [RedisLimiter(r, "{%s}.t%d" % (tag, i), **kw) for i, kw in enumerate(CHARGED)]
    members.append((RedisKeyedLimiter(r, "{%s}.per" % tag, qps=5), "u"))
    twins.append((RedisKeyedLimiter(r, "{%s}.pertwin" % tag, qps=5), "u"))
    group = all_of(*members)
    now = T0
    same = over = 0
    for step in range(50):
        now += rnd.choice([0, 1, 50, 170, 400, 1300]) * MS
        ns = [rnd.choice([0, 1, 2, 3]) for _ in members]
        admitted = []
        for m, t, n in zip(members, twins, ns):
            k, tk = _rkey(m), _rkey(t)
            if r.get(k) is None:
                r.delete(tk)
            else:
                r.copy(k, tk, replace=True)
            lim, key = (t[0], (t[1],)) if isinstance(t, tuple) else (t, ())
            admitted.append(n == 0 or lim.reserve(*key, n, now_ns=now) is not None)
        if rnd.random() < 0.5:
            group.charge(*ns, now_ns=now)
        else:  # each member alone
            for m, n in zip(members, ns):
                lim, key = (m[0], (m[1],)) if isinstance(m, tuple) else (m, ())
                lim.charge(*key, n, now_ns=now)
        for m, t, a, n in zip(members, twins, admitted, ns):
            if a and n:
                assert r.get(_rkey(m)) == r.get(_rkey(t)), (step, m, n)
                same += 1
            elif n:
                over += 1
    assert same and over  # both: a charge an admission would make, and one beyond the limit


def test_group_charge_one_round_trip_one_n_per_member(r):
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter, all_of

    rpm = RedisLimiter(r, "{g}.rpm", qps=100)
    tpm = RedisLimiter(r, "{g}.tpm", qps=1000)
    conc = RedisLimiter(r, "{g}.conc", concurrency=2)
    per = RedisKeyedLimiter(r, "{g}.per", qps=1000)
    g = all_of(rpm, tpm, conc, (per, "u"))
    g.charge(0, 300, 0, 200, now_ns=T0)  # loads the script
    r.config_resetstat()
    assert g.charge(0, 300, 0, 200, now_ns=T0) is None
    assert evalsha_calls(r) == 1
    assert r.get(rpm.key) is None and r.get(conc.key) is None  # n=0: not charged
    assert counts(tpm, T0) == (600, 0) and round(per.stats("u", T0).pass_qps) == 400
    assert per.local_totals() == {"pass": 400, "block": 0}
    r.config_resetstat()
    g.charge(0, now_ns=T0)
    assert evalsha_calls(r) == 0  # all 0: nothing to charge
    with pytest.raises(ValueError, match="member 2 is a concurrency limiter"):
        g.charge(1, now_ns=T0)
    with pytest.raises(ValueError, match="member 2 is a concurrency limiter"):
        g.charge(1, 1, 1, 1, now_ns=T0)
    assert r.get(rpm.key) is None  # nothing charged on a bad call
    with pytest.raises(TypeError, match="one n per member"):
        g.charge(1, 2)
    with pytest.raises(ValueError):
        g.charge(0, -1, 0, 0)
    with pytest.raises(TypeError):
        g.charge(0, 1.5, 0, 0)
    with pytest.raises(TypeError):
        g.charge(0, 1, 0, 0, now_ns="x")
    g2 = all_of(rpm, tpm)
    with pytest.raises(TypeError, match="one n for every member"):
        g2.charge(now_ns=T0)  # as the in-process group: no default n for a charge
    g2.charge(2, now_ns=T0)   # one n: the same for all
    assert counts(rpm, T0) == (2, 0) and counts(tpm, T0) == (602, 0)


def test_group_charge_is_checked_and_writes_all_or_nothing(r, monkeypatch):
    """A member's foreign state or layout: nothing written, the error names it; a reply no
    script returns is a RedisReplyError (a Redis reply is input)."""
    from slidewin.redis import RedisLimiter, RedisReplyError, RedisStateError, all_of
    from slidewin.redis import _transport

    a = RedisLimiter(r, "{v}.a", qps=5, on_error="raise")
    b = RedisLimiter(r, "{v}.b", qps=5, on_error="raise")
    r.set(b.key, b"\x05not ours")
    with pytest.raises(RedisStateError) as e:
        all_of(a, b).charge(1)
    assert repr(b.key) in str(e.value)
    assert r.get(a.key) is None
    with pytest.raises(RedisStateError):
        b.charge(1)
    r.delete(b.key)
    RedisLimiter(r, "{v}.b", qps=5, interval_ms=60_000, sample_count=60).charge(1)
    with pytest.raises(ValueError, match="interval_ms/sample_count 60000/60"):
        all_of(a, b).charge(1)
    with pytest.raises(ValueError, match="interval_ms/sample_count 60000/60"):
        b.charge(1)
    assert r.get(a.key) is None
    two = all_of(a, RedisLimiter(r, "{v}.c", qps=5))
    for bad in ([1, 0], [[1, 0, 0]], b"OK", [[0, 0, 0], [1, 0, 0]], [[1, 5, 0], [1, 0, 0]],
                [[1, 0, 0], [1, 0, -1]], [[1, 0, 0], "x"]):
        monkeypatch.setattr(_transport._SyncTransport, "call", lambda *a, **k: bad)
        with pytest.raises(RedisReplyError):
            two.charge(1)
    for bad in ([1, 0], [1, 5, 0], [0, 0, 0], [1, 0, 0, 0], b"OK", None, [2, 0, -1]):
        monkeypatch.setattr(_transport._SyncTransport, "call", lambda *a, **k: bad)
        with pytest.raises(RedisReplyError):
            a.charge(1)


def test_charge_when_redis_cannot_be_reached():
    """No decision to answer: on_error="raise" raises; otherwise counted in .errors (the
    charge is lost, as an exit's outcome is)."""
    import redis

    from slidewin.redis import RedisLimiter, all_of

    dead = redis.Redis(port=1, socket_connect_timeout=0.05, socket_timeout=0.05)
    quiet = RedisLimiter(dead, "ca", qps=5)
    loud = RedisLimiter(dead, "cb", qps=5, on_error="raise")
    quiet.charge(1)
    all_of(quiet, RedisLimiter(dead, "cc", qps=5)).charge(1)
    assert quiet.errors == 2
    with pytest.raises(redis.ConnectionError):
        loud.charge(1)
    with pytest.raises(redis.ConnectionError):
        all_of(quiet, loud).charge(1)


def test_cluster_group_charge(cluster):  # noqa: F811
    import redis

    from slidewin.redis import RedisKeyedLimiter, RedisLimiter, all_of

    rc = redis.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    rpm = RedisLimiter(rc, "{ch}.rpm", rate="3/minute")
    tpm = RedisLimiter(rc, "{ch}.tpm", rate="100/minute")
    per = RedisKeyedLimiter(rc, "{ch}.per-user", rate="100/minute")
    g = all_of(rpm, tpm, (per, "alice"))
    assert g.try_acquire(1, 40, 40)
    g.charge(0, 70, 70)                               # 110 of 100: over the limit
    assert counts(rpm) == (1, 0) and counts(tpm) == (110, 0)
    assert round(per.stats("alice").pass_qps * 60) == 110
    assert g.try_acquire(1, 1, 1) is False
    assert counts(rpm) == (1, 0) and counts(tpm) == (110, 1)
    rpm.charge(1)
    per.charge("alice", 1)
    assert counts(rpm) == (2, 0) and round(per.stats("alice").pass_qps * 60) == 111
    rc.close()


def test_async_cluster_group_charge(cluster):  # noqa: F811
    import redis.asyncio

    from slidewin.redis import AsyncRedisLimiter, all_of

    async def main():
        rc = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster[0].port)
        a = AsyncRedisLimiter(rc, "{zc}.a", rate="5/minute")
        b = AsyncRedisLimiter(rc, "{zc}.b", rate="60/minute")
        g = all_of(a, b)
        await g.charge(0, 61)
        assert await g.try_acquire(1, 1) is False
        await a.charge(5)
        s, t = await a.stats(), await b.stats()
        assert round(s.pass_qps * 60) == 5 and round(t.pass_qps * 60) == 61
        await rc.aclose()

    asyncio.run(main())


# -- entry(timeout=): waiting for the window --------------------------------------------------

def test_entry_with_a_timeout_waits_for_the_window_to_slide(r):
    import time

    from slidewin.redis import RedisLimiter, all_of

    rpm = RedisLimiter(r, "{et}.rpm", qps=100)
    tpm = RedisLimiter(r, "{et}.tpm", qps=5, interval_ms=2000, sample_count=2)  # 10 a window
    g = all_of(rpm, tpm)
    g.charge(0, 10)                                   # full until the charge slides out
    with pytest.raises(BlockedError) as e:
        with g.entry(1, 1):                           # no timeout: refused at once
            pass
    assert 0 < e.value.retry_after <= 2
    t0 = time.monotonic()
    with pytest.raises(BlockedError):
        with g.entry(1, 1, timeout=0.2):              # not long enough: refused, after 0.2 s
            pass
    assert time.monotonic() - t0 >= 0.2
    assert counts(rpm) == (0, 0) and counts(tpm) == (10, 2)  # one BLOCK per refusal
    with g.entry(1, 1, timeout=30):                   # admitted once the window slid
        assert tpm.stats().concurrency == 1 and rpm.stats().concurrency == 1
    assert counts(rpm) == (1, 0) and counts(tpm)[0] == 1

    g.charge(0, 10)

    @g
    def at_once():
        return "ran"

    @g(timeout=30)
    def waits():
        return "ran"

    with pytest.raises(BlockedError):
        at_once()
    assert waits() == "ran"
    with pytest.raises(TypeError):
        g.entry(timeout="1")
    with pytest.raises(ValueError):
        g.entry(timeout=-1)
    with pytest.raises(TypeError):
        g(timeout="1")


def test_entry_timeout_for_a_member_that_can_never_pass_is_no_wait(r):
    import time

    from slidewin.redis import RedisLimiter, all_of

    g = all_of(RedisLimiter(r, "{nw}.a", qps=5), RedisLimiter(r, "{nw}.b", qps=100))
    t0 = time.monotonic()
    with pytest.raises(BlockedError) as e:
        with g.entry(6, 1, timeout=60):               # 6 > 5: never; no wait
            pass
    assert e.value.retry_after is None and time.monotonic() - t0 < 30


def test_async_group_charge_and_entry_timeout(redis_server):
    import time

    from slidewin.redis import AsyncRedisKeyedLimiter, AsyncRedisLimiter, all_of

    async def main():
        c = redis_server.async_client()
        rpm = AsyncRedisLimiter(c, "{ae}.rpm", qps=100)
        tpm = AsyncRedisLimiter(c, "{ae}.tpm", qps=5, interval_ms=2000, sample_count=2)
        per = AsyncRedisKeyedLimiter(c, "{ae}.per", qps=1000)
        conc = AsyncRedisLimiter(c, "{ae}.conc", concurrency=1)
        await tpm.reset()
        g = all_of(rpm, tpm, conc, (per, "u"))
        assert await g.charge(0, 10, 0, 7) is None
        s = await tpm.stats()
        assert round(s.pass_qps * 2) == 10 and per.local_totals()["pass"] == 7
        with pytest.raises(ValueError, match="member 2 is a concurrency limiter"):
            await g.charge(1)
        with pytest.raises(TypeError, match="one n per member"):
            await g.charge(1, 2)
        with pytest.raises(BlockedError):
            async with g.entry():
                pass
        t0 = time.monotonic()
        with pytest.raises(BlockedError):
            async with g.entry(timeout=0.2):
                pass
        assert time.monotonic() - t0 >= 0.2
        async with g.entry(timeout=30):
            assert (await conc.stats()).concurrency == 1
        assert (await conc.stats()).concurrency == 0
        await tpm.charge(10)
        await per.charge("u", 3)
        assert per.local_totals()["pass"] == 11
        with pytest.raises(ValueError, match="concurrency"):
            await conc.charge(1)

        @g(timeout=30)
        async def waits():
            return "ran"

        @g
        async def at_once():
            return "ran"

        with pytest.raises(BlockedError):
            await at_once()
        assert await waits() == "ran"
        await c.aclose()

    asyncio.run(main())


# -- the worked example across hosts: an LLM client against a fake API -------------------------

def _docs_block(marker):
    """The ```python block of docs/redis.md holding `marker` (marked not run: it needs a
    server), with its server's address made this test's."""
    import os
    import re

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                        "redis.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks = [b for b in re.findall(r"^```python[ \t]*\n(.*?)^```", text, flags=re.S | re.M)
              if marker in b]
    assert len(blocks) == 1, marker
    return blocks[0]


def test_the_docs_llm_example_runs_against_a_real_server(r, redis_server, capsys):
    r.flushall()
    code = _docs_block("llm = all_of(")
    assert 'port=6379' in code
    code = code.replace("port=6379", "port=%d" % redis_server.port)
    exec(compile(code, "docs/redis.md", "exec"), {"__name__": "docs_example"})
    for line, shown in zip(capsys.readouterr().out.splitlines(),
                           re.findall(r"print\(.*\)\s+# (.*?)(?::|$)", code, flags=re.M)):
        assert shown.startswith(line), (line, shown)


def test_llm_client_across_hosts_estimates_then_charges_against_a_fake_api(r, redis_server):
    """Two hosts (each its own client), three threads each, one provider: never above its
    concurrency, every call counted once, every token it used charged."""
    from test_all_of import FakeLLM, llm_clients

    from slidewin.redis import RedisKeyedLimiter, RedisLimiter, all_of

    api = FakeLLM(concurrency=3)
    hosts = []
    for _ in range(2):
        c = redis_server.client()
        hosts.append(dict(
            c=c,
            rpm=RedisLimiter(c, "{llm}.rpm", rate="1000000/minute"),
            tpm=RedisLimiter(c, "{llm}.tpm", rate="1000000000/minute"),
            in_flight=RedisLimiter(c, "{llm}.in-flight", concurrency=3),
            per_user=RedisKeyedLimiter(c, "{llm}.per-user", rate="1000000000/minute")))

    def group_of(w, user):
        h = hosts[w % 2]
        return all_of(h["rpm"], h["tpm"], h["in_flight"], (h["per_user"], user))

    charged = llm_clients(api, group_of, 8, 30)
    assert api.calls == 48 and api.peak <= 3  # never a 429
    h = hosts[0]
    assert counts(h["rpm"]) == (48, 0) and h["in_flight"].stats().concurrency == 0
    assert counts(h["tpm"])[0] == sum(charged) >= sum(api.used)
    assert sum(x["per_user"].local_totals()["pass"] for x in hosts) == sum(charged)
    for x in hosts:
        x["c"].close()
