"""The asyncio Redis types of slidewin.redis: AsyncRedisLimiter and AsyncRedisKeyedLimiter
(a redis.asyncio client; the methods are coroutines)."""
from __future__ import annotations

from typing import Any, Optional

from .._admission import AsyncAdmission, NeedsKey
from .._core import Stats, _KeyedSlices
from ._base import _Base, _KeyedMixin
from ._sync import RedisKeyedLimiter, RedisLimiter
from ._lease import _SLOW, keyed_slices
from ._transport import _Held
from ._wire import F_PRIO, F_TRY


class AsyncRedisLimiter(_Base, AsyncAdmission):
    """RedisLimiter over a ``redis.asyncio`` client: the methods are coroutines."""

    _is_async = True
    __init__ = RedisLimiter.__init__
    key: str  # set by __init__
    _held: "_Held"
    _leased: Any  # lease=True: the _AsyncLeases (else None)
    _take: Any    # ... and its C slice's take

    async def try_acquire(self, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        """With lease=True: on the slice in hand (in C, no round trip), else a grant."""
        if self._leased is not None:
            r = self._take(n, now_ns=now_ns)  # checks n and now_ns
            if r is not _SLOW:
                return bool(r)
            return await self._leased._try_slow(self.key, n, now_ns)  # type: ignore[no-any-return]
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
            return await self._leased._try_slow(  # type: ignore[no-any-return]
                self._rkey(key), n, now_ns)
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
