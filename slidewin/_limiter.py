"""The Python layer of Limiter: asyncio, decorators and `limit()` over the C type.

Like functools.lru_cache over _lru_cache_wrapper: the decisions, counters, `entry()` and the
blocking `acquire()` are C (slidewin._core); what needs the event loop or wraps functions is
plain Python here.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, Callable, Optional, TypeVar, Union, cast, overload

from . import _core

__all__ = ["Limiter", "limit"]

F = TypeVar("F", bound=Callable[..., Any])
_MISSING: Any = object()

_PASS = _core.PASS
_NEVER = _core.NEVER
_F_NO_BLOCK = _core.F_NO_BLOCK
_F_ENTRY = _core.F_ENTRY
_F_RETRY = _core.F_RETRY


def _check_timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            "timeout must be None or a number of seconds, not %s" % type(timeout).__name__
        )
    if timeout != timeout or timeout < 0:
        raise ValueError("timeout must be None or >= 0 seconds, got %r" % (timeout,))
    try:
        return float(timeout)
    except OverflowError:  # an int beyond a double: as acquire(), wait without end
        return float("inf")


class Limiter(_core.Limiter):
    """Flow control with its own sliding-window statistics (see API.md).

    Limiter(qps=None, *, concurrency=None, behavior="reject", warm_up_s=10, cold_factor=3,
            max_queueing_ms=500, occupy_timeout_ms=500, interval_ms=1000, sample_count=2,
            on_block=None)

    `on_block`, when given, is what the decorator calls instead of raising BlockedError:
    ``on_block(error, *args, **kwargs)``; its result (awaited if awaitable) is returned.
    """

    __slots__ = ("_on_block",)
    _on_block: Optional[Callable[..., Any]]

    def __new__(
        cls,
        qps: Union[int, float, None] = None,
        *,
        concurrency: Optional[int] = None,
        behavior: str = "reject",
        warm_up_s: float = 10,
        cold_factor: float = 3,
        max_queueing_ms: int = 500,
        occupy_timeout_ms: int = 500,
        interval_ms: int = 1000,
        sample_count: int = 2,
        on_block: Optional[Callable[..., Any]] = None,
    ) -> "Limiter":
        self = cast(
            "Limiter",
            super().__new__(
                cls,
                qps,
                concurrency=concurrency,
                behavior=behavior,
                warm_up_s=warm_up_s,
                cold_factor=cold_factor,
                max_queueing_ms=max_queueing_ms,
                occupy_timeout_ms=occupy_timeout_ms,
                interval_ms=interval_ms,
                sample_count=sample_count,
            ),
        )
        if on_block is not None and not callable(on_block):
            raise TypeError("on_block must be callable, not %s" % type(on_block).__name__)
        self._on_block = on_block
        return self

    # -- asyncio -------------------------------------------------------------------------

    async def acquire_async(self, n: int = 1, *, timeout: Optional[float] = None) -> None:
        """Like acquire(), sleeping with asyncio: the event loop keeps running."""
        await self._acquire_async(n, _check_timeout(timeout), 0)

    async def _acquire_async(self, n: int, timeout: Optional[float], flags: int) -> None:
        if timeout is None:
            verdict, wait_ns, retry_ns = self._decide(n, flags | _F_RETRY, None)
            if verdict != _PASS:
                self._raise_blocked(n, verdict, retry_ns)
        else:
            deadline = time.monotonic() + timeout
            while True:
                verdict, wait_ns, retry_ns = self._decide(n, flags | _F_NO_BLOCK | _F_RETRY, None)
                if verdict == _PASS:
                    break
                now = time.monotonic()
                if verdict == _NEVER or now >= deadline:
                    self._count_block(n)
                    self._raise_blocked(n, verdict, retry_ns)
                # reject/throttle know when to retry; warm-up and concurrency poll at 1 ms
                step = retry_ns / 1e9 if retry_ns > 0 else 0.001
                await asyncio.sleep(min(step, deadline - now))
        if wait_ns > 0:
            try:
                await asyncio.sleep(wait_ns / 1e9)
            except BaseException:
                if flags & _F_ENTRY:
                    self._release_entry(n)
                raise

    async def _aenter(self, entry: Any) -> Any:
        # entry.__aenter__ claimed the entry (idle -> entering) in one atomic step
        try:
            await self._acquire_async(entry.n, None, _F_ENTRY)
        except BaseException:
            entry._abort()  # refused or cancelled: holds nothing, may be entered again
            raise
        entry._started()
        return entry

    async def _aexit(self, entry: Any, exc_type: Any) -> bool:
        return bool(entry.__exit__(exc_type, None, None))

    # -- decorator -------------------------------------------------------------------------

    @overload
    def __call__(self, func: F) -> F: ...

    @overload
    def __call__(
        self, func: None = None, *, on_block: Optional[Callable[..., Any]] = ...
    ) -> Callable[[F], F]: ...

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING) -> Any:
        """Decorate a sync or async function: each call runs inside ``self.entry()``."""
        if func is None:
            return lambda f: self.__call__(f, on_block=on_block)
        if not callable(func):
            raise TypeError("a Limiter decorates a callable, not %s" % type(func).__name__)
        handler = self._on_block if on_block is _MISSING else on_block
        if handler is not None and not callable(handler):
            raise TypeError("on_block must be callable, not %s" % type(handler).__name__)
        entry = self.entry
        blocked = _core.BlockedError

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                e = entry()
                try:
                    await e.__aenter__()
                except blocked as exc:
                    if handler is None:
                        raise
                    result = handler(exc, *args, **kwargs)
                    if inspect.isawaitable(result):
                        result = await result
                    return result
                try:
                    result = await func(*args, **kwargs)
                except BaseException as exc:
                    e.__exit__(type(exc), exc, None)
                    raise
                e.__exit__(None, None, None)
                return result

            async_wrapper.limiter = self  # type: ignore[attr-defined]
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            e = entry()
            try:
                e.__enter__()
            except blocked as exc:
                if handler is None:
                    raise
                return handler(exc, *args, **kwargs)
            try:
                result = func(*args, **kwargs)
            except BaseException as exc:
                e.__exit__(type(exc), exc, None)
                raise
            e.__exit__(None, None, None)
            return result

        wrapper.limiter = self  # type: ignore[attr-defined]
        return wrapper


def limit(
    qps: Union[int, float, None] = None,
    *,
    concurrency: Optional[int] = None,
    behavior: str = "reject",
    warm_up_s: float = 10,
    cold_factor: float = 3,
    max_queueing_ms: int = 500,
    occupy_timeout_ms: int = 500,
    interval_ms: int = 1000,
    sample_count: int = 2,
    on_block: Optional[Callable[..., Any]] = None,
) -> Limiter:
    """Build a Limiter from the Limiter's arguments; use it as a decorator:

    >>> @limit(qps=10, behavior="throttle")
    ... async def call_api(): ...
    """
    return Limiter(
        qps,
        concurrency=concurrency,
        behavior=behavior,
        warm_up_s=warm_up_s,
        cold_factor=cold_factor,
        max_queueing_ms=max_queueing_ms,
        occupy_timeout_ms=occupy_timeout_ms,
        interval_ms=interval_ms,
        sample_count=sample_count,
        on_block=on_block,
    )
