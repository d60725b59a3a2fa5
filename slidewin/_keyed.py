"""The Python layer of KeyedLimiter: asyncio and the decorator over the C type, as for
Limiter."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, TypeVar, Union, cast, overload

from . import _core, _limiter
from ._admission import NeedsKey
from ._limiter import (
    _MISSING,
    _acquire_async,
    _check_timeout,
    _decorate_entries,
    _Limiting,
    _new,
    _update,
)

__all__ = ["KeyedLimiter"]

F = TypeVar("F", bound=Callable[..., Any])
Key = Union[str, bytes, int]
_rebuild = _limiter._rebuild  # pickles made before it moved name slidewin._keyed._rebuild


class KeyedLimiter(_core.KeyedLimiter, _Limiting, NeedsKey):
    """One limit per key (user, client IP, tenant) in a bounded table.

    ``rate="100/minute"`` (or the string first: ``KeyedLimiter("5/second")``) is the
    alternative to ``qps``, as on Limiter: that count per key in the window, the window
    being the period, in at most 6 steps unless ``sample_count`` is given (each step is 8
    bytes in every key's entry: 6 keep a key within twice the bytes of ``qps=``; a private
    Limiter's 60 would cost 9 times). ``overrides`` stay thresholds per second (qps), as
    ``qps`` is. ``with`` / ``async with`` need a key: ``async with per_key.entry(key):``.

    Each key is limited exactly as a private Limiter with the same settings would limit it
    (behaviors "reject" and "throttle" with qps, or concurrency). Keys are str, bytes or int.
    ``overrides`` maps keys to their own threshold (Sentinel's hot items). At most
    ``max_keys`` keys are held: a new key then takes the place of the least recently used key
    whose window is empty (else of the least recently used key: its limit restarts); a key
    with requests in flight is never evicted.
    """

    __slots__ = ("_on_block", "_waitq")
    _PICKLED = ("concurrency", "behavior", "max_queueing_ms", "interval_ms", "sample_count",
                "max_keys", "overrides", "shared", "name", "shadow")

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
        max_keys: int = 65536,
        overrides: Optional[Mapping[Key, Union[int, float]]] = None,
        shared: Union[None, bool, str] = None,
        name: Optional[str] = None,
        shadow: bool = False,
        on_block: Optional[Callable[..., Any]] = None,
    ) -> "KeyedLimiter":
        return cast("KeyedLimiter", _new(super(), cls, locals()))

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
        overrides: Any = _MISSING,
        on_block: Any = _MISSING,
        **layout: Any,
    ) -> None:
        """Change the settings in place, as ``Limiter.update()`` does (the state kept, an
        invalid value changing nothing), ``overrides`` too; ``max_keys`` is layout: it
        cannot change (ValueError)."""
        _update(self, super().update, locals())

    async def acquire_async(
        self, key: Key, n: int = 1, *, timeout: Optional[float] = None
    ) -> None:
        """Like acquire(), sleeping with asyncio: the event loop keeps running."""
        await _acquire_async(self, key, n, _check_timeout(timeout))

    @overload
    def __call__(
        self,
        func: None = None,
        *,
        key: Callable[..., Key],
        on_block: Optional[Callable[..., Any]] = ...,
        timeout: Optional[float] = ...,
    ) -> Callable[[F], F]: ...

    @overload
    def __call__(
        self,
        func: F,
        *,
        key: Callable[..., Key],
        on_block: Optional[Callable[..., Any]] = ...,
        timeout: Optional[float] = ...,
    ) -> F: ...

    def __call__(
        self,
        func: Any = None,
        *,
        key: Optional[Callable[..., Key]] = None,
        on_block: Any = _MISSING,
        timeout: Optional[float] = None,
    ) -> Any:
        """Decorate a sync or async function as ``Limiter.__call__`` does (``on_block``,
        ``timeout``), each call inside ``self.entry(key(*args, **kwargs))``.

        >>> per_user = KeyedLimiter(qps=10)
        >>> @per_user(key=lambda request, *a, **kw: request.client_ip)
        ... def handle(request): ...
        """
        if key is None:
            raise TypeError(
                "a KeyedLimiter decorator needs key=, a function of the call's arguments "
                "returning the key: @per_key(key=lambda request, *a, **kw: request.user)"
            )
        if not callable(key):
            raise TypeError("key must be callable, not %s" % type(key).__name__)
        return _decorate_entries(self, "KeyedLimiter", func, on_block, keyfn=key,
                                 timeout=timeout)

