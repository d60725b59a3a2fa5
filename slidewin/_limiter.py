"""The Python layer of Limiter: asyncio, decorators and `limit()` over the C type (which
holds the decisions, counters, `entry()` and the blocking `acquire()`).
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import (
    Any,
    Callable,
    Dict,
    NoReturn,
    Optional,
    Tuple,
    TypeVar,
    Union,
    cast,
    overload,
)

from . import _core, _rate
from ._admission import Admission
from ._core import F_ENTRY as _F_ENTRY, F_RETRY as _F_RETRY, KeyedEntry as _KEYED_ENTRY
from ._core import NEVER as _NEVER, PASS as _PASS, SHADOWED as _SHADOWED
from ._waiters import _MAX_SLEEP_S, _SHARED_RECHECK_S, admit_async, waiters_of

__all__ = ["Limiter", "limit"]

F = TypeVar("F", bound=Callable[..., Any])
_MISSING: Any = object()


def _check_timeout(timeout: Optional[float], name: str = "timeout",
                   positive: bool = False) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            "%s must be None or a number of seconds, not %s" % (name, type(timeout).__name__)
        )
    if not (timeout > 0 if positive else timeout >= 0):  # NaN included
        raise ValueError("%s must be None or %s seconds, got %r"
                         % (name, "> 0" if positive else ">= 0", timeout))
    try:
        return float(timeout)
    except OverflowError:  # an int beyond a double: as acquire(), wait without end
        return float("inf")


def _check_on_block(on_block: Any) -> Any:  # _MISSING: an update() not given one
    if on_block is not None and on_block is not _MISSING and not callable(on_block):
        raise TypeError("on_block must be callable, not %s" % type(on_block).__name__)
    return on_block


def _new(base: Any, cls: Any, args: Dict[str, Any]) -> Any:
    """__new__ over `base`'s (super()) from the locals() of the Python __new__."""
    args = dict(args)
    on_block = _check_on_block(args["on_block"])  # before a shared region is made
    keyed = "max_keys" in args
    first = args.pop("qps_or_rate", None)
    if callable(first):
        raise TypeError("qps must be an int or float, not %s (to decorate, build the limiter "
                        "first: @%s(qps=10))" % (type(first).__name__, cls.__name__))
    if first is not None:
        if args["qps"] is None:
            args["qps"] = first
        elif isinstance(first, str) and args["rate"] is None:
            args["rate"] = first  # Limiter("5/m", qps=3): rate= and qps= clash below
        else:
            raise TypeError("qps is given twice: as the first argument (%r) and as qps=%r"
                            % (first, args["qps"]))
    # a keyed table (max_keys) takes fewer default steps: they are per-key memory
    rate = _rate.resolve(args, _rate.KEYED_SAMPLES if keyed else _rate.DEFAULT_SAMPLES, keyed)
    kw = {k: v for k, v in args.items() if k not in ("cls", "qps", "on_block", "__class__")}
    self = base.__new__(cls, args["qps"], **kw)
    self._on_block = on_block
    self._rate = rate
    self._waitq = None  # the queues of asyncio tasks waiting (slidewin._waiters), made later
    return self


def _update(lim: Any, base_update: Callable[..., None], args: Dict[str, Any]) -> None:
    """update() over the C type's from the locals() of the Python update()."""
    settings = {k: v for k, v in args.items()
                if k not in ("self", "layout", "on_block", "rate", "__class__")
                and v is not _MISSING}
    settings.update(args["layout"])  # the layout keywords: the C type says they cannot change
    # on_block assigned only when given: a concurrent update() keeps its own
    on_block = _check_on_block(args["on_block"])
    rate = args.get("rate", _MISSING)
    if rate is not _MISSING and rate is not None:
        clash = [k for k in ("qps", "concurrency", "interval_ms") if k in settings]
        if clash:
            raise ValueError("rate=%r and %s cannot be given together: rate sets qps; pass one "
                             "or the other" % (rate, " and ".join(
                                 "%s=%r" % (k, settings[k]) for k in clash)))
        count, period_ms = _rate.parse_rate(rate)
        if period_ms != lim.interval_ms:
            raise ValueError(
                "rate=%r has a period of %d ms but this limiter's window is interval_ms=%d, "
                "which cannot change: give a rate over %d ms, or build a new limiter"
                % (rate, period_ms, lim.interval_ms, lim.interval_ms))
        settings["qps"] = _rate.qps_for(count, period_ms)
        settings["_rate"] = str.__str__(rate)  # installed with the settings, in one step
    base_update(**settings)
    if on_block is not _MISSING:
        lim._on_block = on_block


def _rebuild(cls: Any, qps: Any, kw: Any) -> Any:
    if kw.get("rate") is not None:  # a limiter built with rate=: rebuilt with the same rate
        kw = {k: v for k, v in kw.items() if k != "interval_ms"}
        qps = None
    return cls(**kw) if qps is None else cls(qps, **kw)  # AdaptiveLimiter: keywords only


_NO_KEY: Any = object()  # the `key` of a Limiter, whose C methods take no key


def _at(key: Any, n: int) -> Tuple[Any, ...]:
    return (n,) if key is _NO_KEY else (key, n)


def _decide_now(lim: Any, key: Any, n: int, flags: int) -> Tuple[int, int]:
    """An async acquire's or entry's decision without a timeout: (PASS or SHADOWED, the ns
    to sleep before going on), or BlockedError."""
    # the two calls spelled out: lim._decide(*_at(key, n), ...) is some 0.2 us slower
    if key is _NO_KEY:
        verdict, wait_ns, retry_ns = lim._decide(n, flags | _F_RETRY, None)
    else:
        verdict, wait_ns, retry_ns = lim._decide(key, n, flags | _F_RETRY, None)
    if verdict != _PASS and verdict != _SHADOWED:
        lim._raise_blocked(*_at(key, n), verdict, retry_ns)
    return verdict, wait_ns


class _Limiting:
    """The admission protocol of Limiter and KeyedLimiter (their C entries and acquires are
    its fast paths). ``req``: ((n,) or (key, n), flags); ``held``: None, the C entry holds it."""

    __slots__ = ()  # the subclasses' slots: _on_block, _waitq (and the C type's _rate)

    _PICKLED: Tuple[str, ...]  # the settings a pickle carries, besides qps and rate
    _on_block: Optional[Callable[..., Any]]
    _waitq: Any  # the queues of asyncio tasks waiting for admission (slidewin._waiters)
    _rate: Optional[str]

    @property
    def rate(self) -> Optional[str]:
        """The ``rate=`` this limiter was built (or last updated) with, else None."""
        return self._rate

    def __reduce__(self) -> Any:
        """A limiter shared by name pickles as its settings and the name: unpickled in another
        process (multiprocessing with spawn, a process pool), it attaches to the same region.
        A private limiter, or an anonymous one (shared=True), cannot cross processes."""
        lim: Any = self
        if not isinstance(lim.shared, str):
            kind = "private" if lim.shared is None else "shared=True"
            raise TypeError("cannot pickle a %s %s: only one shared by name (shared='name') can "
                            "be sent to another process" % (kind, type(lim).__name__))
        kw = {name: getattr(lim, name) for name in self._PICKLED}
        if lim._rate is not None:
            kw["rate"] = lim._rate
        return (_rebuild, (type(lim), lim.qps, kw))

    def _adm_decide(self, req: Any, flags: int) -> Any:
        return self._decide(*req[0], req[1] | flags, None)  # type: ignore[attr-defined]

    def _adm_refuse(self, req: Any, decision: Any) -> NoReturn:
        self._raise_blocked(*req[0], decision[0], decision[2])  # type: ignore[attr-defined]
        raise AssertionError("unreachable")  # _raise_blocked raises

    def _adm_retry_in(self, req: Any, decision: Any, first: bool,
                      deadline: float) -> Optional[float]:
        lim: Any = self
        at = req[0]
        verdict, retry_ns = decision[0], decision[2]
        shared = lim.shared is not None
        if verdict != _NEVER and shared and lim._reap():
            return 0.0  # a dead process's slots came back: decide again now
        if first and len(at) == 2 and lim.concurrency is not None:
            # refused while its key holds nothing: a full table, where any key's release makes room
            waiters_of(lim).wait_for_room(lim._fingerprint(at[0]), lim.in_flight(at[0]) == 0)
        if verdict == _NEVER or time.monotonic() >= deadline:
            lim._count_block(at[-1])
            self._adm_refuse(req, decision)
        if retry_ns > 0:
            return float(retry_ns / 1e9)
        if lim.concurrency is not None:  # until a release wakes the first waiter
            return _SHARED_RECHECK_S if shared else _MAX_SLEEP_S
        return None  # warm-up: no known time

    def _adm_hold(self, req: Any, decision: Any) -> Any:
        return None  # the C entry holds it

    def _adm_exit(self, req: Any, held: Any, et: Any, ev: Any,
                  rt_ns: int) -> Optional[BaseException]:
        held.__exit__(et, ev, None)  # the C entry measures its own RT
        return None

    def _adm_release(self, req: Any, held: Any) -> None:
        if req[1] & _F_ENTRY:  # an acquire's slot is the caller's to release()
            self._release_entry(*req[0])  # type: ignore[attr-defined]

    def _adm_listen(self, wake: Any) -> None:
        self._set_waker(wake)  # type: ignore[attr-defined]


async def _acquire_async(lim: Any, key: Any, n: int, timeout: Optional[float]) -> None:
    if timeout is None:
        wait_ns = _decide_now(lim, key, n, 0)[1]
    else:
        fp = None if key is _NO_KEY else lim._fingerprint(key)  # the queue of a key's waiters
        wait_ns = (await admit_async(lim, (_at(key, n), 0), timeout, fp))[1]
    if wait_ns > 0:
        await asyncio.sleep(wait_ns / 1e9)


async def _aenter(lim: Any, entry: Any) -> Any:
    """An entry's ``__aenter__``, called by the C entry once it has claimed it atomically."""
    key = entry.key if type(entry) is _KEYED_ENTRY else _NO_KEY
    n = entry.n
    try:
        timeout = entry.timeout
        if timeout is None:
            verdict, wait_ns = _decide_now(lim, key, n, _F_ENTRY)
        else:
            fp = None if key is _NO_KEY else lim._fingerprint(key)
            verdict, wait_ns = (await admit_async(lim, (_at(key, n), _F_ENTRY), timeout, fp))[:2]
        if wait_ns > 0:
            try:
                await asyncio.sleep(wait_ns / 1e9)
            except BaseException:
                lim._release_entry(*_at(key, n))  # cancelled: give the slot back
                raise
    except BaseException:
        entry._abort()  # refused or cancelled: holds nothing, may be entered again
        raise
    entry._started(verdict == _SHADOWED)
    return entry


async def _aexit(lim: Any, entry: Any, exc_type: Any) -> bool:  # an exit never waits
    return bool(entry.__exit__(exc_type, None, None))


class _Decorator:
    """The decorator of Limiter and Group: ``@lim``, ``@lim(on_block=..., timeout=...)``."""

    __slots__ = ()
    _kind = "Limiter"

    @overload
    def __call__(self, func: F) -> F: ...

    @overload
    def __call__(
        self, func: None = None, *, on_block: Optional[Callable[..., Any]] = ...,
        timeout: Optional[float] = ...
    ) -> Callable[[F], F]: ...

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING,
                 timeout: Optional[float] = None) -> Any:
        """Decorate a function: each call (or each iteration) runs inside ``self.entry()``,
        held while a function runs, or for a generator (sync or async) from the first
        ``next()``/``anext()`` until it finishes, raises or is closed (a close counts nothing,
        like any other ``BaseException``). The wrapper is of the same kind as ``func``.

        ``on_block(error, *args, **kwargs)``, when given, is called instead of raising
        BlockedError. Its result is returned (awaited first for an async function); for a
        generator, the wrapper yields what it returns (an iterable, or an async iterable for
        an async generator; None yields nothing). An async ``on_block`` with a sync function
        or generator is a TypeError here.

        ``@lim(timeout=5)``: each call waits up to 5 s for admission, as
        ``lim.entry(timeout=5)`` (without it, a refusal raises at once).
        """
        return _decorate_entries(self, self._kind, func, on_block, timeout=timeout)


class Limiter(_core.Limiter, _Limiting, _Decorator, Admission):
    """Flow control with its own sliding-window statistics.

    ``rate="100/minute"`` (also "5/second", "5/m", "1000/hour", "10000/day", "30/5minutes",
    "100 per minute"; or the string as the first argument: ``Limiter("100/minute")``) is the
    alternative to ``qps``: at most that count in the window, the window being the period
    (``interval_ms``) in ``sample_count`` steps (unless given, the largest divisor of the
    period up to 60; without a rate, None means Sentinel's 1000 ms in 2 steps). It cannot be
    combined with ``qps``, ``interval_ms`` or ``concurrency``, and takes one rate (several:
    ``slidewin.rate_limiter("10/second;100/minute")``). Mind that ``qps`` is per second:
    ``qps=100, interval_ms=60_000`` allows 6000 a minute. A window admits
    floor(qps * interval_ms / 1000): ``qps=1.5`` admits 1 a second (a window limit below 1
    is a ValueError); for 1.5/s use ``rate="3/2s"`` or ``interval_ms=2000``.

    ``async with lim:`` / ``with lim:`` wait until admitted, as a semaphore does (an entry
    with ``timeout=math.inf``). A thread-API call that must wait (``acquire()``,
    ``entry(timeout=...)``) in a thread running an asyncio event loop raises RuntimeError
    naming the async form.

    `name` labels it (``slidewin.limiters()``, observers); a shared one defaults to its
    region's name. `shadow=True` decides and counts exactly as an enforcing limiter would, but
    admits every call (for rolling out a limit: read its block rate before enforcing it).

    `on_block`, when given, is what the decorator calls instead of raising BlockedError
    (``on_block(error, *args, **kwargs)``: see ``__call__``).
    """

    __slots__ = ("_on_block", "_waitq")
    _PICKLED: Tuple[str, ...] = (
        "concurrency", "behavior", "warm_up_s", "cold_factor", "max_queueing_ms",
        "occupy_timeout_ms", "interval_ms", "sample_count", "shared", "name", "shadow")

    def __new__(
        cls,
        qps_or_rate: Union[int, float, str, None] = None,
        /,
        *,
        qps: Union[int, float, str, None] = None,
        rate: Optional[str] = None,
        concurrency: Optional[int] = None,
        behavior: str = "reject",
        warm_up_s: float = 10,
        cold_factor: float = 3,
        max_queueing_ms: int = 500,
        occupy_timeout_ms: int = 500,
        interval_ms: Optional[int] = None,
        sample_count: Optional[int] = None,
        shared: Union[None, bool, str] = None,
        name: Optional[str] = None,
        shadow: bool = False,
        on_block: Optional[Callable[..., Any]] = None,
    ) -> "Limiter":
        return cast("Limiter", _new(super(), cls, locals()))

    def update(
        self,
        *,
        qps: Any = _MISSING,
        rate: Any = _MISSING,
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
        """Change the settings given, in place (``rate`` over the same period as the window).
        The state is kept: the windows, the throttle's queue and the warm-up tokens carry
        over. An invalid value raises ValueError/TypeError and changes nothing. The layout
        (interval_ms, sample_count, shared) and name cannot change (ValueError), nor can a qps
        limit become a concurrency limit. On a shared region it changes this process's
        settings; the shared counts stay. A new on_block serves the functions decorated after
        the update (a decorator fixes its handler when it decorates)."""
        _update(self, super().update, locals())

    async def acquire_async(self, n: int = 1, *, timeout: Optional[float] = None) -> None:
        """Like acquire(), sleeping with asyncio: the event loop keeps running."""
        await _acquire_async(self, _NO_KEY, n, _check_timeout(timeout))


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


async def _async_result(handler: Any, exc: BaseException, args: Any, kwargs: Any) -> Any:
    result = handler(exc, *args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


# One wrapper per kind of function, each the decorated call's whole overhead (no shared helper
# that would cost a call). `keyfn`: a KeyedLimiter's key function, None for a Limiter. Without
# a handler, a refusal is not caught: `except ()` matches nothing.


def _wrap_function(entry: Any, func: Any, handler: Any, keyfn: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        e = entry() if keyfn is None else entry(keyfn(*args, **kwargs))
        try:
            e.__enter__()
        except (() if handler is None else _core.BlockedError) as exc:
            return _sync_result(func, handler, handler(exc, *args, **kwargs))
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            e.__exit__(type(exc), exc, None)
            raise
        e.__exit__(None, None, None)
        return result

    return wrapper


def _wrap_coroutine(entry: Any, func: Any, handler: Any, keyfn: Any, aexit: bool) -> Any:
    """aexit: the entry's exit is awaited (a Redis entry's exit is a round trip); a
    Limiter's entry exits in C, without a coroutine."""

    @functools.wraps(func)
    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        e = entry() if keyfn is None else entry(keyfn(*args, **kwargs))
        try:
            await e.__aenter__()
        except (() if handler is None else _core.BlockedError) as exc:
            return await _async_result(handler, exc, args, kwargs)
        try:
            result = await func(*args, **kwargs)
        except BaseException as exc:
            if aexit:
                await e.__aexit__(type(exc), exc, None)
            else:
                e.__exit__(type(exc), exc, None)
            raise
        if aexit:
            await e.__aexit__(None, None, None)
        else:
            e.__exit__(None, None, None)
        return result

    return async_wrapper


def _wrap_generator(entry: Any, func: Any, handler: Any) -> Any:
    @functools.wraps(func)
    def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
        e = entry()  # from the first next(): the entry spans the whole iteration
        try:
            e.__enter__()
        except (() if handler is None else _core.BlockedError) as exc:
            fallback = _sync_result(func, handler, handler(exc, *args, **kwargs))
            return (yield from (() if fallback is None else fallback))
        try:
            # yield from forwards send(), throw() and close() to the generator
            result = yield from func(*args, **kwargs)
        except BaseException as exc:  # GeneratorExit (close, collection) included
            e.__exit__(type(exc), exc, None)
            raise
        e.__exit__(None, None, None)
        return result

    return gen_wrapper


def _wrap_async_generator(entry: Any, func: Any, handler: Any, aexit: bool) -> Any:
    @functools.wraps(func)
    async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
        e = entry()
        try:
            await e.__aenter__()
        except (() if handler is None else _core.BlockedError) as exc:
            fallback = await _async_result(handler, exc, args, kwargs)
            if hasattr(fallback, "__aiter__"):
                async for item in fallback:
                    yield item
            else:
                for item in () if fallback is None else fallback:
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
            if aexit:
                await e.__aexit__(type(exc), exc, None)
            else:
                e.__exit__(type(exc), exc, None)
            raise
        if aexit:
            await e.__aexit__(None, None, None)
        else:
            e.__exit__(None, None, None)

    return agen_wrapper


def _decorate_entries(lim: Any, kind: str, func: Any, on_block: Any, keyfn: Any = None,
                      is_async: Optional[bool] = None, timeout: Optional[float] = None,
                      agen_entry: Any = None) -> Any:
    """Limiter's decorator over any limiter with ``entry()`` (a Redis limiter's too).
    ``is_async``: None for entries that enter both ways; True for async functions only;
    False for sync only. ``agen_entry``: what an async generator enters, if not ``entry()``.
    ``func`` None: ``@lim(...)``, the decorator of these settings."""
    timeout = _check_timeout(timeout)
    if func is None:
        return lambda f: _decorate_entries(lim, kind, f, on_block, keyfn, is_async, timeout,
                                           agen_entry)
    if not callable(func):
        raise TypeError("a %s decorates a callable, not %s" % (kind, type(func).__name__))
    handler = _check_on_block(lim._on_block if on_block is _MISSING else on_block)
    agen = inspect.isasyncgenfunction(func)
    coro = not agen and inspect.iscoroutinefunction(func)
    if is_async is not None and is_async != (agen or coro):
        raise TypeError(("%s decorates coroutine functions and async generators (its decisions "
                         "are awaited); use its sync twin for %s" if is_async else
                         "%s decorates sync functions and generators; use its async twin for %s")
                        % (kind, _name(func)))
    gen = not (agen or coro) and inspect.isgeneratorfunction(func)
    if keyfn is not None and (agen or gen):
        raise TypeError("a %s decorates functions and coroutine functions, not the "
                        "generator %s; use `with per_key.entry(key):` inside it"
                        % (kind, _name(func)))
    aexit = bool(is_async)
    entry = lim.entry if timeout is None else functools.partial(lim.entry, timeout=timeout)
    if agen:
        wrapper = _wrap_async_generator(agen_entry or entry, func, handler, aexit)
    elif coro:
        wrapper = _wrap_coroutine(entry, func, handler, keyfn, aexit)
    elif handler is not None and _is_async_callable(handler):
        raise TypeError(
            "on_block %r is an async function, but %s is not: a sync function cannot await "
            "it; give a sync on_block, or decorate an async function" % (handler, _name(func)))
    elif gen:
        wrapper = _wrap_generator(entry, func, handler)
    else:
        wrapper = _wrap_function(entry, func, handler, keyfn)
    wrapper.limiter = lim
    return wrapper


def limit(
    qps: Union[int, float, str, None] = None,
    *,
    rate: Optional[str] = None,
    concurrency: Optional[int] = None,
    behavior: str = "reject",
    warm_up_s: float = 10,
    cold_factor: float = 3,
    max_queueing_ms: int = 500,
    occupy_timeout_ms: int = 500,
    interval_ms: Optional[int] = None,
    sample_count: Optional[int] = None,
    shared: Union[None, bool, str] = None,
    name: Optional[str] = None,
    shadow: bool = False,
    on_block: Optional[Callable[..., Any]] = None,
) -> Limiter:
    """Build a Limiter from the Limiter's arguments; use it as a decorator:

    >>> @limit(qps=10, behavior="throttle")
    ... async def call_api(): ...
    >>> @limit(rate="100/minute")
    ... def send_mail(): ...
    >>> @limit("5/m")             # a rate string first, as rate=
    ... def send_sms(): ...
    """
    return Limiter(**locals())
