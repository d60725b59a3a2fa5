"""Circuit breaking: ``Breaker`` (Sentinel's degrade rules on the window) and
``BreakerOpenError``. The decisions are C, each in one critical section; here are the entry
(with its ``call_timeout_s``), the decorator, which exceptions are errors, and the listeners,
which the C base calls through ``_tell`` once the core's lock is released.
"""
import asyncio
import logging
import math
from typing import (Any, Callable, Dict, List, NoReturn, Optional, Tuple, Type, TypeVar, Union,
                    cast, overload)

from . import _core
from ._admission import Admission, AdmissionEntry, _monotonic_ns, _running_loop
from ._core import BLOCK as _BLOCK, PASS as _PASS
from ._limiter import _MISSING, _aenter, _aexit, _check_on_block, _check_timeout, _decorate_entries

F = TypeVar("F", bound=Callable[..., Any])
Listener = Callable[[str, str, Optional[float]], Any]
ErrorClasses = Tuple[Type[BaseException], ...]
ErrorPredicate = Callable[[BaseException], bool]
Errors = Union[ErrorClasses, ErrorPredicate]

_log = logging.getLogger("slidewin")


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


def _check_errors(errors: Any) -> Errors:
    if isinstance(errors, type):
        errors = (errors,)
    elif not isinstance(errors, tuple) and callable(errors):
        return cast(ErrorPredicate, errors)  # fn(exc) -> bool: True for a failure
    if not isinstance(errors, tuple) or not all(
        isinstance(e, type) and issubclass(e, BaseException) for e in errors
    ):
        raise TypeError("errors must be an exception class, a tuple of exception classes or "
                        "a predicate fn(exc) -> bool, not %r" % (errors,))
    for e in errors:
        if not issubclass(e, Exception) or issubclass(e, _core.BlockedError):
            # a BaseException that is not an Exception (KeyboardInterrupt, CancelledError)
            # and a refusal by a nested limit cancel the call: never counted as failures
            raise ValueError("errors must be Exception subclasses other than BlockedError "
                             "(%s cancels a call; it never counts as a failure), got %s"
                             % (e.__name__, e.__name__))
    return errors


def _check_call_timeout(value: Any) -> Optional[float]:  # inf: None
    seconds = _check_timeout(value, "call_timeout_s", positive=True)
    return None if seconds is None or math.isinf(seconds) else seconds


# the settings the Python layer holds, each with its check (in the order they are checked)
_OWN = {"errors": _check_errors, "on_block": _check_on_block,
        "call_timeout_s": _check_call_timeout}


def _name_of(fn: Any) -> str:
    return str(getattr(fn, "__name__", None) or repr(fn))


class _Deadline:
    """call_timeout_s for an ``async with`` entry: cancels the task running the body at the
    deadline, as ``asyncio.timeout()`` does, and tells its exit whether that cancel is the
    one to turn into ``TimeoutError`` (no other cancel of the task pending)."""

    __slots__ = ("_task", "_handle", "_cancelling", "fired", "_settled", "_ours")

    def __init__(self, task: "asyncio.Task[Any]", seconds: float) -> None:
        self._task = task
        self._cancelling = task.cancelling() if hasattr(task, "cancelling") else 0
        self.fired = False
        self._settled = False
        self._ours = False
        self._handle = task.get_loop().call_later(seconds, self._fire)

    def _fire(self) -> None:
        self.fired = True
        self._task.cancel()

    def settle(self) -> bool:
        """Stop the timer (once): whether it cancelled the body, no other cancel pending."""
        if not self._settled:
            self._settled = True
            self._handle.cancel()
            if self.fired:
                uncancel = getattr(self._task, "uncancel", None)  # 3.11+
                self._ours = uncancel is None or uncancel() <= self._cancelling
        return self._ours


class _BreakerEntry(AdmissionEntry):
    """One protected call, entered again once exited (its exit: Breaker._adm_exit). Holds the
    core's ticket (``_held``) and the timer of call_timeout_s (``_deadline``). ``timed``:
    whether ``async with`` may cancel the body at call_timeout_s (not an async generator's
    iteration, whose consumer runs between the items in the same task)."""

    __slots__ = ("_timed", "_deadline")
    _what = "breaker entry"

    def __init__(self, br: "Breaker", timed: bool = True) -> None:
        # the base's fields set here: a breaker's entry is made per call (no super() call)
        self._adm: Breaker = br
        self._req = self._timeout = self._held = None
        self._deadline: Optional[_Deadline] = None
        self._start = self._state = 0
        self._timed = timed

    # the protocol's steps for a breaker, which never waits, spelled out: no decision tuple
    # and no list of what it holds (each an allocation a call)
    def __enter__(self) -> "_BreakerEntry":
        if self._state != 0:
            self._claim()
        br = self._adm
        ticket = br._pass()
        if ticket is None:
            raise br._open_error()
        self._held = ticket
        self._state = 1
        self._start = _monotonic_ns()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if et is None and self._state == 1 and self._deadline is None:  # a success, no timer
            rt = (_monotonic_ns() - self._start) / 1e6
            br = self._adm
            limit = br._call_timeout_ms
            if limit is None or rt <= limit:
                br._record(self._held, rt, False)
                self._state = 0
                self._held = None
                return
        if self._state != 1:
            raise RuntimeError("exit of a breaker entry that is not entered")
        err = self._adm._adm_exit(None, self._held, et, ev, _monotonic_ns() - self._start,
                                  self._deadline)
        self._state = 0  # not reached when the core's exit raised (OSError): still entered
        self._held = self._deadline = None
        if err is not None:
            raise err from ev

    async def __aenter__(self) -> "_BreakerEntry":
        self.__enter__()
        seconds = self._adm._call_timeout_s
        if seconds is not None and self._timed:
            loop = _running_loop()  # None: not asyncio's; counted when it returns, as sync
            task = None if loop is None else asyncio.current_task(loop)
            if task is not None:
                self._deadline = _Deadline(task, seconds)
        return self


class Breaker(_core.Breaker, Admission):
    """A circuit breaker on a sliding window: Sentinel's degrade rules.

    Exactly one grade: ``error_ratio`` (opens when more than that share of the window's
    calls failed), ``error_count`` (more than that many failed), ``slow_rt_ms`` with
    ``slow_ratio`` (more than that share took longer than slow_rt_ms; a ratio of 1.0 also
    opens when every call was slow). Never below ``min_requests`` calls in the window.
    Open, it refuses every call for ``recovery_s``, then lets exactly one through (the
    probe, half-open): its success closes the breaker, its failure reopens it; a probe silent
    for ``probe_timeout_s`` (None: for ever) has failed.

    ``with br.entry():``, ``async with br.entry():`` and ``@br`` run calls through it
    (``BreakerOpenError`` when refused; ``on_block(error, *args, **kwargs)`` instead, for
    the decorator, when given); ``try_pass()`` / ``record()`` / ``cancel()`` are the bare
    pair. ``errors``: the exceptions that count as failures (others count as successes),
    or a predicate ``fn(exc) -> bool``. ``call_timeout_s``: a call running longer is a
    failure; an ``async with`` body or a decorated coroutine still running then is
    cancelled and raises ``TimeoutError``.
    """

    __slots__ = ("_errors", "_listeners", "_on_block", "_call_timeout_s", "_call_timeout_ms")
    _errors: Errors
    _listeners: List[Listener]
    _on_block: Optional[Callable[..., Any]]
    _call_timeout_s: Optional[float]
    _call_timeout_ms: Optional[float]

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
        errors: Union[Type[BaseException], ErrorClasses, ErrorPredicate] = (Exception,),
        probe_timeout_s: Optional[float] = 60,
        call_timeout_s: Optional[float] = None,
        shared: Union[None, bool, str] = None,
        name: Optional[str] = None,
        on_block: Optional[Callable[..., Any]] = None,
    ) -> "Breaker":
        core = {k: v for k, v in locals().items() if k not in ("cls", "__class__")}
        own = {k: check(core.pop(k)) for k, check in _OWN.items()}  # checked before the core
        self = cast("Breaker", super().__new__(cls, **core))
        self._listeners = []
        self._assign(own)
        return self

    @property
    def errors(self) -> Errors:
        """What counts as a failure: a tuple of exception classes, or the predicate
        ``fn(exc) -> bool``."""
        return self._errors

    @property
    def call_timeout_s(self) -> Optional[float]:
        """Seconds a call may run before it counts as a failure (an async one is cancelled
        and raises ``TimeoutError``), or None."""
        return self._call_timeout_s

    def _assign(self, own: Dict[str, Any]) -> None:
        for k, v in own.items():
            setattr(self, "_" + k, v)
        if "call_timeout_s" in own:
            seconds = own["call_timeout_s"]
            self._call_timeout_ms = None if seconds is None else seconds * 1e3

    def _is_failure(self, et: Type[BaseException], ev: Optional[BaseException]) -> bool:
        """Whether an ``Exception`` that ended a call is a failure: one of the classes, or
        the predicate's answer (a predicate that raises: a failure, logged)."""
        errors = self._errors
        if isinstance(errors, tuple):
            return issubclass(et, errors)
        try:
            return bool(errors(cast(BaseException, ev)))
        except Exception:
            _log.exception("slidewin: the errors predicate %s of a Breaker raised on %r; "
                           "counted as a failure", _name_of(errors), ev)
            return True

    def __repr__(self) -> str:
        text = super().__repr__()
        if self._call_timeout_s is not None:
            text = "%s, call_timeout_s=%r)" % (text[:-1], self._call_timeout_s)
        errors = self._errors
        if not isinstance(errors, tuple):
            text = "%s, errors=%s)" % (text[:-1], _name_of(errors))
        elif errors != (Exception,):
            names = ", ".join(e.__name__ for e in errors)
            text = "%s, errors=(%s%s))" % (text[:-1], names, "," if len(errors) == 1 else "")
        return text

    def update(self, **settings: Any) -> None:
        """Change the settings in place: error_ratio, error_count, slow_rt_ms (one of these
        switches the grade), slow_ratio, min_requests, recovery_s (an open breaker's next
        probe moves at once, in every process), probe_timeout_s (the probe out too),
        call_timeout_s, errors, on_block. The state is kept; an invalid value raises
        ValueError/TypeError and changes nothing; interval_ms, sample_count, shared and name
        cannot change (ValueError). On a shared region: this process's settings."""
        # each assigned only when given: a concurrent update() of another keeps its value
        own = {k: check(settings.pop(k)) for k, check in _OWN.items() if k in settings}
        super().update(**settings)
        self._assign(own)

    def on_change(self, fn: Listener) -> Listener:
        """Call ``fn(old_state, new_state, value)`` on every change of state (also a
        decorator), after the breaker's lock is released, in order (each ``old`` the previous
        ``new``), in the thread that made the change or one telling an earlier change then.
        An ``Exception`` in it is logged; any other ``BaseException`` is raised once every
        waiting change was told. ``value``: the ratio or count that opened it, 1.0 for a
        failed probe, else None. With ``shared=``: the changes this object's calls made."""
        if not callable(fn):
            raise TypeError("on_change takes a callable, not %s" % type(fn).__name__)
        self._listeners.append(fn)
        return fn

    # the admission protocol (slidewin._admission.Admitter): a breaker never waits

    def _adm_decide(self, req: Any, flags: int) -> Any:
        ticket = self._pass()
        return (_PASS, 0, 0, ticket) if ticket is not None else (_BLOCK, 0, -1, None)

    def _adm_refuse(self, *args: Any) -> NoReturn:
        raise self._open_error()

    _adm_retry_in = _adm_refuse

    def _adm_hold(self, req: Any, decision: Any) -> Any:
        return decision[3]  # the core's ticket

    def _adm_exit(self, req: Any, ticket: int, et: Any, ev: Any, rt_ns: int,
                  deadline: Optional[_Deadline] = None) -> Optional[BaseException]:
        """Record a success, an error (one of ``errors``) or a cancel (a BlockedError, or a
        BaseException that is not an Exception: gives a probe back); a call past
        call_timeout_s (its timer: ``deadline``) is a failure but for a cancel."""
        rt = rt_ns / 1e6
        interrupted = deadline is not None and deadline.settle()
        limit = self._call_timeout_ms
        cancel = et is not None and (issubclass(et, _core.BlockedError) or
                                     not issubclass(et, Exception))
        # the call ends only once the core took the outcome: an exit whose wait for a shared
        # region's lock gave up (OSError) stays entered and may be retried
        if ((deadline is not None and deadline.fired) or
                (not cancel and limit is not None and rt > limit)):
            self._record_timeout(ticket, rt)  # still running at call_timeout_s: a failure
            if interrupted and et is not None and issubclass(et, asyncio.CancelledError):
                return TimeoutError("the call ran past its breaker's call_timeout_s=%g s"
                                    % (self._call_timeout_s or 0.0))
            return None
        if et is None:
            self._record(ticket, rt, False)
        elif cancel:
            self._cancel(ticket)
        else:
            try:
                error = self._is_failure(et, ev)
            except BaseException as e:  # KeyboardInterrupt in the predicate: the call is given
                self._cancel(ticket)       # up, and the exception raised once it has ended
                return e
            self._record(ticket, rt, error)
        return None

    def _adm_release(self, req: Any, held: int) -> None:
        self._cancel(held)

    def _adm_listen(self, wake: Any) -> None:
        pass  # nothing waits on a breaker

    def entry(self) -> _BreakerEntry:
        """A context manager for one call (``with`` or ``async with``)."""
        return _BreakerEntry(self)

    _whole_entry = entry  # `with br:` / `async with br:`: a breaker never waits

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
        runs inside ``self.entry()``; sync and async functions and generators. With
        ``call_timeout_s``, a coroutine still running then is cancelled and raises
        ``TimeoutError``; any other kind is counted as a failure when it ends."""
        return _decorate_entries(self, "Breaker", func, on_block,
                                 agen_entry=lambda: _BreakerEntry(self, False))


def _tell(br: Any, old: str, new: str, value: Optional[float]) -> None:
    first: Optional[BaseException] = None
    for fn in list(br._listeners) if isinstance(br, Breaker) else ():
        try:
            fn(old, new, value)
        except Exception:
            _log.exception("slidewin: a Breaker on_change listener raised (%s -> %s)", old, new)
        except BaseException as e:  # KeyboardInterrupt, SystemExit: after the others
            if first is None:
                first = e
    if first is not None:
        raise first


# the functions the C types call (never a subclass's method by name)
_core._set_layer(_aenter, _aexit, _tell)
