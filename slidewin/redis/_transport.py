"""The round trip, the only part the sync and async types do differently: the shared logic's
script calls over the client's own pool (never retried once one may have applied), Redis
Cluster routing, and the renewal of the leases this process holds."""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import itertools
import logging
import math
import os
import re
import threading
import time
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .. import _io
from .._admission import refuse_in_loop
from . import _fast
from ._config import _Config
from ._scripts import _Script
from ._wire import (_OUT_RENEW, NoScriptError, RedisClusterException, RedisError, RedisReplyError,
                    ResponseError, _eval_of, _named, _parse)
from ._wire import redis as _redis

log = logging.getLogger("slidewin.redis")

# what a decision meets when Redis cannot decide (on_error): redis-py's, socket errors, a
# Cluster's "no reachable node" (not a RedisError), asyncio's timeout (no OSError before 3.11)
_ERRORS = (RedisError, OSError, RedisClusterException, asyncio.TimeoutError)


def _is_cluster(client: Any) -> bool:
    if _redis is None:
        return False
    from redis.asyncio.cluster import RedisCluster as ARedisCluster
    from redis.cluster import RedisCluster

    return isinstance(client, (RedisCluster, ARedisCluster))


# A decision borrows a connection of the client's pool, as a redis-py command does. redis-py
# retries a failed connect with backoff, which would hold a caller for seconds while Redis is
# down, where on_error must answer: the pool's retry policy is wrapped in one that connects
# once while a slidewin call is under way (_DECIDING); the client's own commands keep theirs.

_DECIDING: "contextvars.ContextVar[bool]" = contextvars.ContextVar("slidewin_deciding",
                                                                   default=False)


@contextlib.contextmanager
def _deciding() -> Iterator[None]:
    token = _DECIDING.set(True)
    try:
        yield
    except RecursionError:
        raise RedisReplyError("unreadable reply from Redis: nested without end") from None
    finally:
        _DECIDING.reset(token)


def _tell(retry: Any, fail: Any, err: Exception, a: Tuple[Any, ...], k: Dict[str, Any]) -> Any:
    """The failure handler's result, told only if the policy would have retried err."""
    supported = getattr(retry, "_supported_errors", None)
    if isinstance(supported, tuple) and not isinstance(err, supported):
        return None
    is_retryable = k.get("is_retryable", a[0] if a else None)
    if is_retryable is not None and not is_retryable(err):
        return None
    with_count = k.get("with_failure_count", a[1] if len(a) > 1 else False)
    return fail(err, 1) if with_count else fail(err)


class _GuardedRetry:
    """The client's retry policy (every attribute reaches it), but once during a slidewin call."""

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

    def __reduce__(self) -> Any:  # copies (redis-py's per connection: deep) wrap a copy
        return type(self), (self._retry,)

    def __repr__(self) -> str:
        return "<slidewin guarded %r>" % (self._retry,)

    def call_with_retry(self, do: Any, fail: Any, *a: Any, **k: Any) -> Any:
        if not _DECIDING.get():
            return self._retry.call_with_retry(do, fail, *a, **k)
        try:
            return do()
        except Exception as e:
            _tell(self._retry, fail, e, a, k)
            raise


class _AsyncGuardedRetry(_GuardedRetry):
    __slots__ = ()

    async def call_with_retry(self, do: Any, fail: Any, *a: Any, **k: Any) -> Any:
        if not _DECIDING.get():
            return await self._retry.call_with_retry(do, fail, *a, **k)
        try:
            return await do()
        except Exception as e:
            res = _tell(self._retry, fail, e, a, k)
            if inspect.isawaitable(res):
                await res
            raise


def _guard(retry: Any) -> Any:
    call = getattr(retry, "call_with_retry", None)  # None: no policy (or not redis-py's)
    if call is None or getattr(retry, "_slidewin_guarded", False):
        return retry
    return (_AsyncGuardedRetry if inspect.iscoroutinefunction(call) else _GuardedRetry)(retry)


def _guard_pool(pool: Any) -> None:
    """New connections of the pool get the guarded policy (redis-py copies it into each)."""
    kw = getattr(pool, "connection_kwargs", None)
    if kw is not None and kw.get("retry") is not None:
        kw["retry"] = _guard(kw["retry"])


def _guarded(conn: Any) -> Any:
    if getattr(conn, "retry", None) is not None:
        conn.retry = _guard(conn.retry)
    return conn


def _get_conn(pool: Any) -> Any:
    """A connection of the pool (a coroutine of one, asyncio's), with the guarded policy."""
    _guard_pool(pool)
    try:
        return pool.get_connection()
    except TypeError:  # redis-py < 5 (5.1, asyncio) requires a command name
        return pool.get_connection("EVALSHA")


def _call_pool(pool: Any, script: _Script, packed: bytes, asking: bool = False) -> Any:
    with _deciding():
        return _fast.call_pool(pool, _guarded(_get_conn(pool)), script, packed, asking)


def _unpack(packed: bytes) -> Tuple[List[Any], List[Any]]:
    parts = _parse(packed, 0)[0]
    nkeys = int(parts[2])
    return parts[3:3 + nkeys], parts[3 + nkeys:]


def _public_call(client: Any, script: _Script, packed: bytes) -> Any:
    """One script call by redis-py's public API: EVALSHA, then EVAL on NOSCRIPT."""
    keys, args = _unpack(packed)
    with _deciding():
        _guard_pool(getattr(client, "connection_pool", None))
        try:
            return client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(script.source, len(keys), *keys, *args)


def _redirect(err: Exception) -> Optional[Tuple[str, str, int]]:
    """('MOVED'|'ASK', host, port) for a cluster redirection, else None."""
    kind = type(err).__name__
    m = re.match(r"(MOVED|ASK) (\d+) (\S+):(\d+)", str(err))
    if m:
        return m.group(1), m.group(3), int(m.group(4))
    host = getattr(err, "host", None)
    port = getattr(err, "port", None)
    if host is not None and port is not None and kind in ("MovedError", "AskError"):
        return ("MOVED" if kind == "MovedError" else "ASK"), host, int(port)
    return None


_REFRESHED: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()


def _refresh_slots(client: Any, node: Any) -> None:
    """After a connection error or timeout on a Cluster node: the slot table is read again,
    the failed node asked last, as redis-py does; at most once a second per client."""
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


def _cluster_call(client: Any, script: _Script, key: Any, packed: bytes) -> Any:
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
            kind, host, port = r  # the command did not run there
            asking = kind == "ASK"
            node = client.get_node(host=host, port=port) if asking else None
            if node is None:
                client.nodes_manager.initialize()
                node = (client.get_node(host=host, port=port) if asking
                        else client.get_node_from_key(key))
                if node is None:
                    raise
    raise RedisReplyError("too many cluster redirections for key %r" % (key,))


async def _async_call_pool(pool: Any, script: _Script, packed: bytes) -> Any:
    with _deciding():
        conn = _guarded(await _get_conn(pool))
        try:
            try:
                await conn.send_packed_command([packed])
                return await conn.read_response()
            except NoScriptError:
                await conn.send_packed_command([_eval_of(packed, script.source)])
                return await conn.read_response()
        except BaseException as e:
            if _fast.out_of_step(e):  # (see _fast.call_pool)
                await conn.disconnect()
            raise
        finally:
            await pool.release(conn)


class _SyncTransport:
    """The round trip of the sync types. drive() runs one operation of the shared logic: a
    generator that yields script calls ``(script, key, packed EVALSHA, names)`` (`names`:
    all_of's keys), sleeps (a float, seconds) and waits (a callable), and gets each one's
    result (or its exception) back."""

    is_async = False

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = _is_cluster(client)
        self.fast = _fast.fast(client)  # the fast path (no I/O: the client's classes)

    def drive(self, gen: Any) -> Any:
        return _io.run(self._steps(gen))

    def _steps(self, gen: Any) -> Any:
        """The logic's ops as _io's steps; an exception (a cancellation too) goes back in."""
        val: Any = None
        exc: Optional[BaseException] = None
        while True:
            try:
                op = gen.send(val) if exc is None else gen.throw(exc)
            except StopIteration as stop:
                return stop.value
            exc = None
            try:
                val = yield (op if callable(op) else self._sleep(op) if type(op) is float
                             else functools.partial(self.call, *op))
            except ResponseError as e:  # about a call's key's value: named for what it is
                val, exc = None, (_named(e, op[3] if len(op) > 3 else op[1])
                                  if type(op) is tuple else e)
            except (ValueError, IndexError) as e:  # redis-py's parser on a garbled reply
                val, exc = None, (RedisReplyError("unreadable reply from Redis: %s" % e)
                                  if type(op) is tuple else e)
            except BaseException as e:
                val, exc = None, e

    @staticmethod
    def _sleep(seconds: float) -> Any:
        refuse_in_loop("a Redis limiter's acquire() or entry(timeout=...) that must wait",
                       "its asyncio twin (AsyncRedisLimiter: await lim.acquire(), "
                       "async with lim.entry(), async with lim)")
        return functools.partial(time.sleep, seconds)

    def call(self, script: _Script, key: Any, packed: bytes, names: Any = None) -> Any:
        if self.fast:
            try:
                if not self.cluster:
                    return _call_pool(self.client.connection_pool, script, packed)
                return _cluster_call(self.client, script, key, packed)
            except _fast._NotFast:  # a connection of another kind: public from now on
                self.fast = False
        return _public_call(self.client, script, packed)

    def renewer(self) -> "_Renewer":
        loop = asyncio.get_running_loop() if self.is_async else None
        with _RENEWERS_LOCK:
            table = _RENEWERS if loop is None else _RENEWERS.setdefault(
                loop, weakref.WeakKeyDictionary())
            try:
                r = table.get(self.client)
                if r is None:
                    r = table[self.client] = _Renewer(self.is_async)
            except TypeError:  # not weakly referenceable (nor hashable)
                r = table.setdefault(_SHARED, _Renewer(self.is_async))
            return r


class _AsyncTransport(_SyncTransport):
    """The round trip of the asyncio types: drive() is a coroutine, as are its calls."""

    is_async = True

    async def drive(self, gen: Any) -> Any:
        return await _io.arun(self._steps(gen))

    @staticmethod
    def _sleep(seconds: float) -> Any:
        return functools.partial(asyncio.sleep, seconds)

    async def call(self, script: _Script, key: Any, packed: bytes, names: Any = None) -> Any:
        client = self.client
        if self.fast and not self.cluster:
            return await _async_call_pool(client.connection_pool, script, packed)
        evalsha, eval_ = client.evalsha, client.eval  # a client the fast path does not know
        if self.fast:
            # redis.asyncio.cluster follows MOVED/ASK itself. The node is named: a call without
            # one is retried on TimeoutError / ConnectionError by the cluster client, which
            # could apply a decision twice and hold the caller past its timeout.
            if getattr(client, "_initialize", False):
                await client.initialize()
            node = client.get_node_from_key(key)
            evalsha = functools.partial(client.execute_command, "EVALSHA", target_nodes=node)
            eval_ = functools.partial(client.execute_command, "EVAL", target_nodes=node)
        ks, args = _unpack(packed)
        with _deciding():
            try:
                return await evalsha(script.sha, len(ks), *ks, *args)
            except NoScriptError:
                return await eval_(script.source, len(ks), *ks, *args)


class _Held(Dict[Any, List[List[Any]]]):
    """A concurrency limiter's admissions this client holds, per Redis key: [lease id, n,
    renewal token] each, released newest first (a forked child holds none: _after_fork, or
    own() after a fork by C, without the at-fork hooks: uWSGI's, ctypes')."""

    def __init__(self) -> None:
        super().__init__()
        self.pid = os.getpid()
        _HELD[id(self)] = self

    def own(self) -> "_Held":
        if self.pid != os.getpid():
            self.clear()
            self.pid = os.getpid()
        return self

    def take(self, key: Any, n: int, what: str) -> Tuple[List[Tuple[str, int]], List[Any]]:
        """(lease id, count) pairs to release, and the renewal tokens of leases now empty."""
        leases = self.own().get(key, [])
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
            self.pop(key, None)
        return pairs, done


_HELD: "weakref.WeakValueDictionary[int, _Held]" = weakref.WeakValueDictionary()


# A lease expires lease_ms after it was taken or last renewed: its holder renews it every
# lease_ms / 3 (one EXIT call per key), so a crashed client's is gone lease_ms later. Leases
# taken with an explicit now_ns are on the caller's clock: not renewed.

_TICK = 0.25  # s: how late a renewal may be, at most


def _due(leases: Dict[int, List[Any]], now: float) -> Tuple[Dict[Any, Any], float]:
    groups: Dict[Any, Tuple[Any, Any, Any, List[Tuple[int, str]]]] = {}
    nxt = math.inf
    for tok, v in leases.items():
        if v[4] <= now:
            g = groups.setdefault((id(v[0]), v[1], id(v[2])), (v[0], v[1], v[2], []))
            g[3].append((tok, v[3]))
        elif v[4] < nxt:
            nxt = v[4]
    return groups, nxt


class _Renewer:
    """The leases held through one client, renewed by a runner of their own (a stalled server
    delays no other client's renewals): a daemon thread, or an asyncio client's task on its
    loop. The runner ends when none is left."""

    def __init__(self, is_async: bool) -> None:
        self.lock = threading.Lock()
        self.leases: Dict[int, List[Any]] = {}  # token -> [lim, key, cfg, lease id, due]
        self.runner: Any = None  # the thread (or task)
        self.is_async = is_async
        self.pid = os.getpid()

    def add(self, lim: Any, key: Any, cfg: _Config, lease: str) -> Tuple[Any, int]:
        if self.pid != os.getpid():  # forked by C (no at-fork hooks): the parent's runner
            with _FORKED.setdefault(os.getpid(), threading.Lock()):  # once, of its threads
                if self.pid != os.getpid():
                    self.__init__(is_async=self.is_async)  # type: ignore[misc]
        tok = next(_SEQ)
        due = time.monotonic() + cfg.lease_ms / 3000.0
        with self.lock:
            self.leases[tok] = [lim, key, cfg, lease, due]
            if self.runner is None and self.is_async:
                self.runner = asyncio.get_running_loop().create_task(
                    _io.arun(self._g_run(asyncio.sleep)))
            elif self.runner is None:
                thread = threading.Thread(target=_io.run, args=(self._g_run(time.sleep),),
                                          daemon=True, name="slidewin.redis leases")
                thread.start()
                self.runner = thread
        return (self, tok)

    def _g_run(self, sleep: Any) -> Any:
        """The due leases renewed (one EXIT call per key), in turn; `sleep`: the runner's."""
        pid = os.getpid()
        try:
            while True:
                with self.lock:
                    if not self.leases or pid != os.getpid():
                        self.runner = None
                        return
                    groups, nxt = _due(self.leases, time.monotonic())
                for lim, key, cfg, items in groups.values():
                    ok = yield functools.partial(lim._t.drive, lim._g_exit(  # False: it failed
                        key, cfg, 1, _OUT_RENEW, 0, [(lid, 0) for _, lid in items]))
                    period = cfg.lease_ms / 3000.0
                    again = time.monotonic() + (period if ok else min(period, _TICK))
                    with self.lock:
                        for tok, _ in items:
                            v = self.leases.get(tok)
                            if v is not None:
                                v[4] = again
                if not groups:
                    yield functools.partial(sleep, min(_TICK, max(0.001, nxt - time.monotonic())))
        except BaseException:  # a cancelled task: the next lease starts a runner anew
            self.runner = None
            raise


_SEQ = itertools.count(1)  # renewal tokens
_FORKED: Dict[int, threading.Lock] = {}  # a C-forked child's renewers made anew, per pid
# one renewer per sync client, per asyncio client on each loop (a client that takes no weak
# reference: the shared one, keyed by _SHARED)
_RENEWERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_RENEWERS_LOCK = threading.Lock()
_SHARED = type("_Shared", (), {})()


def _unrenew(tok: Any) -> None:  # (renewer, token) of a lease given back: not renewed
    if tok is not None:
        with tok[0].lock:
            tok[0].leases.pop(tok[1], None)


def _after_fork() -> None:  # the child holds none of the parent's leases (nor its locks)
    global _RENEWERS_LOCK, _RENEWERS
    _RENEWERS_LOCK = threading.Lock()
    _RENEWERS = weakref.WeakKeyDictionary()
    for held in list(_HELD.values()):
        held.clear()


os.register_at_fork(after_in_child=_after_fork)
