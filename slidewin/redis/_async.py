"""The asyncio Redis types of slidewin.redis: AsyncRedisLimiter and AsyncRedisKeyedLimiter
(a redis.asyncio client; the methods are coroutines)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

from .. import _rate
from .._admission import AsyncAdmission, NeedsKey
from .._core import Stats, _KeyedSlices
from ._base import _Base, _KeyedMixin
from ._sync import RedisKeyedLimiter
from ._lease import _SLOW, keyed_slices, lease_engine
from ._transport import _Held
from ._wire import F_PRIO, F_TRY, _limiter_key


class AsyncRedisLimiter(_Base, AsyncAdmission):
    """RedisLimiter over a ``redis.asyncio`` client: the methods are coroutines."""

    _is_async = True
    key: str  # set by __init__ (_init_limiter)
    _held: "_Held"
    _leased: Any  # lease=True: the _AsyncLeases (else None)
    _take: Any    # ... and its C slice's take

    async def try_acquire(self, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        """With lease=True: on the slice in hand (in C, no round trip), else a grant."""
        if self._leased is not None:
            r = self._take(n, now_ns=now_ns)  # checks n and now_ns
            if r is not _SLOW:
                return bool(r)
            return bool(await self._leased.slow(self.key, self._cfg, n, now_ns))
        return await self._t.drive(self._g_admit(None, n, F_TRY, now_ns)) is not None

    async def reserve(self, n: int = 1, *, now_ns: Optional[int] = None,
                      prioritized: bool = False) -> Optional[int]:
        return await self._t.drive(  # type: ignore[no-any-return]
            self._g_admit(None, n, F_PRIO if prioritized else 0, now_ns))

    async def acquire(self, n: int = 1, *, timeout: Optional[float] = None) -> None:
        await self._t.drive(self._g_acquire(None, n, timeout))

    acquire_async = acquire

    async def charge(self, n: int, *, now_ns: Optional[int] = None) -> None:
        """RedisLimiter.charge: count n more as admitted now, without a decision."""
        await self._t.drive(self._g_charge(None, n, now_ns))

    async def release(self, n: int = 1) -> None:
        await self._t.drive(self._g_release(None, n))

    async def stats(self, now_ns: Optional[int] = None) -> Stats:
        return await self._t.drive(self._g_stats(None, now_ns))  # type: ignore[no-any-return]

    async def reset(self) -> None:
        await self._client.delete(self.key)

    async def aclose(self) -> None:
        """Nothing to close: decisions use the client's own pool (close the client). Kept
        for callers of earlier versions. With lease=True: gives back the unused slices and
        ends the lease task."""
        if self._leased is not None:
            await self._leased.aclose()


def _init_limiter(self: Any, client: Any, name: str, qps: Any, kw: Dict[str, Any],
                  on_error: str, lease_ms: int, on_block: Any, lease: bool) -> None:
    self._setup(client, name, qps, kw, on_error, lease_ms, on_block)
    self.key = _limiter_key(self._name)
    self._held = _Held()
    self._leased = lease_engine(self, lease)
    if self._leased is not None:
        self._take = self._leased.c_slice(self.key).take


def _limiter_init(self: Any, client: Any, name: str,
                  qps: Union[int, float, str, None] = None, *,
                  rate: Optional[str] = None,
                  concurrency: Optional[int] = None, behavior: str = "reject",
                  warm_up_s: float = 10, cold_factor: float = 3, max_queueing_ms: int = 500,
                  occupy_timeout_ms: int = 500, interval_ms: int = _rate.INTERVAL_MS,
                  sample_count: int = _rate.SAMPLE_COUNT,
                  on_error: str = "allow", lease_ms: int = 5_000,
                  on_block: Optional[Callable[..., Any]] = None, lease: bool = False) -> None:
    kw = dict(rate=rate, concurrency=concurrency, behavior=behavior, warm_up_s=warm_up_s,
              cold_factor=cold_factor, max_queueing_ms=max_queueing_ms,
              occupy_timeout_ms=occupy_timeout_ms, interval_ms=interval_ms,
              sample_count=sample_count)
    _init_limiter(self, client, name, qps, kw, on_error, lease_ms, on_block, lease)


AsyncRedisLimiter.__init__ = _limiter_init  # type: ignore[method-assign,assignment]


class AsyncRedisKeyedLimiter(NeedsKey, _KeyedMixin,  # type: ignore[misc]
                             AsyncRedisLimiter):
    """RedisKeyedLimiter over a ``redis.asyncio`` client: the methods are coroutines."""

    _kind = "AsyncRedisKeyedLimiter"
    __init__ = RedisKeyedLimiter.__init__

    async def try_acquire(self, key: Any, n: int = 1, *,  # type: ignore[override]
                          now_ns: Optional[int] = None) -> bool:
        """With lease=True: on the key's slice in hand (in C, no round trip), else a grant."""
        if self._leased is not None:
            if self._ks is None:
                self._ks = keyed_slices(self)
            r = self._ks.take(key, n, now_ns=now_ns)  # checks key, n and now_ns
            if r is not _SLOW:
                return bool(r)
            rk = self._rkey(key)
            return bool(await self._leased.slow(rk, self._cfg_for(rk), n, now_ns))
        return await self._t.drive(self._g_admit(key, n, F_TRY, now_ns)) is not None

    async def reserve(self, key: Any, n: int = 1, *,  # type: ignore[override]
                      now_ns: Optional[int] = None) -> Optional[int]:
        return await self._t.drive(  # type: ignore[no-any-return]
            self._g_admit(key, n, 0, now_ns))

    async def acquire(self, key: Any, n: int = 1, *,  # type: ignore[override]
                      timeout: Optional[float] = None) -> None:
        await self._t.drive(self._g_acquire(key, n, timeout))

    acquire_async = acquire  # type: ignore[assignment]

    async def charge(self, key: Any, n: int, *,  # type: ignore[override]
                     now_ns: Optional[int] = None) -> None:
        """RedisKeyedLimiter.charge: count n more as admitted for key now."""
        await self._t.drive(self._g_charge(key, n, now_ns))

    async def release(self, key: Any, n: int = 1) -> None:  # type: ignore[override]
        await self._t.drive(self._g_release(key, n))

    async def stats(self, key: Any,  # type: ignore[override]
                    now_ns: Optional[int] = None) -> Stats:
        return await self._t.drive(self._g_stats(key, now_ns))  # type: ignore[no-any-return]

    async def reset(self, key: Any) -> None:  # type: ignore[override]
        await self._client.delete(self._rkey(key))

    _ks: Optional[_KeyedSlices] = None  # lease=True: the keys' slices (from the first decision)

    def local_totals(self) -> Dict[str, int]:
        if self._leased is not None:
            self._leased.counters()  # folds the decisions made on slices into the totals
        return super().local_totals()
