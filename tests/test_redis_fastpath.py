"""Which clients take slidewin.redis's fast path (a decision written and read on the socket
of a connection of the client's pool, slidewin/redis/_fast.py) and which take redis-py's
public API (EVALSHA/EVAL through the client): the redis-py releases it knows are pinned here,
any other client still decides correctly, and a reply no script returns is on_error's, never
a crash, on either path."""

import asyncio
import socket
import threading

import pytest

redis = pytest.importorskip("redis")

from slidewin.redis import (AsyncRedisLimiter, RedisKeyedLimiter, RedisLimiter,  # noqa: E402
                            RedisReplyError, all_of)
from redis_servers import r, redis_server  # noqa: E402,F401 (fixtures)
from slidewin.redis import _fast, _transport, _wire  # noqa: E402

NOW = 1_700_000_000_000_000_000


class _Wrapper:
    """A client of a shape slidewin does not know (a proxy, a look-alike): only the public
    commands of the client it wraps."""

    def __init__(self, client):
        self._c = client

    def evalsha(self, *a):
        return self._c.evalsha(*a)

    def eval(self, *a):
        return self._c.eval(*a)

    def delete(self, *a):
        return self._c.delete(*a)


def _decides(lim):
    """qps=2: two admitted, the third refused, at one virtual instant."""
    return [lim.try_acquire(now_ns=NOW) for _ in range(3)] == [True, True, False]


def test_the_fast_path_is_pinned_to_the_redis_py_releases_it_knows(monkeypatch):
    assert _fast.FAST_VERSIONS == (5, 6, 7, 8)
    assert _fast._version(redis.__version__)[0] in _fast.FAST_VERSIONS  # the installed one
    assert _fast.fast(redis.Redis(port=1))  # constructing connects nothing
    import redis.asyncio as aredis

    async def built_in_a_loop():  # Python 3.9: redis.asyncio's pool needs a running loop
        return aredis.Redis(port=1)

    assert _fast.fast(asyncio.run(built_in_a_loop()))
    for v in ("4.6.0", "9.0.0", "10.1", "", "dev"):
        monkeypatch.setattr(redis, "__version__", v)
        assert not _fast.fast(redis.Redis(port=1)), v
    assert _fast._version("5.0.1") == (5, 0) and _fast._version("8.1.0b1") == (8, 1)


def test_clients_of_other_shapes_take_the_public_api():
    assert not _fast.fast(_Wrapper(redis.Redis(port=1)))
    assert not _fast.fast(object())

    class OtherPool(redis.ConnectionPool):
        pass

    # a pool of redis-py's kind with a connection class that is not redis-py's
    other = redis.Redis(connection_pool=OtherPool(connection_class=object))
    assert not _fast.fast(other)


def test_the_installed_redis_py_takes_the_fast_path(r):
    lim = RedisLimiter(r, "fp", qps=2)
    assert _decides(lim)
    assert lim._t.fast is True


def test_a_redis_py_release_it_does_not_know_decides_through_the_public_api(r, monkeypatch):
    monkeypatch.setattr(redis, "__version__", "99.0.0")
    calls = []
    real = _transport._public_call
    monkeypatch.setattr(_transport, "_public_call",
                        lambda *a: calls.append(a[1]) or real(*a))
    lim = RedisLimiter(r, "pub", qps=2)
    assert _decides(lim)
    assert lim._t.fast is False and len(calls) == 3
    # the other operations too: stats, charge, entry (EXIT), a keyed limiter, all_of
    assert lim.stats(now_ns=NOW).pass_qps == 2
    lim.charge(1, now_ns=NOW)
    per = RedisKeyedLimiter(r, "pubk", qps=1)
    assert per.try_acquire("a") and not per.try_acquire("a") and per.try_acquire("b")
    c = RedisLimiter(r, "pubc", concurrency=1)
    with c.entry():
        assert not c.try_acquire()
    assert c.try_acquire()
    c.release()
    g = all_of(RedisLimiter(r, "{g}.a", qps=1), RedisLimiter(r, "{g}.b", qps=5))
    assert g.try_acquire() and not g.try_acquire()
    r.script_flush()  # NOSCRIPT: EVAL once, through the public API too
    assert RedisLimiter(r, "pub2", qps=1).try_acquire()


def test_a_wrapped_client_decides_through_the_public_api(r):
    lim = RedisLimiter(_Wrapper(r), "wrap", qps=2)
    assert _decides(lim)
    assert lim._t.fast is False
    lim.reset()
    assert r.get(lim.key) is None


def test_a_connection_without_a_socket_turns_the_client_to_the_public_api(r, monkeypatch):
    def not_fast(pool, conn, *a):
        pool.release(conn)
        raise _fast._NotFast

    monkeypatch.setattr(_fast, "call_pool", not_fast)
    lim = RedisLimiter(r, "nosock", qps=2)
    assert _decides(lim)
    assert lim._t.fast is False


def test_async_clients_of_an_unknown_release_decide_through_the_public_api(redis_server,
                                                                          monkeypatch):
    monkeypatch.setattr(redis, "__version__", "4.0.0")

    async def main():
        c = redis_server.async_client()
        await c.flushall()
        lim = AsyncRedisLimiter(c, "apub", qps=2)
        got = [await lim.try_acquire(now_ns=NOW) for _ in range(3)]
        fast = lim._t.fast
        async with lim.entry(timeout=5):
            pass
        await c.aclose()
        return got, fast

    assert asyncio.run(main()) == ([True, True, False], False)


def test_the_wrong_kind_of_with_on_an_entry_is_a_clear_type_error():
    lim = RedisLimiter(redis.Redis(port=1), "k", qps=1)

    async def enter():
        async with lim.entry():
            pass

    with pytest.raises(TypeError, match="RedisLimiter is entered with `with`"):
        asyncio.run(enter())


# -- a reply no script returns, on either path: on_error, never a crash -------------------


class _FakeServer:
    """Answers EVALSHA/EVAL with `reply` (raw RESP bytes), HELLO in the protocol asked for, any
    other command +OK."""

    def __init__(self, reply):
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        buf = b""
        with conn:
            while True:
                try:
                    cmd, end = _wire._parse(buf, 0)
                except _wire._Incomplete:
                    try:
                        more = conn.recv(65536)
                    except OSError:
                        return
                    if not more:
                        return
                    buf += more
                    continue
                buf = buf[end:]
                name = cmd[0].upper() if cmd else b""
                if name in (b"EVALSHA", b"EVAL"):
                    conn.sendall(self.reply)
                elif name == b"HELLO":  # redis-py's handshake (RESP3 since redis-py 8)
                    conn.sendall(b"%%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n"
                                 b"$5\r\nproto\r\n:%s\r\n" % cmd[1])
                else:
                    conn.sendall(b"+OK\r\n")

    def close(self):
        self.sock.close()


NESTED = b"*1\r\n" * 5000 + b":1\r\n"  # deeper than any reader's recursion may go


GARBLED = b"*3\r\n:1\r\n:0\r\n:x\r\n"  # an integer that is not one: redis-py's int() raises


@pytest.mark.parametrize("reply", [NESTED, b"*3\r\n:1\r\n:0\r\n+x\r\n", b"~1\r\n:1\r\n",
                                   b"*2\r\n:1\r\n$-1\r\n", b":7\r\n", GARBLED])
@pytest.mark.parametrize("path", ["fast", "public", "async"])
def test_a_reply_no_script_returns_is_on_errors_on_either_path(reply, path, monkeypatch):
    if path == "public":
        monkeypatch.setattr(redis, "__version__", "99.0.0")
    srv = _FakeServer(reply)
    is_async = path == "async"
    from slidewin.redis import AsyncRedisLimiter

    async def main():
        c = (redis.asyncio.Redis if is_async else redis.Redis)(port=srv.port, socket_timeout=2)
        kind = AsyncRedisLimiter if is_async else RedisLimiter

        async def ask(lim):
            got = lim.try_acquire()
            return await got if is_async else got

        lim = kind(c, "bad", qps=1)
        assert await ask(lim) is True  # on_error="allow"
        assert lim.errors == 1 and lim.errors_allowed == 1
        assert is_async or lim._t.fast is (path == "fast")
        with pytest.raises(redis.RedisError):
            await ask(kind(c, "bad", qps=1, on_error="raise"))
        await c.aclose() if is_async else c.close()

    try:
        asyncio.run(main())
    finally:
        srv.close()


def test_a_deeply_nested_reply_is_unreadable_not_a_recursion_error():
    with pytest.raises(RedisReplyError, match="nested"):
        _wire._parse(NESTED, 0)
    assert _wire._parse(b"*1\r\n*1\r\n*1\r\n:5\r\n", 0) == ([[[5]]], 16)
