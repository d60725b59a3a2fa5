"""The Python layer of KeyedLimiter: asyncio and the decorator over the C type.

The decisions, the table, ``entry()`` and the blocking ``acquire()`` are C (slidewin._core);
what needs the event loop or wraps functions is plain Python here, as for Limiter.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, Callable, Mapping, Optional, TypeVar, Union, cast, overload

from . import _core
from ._limiter import _check_timeout, _is_async_callable, _name, _sync_result

__all__ = ["KeyedLimiter"]

F = TypeVar("F", bound=Callable[..., Any])
Key = Union[str, bytes, int]
_MISSING: Any = object()

_PASS = _core.PASS
_NEVER = _core.NEVER
_F_NO_BLOCK = _core.F_NO_BLOCK
_F_ENTRY = _core.F_ENTRY
_F_RETRY = _core.F_RETRY
_SHADOWED = _core.SHADOWED


class KeyedLimiter(_core.KeyedLimiter):
    """One limit per key (user, client IP, tenant) in a bounded table.

    KeyedLimiter(qps=None, *, concurrency=None, behavior="reject", max_queueing_ms=500,
                 interval_ms=1000, sample_count=2, max_keys=65536, overrides=None,
                 shared=None, name=None, shadow=False, on_block=None)

    Each key is limited exactly as a private Limiter with the same settings would limit it
    (behaviors "reject" and "throttle" with qps, or concurrency). Keys are str, bytes or int.
    ``overrides`` maps keys to their own threshold (Sentinel's hot items). At most
    ``max_keys`` keys are held: a new key then takes the place of the least recently used key
    whose window is empty (else of the least recently used key: its limit restarts); a key
    with requests in flight is never evicted.
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
        max_keys: int = 65536,
        overrides: Optional[Mapping[Key, Union[int, float]]] = None,
        shared: Union[None, bool, str] = None,
        name: Optional[str] = None,
        shadow: bool = False,
        on_block: Optional[Callable[..., Any]] = None,
    ) -> "KeyedLimiter":
        self = cast(
            "KeyedLimiter",
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
                max_keys=max_keys,
                overrides=overrides,
                shared=shared,
                name=name,
                shadow=shadow,
            ),
        )
        if on_block is not None and not callable(on_block):
            raise TypeError("on_block must be callable, not %s" % type(on_block).__name__)
        self._on_block = on_block
        return self

    def __reduce__(self) -> Any:
        """A KeyedLimiter shared by name pickles as its settings and the name (it attaches to
        the same region in another process); a private or anonymous one cannot."""
        if not isinstance(self.shared, str):
            raise TypeError(
                "cannot pickle a %s KeyedLimiter: only one shared by name (shared='name') can "
                "be sent to another process"
                % ("private" if self.shared is None else "shared=True")
            )
        kw = dict(
            concurrency=self.concurrency,
            behavior=self.behavior,
            max_queueing_ms=self.max_queueing_ms,
            interval_ms=self.interval_ms,
            sample_count=self.sample_count,
            max_keys=self.max_keys,
            overrides=self.overrides,
            shared=self.shared,
            name=self.name,
            shadow=self.shadow,
        )
        return (_rebuild, (type(self), self.qps, kw))

    def update(
        self,
        *,
        qps: Any = _MISSING,
        concurrency: Any = _MISSING,
        behavior: Any = _MISSING,
        warm_up_s: Any = _MISSING,
        cold_factor: Any = _MISSING,
        max_queueing_ms: Any = _MISSING,
        occupy_timeout_ms: Any = _MISSING,
        shadow: Any = _MISSING,
        overrides: Any = _MISSING,
        on_block: Any = _MISSING,
        **layout: Any,
    ) -> None:
        """Change the settings in place: any constructor keyword that is a setting (qps or
        concurrency, behavior, warm_up_s, cold_factor, max_queueing_ms, occupy_timeout_ms,
        shadow, on_block, overrides). The state is kept: the windows, the throttle's queue and
        the warm-up tokens carry over. An invalid value raises ValueError/TypeError and
        changes nothing. The layout (interval_ms, sample_count, max_keys, shared) and name
        cannot change (ValueError), nor can a qps limit become a concurrency limit. On a
        shared region it changes this process's settings; the shared counts stay. A new
        on_block serves the functions decorated after the update (a decorator fixes its
        handler when it decorates)."""
        settings = {k: v for k, v in locals().items()
                    if k not in ("self", "layout", "on_block", "__class__") and v is not _MISSING}
        settings.update(layout)  # the layout keywords: the C type says they cannot change
        if on_block is not _MISSING and on_block is not None and not callable(on_block):
            raise TypeError("on_block must be callable, not %s" % type(on_block).__name__)
        super().update(**settings)
        if on_block is not _MISSING:
            self._on_block = on_block

    # -- asyncio -------------------------------------------------------------------------

    async def acquire_async(
        self, key: Key, n: int = 1, *, timeout: Optional[float] = None
    ) -> None:
        """Like acquire(), sleeping with asyncio: the event loop keeps running."""
        await self._acquire_async(key, n, _check_timeout(timeout), 0)

    async def _acquire_async(
        self, key: Key, n: int, timeout: Optional[float], flags: int
    ) -> int:
        if timeout is None:
            verdict, wait_ns, retry_ns = self._decide(key, n, flags | _F_RETRY, None)
            if verdict != _PASS and verdict != _SHADOWED:
                self._raise_blocked(key, n, verdict, retry_ns)
        else:
            deadline = time.monotonic() + timeout
            while True:
                verdict, wait_ns, retry_ns = self._decide(
                    key, n, flags | _F_NO_BLOCK | _F_RETRY, None
                )
                if verdict == _PASS or verdict == _SHADOWED:
                    break
                now = time.monotonic()
                if verdict == _NEVER or now >= deadline:
                    self._count_block(n)
                    self._raise_blocked(key, n, verdict, retry_ns)
                step = retry_ns / 1e9 if retry_ns > 0 else 0.001
                await asyncio.sleep(min(step, deadline - now))
        if wait_ns > 0:
            try:
                await asyncio.sleep(wait_ns / 1e9)
            except BaseException:
                if flags & _F_ENTRY:
                    self._release_entry(key, n)
                raise
        return verdict

    async def _aenter(self, entry: Any) -> Any:
        try:
            verdict = await self._acquire_async(entry.key, entry.n, None, _F_ENTRY)
        except BaseException:
            entry._abort()
            raise
        entry._started(verdict == _SHADOWED)
        return entry

    async def _aexit(self, entry: Any, exc_type: Any) -> bool:
        return bool(entry.__exit__(exc_type, None, None))

    # -- decorator -------------------------------------------------------------------------

    @overload
    def __call__(
        self,
        func: None = None,
        *,
        key: Callable[..., Key],
        on_block: Optional[Callable[..., Any]] = ...,
    ) -> Callable[[F], F]: ...

    @overload
    def __call__(
        self,
        func: F,
        *,
        key: Callable[..., Key],
        on_block: Optional[Callable[..., Any]] = ...,
    ) -> F: ...

    def __call__(
        self,
        func: Any = None,
        *,
        key: Optional[Callable[..., Key]] = None,
        on_block: Any = _MISSING,
    ) -> Any:
        """Decorate a sync or async function: each call runs inside
        ``self.entry(key(*args, **kwargs))``.

        >>> per_user = KeyedLimiter(qps=10)
        >>> @per_user(key=lambda request, *a, **kw: request.client_ip)
        ... def handle(request): ...

        ``on_block(error, *args, **kwargs)``, when given, is called instead of raising
        BlockedError and its result returned (awaited first for an async function).
        """
        if func is None:
            if key is None:
                raise TypeError(
                    "a KeyedLimiter decorator needs key=, a function of the call's arguments "
                    "returning the key: @per_key(key=lambda request, *a, **kw: request.user)"
                )
            return lambda f: self.__call__(f, key=key, on_block=on_block)
        if key is None:
            raise TypeError(
                "a KeyedLimiter decorator needs key=: use @per_key(key=lambda *a, **kw: ...)"
            )
        if not callable(key):
            raise TypeError("key must be callable, not %s" % type(key).__name__)
        if not callable(func):
            raise TypeError("a KeyedLimiter decorates a callable, not %s" % type(func).__name__)
        handler = self._on_block if on_block is _MISSING else on_block
        if handler is not None and not callable(handler):
            raise TypeError("on_block must be callable, not %s" % type(handler).__name__)
        if inspect.iscoroutinefunction(func):
            wrapper = _wrap_coroutine(self, func, key, handler)
        elif inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError(
                "a KeyedLimiter decorates functions and coroutine functions, not the generator "
                "%s; use `with per_key.entry(key):` inside it" % _name(func)
            )
        else:
            if handler is not None and _is_async_callable(handler):
                raise TypeError(
                    "on_block %r is an async function, but %s is not: a sync function cannot "
                    "await it; give a sync on_block, or decorate an async function"
                    % (handler, _name(func))
                )
            wrapper = _wrap_function(self, func, key, handler)
        wrapper.limiter = self
        return wrapper


def _wrap_function(lim: KeyedLimiter, func: Any, keyfn: Any, handler: Any) -> Any:
    entry = lim.entry
    blocked = _core.BlockedError

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        e = entry(keyfn(*args, **kwargs))
        try:
            e.__enter__()
        except blocked as exc:
            if handler is None:
                raise
            return _sync_result(func, handler, handler(exc, *args, **kwargs))
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            e.__exit__(type(exc), exc, None)
            raise
        e.__exit__(None, None, None)
        return result

    return wrapper


def _wrap_coroutine(lim: KeyedLimiter, func: Any, keyfn: Any, handler: Any) -> Any:
    entry = lim.entry
    blocked = _core.BlockedError

    @functools.wraps(func)
    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        e = entry(keyfn(*args, **kwargs))
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

    return async_wrapper


def _rebuild(cls: Any, qps: Any, kw: Any) -> Any:
    return cls(qps, **kw)
