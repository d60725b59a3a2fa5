"""The fast path of slidewin.redis: a sync decision written and read on the socket of a
connection of the client's own redis-py pool (about 1.4x a PING round trip; through
``client.evalsha``: 2x). It relies on what redis-py does not promise (``Connection._sock``,
the cluster client's routing), so only redis-py's own classes of a release in FAST_VERSIONS
take it; any other client, or a connection without ``_sock``, takes the public API."""
from __future__ import annotations

import socket
from typing import Any, List, Tuple

from ._scripts import _Script
from ._wire import (_ASKING, NoScriptError, ReadOnlyError, RedisError, RedisReplyError,
                    ResponseError, _eval_of, _Incomplete, _parse)
from ._wire import redis as _redis

# the redis-py releases (major versions) whose connection internals the fast path was
# tested on; tests/test_redis_wire.py pins that the installed one is among them
FAST_VERSIONS = (5, 6, 7, 8)


class _NotFast(Exception):
    """The connection is not one the fast path knows (no ``_sock``): the public API."""


def _version(v: str) -> Tuple[int, ...]:
    return tuple(int("0" + "".join(c for c in part if c.isdigit())) for part in v.split(".")[:2])


def fast(client: Any) -> bool:
    """Whether `client` takes the fast path (an asyncio client's: its decision packed on
    its connection, or on a cluster sent to the key's node by name)."""
    if _redis is None or _version(getattr(_redis, "__version__", "0"))[0] not in FAST_VERSIONS:
        return False
    import redis.asyncio as aredis
    from redis.asyncio.cluster import RedisCluster as ARedisCluster
    from redis.cluster import RedisCluster

    for cluster, routing in ((RedisCluster, ("get_redis_connection", "get_node")),
                             (ARedisCluster, ("initialize", "execute_command"))):
        if isinstance(client, cluster):
            return all(callable(getattr(client, a, None))
                       for a in ("get_node_from_key",) + routing)
    for mod in (_redis, aredis):
        if isinstance(client, mod.Redis):
            pool = getattr(client, "connection_pool", None)
            cls = getattr(pool, "connection_class", None)
            return (isinstance(pool, mod.ConnectionPool) and isinstance(cls, type)
                    and issubclass(cls, mod.connection.AbstractConnection)
                    and callable(getattr(pool, "get_connection", None)))
    return False


def _exchange(sock: Any, data: bytes, count: int) -> List[Any]:
    """Write data, read count replies; socket errors as redis-py's."""
    try:
        sock.sendall(data)
        buf = sock.recv(65536)
        if count == 1 and buf[:5] == b"*3\r\n:":  # a decision's [verdict, wait, retry]
            parts = buf.split(b"\r\n")
            if (len(parts) == 5 and not parts[4] and parts[2][:1] == b":"
                    and parts[3][:1] == b":"):
                return [[int(parts[1][1:]), int(parts[2][1:]), int(parts[3][1:])]]
        while True:
            try:
                out = []
                pos = 0
                for _ in range(count):
                    v, pos = _parse(buf, pos)
                    out.append(v)
            except _Incomplete:  # (an empty buf too: a closed connection reads empty again)
                more = sock.recv(65536)
                if not more:
                    raise _redis.ConnectionError("Connection closed by server.") from None
                buf += more
                continue
            if pos != len(buf):  # more than was asked: out of step
                raise RedisReplyError("Redis sent more than one reply")
            return out
    except socket.timeout:
        raise _redis.TimeoutError("Timeout reading from socket") from None
    except (ValueError, IndexError) as e:  # a garbled length or type byte
        raise RedisReplyError("unreadable reply from Redis: %s" % e) from None
    except OSError as e:
        if isinstance(e, RedisError):
            raise
        raise _redis.ConnectionError("Error while talking to Redis: %s" % e) from None


def out_of_step(e: BaseException) -> bool:
    """Whether a call's connection is closed: it may be out of step (a timeout, a broken
    connection: the call is not repeated; an error reply leaves it in step), or its server is
    a replica now (a failover: a new connection finds the primary)."""
    return (not isinstance(e, ResponseError) or isinstance(e, ReadOnlyError)
            or str(e).startswith("READONLY"))


def call_pool(pool: Any, conn: Any, script: _Script, packed: bytes, asking: bool) -> Any:
    """One script call on the socket of `conn` of `pool`, given back to the pool (closed:
    out_of_step). The pool checked the connection (a server that closed it idle, say by a
    restart, gave a new connection, never a failed decision)."""
    sock = getattr(conn, "_sock", _NotFast)
    if sock is _NotFast:
        pool.release(conn)
        raise _NotFast
    try:
        if sock is None:
            conn.connect()
            sock = conn._sock
        reply = _send(sock, packed, asking)
        if isinstance(reply, NoScriptError):
            # the script cache was flushed: nothing ran, so EVAL is no retry
            reply = _send(sock, _eval_of(packed, script.source), asking)
        if isinstance(reply, ResponseError):
            raise reply
        return reply
    except BaseException as e:
        if out_of_step(e):
            conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _send(sock: Any, cmd: bytes, asking: bool) -> Any:
    """One command's reply (after ASKING's, when `asking`)."""
    if not asking:
        return _exchange(sock, cmd, 1)[0]
    ok, reply = _exchange(sock, _ASKING + cmd, 2)
    if isinstance(ok, ResponseError):
        raise ok
    return reply
