"""The asyncio Redis types of slidewin.redis: AsyncRedisLimiter and AsyncRedisKeyedLimiter
(a redis.asyncio client; the methods are coroutines)."""
from __future__ import annotations

from typing import Any, Optional

from .._admission import AsyncAdmission, NeedsKey
from ._base import _awaited, _Base, _KeyedMixin
from ._sync import RedisKeyedLimiter, RedisLimiter
from ._lease import _SLOW
from ._wire import F_TRY


class AsyncRedisLimiter(_Base, AsyncAdmission):
    """RedisLimiter over a ``redis.asyncio`` client: the methods are coroutines."""

    _is_async = True
    __init__ = RedisLimiter.__init__
    key: str  # set by __init__
    _leased: Any  # lease=True: the _Leases (else None)
    _take: Any    # ... and its C slice's take (a keyed limiter's: its _KeyedSlices')

    async def try_acquire(self, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        """With lease=True: on the slice in hand (in C, no round trip), else a grant."""
        if self._leased is not None:
            r = self._take(n, now_ns=now_ns)  # checks n and now_ns
            if r is not _SLOW:
                return bool(r)
            return await self._leased._try_slow(self.key, n, now_ns)  # type: ignore[no-any-return]
        return await self._t.drive(self._g_admit(None, n, F_TRY, now_ns)) is not None

    reserve = _awaited(RedisLimiter.reserve)
    acquire = acquire_async = _awaited(RedisLimiter.acquire)
    charge = _awaited(RedisLimiter.charge)
    release = _awaited(RedisLimiter.release)
    stats = _awaited(RedisLimiter.stats)

    async def reset(self) -> None:
        """Delete this limiter's state in Redis (every client starts fresh)."""
        await self._client.delete(self.key)

    async def aclose(self) -> None:
        """Nothing to close: decisions use the client's own pool (close the client). Kept
        for callers of earlier versions. With lease=True: gives back the unused slices and
        ends the lease task."""
        if self._leased is not None:
            await self._leased.aclose()


class _AsyncKeyedFaces:
    """RedisKeyedLimiter's methods awaited (typed apart from AsyncRedisLimiter's)."""

    reserve = _awaited(RedisKeyedLimiter.reserve)
    acquire = acquire_async = _awaited(RedisKeyedLimiter.acquire)
    charge = _awaited(RedisKeyedLimiter.charge)
    release = _awaited(RedisKeyedLimiter.release)
    stats = _awaited(RedisKeyedLimiter.stats)

    async def reset(self: Any, key: Any) -> None:
        await self._client.delete(self._rkey(key))


class AsyncRedisKeyedLimiter(NeedsKey, _KeyedMixin, _AsyncKeyedFaces,  # type: ignore[misc]
                             AsyncRedisLimiter):
    """RedisKeyedLimiter over a ``redis.asyncio`` client: the methods are coroutines."""

    __init__ = RedisKeyedLimiter.__init__

    async def try_acquire(self, key: Any, n: int = 1, *,  # type: ignore[override]
                          now_ns: Optional[int] = None) -> bool:
        """With lease=True: on the key's slice in hand (in C, no round trip), else a grant."""
        if self._leased is not None:
            r = self._take(key, n, now_ns=now_ns)  # checks key, n and now_ns
            if r is not _SLOW:
                return bool(r)
            return await self._leased._try_slow(  # type: ignore[no-any-return]
                self._rkey(key), n, now_ns)
        return await self._t.drive(self._g_admit(key, n, F_TRY, now_ns)) is not None
