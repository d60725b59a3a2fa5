"""Circuit breaking: ``Breaker`` (Sentinel's degrade rules on the window) and
``BreakerOpenError``.

The decisions are the C core's (``sw_breaker``): admission, outcomes, the trip and the one
probe each happen in one critical section. This module adds what is Python: the entry (sync
and ``async with``), the decorator (Limiter's, over ``entry()``), which exceptions count as
errors, and the listeners, which the C base calls through ``_notify`` once the core's lock
is released.
"""
import logging
import time
from typing import (Any, Callable, List, Optional, Tuple, Type, TypeVar, Union, cast,
                    overload)

from . import _core
from ._admission import Admission
from ._limiter import _MISSING, _check_on_block, _decorate_entries

F = TypeVar("F", bound=Callable[..., Any])
Listener = Callable[[str, str, Optional[float]], Any]

_log = logging.getLogger("slidewin")
_monotonic_ns = time.monotonic_ns  # CLOCK_MONOTONIC, the core's clock


class BreakerOpenError(_core.BlockedError):
    """A circuit breaker refused the call: it is open (or half-open, its one probe out).

    ``retry_after``: seconds until a probe may pass (when half-open: the breaker's
    ``recovery_s``, the wait should the probe fail); ``breaker`` (also ``limiter``): the
    Breaker. A ``BlockedError``: the web middlewares answer it with 503 and Retry-After.
    """

    @property
    def breaker(self) -> Any:
        """The Breaker that refused the call (None once pickled)."""
        return self.limiter

    def __reduce__(self) -> Any:
        # a Breaker lives in its process: a pickled error keeps the message and retry_after
        state = dict(getattr(self, "__dict__", {}))
        state["retry_after"] = self.retry_after
        state["limiter"] = None
        return (type(self), self.args, state)


def _check_errors(errors: Any) -> Tuple[Type[BaseException], ...]:
    if isinstance(errors, type):
        errors = (errors,)
    if not isinstance(errors, tuple) or not all(
        isinstance(e, type) and issubclass(e, BaseException) for e in errors
    ):
        raise TypeError("errors must be an exception class or a tuple of exception classes, "
                        "not %r" % (errors,))
    for e in errors:
        if not issubclass(e, Exception) or issubclass(e, _core.BlockedError):
            # a BaseException that is not an Exception (KeyboardInterrupt, CancelledError)
            # and a refusal by a nested limit cancel the call: never counted as failures
            raise ValueError("errors must be Exception subclasses other than BlockedError "
                             "(%s cancels a call; it never counts as a failure), got %s"
                             % (e.__name__, e.__name__))
    return errors


class _BreakerEntry:
    """One protected call: ``with br.entry():`` / ``async with br.entry():``.

    Enter: admitted (a ticket from the core) or ``BreakerOpenError``. Exit: no exception, or
    an ``Exception`` that is not one of ``errors``: a success; one of ``errors``: an error
    (it propagates); a ``BlockedError`` (a limit nested inside refused) or a
    ``BaseException`` that is not an ``Exception`` (``CancelledError``,
    ``KeyboardInterrupt``, a generator's close): a cancel, which gives a probe back.
    """

    __slots__ = ("_br", "_ticket", "_start")

    def __init__(self, br: "Breaker") -> None:
        self._br = br
        self._ticket: Optional[int] = None
        self._start = 0

    def __enter__(self) -> "_BreakerEntry":
        if self._ticket is not None:
            raise RuntimeError("this breaker entry is already entered")
        br = self._br
        ticket = br._pass()
        if ticket is None:
            raise br._open_error()
        self._ticket = ticket
        self._start = _monotonic_ns()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        ticket = self._ticket
        if ticket is None:
            raise RuntimeError("exit of a breaker entry that is not entered")
        br = self._br
        # the ticket is given up only once the core took the outcome: an exit whose wait for
        # a shared region's lock gave up (OSError) stays entered and may be retried
        if et is None:
            br._record(ticket, (_monotonic_ns() - self._start) / 1e6, False)
        elif issubclass(et, _core.BlockedError) or not issubclass(et, Exception):
            br._cancel(ticket)
        else:
            br._record(ticket, (_monotonic_ns() - self._start) / 1e6,
                       issubclass(et, br._errors))
        self._ticket = None

    async def __aenter__(self) -> "_BreakerEntry":
        return self.__enter__()

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.__exit__(et, ev, tb)


class Breaker(_core.Breaker, Admission):
    """A circuit breaker on a sliding window: Sentinel's degrade rules.

    Breaker(*, error_ratio=None, error_count=None, slow_rt_ms=None, slow_ratio=1.0,
            min_requests=5, recovery_s=10, interval_ms=1000, sample_count=1,
            errors=(Exception,), shared=None, name=None, on_block=None)

    Exactly one grade: ``error_ratio`` (opens when more than that share of the window's
    calls failed), ``error_count`` (more than that many failed), ``slow_rt_ms`` with
    ``slow_ratio`` (more than that share took longer than slow_rt_ms; a ratio of 1.0 also
    opens when every call was slow). Never below ``min_requests`` calls in the window.
    Open, it refuses every call for ``recovery_s``, then lets exactly one through (the
    probe, half-open): its success closes the breaker, its failure reopens it.

    ``with br.entry():``, ``async with br.entry():`` and ``@br`` run calls through it
    (``BreakerOpenError`` when refused; ``on_block(error, *args, **kwargs)`` instead, for
    the decorator, when given); ``try_pass()`` / ``record()`` / ``cancel()`` are the bare
    pair. ``errors``: the exceptions that count as failures (others count as successes).
    """

    __slots__ = ("_errors", "_listeners", "_on_block")
    _errors: Tuple[Type[BaseException], ...]
    _listeners: List[Listener]
    _on_block: Optional[Callable[..., Any]]

    def __new__(
        cls,
        *,
        error_ratio: Optional[float] = None,
        error_count: Optional[int] = None,
        slow_rt_ms: Optional[int] = None,
        slow_ratio: float = 1.0,
        min_requests: int = 5,
        recovery_s: float = 10,
        interval_ms: int = 1000,
        sample_count: int = 1,
        errors: Union[Type[BaseException], Tuple[Type[BaseException], ...]] = (Exception,),
        shared: Union[None, bool, str] = None,
        name: Optional[str] = None,
        on_block: Optional[Callable[..., Any]] = None,
    ) -> "Breaker":
        checked = _check_errors(errors)
        handler = _check_on_block(on_block)
        self = cast("Breaker", super().__new__(
            cls, error_ratio=error_ratio, error_count=error_count, slow_rt_ms=slow_rt_ms,
            slow_ratio=slow_ratio, min_requests=min_requests, recovery_s=recovery_s,
            interval_ms=interval_ms, sample_count=sample_count, shared=shared, name=name))
        self._errors = checked
        self._listeners = []
        self._on_block = handler
        return self

    @property
    def errors(self) -> Tuple[Type[BaseException], ...]:
        """The exception classes that count as failures."""
        return self._errors

    def __repr__(self) -> str:
        text = super().__repr__()
        if self._errors != (Exception,):
            names = ", ".join(e.__name__ for e in self._errors)
            text = "%s, errors=(%s%s))" % (text[:-1], names, "," if len(self._errors) == 1
                                           else "")
        return text

    def update(self, **settings: Any) -> None:
        """Change the settings in place: error_ratio, error_count, slow_rt_ms, slow_ratio,
        min_requests, recovery_s (one of the first three switches the grade), errors,
        on_block. The state and the window are kept. An invalid value raises
        ValueError/TypeError and changes nothing; interval_ms, sample_count, shared and
        name cannot change (ValueError). On a shared region it changes this process's
        settings."""
        errors = settings.pop("errors", _MISSING)
        on_block = settings.pop("on_block", _MISSING)
        checked = self._errors if errors is _MISSING else _check_errors(errors)
        handler = self._on_block if on_block is _MISSING else _check_on_block(on_block)
        super().update(**settings)
        self._errors = checked
        self._on_block = handler

    # -- listeners -------------------------------------------------------------------------

    def on_change(self, fn: Listener) -> Listener:
        """Call ``fn(old_state, new_state, value)`` on every change of state (also usable as
        a decorator), after the breaker's lock is released, in the order of the changes
        (each ``old`` is the previous ``new``): in the thread that made the change, or, when
        another thread is telling an earlier change at that moment, in that thread right
        after it. An ``Exception`` in it is logged and stops nothing; any other
        ``BaseException`` (``KeyboardInterrupt``) is raised by the call that told the change
        once every waiting change was told. ``value``: the error ratio, error count or slow
        ratio that opened it, 1.0 for a failed probe, None otherwise. With ``shared=``: the
        changes this object's calls made (other processes' are told in theirs)."""
        if not callable(fn):
            raise TypeError("on_change takes a callable, not %s" % type(fn).__name__)
        self._listeners.append(fn)
        return fn

    def _notify(self, old: str, new: str, value: Optional[float]) -> None:
        first: Optional[BaseException] = None
        for fn in list(self._listeners):
            try:
                fn(old, new, value)
            except Exception:
                _log.exception("slidewin: a Breaker on_change listener raised (%s -> %s)",
                               old, new)
            except BaseException as e:  # KeyboardInterrupt, SystemExit: after the others
                if first is None:
                    first = e
        if first is not None:
            raise first

    # -- calls -----------------------------------------------------------------------------

    def entry(self) -> _BreakerEntry:
        """A context manager for one call (``with`` or ``async with``)."""
        return _BreakerEntry(self)

    def _whole_entry(self) -> _BreakerEntry:
        # `with br:` / `async with br:`: a breaker never waits, it admits or refuses
        return _BreakerEntry(self)

    def _open_error(self) -> BreakerOpenError:
        retry = self.retry_after()
        who = "circuit breaker %r" % self.name if self.name is not None else "circuit breaker"
        state = self.state
        what = "half-open, its probe out" if state == "half_open" else state
        return BreakerOpenError(
            "%s is %s; retry after %.3f s" % (who, what, retry or 0.0),
            retry_after=retry, limiter=self)

    @overload
    def __call__(self, func: F) -> F: ...

    @overload
    def __call__(
        self, func: None = None, *, on_block: Optional[Callable[..., Any]] = ...
    ) -> Callable[[F], F]: ...

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING) -> Any:
        """Decorate a function as Limiter does: each call (each iteration of a generator)
        runs inside ``self.entry()``; sync and async functions and generators."""
        if func is None:
            return lambda f: self.__call__(f, on_block=on_block)
        return _decorate_entries(self, "Breaker", func, on_block)
