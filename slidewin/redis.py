"""One limit across hosts: slidewin's limiters with their state in Redis.

    import redis
    from slidewin.redis import RedisLimiter, RedisKeyedLimiter

    r = redis.Redis(host="localhost", port=6379)        # or redis.RedisCluster(...)
    lim = RedisLimiter(r, "api", qps=1000)              # client, name, then Limiter's arguments
    per_user = RedisKeyedLimiter(r, "per-user", qps=10)

``AsyncRedisLimiter`` / ``AsyncRedisKeyedLimiter`` take a ``redis.asyncio`` client; their
methods are coroutines.

- The same decisions as the in-process Limiter for the same ``now_ns``; here ``now_ns`` is
  wall-clock time (ns since the epoch, as ``time.time_ns()``). Omitted, the Redis server's
  clock (``TIME``) is used, so hosts with skewed clocks share one window.
- Redis holds the counts and the controllers' state (one string per limiter, one per key of a
  keyed limiter); the settings belong to each client. A name used with another
  ``interval_ms``/``sample_count`` raises ValueError at its first decision.
- One round trip per decision: one Lua script per behavior, called with EVALSHA (on
  NOSCRIPT the script is sent once with EVAL), written on the connection's socket and its
  reply read here. Keys expire once idle.
- Decisions use the client's own connection pool (a BlockingConnectionPool is waited on;
  never more connections than its max_connections); a connect made for a decision is tried
  once (the pool's retry policy skips its retries during slidewin's calls only).
- ``on_error="allow"`` (default) | ``"deny"`` | ``"raise"``: what a decision gives when
  Redis is unreachable, times out, answers an error (OOM, READONLY, a key of another type:
  RedisStateError) or nonsense (RedisReplyError); counted in ``.errors`` and logged, named
  for what it is, at most once a minute per limiter. A call that timed out is never retried
  (it may have applied, even after its caller gave up: a stalled server runs it when it
  resumes).
- A keyed limiter's key is at most MAX_KEY_BYTES (1024) bytes once encoded.
- In-flight counts (concurrency limiters, and ``entry()`` on every limiter) are leases that
  expire ``lease_ms`` (default 5 s) after they were taken or last renewed; this process
  renews the leases it holds (a daemon thread per client, or a task on the event loop;
  ``lease_ms`` is at least 100), so a crashed
  client's slots, and those of a decision that ran after its caller timed out, come back.
- Constructing contacts no server; the first decision does.

See the README, "Across hosts: slidewin.redis".
"""
from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import hashlib
import inspect
import itertools
import logging
import math
import os
import re
import socket
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union, cast

from . import _rate, _redis_lua
from ._core import BlockedError, Stats
from ._limiter import _MISSING, Limiter, _check_timeout, _decorate_entries

try:  # redis-py is an optional extra: pip install "slidewin[redis]"
    import redis as _redis
    from redis.exceptions import (NoScriptError, ReadOnlyError, RedisClusterException,
                                  RedisError, ResponseError)
except ImportError:  # pragma: no cover - exercised only without the extra
    _redis = None  # type: ignore[assignment]

    class RedisError(Exception):  # type: ignore[no-redef]
        pass

    class NoScriptError(RedisError):  # type: ignore[no-redef]
        pass

    class ResponseError(RedisError):  # type: ignore[no-redef]
        pass

    class ReadOnlyError(ResponseError):  # type: ignore[no-redef]
        pass

    class RedisClusterException(Exception):  # type: ignore[no-redef]
        pass


__all__ = [
    "RedisLimiter",
    "RedisKeyedLimiter",
    "AsyncRedisLimiter",
    "AsyncRedisKeyedLimiter",
    "RedisReplyError",
    "RedisStateError",
    "MAX_KEY_BYTES",
]

log = logging.getLogger("slidewin.redis")

# verdicts of the scripts (and of the C core)
BLOCK, PASS, NEVER, LAYOUT = 0, 1, 2, 3
# flags understood by the scripts
F_TRY, F_PRIO, F_NO_BLOCK, F_ENTRY, F_RETRY, F_LEAN, F_MINUTE = 1, 2, 4, 8, 16, 32, 64
# EXIT outcomes
_OUT_NONE, _OUT_SUCCESS, _OUT_EXCEPTION, _OUT_BLOCK, _OUT_RENEW = 0, 1, 2, 3, 4

# what a decision meets when Redis cannot decide (on_error): redis-py's errors, socket
# errors, and a Cluster client's "no reachable node" (not a RedisError)
_UNREACHABLE = (RedisError, OSError, RedisClusterException)
_NS_MAX = 9223372036854774784  # the largest double below 2**63: the scripts saturate there
_NAME_RE = re.compile(r"[A-Za-z0-9._:/-]{1,200}\Z")
_ON_ERROR = ("allow", "deny", "raise")
_LOG_EVERY_S = 60.0


class RedisReplyError(RedisError):
    """Redis answered something a slidewin script never returns (a proxy in the way, a
    server of another kind): handled per ``on_error``."""


class RedisStateError(RedisReplyError, ResponseError):
    """The limiter's key holds a value no slidewin client wrote: another type (WRONGTYPE),
    or a string of another application. Handled per ``on_error``; ``reset()`` (or deleting
    the key) starts afresh. A ResponseError, as the server's error reply it comes from."""


MAX_KEY_BYTES = 1024  # a keyed limiter's key, encoded (str as UTF-8, int as its digits)
MIN_LEASE_MS = 100  # the shortest lease: renewed every lease_ms / 3


def _named(err: BaseException, key: Any) -> BaseException:
    """An error reply about the key's value, named for what it is (RedisStateError)."""
    if not isinstance(err, ResponseError) or isinstance(err, RedisStateError):
        return err
    text = str(err)
    k = _text(key)
    if text.startswith("WRONGTYPE") or text.startswith("Operation against a key holding"):
        return RedisStateError(
            "the key %r holds another type of value (WRONGTYPE), not a slidewin state: "
            "another application's key? Delete it, reset(), or use another name" % (k,))
    if "holds no slidewin state" in text:
        return RedisStateError(
            "the key %r holds no slidewin state (a value no slidewin client wrote: another "
            "application's key?); delete it, reset(), or use another name" % (k,))
    return err


def _what(err: BaseException) -> str:
    """What an error means for a decision, in the log's words."""
    if isinstance(err, RedisStateError):
        return "found a value no slidewin client wrote under its key"
    if isinstance(err, ReadOnlyError):
        return ("was answered READONLY: the server is a replica (a failover?); the "
                "connection is closed, the next decision connects anew")
    if _redis is not None and isinstance(err, _redis.exceptions.OutOfMemoryError):
        return "was refused: the Redis server is out of memory (maxmemory, OOM)"
    if _redis is not None and isinstance(err, _redis.exceptions.BusyLoadingError):
        return "was refused: the Redis server is loading its data set"
    if isinstance(err, NoScriptError):
        return "was refused: the server does not keep slidewin's script (NOSCRIPT after EVAL)"
    if isinstance(err, ResponseError):
        return "was refused by Redis with an error reply"
    if isinstance(err, RedisReplyError):
        return "got a reply no slidewin script returns"
    return "could not reach Redis"


class _Script:
    __slots__ = ("source", "sha")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


_SCRIPTS = {
    "reject": _Script(_redis_lua.REJECT),
    "concurrency": _Script(_redis_lua.CONCURRENCY),
    "warm_up": _Script(_redis_lua.WARM_UP),
    "throttle": _Script(_redis_lua.THROTTLE),
    "exit": _Script(_redis_lua.EXIT),
    "stats": _Script(_redis_lua.STATS),
}


def _bulk(x: Union[str, bytes]) -> bytes:
    """One RESP bulk string."""
    if isinstance(x, str):
        x = x.encode()
    return b"$%d\r\n%s\r\n" % (len(x), x)


def _fmt(x: float) -> str:
    """A double for Lua's tonumber: repr round-trips exactly (strtod is correctly rounded)."""
    if isinstance(x, int):
        return str(x)
    return repr(float(x))


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError("name must be a str, not %s" % type(name).__name__)
    if not _NAME_RE.match(name):
        raise ValueError(
            "name must match [A-Za-z0-9._:/-]{1,200} (no braces: the name is the key's "
            "Redis Cluster hash tag), got %r" % (name,)
        )
    return name


def _check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError("n must be an int, not %s" % type(n).__name__)
    if n < 1:
        raise ValueError("n must be >= 1, got %d" % n)
    if n > 2**63 - 1:  # as the in-process types
        raise ValueError("n must be between 1 and %d, got %d" % (2**63 - 1, n))
    return n


def _time_args(now_ns: Any) -> Tuple[str, str]:
    if now_ns is None:
        return "", ""
    if isinstance(now_ns, bool) or not isinstance(now_ns, int):
        raise TypeError("now_ns must be an int (ns since the epoch), not %s"
                        % type(now_ns).__name__)
    if now_ns < 0:
        raise ValueError("now_ns must be >= 0, got %d" % now_ns)
    if now_ns >= 2**62:
        raise ValueError("now_ns must be below 2**62, got %d" % now_ns)
    return str(now_ns // 1_000_000), str(now_ns % 1_000_000)


def _is_cluster(client: Any) -> bool:
    if _redis is None:
        return False
    from redis.cluster import RedisCluster

    if isinstance(client, RedisCluster):
        return True
    try:
        from redis.asyncio.cluster import RedisCluster as ARedisCluster
    except ImportError:  # pragma: no cover
        return False
    return isinstance(client, ARedisCluster)


# -- settings ------------------------------------------------------------------------------


class _Config:
    """One client's settings: validated by the C core's own check (a private Limiter with
    the same arguments), then turned into the script's arguments."""

    def __init__(self, qps: Any, kw: Dict[str, Any], lease_ms: int) -> None:
        tmpl = Limiter(qps, **kw)  # raises the core's TypeError / ValueError
        self.template = tmpl
        self.rate = tmpl.rate  # rate= (already turned into qps, interval_ms, sample_count)
        self.qps = tmpl.qps
        self.concurrency = tmpl.concurrency
        self.behavior = tmpl.behavior
        self.interval_ms = iv = tmpl.interval_ms
        self.sample_count = sc = tmpl.sample_count
        self.max_queueing_ms = tmpl.max_queueing_ms
        self.occupy_timeout_ms = tmpl.occupy_timeout_ms
        self.warm_up_s = tmpl.warm_up_s
        self.cold_factor = tmpl.cold_factor
        self.layout = "%d/%d" % (iv, sc)
        self.lease_ms = lease_ms
        ttl = iv + 1000
        if self.concurrency is not None:
            c = self.concurrency
            self.limit = float(c)
            self.script = _SCRIPTS["concurrency"]
            self.params = [_fmt(c)]
            self.never_n: Optional[float] = c  # n above it can never pass
        else:
            q = float(cast(float, self.qps))  # not None without concurrency
            L = q if iv == 1000 else q * (iv / 1000.0)  # the core's window_limit
            self.limit = L
            b = self.behavior
            warm: List[str] = []
            if b in ("warm_up", "warm_up_throttle") and q > 0:
                W, cf = float(self.warm_up_s), float(self.cold_factor)
                warning = math.floor(math.floor(W * q) / (cf - 1.0))
                max_token = warning + math.floor(2.0 * W * q / (1.0 + cf))
                ramp = 1 if max_token > warning else 0
                slope = (cf - 1.0) / q / float(max_token - warning) if ramp else 0.0
                cold_pass = math.floor(math.floor(q) / cf)
                per_window = 1000.0 / iv
                min_rate = q if q < per_window else per_window
                warm = [str(warning), str(max_token), str(ramp), _fmt(slope),
                        str(cold_pass), _fmt(min_rate)]
                # idle long enough, the tokens are full again (cold): as a fresh key
                refill_ms = math.ceil((max_token + 1) * 1000.0 / q) + 2000
                payback_ms = math.ceil(L * 1000.0 / min_rate)
                ttl += min(refill_ms + payback_ms, 2**40)
            elif b in ("warm_up", "warm_up_throttle"):
                warm = ["0", "0", "0", "0", "0", "0"]
            if b == "reject":
                self.script = _SCRIPTS["reject"]
                self.params = [_fmt(L), str(self.occupy_timeout_ms)]
            elif b == "warm_up":
                self.script = _SCRIPTS["warm_up"]
                self.params = [_fmt(q), _fmt(L)] + warm
            else:
                self.script = _SCRIPTS["throttle"]
                maxq = self.max_queueing_ms * 1_000_000
                self.params = [_fmt(q), str(maxq), "1" if b == "warm_up_throttle" else "0"]
                self.params += warm
                ttl += self.max_queueing_ms
                if q > 0:
                    # the key outlives the next request's slot (one request's cost at the
                    # slowest rate after the latest pass): expired sooner, it would admit
                    # early when a request is more than a window and a second apart
                    slowest = q / float(self.cold_factor) if b == "warm_up_throttle" else q
                    ttl += min(math.ceil(1000.0 / slowest), 2**40)
            self.never_n = L if b in ("reject", "warm_up") else None
        self.ttl_ms = ttl
        # the decision's EVALSHA, packed once: its static arguments as RESP bytes (redis-py
        # would encode the 15-20 arguments again at every call)
        nargs = 10 + len(self.params)
        self.head = b"*%d\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n" % (
            4 + nargs, self.script.sha.encode())
        self.mid = b"".join(_bulk(x) for x in (self.layout, str(ttl), str(iv), str(sc)))
        self.tail = b"".join(_bulk(x) for x in [str(lease_ms)] + self.params)
        self.is_throttle = self.behavior in ("throttle", "warm_up_throttle")
        self.minute = self.behavior in ("warm_up", "warm_up_throttle")

    def can_never_pass(self, n: int) -> bool:
        if self.concurrency is not None:
            return n > self.concurrency
        if self.qps == 0:
            return True
        return self.never_n is not None and n > self.never_n

    def describe(self) -> str:
        if self.concurrency is not None:
            return "concurrency=%d" % self.concurrency
        if self.rate is not None:
            return "rate=%r, behavior=%r" % (self.rate, self.behavior)
        return "qps=%r, behavior=%r" % (self.qps, self.behavior)


# -- transport: one round trip, never retried after it may have applied --------------------


def _pack(parts: List[Any]) -> bytes:
    """A command as RESP bytes."""
    return b"*%d\r\n" % len(parts) + b"".join(_bulk(p) for p in parts)


_ASKING = _pack(["ASKING"])
# an EVALSHA's "$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n" after its "*N\r\n"
_EVALSHA_LEN = 4 + 9 + 5 + 40 + 2


def _eval_of(packed: bytes, script: _Script) -> bytes:
    """The EVAL of a packed EVALSHA: the same keys and arguments, the script's source."""
    i = packed.index(b"\r\n") + 2
    return packed[:i] + b"$4\r\nEVAL\r\n" + _bulk(script.source) + packed[i + _EVALSHA_LEN:]


def _small_bulk(i: int) -> bytes:
    s = b"%d" % i
    return b"$%d\r\n%s\r\n" % (len(s), s)


_SMALL = [_small_bulk(i) for i in range(256)]  # n and flags, packed once
_NO_TIME = b"$0\r\n\r\n$0\r\n\r\n"  # now_ms and sub empty: the server's TIME


class _Incomplete(Exception):
    pass


try:  # redis-py's own mapping of error replies to its exceptions (READONLY, OOM, NOSCRIPT...)
    from redis._parsers.base import BaseParser as _BaseParser
except ImportError:  # pragma: no cover - redis-py < 5 (or without the extra)
    try:
        from redis.connection import (  # type: ignore[no-redef,attr-defined,unused-ignore]
            BaseParser as _BaseParser,
        )
    except ImportError:
        _BaseParser = None  # type: ignore[assignment,misc]


def _error_reply(text: str) -> Exception:
    """An error reply as redis-py's parser gives it: ReadOnlyError, OutOfMemoryError,
    NoScriptError, BusyLoadingError..., else a ResponseError with the whole text."""
    if _BaseParser is not None:
        try:
            err = _BaseParser.parse_error(text)  # type: ignore[no-untyped-call,unused-ignore]
            return cast(Exception, err)
        except Exception:  # pragma: no cover - an older parser's signature
            pass
    if text.startswith("NOSCRIPT"):
        return NoScriptError(text)
    return ResponseError(text)


def _parse(buf: bytes, pos: int) -> Tuple[Any, int]:
    """One RESP reply at buf[pos:]: (value, end). An error reply is a ResponseError instance
    (returned, not raised: the connection is still in step). Raises _Incomplete when more
    bytes are needed, RedisReplyError on what no slidewin script returns."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    t = buf[pos]
    if t == 58:  # ':' integer
        return int(buf[pos + 1:end]), end + 2
    if t == 42:  # '*' array
        n = int(buf[pos + 1:end])
        pos = end + 2
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            v, pos = _parse(buf, pos)
            items.append(v)
        return items, pos
    if t == 36:  # '$' bulk string
        n = int(buf[pos + 1:end])
        if n < 0:
            return None, end + 2
        stop = end + 2 + n
        if len(buf) < stop + 2:
            raise _Incomplete
        return buf[end + 2:stop], stop + 2
    if t == 45:  # '-' error
        return _error_reply(buf[pos + 1:end].decode("utf-8", "replace")), end + 2
    if t == 43:  # '+' simple string
        return buf[pos + 1:end], end + 2
    if t == 95:  # '_' RESP3 null
        return None, end + 2
    raise RedisReplyError("unexpected RESP type %r from Redis" % (chr(t),))


def _exchange(sock: Any, data: bytes, count: int) -> List[Any]:
    """Write data, read count replies. Socket errors become redis-py's TimeoutError and
    ConnectionError; the caller closes the connection on any exception."""
    try:
        sock.sendall(data)
        buf = sock.recv(65536)
        if count == 1 and buf[:5] == b"*3\r\n:":  # a decision's [verdict, wait, retry]
            parts = buf.split(b"\r\n")
            if (len(parts) == 5 and not parts[4] and parts[2][:1] == b":"
                    and parts[3][:1] == b":"):
                return [[int(parts[1][1:]), int(parts[2][1:]), int(parts[3][1:])]]
        while True:
            if not buf:
                raise _redis.ConnectionError("Connection closed by server.")
            try:
                out = []
                pos = 0
                for _ in range(count):
                    v, pos = _parse(buf, pos)
                    out.append(v)
            except _Incomplete:
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


def _call_conn(conn: Any, script: _Script, asking: bool, packed: bytes) -> Any:
    """One script call on a connection's socket, written and read here (redis-py's
    command machinery costs tens of microseconds a call; a decision is one small fixed
    command and one small reply). The pool checked the connection (a server that closed
    it idle, say by a restart, gave a new connection, never a failed decision)."""
    sock = conn._sock
    if sock is None:
        conn.connect()
        sock = conn._sock
    if asking:
        ok, reply = _exchange(sock, _ASKING + packed, 2)
        if isinstance(ok, ResponseError):
            raise ok
    else:
        reply = _exchange(sock, packed, 1)[0]
    if isinstance(reply, NoScriptError):
        # the script cache was flushed (SCRIPT FLUSH, a restart, a failover): EVAL sends
        # the source once, which also caches it again. Nothing ran, so this is no retry.
        cmd = _eval_of(packed, script)
        if asking:
            ok, reply = _exchange(sock, _ASKING + cmd, 2)
        else:
            reply = _exchange(sock, cmd, 1)[0]
    if isinstance(reply, ResponseError):
        raise reply
    return reply


# -- the client's own pool, its retries off for a decision's connect -----------------------
#
# A decision takes a connection from the client's pool and gives it back at once, as a
# redis-py command does: a BlockingConnectionPool is waited on (its timeout), and the process
# never holds more connections than the pool's max_connections. redis-py retries a failed
# connect with backoff (10 times in redis-py 6+): harmless for a connect, but it would hold a
# caller for seconds while Redis is down, where on_error must answer. The pool's retry policy
# is wrapped in one that delegates to it, except that it connects once while a slidewin call
# is under way (_DECIDING); the client's own commands keep their retries (and later changes
# to the client's policy). The decision itself is never retried: slidewin
# writes and reads it on the socket itself.

_DECIDING: "contextvars.ContextVar[bool]" = contextvars.ContextVar("slidewin_deciding",
                                                                   default=False)
def _call_fail(fail: Any, err: Exception, a: Tuple[Any, ...], k: Dict[str, Any]) -> Any:
    with_count = k.get("with_failure_count", a[1] if len(a) > 1 else False)
    return fail(err, 1) if with_count else fail(err)


def _would_retry(retry: Any, err: Exception, a: Tuple[Any, ...], k: Dict[str, Any]) -> bool:
    """Whether the policy would have retried err (redis-py's rule: one of its supported
    errors, and the caller's is_retryable agrees): only then is the failure handler told."""
    supported = getattr(retry, "_supported_errors", None)
    if isinstance(supported, tuple) and not isinstance(err, supported):
        return False
    is_retryable = k.get("is_retryable", a[0] if a else None)
    return not (is_retryable is not None and not is_retryable(err))


class _GuardedRetry:
    """The client's retry policy itself (every attribute and change reaches it), except that
    a connect under way for a slidewin call is tried once."""

    _slidewin_guarded = True
    __slots__ = ("_retry",)

    def __init__(self, retry: Any) -> None:
        object.__setattr__(self, "_retry", retry)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_retry"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._retry, name, value)

    def __eq__(self, other: Any) -> bool:
        return bool(self._retry == getattr(other, "_retry", other))

    def __hash__(self) -> int:
        return hash(self._retry)

    def __copy__(self) -> Any:
        return type(self)(self._retry)

    def __deepcopy__(self, memo: Dict[int, Any]) -> Any:  # redis-py copies it per connection
        return type(self)(copy.deepcopy(self._retry, memo))

    def __repr__(self) -> str:
        return "<slidewin guarded %r>" % (self._retry,)

    def call_with_retry(self, do: Any, fail: Any, *a: Any, **k: Any) -> Any:
        if not _DECIDING.get():
            return self._retry.call_with_retry(do, fail, *a, **k)
        try:
            return do()
        except Exception as e:
            if _would_retry(self._retry, e, a, k):
                _call_fail(fail, e, a, k)
            raise


class _AsyncGuardedRetry(_GuardedRetry):
    __slots__ = ()

    async def call_with_retry(self, do: Any, fail: Any, *a: Any, **k: Any) -> Any:
        if not _DECIDING.get():
            return await self._retry.call_with_retry(do, fail, *a, **k)
        try:
            return await do()
        except Exception as e:
            if _would_retry(self._retry, e, a, k):
                res = _call_fail(fail, e, a, k)
                if inspect.isawaitable(res):
                    await res
            raise


def _guard(retry: Any) -> Any:
    """The same retry policy (delegated to), connecting once during a slidewin call."""
    if retry is None or getattr(retry, "_slidewin_guarded", False):
        return retry
    call = getattr(retry, "call_with_retry", None)
    if call is None:  # pragma: no cover - not a redis-py policy
        return retry
    if inspect.iscoroutinefunction(call):
        return _AsyncGuardedRetry(retry)
    return _GuardedRetry(retry)


def _guard_pool(pool: Any) -> None:
    """New connections of the pool get the guarded policy (redis-py copies it into each)."""
    kw = getattr(pool, "connection_kwargs", None)
    if kw is not None:
        r = kw.get("retry")
        if r is not None and not getattr(r, "_slidewin_guarded", False):
            kw["retry"] = _guard(r)


def _guard_conn(conn: Any) -> None:
    r = getattr(conn, "retry", None)
    if r is not None and not getattr(r, "_slidewin_guarded", False):
        conn.retry = _guard(r)


def _get_conn(pool: Any) -> Any:
    """A connection of the client's pool, waited for as the pool waits (a
    BlockingConnectionPool: up to its timeout, then redis-py's ConnectionError)."""
    _guard_pool(pool)
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py < 5 requires a command name
        conn = pool.get_connection("EVALSHA")
    _guard_conn(conn)
    return conn


def _call_pool(pool: Any, script: _Script, packed: bytes, asking: bool = False) -> Any:
    token = _DECIDING.set(True)
    try:
        conn = _get_conn(pool)
        if getattr(conn, "_sock", _MISSING) is _MISSING:  # not a socket connection
            return _call_generic(pool, conn, script, asking, packed)
        try:
            reply = _call_conn(conn, script, asking, packed)
        except ResponseError as e:
            if isinstance(e, ReadOnlyError) or str(e).startswith("READONLY"):
                # a replica now (a failover): a new connection finds the primary again
                # (DNS, Sentinel), as redis-py's Sentinel connections do
                conn.disconnect()
            pool.release(conn)  # an error reply: the connection is in step
            raise
        except BaseException:
            # a timeout or a broken connection: the reply may still come, so this
            # connection is out of step; it is closed, and the call is not repeated
            conn.disconnect()
            pool.release(conn)
            raise
        pool.release(conn)
        return reply
    finally:
        _DECIDING.reset(token)


def _call_generic(pool: Any, conn: Any, script: _Script, asking: bool, packed: bytes) -> Any:
    try:
        if asking:
            conn.send_command("ASKING")
            conn.read_response()
        try:
            conn.send_packed_command([packed])
            return conn.read_response()
        except NoScriptError:
            if asking:
                conn.send_command("ASKING")
                conn.read_response()
            conn.send_packed_command([_eval_of(packed, script)])
            return conn.read_response()
    except ResponseError:
        raise
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _redirect(err: Exception) -> Optional[Tuple[str, str, int]]:
    """('MOVED'|'ASK', host, port) for a cluster redirection, else None."""
    kind = type(err).__name__
    text = str(err)
    m = re.match(r"(MOVED|ASK) (\d+) (\S+):(\d+)", text)
    if m:
        return m.group(1), m.group(3), int(m.group(4))
    host = getattr(err, "host", None)
    port = getattr(err, "port", None)
    if host is not None and port is not None and kind in ("MovedError", "AskError"):
        return ("MOVED" if kind == "MovedError" else "ASK"), host, int(port)
    return None


def _close_pools(client: Any, cluster: bool) -> None:
    """Nothing to close: decisions use the client's own pool (kept for callers of
    earlier versions)."""


_REFRESHED: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()


def _refresh_slots(client: Any, node: Any) -> None:
    """After a connection error or timeout on a Cluster node (dead, or failed over to its
    replica): the cluster client's slot table is read again, the failed node asked last, as
    redis-py's own commands do; at most once a second per client. A refresh that fails is
    left to the next decision's error."""
    now = time.monotonic()
    if now - _REFRESHED.get(client, -math.inf) < 1.0:
        return
    _REFRESHED[client] = now
    nm = client.nodes_manager
    try:
        move = getattr(nm, "move_node_to_end_of_cached_nodes", None)  # redis-py 6+
        if move is not None:
            move(node.name)
        nm.initialize()
    except Exception as e:  # the whole cluster unreachable, say
        log.debug("slidewin.redis: refreshing the cluster's slots failed: %s", e)


def _sync_call(client: Any, cluster: bool, script: _Script, key: Any, packed: bytes) -> Any:
    try:
        return _sync_call_on(client, cluster, script, key, packed)
    except ResponseError as e:
        named = _named(e, key)
        if named is e:
            raise
        raise named from e


def _sync_call_on(client: Any, cluster: bool, script: _Script, key: Any,
                  packed: bytes) -> Any:
    if not cluster:
        return _call_pool(client.connection_pool, script, packed)
    node = client.get_node_from_key(key)
    asking = False
    for _ in range(3):
        pool = client.get_redis_connection(node).connection_pool
        try:
            return _call_pool(pool, script, packed, asking)
        except (_redis.ConnectionError, _redis.TimeoutError):
            _refresh_slots(client, node)  # not retried: the next decision uses it
            raise
        except ResponseError as e:
            r = _redirect(e)
            if r is None:
                raise
            # MOVED / ASK: the command did not run there; the cluster client's own slot
            # table is refreshed (MOVED) or the one-shot target asked (ASK)
            kind, host, port = r
            if kind == "MOVED":
                client.nodes_manager.initialize()
                node = client.get_node_from_key(key)
                asking = False
            else:
                node = client.get_node(host=host, port=port)
                if node is None:
                    client.nodes_manager.initialize()
                    node = client.get_node(host=host, port=port)
                    if node is None:
                        raise
                asking = True
    raise RedisReplyError("too many cluster redirections for key %r" % (key,))


async def _async_call_pool(pool: Any, script: _Script, key: Any, args: List[Any],
                           packed: Optional[bytes] = None) -> Any:
    token = _DECIDING.set(True)
    try:
        _guard_pool(pool)
        try:
            conn = await pool.get_connection()
        except TypeError:  # redis-py < 5.1 requires a command name
            conn = await pool.get_connection("EVALSHA")
        _guard_conn(conn)
        try:
            try:
                if packed is not None:
                    await conn.send_packed_command([packed])
                else:
                    await conn.send_command("EVALSHA", script.sha, 1, key, *args)
                return await conn.read_response()
            except NoScriptError:
                if packed is not None:
                    await conn.send_packed_command([_eval_of(packed, script)])
                else:
                    await conn.send_command("EVAL", script.source, 1, key, *args)
                return await conn.read_response()
        except ResponseError as e:
            if isinstance(e, ReadOnlyError):  # a replica now: see _call_pool
                await conn.disconnect()
            raise
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)
    finally:
        _DECIDING.reset(token)


async def _async_call(client: Any, cluster: bool, script: _Script, key: Any,
                      args: List[Any], packed: Optional[bytes] = None) -> Any:
    try:
        return await _async_call_on(client, cluster, script, key, args, packed)
    except ResponseError as e:
        named = _named(e, key)
        if named is e:
            raise
        raise named from e


async def _async_call_on(client: Any, cluster: bool, script: _Script, key: Any,
                         args: List[Any], packed: Optional[bytes] = None) -> Any:
    if not cluster:
        return await _async_call_pool(client.connection_pool, script, key, args, packed)
    # redis.asyncio.cluster follows MOVED/ASK itself. The node is named (target_nodes): a
    # call without one is retried on TimeoutError / ConnectionError by the cluster client,
    # which could apply a decision twice and hold the caller past its timeout.
    if getattr(client, "_initialize", False):
        await client.initialize()
    node = client.get_node_from_key(key)
    try:
        return await client.execute_command("EVALSHA", script.sha, 1, key, *args,
                                            target_nodes=node)
    except NoScriptError:
        return await client.execute_command("EVAL", script.source, 1, key, *args,
                                            target_nodes=node)


# -- replies -------------------------------------------------------------------------------


def _text(x: Any) -> str:
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    return str(x)


class _Base:
    """What the sync and async types share: settings, arguments, replies, on_error."""

    _kind = "RedisLimiter"
    _is_async = False
    _held: "_Held"

    def _setup(self, client: Any, name: Any, qps: Any, kw: Dict[str, Any], on_error: Any,
               lease_ms: Any, on_block: Any) -> None:
        if client is None:
            raise TypeError("client must be a redis-py client, not None")
        self._name = _check_name(name)
        if not isinstance(on_error, str):
            raise TypeError("on_error must be a str ('allow', 'deny' or 'raise'), not %s"
                            % type(on_error).__name__)
        if on_error not in _ON_ERROR:
            raise ValueError("on_error must be one of 'allow', 'deny', 'raise', got %r"
                             % (on_error,))
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int):
            raise TypeError("lease_ms must be an int, not %s" % type(lease_ms).__name__)
        if not MIN_LEASE_MS <= lease_ms <= 2**40:  # renewed every lease_ms / 3
            raise ValueError("lease_ms must be in [%d, 2**40] ms, got %d"
                             % (MIN_LEASE_MS, lease_ms))
        if on_block is not None and not callable(on_block):
            raise TypeError("on_block must be callable, not %s" % type(on_block).__name__)
        self._cfg = _Config(qps, kw, lease_ms)
        self._client = client
        self._cluster = _is_cluster(client)
        self._on_error = on_error
        self._on_block = on_block
        self._lock = threading.Lock()
        # this client's lease id (entries); a concurrency limiter's admissions take a random
        # one each (_lease_for: unique across forked processes too, where a prefix and a
        # counter would repeat in every gunicorn --preload worker)
        self._lease = os.urandom(8).hex()
        self.errors = 0          # decisions that could not reach Redis
        self.errors_allowed = 0  # ... of which on_error admitted
        self.errors_denied = 0   # ... of which on_error refused
        self._last_log = -math.inf

    # settings, read-only
    name = property(lambda self: self._name)
    qps = property(lambda self: self._cfg.qps)
    rate = property(lambda self: self._cfg.rate)
    concurrency = property(lambda self: self._cfg.concurrency)
    behavior = property(lambda self: self._cfg.behavior)
    interval_ms = property(lambda self: self._cfg.interval_ms)
    sample_count = property(lambda self: self._cfg.sample_count)
    max_queueing_ms = property(lambda self: self._cfg.max_queueing_ms)
    occupy_timeout_ms = property(lambda self: self._cfg.occupy_timeout_ms)
    warm_up_s = property(lambda self: self._cfg.warm_up_s)
    cold_factor = property(lambda self: self._cfg.cold_factor)
    lease_ms = property(lambda self: self._cfg.lease_ms)
    on_error = property(lambda self: self._on_error)
    client = property(lambda self: self._client)

    def __repr__(self) -> str:
        return "%s(%r, %s, on_error=%r)" % (type(self).__name__, self._name,
                                             self._cfg.describe(), self._on_error)

    def _lease_for(self, cfg: _Config) -> str:
        """The lease an admission takes: one of its own for a concurrency limiter (each
        renewed and released by name), else this client's (unused: no lease is taken)."""
        if cfg.concurrency is None:
            return self._lease
        return os.urandom(8).hex()

    def _hold(self, hkey: Any, key: Any, cfg: _Config, lease: str, n: int,
              now_ns: Any) -> None:
        """An admission of a concurrency limiter: held (release()) and renewed while held
        (on the server's clock only)."""
        tok = None
        if now_ns is None:
            tok = (_arenewer() if self._is_async else _renewer(self._client)).add(
                self, key, cfg, lease)
        with self._lock:
            self._held.add(hkey, lease, n, tok)

    def _unhold(self, hkey: Any, n: int, what: str) -> List[Tuple[str, int]]:
        with self._lock:
            pairs, done = self._held.take(hkey, n, what)
        for tok in done:
            _unrenew(tok)
        return pairs

    def _args(self, cfg: _Config, n: int, flags: int, now_ns: Any, lease: str) -> List[Any]:
        ms, sub = _time_args(now_ns)
        if self._lean:
            flags |= F_LEAN | (F_MINUTE if cfg.minute else 0)
        return [ms, sub, str(n), str(flags), cfg.layout, str(cfg.ttl_ms),
                str(cfg.interval_ms), str(cfg.sample_count), lease, str(cfg.lease_ms)]

    _lean = False

    def _packed_decision(self, cfg: _Config, key: Any, n: int, flags: int, now_ns: Any,
                         lease: str) -> bytes:
        """The decision's EVALSHA as RESP bytes, its constant parts packed once (_Config)."""
        if self._lean:
            flags |= F_LEAN | (F_MINUTE if cfg.minute else 0)
        if now_ns is None:
            t = _NO_TIME
        else:
            ms, sub = _time_args(now_ns)
            t = _bulk(ms) + _bulk(sub)
        return b"".join((cfg.head, _bulk(key), t, _SMALL[n] if n < 256 else _small_bulk(n),
                         _SMALL[flags], cfg.mid, _bulk(lease), cfg.tail))

    def _parse(self, reply: Any, cfg: _Config) -> Tuple[int, int, int]:
        if type(reply) is list and len(reply) == 3:  # the usual reply, checked quickly
            v, wait, retry = reply
            if (type(v) is int and type(wait) is int and type(retry) is int
                    and 0 <= v <= 2 and wait >= 0 and retry >= -1):
                return v, wait, retry
        if isinstance(reply, list) and len(reply) == 2 and reply[0] == LAYOUT:
            stored = _text(reply[1])
            raise ValueError(
                "the Redis limiter %r holds interval_ms/sample_count %s, this client asks "
                "for interval_ms=%d, sample_count=%d: use the same layout on every client, "
                "another name, or delete the key once no client uses it"
                % (self._name, stored, cfg.interval_ms, cfg.sample_count)
            )
        if (
            not isinstance(reply, list)
            or len(reply) != 3
            or not all(type(x) is int for x in reply)
            or reply[0] not in (BLOCK, PASS, NEVER)
            or reply[1] < 0
            or reply[2] < -1
        ):
            raise RedisReplyError("unexpected reply from Redis for %r: %.200r"
                                  % (self._name, reply))
        return reply[0], reply[1], reply[2]

    def _failed(self, err: BaseException, flags: int) -> Tuple[int, int, int]:
        """on_error: the decision when Redis could not decide."""
        with self._lock:
            self.errors += 1
            now = time.monotonic()
            quiet = now - self._last_log < _LOG_EVERY_S
            if not quiet:
                self._last_log = now
        if not quiet:
            log.warning("slidewin.redis: a decision of %r %s (%s: %s); on_error=%r "
                        "(logged at most once a minute; %d errors so far)", self._name,
                        _what(err), type(err).__name__, err, self._on_error, self.errors)
        if self._on_error == "raise":
            raise err
        if self._on_error == "allow":
            with self._lock:
                self.errors_allowed += 1
            return PASS, 0, -1
        with self._lock:
            self.errors_denied += 1
        return BLOCK, 0, -1

    def _blocked(self, n: int, verdict: int, retry_ns: int) -> BlockedError:
        retry = None if verdict == NEVER or retry_ns < 0 else retry_ns / 1e9
        return BlockedError(
            "%s %r (%s) refused a request of %d" % (type(self).__name__, self._name,
                                                    self._cfg.describe(), n),
            retry_after=retry,
            limiter=self,
        )

    @staticmethod
    def _stats(reply: Any, cfg: _Config, name: str) -> Stats:
        if (not isinstance(reply, list) or len(reply) != 9
                or not all(type(x) is int and x >= 0 for x in reply)):
            if isinstance(reply, list) and len(reply) == 2 and reply[0] == LAYOUT:
                raise ValueError("the Redis limiter %r holds interval_ms/sample_count %s, this "
                                 "client asks for %s" % (name, _text(reply[1]), cfg.layout))
            raise RedisReplyError("unexpected stats reply from Redis for %r: %.200r"
                                  % (name, reply))
        if max(reply) >= _NS_MAX:  # saturated by the script: the core's int64 maximum
            reply = [2**63 - 1 if x >= _NS_MAX else x for x in reply]
        p, b, x, u, rt, o, m, inflight, waiting = reply
        sec = cfg.interval_ms / 1000.0
        return Stats((p / sec, b / sec, u / sec, x / sec, rt / u if u else 0.0, float(m),
                      inflight, waiting, o / sec))


def _elapsed_ms(t0: float) -> int:
    return max(0, int((time.monotonic() - t0) * 1000))


def _outcome(exc_type: Any) -> int:
    if exc_type is None:
        return _OUT_SUCCESS
    if issubclass(exc_type, Exception):
        return _OUT_EXCEPTION
    return _OUT_NONE


# -- sync ----------------------------------------------------------------------------------


class _SyncOps(_Base):
    def _run(self, script: _Script, key: Any, args: List[Any]) -> Any:
        return _sync_call(self._client, self._cluster, script, key,
                          _pack(["EVALSHA", script.sha, "1", key] + args))

    def _decide_on(self, key: Any, cfg: _Config, n: int, flags: int, now_ns: Any,
                   lease: str) -> Tuple[int, int, int]:
        try:
            packed = self._packed_decision(cfg, key, n, flags, now_ns, lease)
            reply = _sync_call(self._client, self._cluster, cfg.script, key, packed)
            return self._parse(reply, cfg)
        except _UNREACHABLE as e:
            return self._failed(e, flags)

    def _exit_on(self, key: Any, cfg: _Config, n: int, outcome: int, rt_ms: int,
                 leases: List[Tuple[str, int]], quiet: bool = True) -> None:
        args = self._args(cfg, n, 0, None, "") + [str(outcome), str(rt_ms)]
        for lid, k in leases:
            args += [lid, str(k)]
        try:
            _check_exit_reply(self._run(_SCRIPTS["exit"], key, args), self._name)
        except _UNREACHABLE as e:
            if not quiet:
                raise
            # the lease expires on its own (lease_ms); the outcome is lost: counted
            with self._lock:
                self.errors += 1
            log.debug("slidewin.redis: exit of %r failed: %s", self._name, e)

    def _renew(self, key: Any, cfg: _Config, ids: List[str]) -> bool:
        """Renew this client's leases on a key (the renewal thread); False if it failed."""
        try:
            _check_exit_reply(self._run(_SCRIPTS["exit"], key, _renew_args(self, cfg, ids)),
                              self._name)
            return True
        except Exception as e:  # the next renewal tries again; the leases may run out
            log.debug("slidewin.redis: renewing the leases of %r failed: %s", self._name, e)
            return False

    def _acquire_on(self, key: Any, cfg: _Config, n: int, timeout: Optional[float],
                    flags: int, lease: str, sleep_wait: bool = True) -> int:
        """The shared loop of acquire() and entry(): returns the wait slept (ns), or to
        sleep (sleep_wait False: entry() registers its lease for renewal first)."""
        if timeout is None:
            verdict, wait_ns, retry_ns = self._decide_on(key, cfg, n, flags | F_RETRY, None,
                                                         lease)
            if verdict != PASS:
                raise self._blocked(n, verdict, retry_ns)
        else:
            deadline = time.monotonic() + timeout
            step = 0.001
            while True:
                verdict, wait_ns, retry_ns = self._decide_on(
                    key, cfg, n, flags | F_NO_BLOCK | F_RETRY, None, lease)
                if verdict == PASS:
                    break
                now = time.monotonic()
                if verdict == NEVER or now >= deadline:
                    self._exit_on(key, cfg, n, _OUT_BLOCK, 0, [])
                    raise self._blocked(n, verdict, retry_ns)
                if retry_ns > 0:
                    sleep = retry_ns / 1e9
                else:  # concurrency / warm-up: poll, backing off to 50 ms
                    sleep, step = step, min(step * 2, 0.05)
                time.sleep(max(0.0, min(sleep, deadline - now)))
        if wait_ns > 0 and sleep_wait:
            time.sleep(wait_ns / 1e9)
        return wait_ns


class _SyncEntry:
    __slots__ = ("_lim", "_key", "_cfg", "n", "_lease", "_t0", "_held", "_tok")

    def __init__(self, lim: Any, key: Any, cfg: _Config, n: int) -> None:
        self._lim, self._key, self._cfg, self.n = lim, key, cfg, n
        self._lease = os.urandom(8).hex()
        self._held = False

    def __enter__(self) -> "_SyncEntry":
        if self._held:
            raise RuntimeError("this entry is already entered")
        wait_ns = self._lim._acquire_on(self._key, self._cfg, self.n, None, F_ENTRY,
                                        self._lease, False)
        # renewed from the decision on: a throttle's wait may outlast the lease
        self._tok = _renewer(self._lim._client).add(self._lim, self._key, self._cfg,
                                                    self._lease)
        if wait_ns > 0:
            try:
                time.sleep(wait_ns / 1e9)
            except BaseException:  # interrupted before the body: given back
                _unrenew(self._tok)
                self._lim._exit_on(self._key, self._cfg, self.n, _OUT_NONE, 0,
                                   [(self._lease, self.n)])
                raise
        self._held = True
        self._t0 = time.monotonic()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        if self._held:
            self._held = False
            _unrenew(self._tok)
            self._lim._exit_on(self._key, self._cfg, self.n, _outcome(exc_type),
                               _elapsed_ms(self._t0), [(self._lease, self.n)])
        return False


class _AsyncEntry:
    __slots__ = ("_lim", "_key", "_cfg", "n", "_lease", "_t0", "_held", "_tok")

    def __init__(self, lim: Any, key: Any, cfg: _Config, n: int) -> None:
        self._lim, self._key, self._cfg, self.n = lim, key, cfg, n
        self._lease = os.urandom(8).hex()
        self._held = False

    async def __aenter__(self) -> "_AsyncEntry":
        if self._held:
            raise RuntimeError("this entry is already entered")
        wait_ns = await self._lim._acquire_on(self._key, self._cfg, self.n, None, F_ENTRY,
                                              self._lease, False)
        # renewed from the decision on: a throttle's wait may outlast the lease
        self._tok = _arenewer().add(self._lim, self._key, self._cfg, self._lease)
        if wait_ns > 0:
            try:
                await asyncio.sleep(wait_ns / 1e9)
            except BaseException:  # cancelled before the body: given back
                _unrenew(self._tok)
                await self._lim._exit_on(self._key, self._cfg, self.n, _OUT_NONE, 0,
                                         [(self._lease, self.n)])
                raise
        self._held = True
        self._t0 = time.monotonic()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if self._held:
            self._held = False
            _unrenew(self._tok)
            await self._lim._exit_on(self._key, self._cfg, self.n, _outcome(exc_type),
                                     _elapsed_ms(self._t0), [(self._lease, self.n)])
        return False


class _Held:
    """What this client holds in flight on its own leases (try_acquire/reserve/acquire of a
    concurrency limiter), per Redis key: [lease id, n, renewal token] each, released newest
    first."""

    def __init__(self) -> None:
        self.counts: Dict[Any, List[List[Any]]] = {}
        self.pid = os.getpid()

    def _forked(self) -> None:
        """In a forked child the parent's admissions are the parent's: none held here."""
        if self.pid != os.getpid():
            self.counts.clear()
            self.pid = os.getpid()

    def add(self, key: Any, lease: str, n: int, token: Any) -> None:
        self._forked()
        self.counts.setdefault(key, []).append([lease, n, token])

    def take(self, key: Any, n: int, what: str) -> Tuple[List[Tuple[str, int]], List[Any]]:
        """(lease id, count) pairs to release, and the renewal tokens of leases now empty."""
        self._forked()
        leases = self.counts.get(key, [])
        have = sum(x[1] for x in leases)
        if n > have:
            raise ValueError("release(%d) beyond what this client holds in flight on %s (%d)"
                             % (n, what, have))
        pairs: List[Tuple[str, int]] = []
        done: List[Any] = []
        while n:
            last = leases[-1]
            k = min(n, last[1])
            pairs.append((last[0], k))
            last[1] -= k
            n -= k
            if not last[1]:
                leases.pop()
                done.append(last[2])
        if not leases:
            self.counts.pop(key, None)
        return pairs, done


# -- lease renewal ---------------------------------------------------------------------------
#
# A lease expires lease_ms after it was taken or last renewed. The holder renews it about
# every lease_ms / 3 while it holds it (an entry between enter and exit, an admission of a
# concurrency limiter until release()), one EXIT call per key for all its due leases. A lease
# nobody renews -- a crashed client's, or the one a decision made when it ran after its
# caller had timed out and gone on -- is gone lease_ms after it was taken. Leases taken with
# an explicit now_ns are on the caller's clock: not renewed.

_TICK = 0.25  # s: how late a renewal may be, at most


def _due(leases: Dict[int, List[Any]], now: float) -> Tuple[Dict[Any, Any], float]:
    """The due leases grouped by (limiter, key, settings), and the next due time."""
    groups: Dict[Any, Tuple[Any, Any, Any, List[Tuple[int, str]]]] = {}
    nxt = math.inf
    for tok, v in leases.items():
        if v[4] <= now:
            g = groups.get((id(v[0]), v[1], id(v[2])))
            if g is None:
                g = groups[(id(v[0]), v[1], id(v[2]))] = (v[0], v[1], v[2], [])
            g[3].append((tok, v[3]))
        elif v[4] < nxt:
            nxt = v[4]
    return groups, nxt


def _renew_args(lim: Any, cfg: _Config, ids: List[str]) -> List[Any]:
    args: List[Any] = lim._args(cfg, 1, 0, None, "") + [str(_OUT_RENEW), "0"]
    for lid in ids:
        args += [lid, "0"]
    return args


class _Renewer:
    """The leases this process holds through one sync client, renewed by a daemon thread of
    their own (started with the first lease, ended when none is left): a renewal blocked on
    one client's server (stalled, or its pool exhausted) delays no other client's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.leases: Dict[int, List[Any]] = {}  # token -> [lim, key, cfg, lease id, due]
        self.thread: Optional[threading.Thread] = None

    def add(self, lim: Any, key: Any, cfg: _Config, lease: str) -> Tuple[Any, int]:
        tok = next(_SEQ)
        due = time.monotonic() + cfg.lease_ms / 3000.0
        with self.lock:
            self.leases[tok] = [lim, key, cfg, lease, due]
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="slidewin.redis leases")
                self.thread.start()
        return (self, tok)

    def remove(self, tok: int) -> None:
        with self.lock:
            self.leases.pop(tok, None)

    def _run(self) -> None:
        pid = os.getpid()
        while True:
            with self.lock:
                if not self.leases or pid != os.getpid():
                    if self.thread is threading.current_thread():
                        self.thread = None
                    return
                now = time.monotonic()
                groups, nxt = _due(self.leases, now)
            for lim, key, cfg, items in groups.values():
                ok = lim._renew(key, cfg, [lid for _, lid in items])
                period = cfg.lease_ms / 3000.0
                again = time.monotonic() + (period if ok else min(period, _TICK))
                with self.lock:
                    for tok, _ in items:
                        v = self.leases.get(tok)
                        if v is not None:
                            v[4] = again
            if not groups:
                time.sleep(min(_TICK, max(0.001, nxt - time.monotonic())))


_SEQ = itertools.count(1)  # renewal tokens
# one renewer per sync client (a client that takes no weak reference: the shared one)
_RENEWERS: "weakref.WeakKeyDictionary[Any, _Renewer]" = weakref.WeakKeyDictionary()
_RENEWERS_LOCK = threading.Lock()
_SHARED_RENEWER = _Renewer()


def _renewer(client: Any) -> _Renewer:
    with _RENEWERS_LOCK:
        try:
            r = _RENEWERS.get(client)
            if r is None:
                r = _RENEWERS[client] = _Renewer()
        except TypeError:  # not weakly referenceable (nor hashable)
            r = _SHARED_RENEWER
        return r


def _unrenew(tok: Any) -> None:
    """Stop renewing the lease of a token of _Renewer.add or _AsyncRenewer.add."""
    if tok is not None:
        tok[0].remove(tok[1])


def _after_fork() -> None:  # the child holds none of the parent's leases (nor its locks)
    global _RENEWERS_LOCK, _SHARED_RENEWER, _RENEWERS
    _RENEWERS_LOCK = threading.Lock()
    _RENEWERS = weakref.WeakKeyDictionary()
    _SHARED_RENEWER = _Renewer()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _forget(busy: Dict[int, Any], cid: int, _: Any) -> None:
    busy.pop(cid, None)


class _AsyncRenewer:
    """The leases held through async clients on one event loop, renewed by one task (made
    with the first lease, done when none is left); each client's renewals in turn, the
    clients' at once (a stalled server delays only its own client's)."""

    def __init__(self) -> None:
        self.leases: Dict[int, List[Any]] = {}
        self.task: Optional["asyncio.Task[None]"] = None

    def add(self, lim: Any, key: Any, cfg: _Config, lease: str) -> Tuple[Any, int]:
        tok = next(_SEQ)
        self.leases[tok] = [lim, key, cfg, lease, time.monotonic() + cfg.lease_ms / 3000.0]
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())
        return (self, tok)

    def remove(self, tok: int) -> None:
        self.leases.pop(tok, None)

    async def _client_renewals(self, groups: List[Any]) -> None:
        for lim, key, cfg, items in groups:
            ok = await lim._renew(key, cfg, [lid for _, lid in items])
            period = cfg.lease_ms / 3000.0
            again = time.monotonic() + (period if ok else min(period, _TICK))
            for tok, _ in items:
                v = self.leases.get(tok)
                if v is not None:
                    v[4] = again

    async def _run(self) -> None:
        busy: Dict[int, "asyncio.Task[None]"] = {}  # id(client) -> its renewals under way
        try:
            while self.leases:
                now = time.monotonic()
                groups, nxt = _due(self.leases, now)
                per: Dict[int, List[Any]] = {}
                for g in groups.values():
                    cid = id(g[0]._client)
                    if cid not in busy:  # a client still renewing: its leases wait
                        per.setdefault(cid, []).append(g)
                for cid, gs in per.items():
                    task = busy[cid] = asyncio.ensure_future(self._client_renewals(gs))
                    task.add_done_callback(functools.partial(_forget, busy, cid))
                await asyncio.sleep(min(_TICK, max(0.001, nxt - time.monotonic()))
                                    if not per else 0.001)
        finally:
            for t in list(busy.values()):
                t.cancel()
            self.task = None


_ARENEWERS: "weakref.WeakKeyDictionary[Any, _AsyncRenewer]" = weakref.WeakKeyDictionary()


def _arenewer() -> _AsyncRenewer:
    loop = asyncio.get_running_loop()
    r = _ARENEWERS.get(loop)
    if r is None:
        r = _ARENEWERS[loop] = _AsyncRenewer()
    return r


def _check_exit_reply(reply: Any, name: str) -> int:
    """The EXIT script's reply [1, count, 0]: the count (released or renewed)."""
    if (type(reply) is not list or len(reply) != 3 or not all(type(x) is int for x in reply)
            or reply[0] != 1 or reply[1] < 0):
        raise RedisReplyError("unexpected reply from Redis for %r: %.200r" % (name, reply))
    return cast(int, reply[1])


class RedisLimiter(_SyncOps):
    """Limiter's surface with its state in Redis (a sync redis-py client).

    RedisLimiter(client, name, qps=None, *, concurrency=None, behavior="reject",
                 warm_up_s=10, cold_factor=3, max_queueing_ms=500, occupy_timeout_ms=500,
                 interval_ms=1000, sample_count=2, on_error="allow", lease_ms=5000,
                 on_block=None)
    """

    def __init__(self, client: Any, name: str, qps: Union[int, float, None] = None, *,
                 rate: Optional[str] = None,
                 concurrency: Optional[int] = None, behavior: str = "reject",
                 warm_up_s: float = 10, cold_factor: float = 3, max_queueing_ms: int = 500,
                 occupy_timeout_ms: int = 500, interval_ms: int = _rate.INTERVAL_MS,
                 sample_count: int = _rate.SAMPLE_COUNT,
                 on_error: str = "allow", lease_ms: int = 5_000,
                 on_block: Optional[Callable[..., Any]] = None) -> None:
        kw = dict(rate=rate, concurrency=concurrency, behavior=behavior, warm_up_s=warm_up_s,
                  cold_factor=cold_factor, max_queueing_ms=max_queueing_ms,
                  occupy_timeout_ms=occupy_timeout_ms, interval_ms=interval_ms,
                  sample_count=sample_count)
        self._setup(client, name, qps, kw, on_error, lease_ms, on_block)
        self.key = "slidewin:{%s}" % self._name
        self._held = _Held()

    def try_acquire(self, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        """Admit now or refuse; never waits. Counts PASS or BLOCK in Redis."""
        n = _check_n(n)
        lease = self._lease_for(self._cfg)
        v, _, _ = self._decide_on(self.key, self._cfg, n, F_TRY, now_ns, lease)
        if v == PASS and self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, now_ns)
        return v == PASS

    def reserve(self, n: int = 1, *, now_ns: Optional[int] = None,
                prioritized: bool = False) -> Optional[int]:
        """The wait in ns (0 = go now), already counted as admitted; None = blocked."""
        n = _check_n(n)
        flags = F_PRIO if prioritized else 0
        lease = self._lease_for(self._cfg)
        v, wait, _ = self._decide_on(self.key, self._cfg, n, flags, now_ns, lease)
        if v != PASS:
            return None
        if self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, now_ns)
        return wait

    def acquire(self, n: int = 1, *, timeout: Optional[float] = None) -> None:
        """One decision, sleeping its wait; with a timeout, retry until admitted or the
        timeout passed. Raises BlockedError."""
        n = _check_n(n)
        timeout = _check_timeout(timeout)
        if timeout is not None and self._cfg.can_never_pass(n):
            timeout = 0.0
        lease = self._lease_for(self._cfg)
        self._acquire_on(self.key, self._cfg, n, timeout, 0, lease)
        if self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, None)

    def release(self, n: int = 1) -> None:
        """Give back n of what this client holds (try_acquire/reserve/acquire of a
        concurrency limiter)."""
        n = _check_n(n)
        pairs = self._unhold(None, n, repr(self._name))
        self._exit_on(self.key, self._cfg, n, _OUT_NONE, 0, pairs)

    def entry(self, n: int = 1) -> _SyncEntry:
        """``with lim.entry(): ...``: acquire, then on exit record SUCCESS (and RT) or
        EXCEPTION and give back the in-flight lease."""
        return _SyncEntry(self, self.key, self._cfg, _check_n(n))

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING) -> Any:
        if func is None:
            return lambda f: self.__call__(f, on_block=on_block)
        return _decorate_entries(self, type(self).__name__, func, on_block, None, False)

    def stats(self, now_ns: Optional[int] = None) -> Stats:
        """The window's rates in Redis (all clients together). Errors propagate."""
        args = self._args(self._cfg, 1, 0, now_ns, "")
        return self._stats(self._run(_SCRIPTS["stats"], self.key, args), self._cfg,
                           self._name)

    def reset(self) -> None:
        """Delete this limiter's state in Redis (every client starts fresh)."""
        self._client.delete(self.key)

    def close(self) -> None:
        """Nothing to close: decisions use the client's own pool (close the client). Kept
        for callers of earlier versions."""


class AsyncRedisLimiter(_Base):
    """RedisLimiter over a ``redis.asyncio`` client: the methods are coroutines."""

    _is_async = True
    key: str  # set by __init__ (_init_limiter)
    _held: "_Held"

    async def _run(self, script: _Script, key: Any, args: List[Any],
                   packed: Optional[bytes] = None) -> Any:
        return await _async_call(self._client, self._cluster, script, key, args, packed)

    async def _decide_on(self, key: Any, cfg: _Config, n: int, flags: int, now_ns: Any,
                         lease: str) -> Tuple[int, int, int]:
        try:
            if self._cluster:  # the cluster client routes it: its arguments
                args, packed = self._args(cfg, n, flags, now_ns, lease) + cfg.params, None
            else:  # the same bytes as the sync types send
                args, packed = [], self._packed_decision(cfg, key, n, flags, now_ns, lease)
            reply = await self._run(cfg.script, key, args, packed)
            return self._parse(reply, cfg)
        except _UNREACHABLE + (asyncio.TimeoutError,) as e:
            return self._failed(e, flags)

    async def _exit_on(self, key: Any, cfg: _Config, n: int, outcome: int, rt_ms: int,
                       leases: List[Tuple[str, int]]) -> None:
        args = self._args(cfg, n, 0, None, "") + [str(outcome), str(rt_ms)]
        for lid, k in leases:
            args += [lid, str(k)]
        try:
            _check_exit_reply(await self._run(_SCRIPTS["exit"], key, args), self._name)
        except _UNREACHABLE + (asyncio.TimeoutError,) as e:
            with self._lock:
                self.errors += 1
            log.debug("slidewin.redis: exit of %r failed: %s", self._name, e)

    async def _renew(self, key: Any, cfg: _Config, ids: List[str]) -> bool:
        try:
            _check_exit_reply(await self._run(_SCRIPTS["exit"], key,
                                              _renew_args(self, cfg, ids)), self._name)
            return True
        except Exception as e:
            log.debug("slidewin.redis: renewing the leases of %r failed: %s", self._name, e)
            return False

    async def _acquire_on(self, key: Any, cfg: _Config, n: int, timeout: Optional[float],
                          flags: int, lease: str, sleep_wait: bool = True) -> int:
        if timeout is None:
            verdict, wait_ns, retry_ns = await self._decide_on(key, cfg, n, flags | F_RETRY,
                                                               None, lease)
            if verdict != PASS:
                raise self._blocked(n, verdict, retry_ns)
        else:
            deadline = time.monotonic() + timeout
            step = 0.001
            while True:
                verdict, wait_ns, retry_ns = await self._decide_on(
                    key, cfg, n, flags | F_NO_BLOCK | F_RETRY, None, lease)
                if verdict == PASS:
                    break
                now = time.monotonic()
                if verdict == NEVER or now >= deadline:
                    await self._exit_on(key, cfg, n, _OUT_BLOCK, 0, [])
                    raise self._blocked(n, verdict, retry_ns)
                if retry_ns > 0:
                    sleep = retry_ns / 1e9
                else:
                    sleep, step = step, min(step * 2, 0.05)
                await asyncio.sleep(max(0.0, min(sleep, deadline - now)))
        if wait_ns > 0 and sleep_wait:
            await asyncio.sleep(wait_ns / 1e9)
        return wait_ns

    async def try_acquire(self, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        n = _check_n(n)
        lease = self._lease_for(self._cfg)
        v, _, _ = await self._decide_on(self.key, self._cfg, n, F_TRY, now_ns, lease)
        if v == PASS and self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, now_ns)
        return v == PASS

    async def reserve(self, n: int = 1, *, now_ns: Optional[int] = None,
                      prioritized: bool = False) -> Optional[int]:
        n = _check_n(n)
        flags = F_PRIO if prioritized else 0
        lease = self._lease_for(self._cfg)
        v, wait, _ = await self._decide_on(self.key, self._cfg, n, flags, now_ns, lease)
        if v != PASS:
            return None
        if self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, now_ns)
        return wait

    async def acquire(self, n: int = 1, *, timeout: Optional[float] = None) -> None:
        n = _check_n(n)
        timeout = _check_timeout(timeout)
        if timeout is not None and self._cfg.can_never_pass(n):
            timeout = 0.0
        lease = self._lease_for(self._cfg)
        await self._acquire_on(self.key, self._cfg, n, timeout, 0, lease)
        if self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, None)

    acquire_async = acquire

    async def release(self, n: int = 1) -> None:
        n = _check_n(n)
        pairs = self._unhold(None, n, repr(self._name))
        await self._exit_on(self.key, self._cfg, n, _OUT_NONE, 0, pairs)

    def entry(self, n: int = 1) -> _AsyncEntry:
        return _AsyncEntry(self, self.key, self._cfg, _check_n(n))

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING) -> Any:
        if func is None:
            return lambda f: self.__call__(f, on_block=on_block)
        return _decorate_entries(self, type(self).__name__, func, on_block, None, True)

    async def stats(self, now_ns: Optional[int] = None) -> Stats:
        args = self._args(self._cfg, 1, 0, now_ns, "")
        return self._stats(await self._run(_SCRIPTS["stats"], self.key, args), self._cfg,
                           self._name)

    async def reset(self) -> None:
        await self._client.delete(self.key)

    async def aclose(self) -> None:
        """Nothing to close: decisions use the client's own pool (close the client). Kept
        for callers of earlier versions."""


def _init_limiter(self: Any, client: Any, name: str, qps: Any, kw: Dict[str, Any],
                  on_error: str, lease_ms: int, on_block: Any) -> None:
    self._setup(client, name, qps, kw, on_error, lease_ms, on_block)
    self.key = "slidewin:{%s}" % self._name
    self._held = _Held()


def _limiter_init(self: Any, client: Any, name: str, qps: Union[int, float, None] = None, *,
                  rate: Optional[str] = None,
                  concurrency: Optional[int] = None, behavior: str = "reject",
                  warm_up_s: float = 10, cold_factor: float = 3, max_queueing_ms: int = 500,
                  occupy_timeout_ms: int = 500, interval_ms: int = _rate.INTERVAL_MS,
                  sample_count: int = _rate.SAMPLE_COUNT,
                  on_error: str = "allow", lease_ms: int = 5_000,
                  on_block: Optional[Callable[..., Any]] = None) -> None:
    kw = dict(rate=rate, concurrency=concurrency, behavior=behavior, warm_up_s=warm_up_s,
              cold_factor=cold_factor, max_queueing_ms=max_queueing_ms,
              occupy_timeout_ms=occupy_timeout_ms, interval_ms=interval_ms,
              sample_count=sample_count)
    _init_limiter(self, client, name, qps, kw, on_error, lease_ms, on_block)


AsyncRedisLimiter.__init__ = _limiter_init  # type: ignore[method-assign,assignment]


# -- per key ---------------------------------------------------------------------------------


def _encode_key(key: Any) -> bytes:
    """Type-tagged, so "1", b"1" and 1 are different keys (as KeyedLimiter)."""
    if isinstance(key, str):
        body = key.encode("utf-8", "surrogatepass")
        tag = b"s"
    elif isinstance(key, bytes):
        body, tag = key, b"b"
    elif isinstance(key, int) and not isinstance(key, bool):
        if key.bit_length() > 3500:  # far beyond the cap, and str() has a digit limit
            raise ValueError("key must be at most %d bytes once encoded (an int: its "
                             "digits), got an int of %d bits" % (MAX_KEY_BYTES,
                                                                 key.bit_length()))
        body, tag = str(key).encode(), b"i"
    else:
        raise TypeError("a key must be str, bytes or int, not %s" % type(key).__name__)
    if len(body) > MAX_KEY_BYTES:
        # it is stored (in the Redis key's name) and sent with every decision
        raise ValueError("key must be at most %d bytes once encoded (str as UTF-8, int as "
                         "its digits), got %d bytes" % (MAX_KEY_BYTES, len(body)))
    return tag + body


class _KeyedMixin:
    """Per-key state: one Redis string per key, each with its own hash tag (keys spread over a
    cluster's nodes); only what admission needs is stored per key (PASS counts, the pacing
    time, warm-up tokens, leases). BLOCK, SUCCESS, EXCEPTION and RT of a keyed limiter are
    counted by this client in ``local_totals()``, not in Redis."""

    _lean = True
    # set by _Base._setup (the class this one is mixed with)
    _name: str
    _cfg: _Config
    _lock: threading.Lock

    def _keyed_setup(self, overrides: Any) -> None:
        self._prefix = b"slidewin:k:{" + self._name.encode() + b":"
        self._kw = dict(concurrency=self._cfg.concurrency, behavior=self._cfg.behavior,
                        warm_up_s=self._cfg.warm_up_s, cold_factor=self._cfg.cold_factor,
                        max_queueing_ms=self._cfg.max_queueing_ms,
                        occupy_timeout_ms=self._cfg.occupy_timeout_ms,
                        interval_ms=self._cfg.interval_ms, sample_count=self._cfg.sample_count)
        self._overrides: Dict[bytes, _Config] = {}
        self._override_values: Dict[Any, Any] = {}
        self._held = _Held()
        self._totals = {"pass": 0, "block": 0}
        if overrides:
            self.overrides = overrides

    def _rkey(self, key: Any) -> bytes:
        return self._prefix + _encode_key(key) + b"}"

    def _cfg_for(self, rk: bytes) -> _Config:
        """The settings of a Redis key of this limiter (its overrides, else the limiter's)."""
        if not self._overrides:
            return self._cfg
        return self._overrides.get(rk[len(self._prefix):-1], self._cfg)

    @property
    def overrides(self) -> Dict[Any, Any]:
        """Per-key thresholds (qps, or concurrency for a concurrency limiter)."""
        return dict(self._override_values)

    @overrides.setter
    def overrides(self, value: Any) -> None:
        if not isinstance(value, dict):
            raise TypeError("overrides must be a dict {key: threshold}, not %s"
                            % type(value).__name__)
        cfgs: Dict[bytes, _Config] = {}
        for k, v in value.items():
            try:
                enc = _encode_key(k)
            except (TypeError, ValueError) as e:
                raise type(e)("overrides: %s" % e) from None
            kw = dict(self._kw)
            try:
                if self._cfg.concurrency is not None:
                    kw["concurrency"] = v
                    cfgs[enc] = _Config(None, kw, self._cfg.lease_ms)
                else:
                    cfgs[enc] = _Config(v, kw, self._cfg.lease_ms)
            except (TypeError, ValueError) as e:
                raise type(e)("overrides[%r]: %s" % (k, e)) from None
        self._overrides = cfgs
        self._override_values = dict(value)

    def _tally(self, v: int, n: int) -> None:
        with self._lock:
            if v == PASS:
                self._totals["pass"] += n
            else:
                self._totals["block"] += n

    def local_totals(self) -> Dict[str, int]:
        """This client's admitted and refused requests over every key."""
        with self._lock:
            return dict(self._totals)


class RedisKeyedLimiter(_KeyedMixin, _SyncOps):
    """KeyedLimiter's surface with one Redis string per key (a sync redis-py client).

    RedisKeyedLimiter(client, name, qps=None, *, <Limiter's keywords>, overrides=None,
                      on_error="allow", lease_ms=5000, on_block=None)
    """

    _kind = "RedisKeyedLimiter"

    def __init__(self, client: Any, name: str, qps: Union[int, float, None] = None, *,
                 rate: Optional[str] = None,
                 concurrency: Optional[int] = None, behavior: str = "reject",
                 warm_up_s: float = 10, cold_factor: float = 3, max_queueing_ms: int = 500,
                 occupy_timeout_ms: int = 500, interval_ms: int = _rate.INTERVAL_MS,
                 sample_count: int = _rate.SAMPLE_COUNT,
                 overrides: Optional[Dict[Any, Any]] = None, on_error: str = "allow",
                 lease_ms: int = 5_000, on_block: Optional[Callable[..., Any]] = None) -> None:
        kw = dict(rate=rate, concurrency=concurrency, behavior=behavior, warm_up_s=warm_up_s,
                  cold_factor=cold_factor, max_queueing_ms=max_queueing_ms,
                  occupy_timeout_ms=occupy_timeout_ms, interval_ms=interval_ms,
                  sample_count=sample_count)
        self._setup(client, name, qps, kw, on_error, lease_ms, on_block)
        self._keyed_setup(overrides)

    def _one(self, key: Any, n: int, flags: int, now_ns: Any) -> Tuple[int, int, int]:
        rk = self._rkey(key)
        n = _check_n(n)
        cfg = self._cfg_for(rk)
        lease = self._lease_for(cfg)
        v, wait, retry = self._decide_on(rk, cfg, n, flags, now_ns, lease)
        self._tally(v, n)
        if v == PASS and cfg.concurrency is not None:
            self._hold(rk, rk, cfg, lease, n, now_ns)
        return v, wait, retry

    def try_acquire(self, key: Any, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        return self._one(key, n, F_TRY, now_ns)[0] == PASS

    def reserve(self, key: Any, n: int = 1, *, now_ns: Optional[int] = None) -> Optional[int]:
        v, wait, _ = self._one(key, n, 0, now_ns)
        return wait if v == PASS else None

    def acquire(self, key: Any, n: int = 1, *, timeout: Optional[float] = None) -> None:
        rk = self._rkey(key)
        n = _check_n(n)
        timeout = _check_timeout(timeout)
        cfg = self._cfg_for(rk)
        if timeout is not None and cfg.can_never_pass(n):
            timeout = 0.0
        lease = self._lease_for(cfg)
        try:
            self._acquire_on(rk, cfg, n, timeout, 0, lease)
        except BlockedError:
            self._tally(BLOCK, n)
            raise
        self._tally(PASS, n)
        if cfg.concurrency is not None:
            self._hold(rk, rk, cfg, lease, n, None)

    def release(self, key: Any, n: int = 1) -> None:
        rk = self._rkey(key)
        n = _check_n(n)
        pairs = self._unhold(rk, n, "key %r" % (key,))
        self._exit_on(rk, self._cfg_for(rk), n, _OUT_NONE, 0, pairs)

    def entry(self, key: Any, n: int = 1) -> _SyncEntry:
        rk = self._rkey(key)
        return _SyncEntry(self, rk, self._cfg_for(rk), _check_n(n))

    def __call__(self, func: Any = None, *, key: Any = None, on_block: Any = _MISSING) -> Any:
        """``@per_user(key=lambda request, *a, **k: request.client_ip)``"""
        if func is None:
            return lambda f: self.__call__(f, key=key, on_block=on_block)
        if key is None or not callable(key):
            raise TypeError("a keyed limiter decorates with key=callable(*args, **kwargs)")
        return _decorate_entries(self, type(self).__name__, func, on_block, key,
                                 self._is_async)

    def stats(self, key: Any, now_ns: Optional[int] = None) -> Stats:
        """One key's window: pass_qps, concurrency (in-flight leases) and waiting; BLOCK and
        the outcomes of keys are counted by each client (``local_totals()``)."""
        rk = self._rkey(key)
        cfg = self._cfg_for(rk)
        args = self._args(cfg, 1, 0, now_ns, "")
        return self._stats(self._run(_SCRIPTS["stats"], rk, args), cfg, self._name)

    def reset(self, key: Any) -> None:
        self._client.delete(self._rkey(key))


class AsyncRedisKeyedLimiter(_KeyedMixin, AsyncRedisLimiter):
    """RedisKeyedLimiter over a ``redis.asyncio`` client: the methods are coroutines."""

    _kind = "AsyncRedisKeyedLimiter"
    __init__ = RedisKeyedLimiter.__init__

    async def _one(self, key: Any, n: int, flags: int, now_ns: Any) -> Tuple[int, int, int]:
        rk = self._rkey(key)
        n = _check_n(n)
        cfg = self._cfg_for(rk)
        lease = self._lease_for(cfg)
        v, wait, retry = await self._decide_on(rk, cfg, n, flags, now_ns, lease)
        self._tally(v, n)
        if v == PASS and cfg.concurrency is not None:
            self._hold(rk, rk, cfg, lease, n, now_ns)
        return v, wait, retry

    async def try_acquire(self, key: Any, n: int = 1, *,  # type: ignore[override]
                          now_ns: Optional[int] = None) -> bool:
        return (await self._one(key, n, F_TRY, now_ns))[0] == PASS

    async def reserve(self, key: Any, n: int = 1, *,  # type: ignore[override]
                      now_ns: Optional[int] = None) -> Optional[int]:
        v, wait, _ = await self._one(key, n, 0, now_ns)
        return wait if v == PASS else None

    async def acquire(self, key: Any, n: int = 1, *,  # type: ignore[override]
                      timeout: Optional[float] = None) -> None:
        rk = self._rkey(key)
        n = _check_n(n)
        timeout = _check_timeout(timeout)
        cfg = self._cfg_for(rk)
        if timeout is not None and cfg.can_never_pass(n):
            timeout = 0.0
        lease = self._lease_for(cfg)
        try:
            await self._acquire_on(rk, cfg, n, timeout, 0, lease)
        except BlockedError:
            self._tally(BLOCK, n)
            raise
        self._tally(PASS, n)
        if cfg.concurrency is not None:
            self._hold(rk, rk, cfg, lease, n, None)

    acquire_async = acquire  # type: ignore[assignment]

    async def release(self, key: Any, n: int = 1) -> None:  # type: ignore[override]
        rk = self._rkey(key)
        n = _check_n(n)
        pairs = self._unhold(rk, n, "key %r" % (key,))
        await self._exit_on(rk, self._cfg_for(rk), n, _OUT_NONE, 0, pairs)

    def entry(self, key: Any, n: int = 1) -> _AsyncEntry:  # type: ignore[override]
        rk = self._rkey(key)
        return _AsyncEntry(self, rk, self._cfg_for(rk), _check_n(n))

    __call__ = RedisKeyedLimiter.__call__

    async def stats(self, key: Any, now_ns: Optional[int] = None) -> Stats:  # type: ignore[override]
        rk = self._rkey(key)
        cfg = self._cfg_for(rk)
        args = self._args(cfg, 1, 0, now_ns, "")
        return self._stats(await self._run(_SCRIPTS["stats"], rk, args), cfg, self._name)

    async def reset(self, key: Any) -> None:  # type: ignore[override]
        await self._client.delete(self._rkey(key))
