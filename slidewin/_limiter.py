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
_SHADOWED = _core.SHADOWED


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
    """Flow control with its own sliding-window statistics.

    Limiter(qps=None, *, concurrency=None, behavior="reject", warm_up_s=10, cold_factor=3,
            max_queueing_ms=500, occupy_timeout_ms=500, interval_ms=1000, sample_count=2,
            shared=None, name=None, shadow=False, on_block=None)

    `name` labels it (``slidewin.limiters()``, observers); a shared one defaults to its
    region's name. `shadow=True` decides and counts exactly as an enforcing limiter would, but
    admits every call (for rolling out a limit: read its block rate before enforcing it).

    `on_block`, when given, is what the decorator calls instead of raising BlockedError:
    ``on_block(error, *args, **kwargs)``; its result (awaited if awaitable) is returned. An
    async on_block serves async functions only (see ``__call__``).
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
        shared: Union[None, bool, str] = None,
        name: Optional[str] = None,
        shadow: bool = False,
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
        """A limiter shared by name pickles as its settings and the name: unpickled in another
        process (multiprocessing with spawn, a process pool), it attaches to the same region.
        A private limiter, or an anonymous one (shared=True), cannot cross processes."""
        if not isinstance(self.shared, str):
            raise TypeError(
                "cannot pickle a %s Limiter: only one shared by name (shared='name') can be "
                "sent to another process" % ("private" if self.shared is None else "shared=True")
            )
        kw = dict(
            concurrency=self.concurrency,
            behavior=self.behavior,
            warm_up_s=self.warm_up_s,
            cold_factor=self.cold_factor,
            max_queueing_ms=self.max_queueing_ms,
            occupy_timeout_ms=self.occupy_timeout_ms,
            interval_ms=self.interval_ms,
            sample_count=self.sample_count,
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
        on_block: Any = _MISSING,
        **layout: Any,
    ) -> None:
        """Change the settings in place: any constructor keyword that is a setting (qps or
        concurrency, behavior, warm_up_s, cold_factor, max_queueing_ms, occupy_timeout_ms,
        shadow, on_block). The state is kept: the windows, the throttle's queue and
        the warm-up tokens carry over. An invalid value raises ValueError/TypeError and
        changes nothing. The layout (interval_ms, sample_count, shared) and name
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

    async def acquire_async(self, n: int = 1, *, timeout: Optional[float] = None) -> None:
        """Like acquire(), sleeping with asyncio: the event loop keeps running."""
        await self._acquire_async(n, _check_timeout(timeout), 0)

    async def _acquire_async(self, n: int, timeout: Optional[float], flags: int) -> int:
        # returns the verdict: PASS, or SHADOWED (shadow mode: admitted where an enforcing
        # limiter would have refused; holds nothing, no wait)
        if timeout is None:
            verdict, wait_ns, retry_ns = self._decide(n, flags | _F_RETRY, None)
            if verdict != _PASS and verdict != _SHADOWED:
                self._raise_blocked(n, verdict, retry_ns)
        else:
            deadline = time.monotonic() + timeout
            while True:
                verdict, wait_ns, retry_ns = self._decide(n, flags | _F_NO_BLOCK | _F_RETRY, None)
                if verdict == _PASS or verdict == _SHADOWED:
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
        return verdict

    async def _aenter(self, entry: Any) -> Any:
        # entry.__aenter__ claimed the entry (idle -> entering) in one atomic step
        try:
            verdict = await self._acquire_async(entry.n, None, _F_ENTRY)
        except BaseException:
            entry._abort()  # refused or cancelled: holds nothing, may be entered again
            raise
        entry._started(verdict == _SHADOWED)
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
        """Decorate a function: each call (or each iteration) runs inside ``self.entry()``.

        - sync or async function: the entry is held while the call runs;
        - generator or async-generator function: the entry is taken when the iteration
          starts (the first ``next()``/``anext()``) and held until the generator finishes,
          raises, or is closed (``close()``, ``aclose()``, a ``break`` followed by garbage
          collection). A close counts nothing, like any other ``BaseException``.

        The wrapper is of the same kind as ``func`` (``inspect.iscoroutinefunction``,
        ``isgeneratorfunction``, ``isasyncgenfunction`` agree).

        ``on_block(error, *args, **kwargs)``, when given, is called instead of raising
        BlockedError. Its result is returned (awaited first for an async function); for a
        generator, the wrapper yields what it returns (an iterable, or an async iterable for
        an async generator; None yields nothing). An async ``on_block`` cannot be awaited by
        a sync function or generator: that combination is a TypeError here.
        """
        if func is None:
            return lambda f: self.__call__(f, on_block=on_block)
        if not callable(func):
            raise TypeError("a Limiter decorates a callable, not %s" % type(func).__name__)
        handler = self._on_block if on_block is _MISSING else on_block
        if handler is not None and not callable(handler):
            raise TypeError("on_block must be callable, not %s" % type(handler).__name__)

        if inspect.isasyncgenfunction(func):
            wrapper = _wrap_async_generator(self, func, handler)
        elif inspect.iscoroutinefunction(func):
            wrapper = _wrap_coroutine(self, func, handler)
        else:
            if handler is not None and _is_async_callable(handler):
                raise TypeError(
                    "on_block %r is an async function, but %s is not: a sync function cannot "
                    "await it; give a sync on_block, or decorate an async function"
                    % (handler, _name(func))
                )
            if inspect.isgeneratorfunction(func):
                wrapper = _wrap_generator(self, func, handler)
            else:
                wrapper = _wrap_function(self, func, handler)
        wrapper.limiter = self
        return wrapper


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


def _is_async_callable(f: Any) -> bool:
    """True for a coroutine function or async-generator function (also behind
    functools.partial, or as the ``__call__`` of an instance)."""
    if inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f):
        return True
    if not inspect.isroutine(f) and not isinstance(f, (type, functools.partial)):
        call = getattr(type(f), "__call__", None)
        return inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call)
    return False


def _sync_result(func: Any, handler: Any, result: Any) -> Any:
    """on_block's result for a sync caller: an awaitable there would never be awaited."""
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # no "never awaited" warning: the error below says it
        raise TypeError(
            "on_block %r returned an awaitable for the sync %s, which cannot await it; "
            "give a sync on_block" % (handler, _name(func))
        )
    return result


def _wrap_function(lim: Limiter, func: Any, handler: Any) -> Any:
    entry = lim.entry
    blocked = _core.BlockedError

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        e = entry()
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


def _wrap_coroutine(lim: Limiter, func: Any, handler: Any) -> Any:
    entry = lim.entry
    blocked = _core.BlockedError

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

    return async_wrapper


def _wrap_generator(lim: Limiter, func: Any, handler: Any) -> Any:
    entry = lim.entry
    blocked = _core.BlockedError

    @functools.wraps(func)
    def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
        # runs from the first next(): the entry spans the whole iteration
        e = entry()
        try:
            e.__enter__()
        except blocked as exc:
            if handler is None:
                raise
            fallback = _sync_result(func, handler, handler(exc, *args, **kwargs))
            if fallback is None:
                return None
            return (yield from fallback)
        try:
            # yield from forwards send(), throw() and close() to the generator
            result = yield from func(*args, **kwargs)
        except BaseException as exc:  # GeneratorExit (close, collection) included
            e.__exit__(type(exc), exc, None)
            raise
        e.__exit__(None, None, None)
        return result

    return gen_wrapper


def _wrap_async_generator(lim: Limiter, func: Any, handler: Any) -> Any:
    entry = lim.entry
    blocked = _core.BlockedError

    @functools.wraps(func)
    async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
        e = entry()
        try:
            await e.__aenter__()
        except blocked as exc:
            if handler is None:
                raise
            fallback = handler(exc, *args, **kwargs)
            if inspect.isawaitable(fallback):
                fallback = await fallback
            if fallback is None:
                return
            if hasattr(fallback, "__aiter__"):
                async for item in fallback:
                    yield item
            else:
                for item in fallback:
                    yield item
            return
        try:
            # what `yield from` does for a generator, by hand: asend(), athrow() and
            # aclose() reach the decorated async generator
            agen = func(*args, **kwargs)
            try:
                item = await agen.__anext__()
                while True:
                    try:
                        sent = yield item
                    except GeneratorExit:
                        await agen.aclose()
                        raise
                    except BaseException as thrown:
                        item = await agen.athrow(thrown)
                    else:
                        item = await agen.asend(sent)
            except StopAsyncIteration:
                pass
        except BaseException as exc:  # GeneratorExit (aclose, collection) included
            e.__exit__(type(exc), exc, None)
            raise
        e.__exit__(None, None, None)

    return agen_wrapper


def _rebuild(cls: Any, qps: Any, kw: Any) -> Any:
    return cls(qps, **kw)


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
    shared: Union[None, bool, str] = None,
    name: Optional[str] = None,
    shadow: bool = False,
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
        shared=shared,
        name=name,
        shadow=shadow,
        on_block=on_block,
    )
