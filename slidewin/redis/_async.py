"""The asyncio Redis types of slidewin.redis: AsyncRedisLimiter and AsyncRedisKeyedLimiter
(a redis.asyncio client; the methods are coroutines)."""
from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .. import _rate
from .._admission import AsyncAdmission, NeedsKey
from .._core import BlockedError, Stats
from .._limiter import _MISSING, _check_timeout, _decorate_entries
from ._base import _Base, _elapsed_ms, _wait_timeout, _KeyedMixin, _outcome, _step
from ._config import _Config
from ._scripts import SCRIPTS as _SCRIPTS
from ._scripts import _Script
from ._sync import RedisKeyedLimiter
from ._transport import _UNREACHABLE, _arenewer, _async_call, _Held, _renew_args, _unrenew
from ._wire import (_OUT_BLOCK, _OUT_NONE, BLOCK, F_ENTRY, F_NO_BLOCK, F_PRIO, F_RETRY, F_TRY,
                    NEVER, PASS, _charge_reply, _check_charge_n, _check_exit_reply, _check_n,
                    _limiter_key, _time_args)

log = logging.getLogger("slidewin.redis")


class _AsyncEntry:
    __slots__ = ("_lim", "_key", "_cfg", "n", "_lease", "_t0", "_held", "_tok", "_timeout")

    def __init__(self, lim: Any, key: Any, cfg: _Config, n: int,
                 timeout: Optional[float] = None) -> None:
        self._lim, self._key, self._cfg, self.n = lim, key, cfg, n
        self._timeout = timeout  # checked (_wait_timeout): None, refused at once
        self._lease = os.urandom(8).hex()
        self._held = False

    async def __aenter__(self) -> "_AsyncEntry":
        if self._held:
            raise RuntimeError("this entry is already entered")
        wait_ns = await self._lim._acquire_on(self._key, self._cfg, self.n, self._timeout, F_ENTRY,
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


class AsyncRedisLimiter(_Base, AsyncAdmission):
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

    async def _charge_on(self, key: Any, cfg: _Config, n: int, now_ns: Any) -> bool:
        args = self._charge_args(cfg, n, now_ns)
        try:
            _charge_reply(await self._run(_SCRIPTS["charge"], key, args), self._name,
                          cfg.interval_ms, cfg.sample_count)
            return True
        except _UNREACHABLE + (asyncio.TimeoutError,) as e:
            self._charge_failed(e)
            return False

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
                sleep, step = _step(retry_ns, step)
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
        timeout = _wait_timeout(self._cfg, n, timeout)
        lease = self._lease_for(self._cfg)
        await self._acquire_on(self.key, self._cfg, n, timeout, 0, lease)
        if self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, None)

    acquire_async = acquire

    async def charge(self, n: int, *, now_ns: Optional[int] = None) -> None:
        """RedisLimiter.charge: count n more as admitted now, without a decision."""
        n = _check_charge_n(n)
        _time_args(now_ns)
        self._chargeable(self._cfg, n, "charge(n=%d)" % n)
        if n:
            await self._charge_on(self.key, self._cfg, n, now_ns)

    async def release(self, n: int = 1) -> None:
        n = _check_n(n)
        pairs = self._unhold(None, n, repr(self._name))
        await self._exit_on(self.key, self._cfg, n, _OUT_NONE, 0, pairs)

    def entry(self, n: int = 1, *, timeout: Optional[float] = None) -> _AsyncEntry:
        n = _check_n(n)
        return _AsyncEntry(self, self.key, self._cfg, n, _wait_timeout(self._cfg, n, timeout))

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING,
                 timeout: Optional[float] = None) -> Any:
        timeout = _check_timeout(timeout)
        if func is None:
            return lambda f: self.__call__(f, on_block=on_block, timeout=timeout)
        return _decorate_entries(self, type(self).__name__, func, on_block, None, True,
                                 timeout)

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
    self.key = _limiter_key(self._name)
    self._held = _Held()


def _limiter_init(self: Any, client: Any, name: str,
                  qps: Union[int, float, str, None] = None, *,
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


class AsyncRedisKeyedLimiter(NeedsKey, _KeyedMixin, AsyncRedisLimiter):
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
        cfg = self._cfg_for(rk)
        timeout = _wait_timeout(cfg, n, timeout)
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

    async def charge(self, key: Any, n: int, *,  # type: ignore[override]
                     now_ns: Optional[int] = None) -> None:
        """RedisKeyedLimiter.charge: count n more as admitted for key now."""
        rk = self._rkey(key)
        n = _check_charge_n(n)
        _time_args(now_ns)
        cfg = self._cfg_for(rk)
        self._chargeable(cfg, n, "charge(%r, n=%d)" % (key, n))
        if n and await self._charge_on(rk, cfg, n, now_ns):
            self._tally(PASS, n)

    async def release(self, key: Any, n: int = 1) -> None:  # type: ignore[override]
        rk = self._rkey(key)
        n = _check_n(n)
        pairs = self._unhold(rk, n, "key %r" % (key,))
        await self._exit_on(rk, self._cfg_for(rk), n, _OUT_NONE, 0, pairs)

    def entry(self, key: Any, n: int = 1, *,  # type: ignore[override]
              timeout: Optional[float] = None) -> _AsyncEntry:
        rk = self._rkey(key)
        n = _check_n(n)
        cfg = self._cfg_for(rk)
        return _AsyncEntry(self, rk, cfg, n, _wait_timeout(cfg, n, timeout))

    __call__ = RedisKeyedLimiter.__call__

    async def stats(self, key: Any, now_ns: Optional[int] = None) -> Stats:  # type: ignore[override]
        rk = self._rkey(key)
        cfg = self._cfg_for(rk)
        args = self._args(cfg, 1, 0, now_ns, "")
        return self._stats(await self._run(_SCRIPTS["stats"], rk, args), cfg, self._name)

    async def reset(self, key: Any) -> None:  # type: ignore[override]
        await self._client.delete(self._rkey(key))
