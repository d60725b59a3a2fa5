"""The one admission protocol (``Admitter``) and the one entry over it (``AdmissionEntry``);
``with lim:`` / ``async with lim:`` (``lim.entry(timeout=math.inf)``, its entry kept for the
exit in a context variable: a stack per task or thread, so any number may hold the same
limiter, nested too); and the guard that keeps a thread-API wait off a running event loop.
"""
from __future__ import annotations

import asyncio
import contextvars
import time
from typing import (Any, Callable, NoReturn, Optional, Protocol, Tuple, TypeVar,
                    runtime_checkable)

__all__ = ["SyncAdmission", "AsyncAdmission", "Admission", "NeedsKey", "refuse_in_loop",
           "Admitter", "AdmissionEntry", "Decision"]

# the entries held by `with lim:` / `async with lim:` in this context: ((lim, entry), ...)
_HELD: "contextvars.ContextVar[Tuple[Tuple[Any, Any], ...]]" = contextvars.ContextVar(
    "slidewin_held", default=())
_FOREVER = float("inf")
_E = TypeVar("_E", bound="AdmissionEntry")  # what an entry's __enter__ gives: its own type
_running_loop = asyncio.events._get_running_loop  # None, not an exception, when there is none
_monotonic_ns = time.monotonic_ns  # CLOCK_MONOTONIC, the core's clock


def refuse_in_loop(what: str, async_form: str) -> None:
    """RuntimeError when this thread runs an event loop: a sleep here would stop it. Called
    only on a path that is about to sleep, never on an admission that goes at once."""
    if _running_loop() is not None:
        raise RuntimeError(
            "%s would sleep in the thread that runs an asyncio event loop, blocking every "
            "task of it: inside a running event loop use %s" % (what, async_form))


def _pop(lim: Any) -> Any:
    held = _HELD.get()
    for i in range(len(held) - 1, -1, -1):
        if held[i][0] is lim:
            _HELD.set(held[:i] + held[i + 1:])
            return held[i][1]
    raise RuntimeError("exit of `with %r:` that this task or thread did not enter" % (lim,))


class _Whole:
    __slots__ = ()

    def _whole_entry(self) -> Any:  # what `with lim:` enters (a Breaker's: its entry())
        return self.entry(timeout=_FOREVER)  # type: ignore[attr-defined]


class SyncAdmission(_Whole):
    """``with lim:``: ``with lim.entry(timeout=math.inf):``, waiting until admitted."""

    __slots__ = ()

    def __enter__(self) -> None:
        entry = self._whole_entry()
        entry.__enter__()
        _HELD.set(_HELD.get() + ((self, entry),))

    def __exit__(self, et: Any, ev: Any, tb: Any) -> Optional[bool]:
        return _pop(self).__exit__(et, ev, tb)  # type: ignore[no-any-return]


class AsyncAdmission(_Whole):
    """``async with lim:``: ``async with lim.entry(timeout=math.inf):``, waiting (with
    asyncio) until admitted, as ``asyncio.Semaphore`` and aiolimiter do."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        entry = self._whole_entry()
        await entry.__aenter__()
        _HELD.set(_HELD.get() + ((self, entry),))

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> Optional[bool]:
        return await _pop(self).__aexit__(et, ev, tb)  # type: ignore[no-any-return]


class Admission(SyncAdmission, AsyncAdmission):
    """Both: the in-process types, whose entries enter either way."""

    __slots__ = ()


class NeedsKey:
    """A keyed limiter: ``with`` and ``async with`` need a key, so they say so."""

    __slots__ = ()

    def _no_key(self, *args: Any) -> NoReturn:
        name = type(self).__name__
        raise TypeError("a %s limits each key on its own: `async with lim:` has no key; use "
                        "`async with lim.entry(key):` (or `with lim.entry(key):`)" % name)

    __enter__ = __exit__ = __aenter__ = __aexit__ = _no_key


Decision = Tuple[Any, ...]  # the admitter's answer: (verdict, wait_ns, retry_ns, ...)


@runtime_checkable
class Admitter(Protocol):
    """What every admission type implements: the one entry (``AdmissionEntry``), the one
    waiter (``slidewin._waiters``) and the one decorator run over these methods alone.

    ``req``: the request as the admitter knows it (sizes, key, the caller's flags), opaque
    to the callers; ``held``: what an admission holds until its exit. A ``Decision`` starts
    with (verdict (``PASS``, ``SHADOWED`` admit; ``BLOCK``, ``NEVER`` refuse), the ns to sleep
    before going on, the ns after which a refused request may pass (0: unknown, -1: never)).
    Limiter's and KeyedLimiter's C ``try_acquire()``, ``acquire()`` and ``entry()`` are fast
    paths of the same protocol.
    """

    def _adm_decide(self, req: Any, flags: int) -> Decision:
        """One decision; ``flags`` adds to the request's (``F_NO_BLOCK``: a retry of a wait,
        which counts no BLOCK; ``F_RETRY``: give the retry time)."""

    def _adm_refuse(self, req: Any, decision: Decision) -> NoReturn:
        """Raise the refusal's error (a decision without ``F_NO_BLOCK`` counted it)."""

    def _adm_retry_in(self, req: Any, decision: Decision, first: bool,
                      deadline: float) -> Optional[float]:
        """A refused try of a wait that ends at ``deadline`` (``time.monotonic()``): the
        seconds until the first waiter should decide again (None: unknown, poll), or, the
        wait being over (the deadline passed, or it can never pass), one BLOCK counted and
        the refusal raised. ``first``: the caller is the first of its queue."""

    def _adm_hold(self, req: Any, decision: Decision) -> Any:
        """What an admission holds until its exit or release."""

    def _adm_exit(self, req: Any, held: Any, et: Any, ev: Any,
                  rt_ns: int) -> Optional[BaseException]:
        """End an admission with its outcome (how the body ended: ``et``, ``ev``) and its
        response time. Raising leaves it held (an exit may be retried); a returned exception
        is raised by the caller once the admission has ended."""

    def _adm_release(self, req: Any, held: Any) -> None:
        """Give an admission back without an outcome (its caller never ran the body)."""

    def _adm_listen(self, wake: Optional[Callable[..., None]]) -> None:
        """The wake-up hook: call ``wake()`` (or ``wake(fingerprint)``, a key's release)
        from any thread at each release that may admit a waiter; None: no more."""


class AdmissionEntry:
    """The one entry over an ``Admitter`` (``with`` and ``async with``): admitted (waiting up
    to ``timeout`` seconds, None: not at all) and held while the body runs, then ended with
    the body's outcome and response time. Used once."""

    __slots__ = ("_adm", "_req", "_timeout", "_held", "_start", "_state")
    _what = "entry"
    _in_loop: Tuple[str, str]  # refuse_in_loop's words: what must wait, the async form to use

    def __init__(self, adm: Admitter, req: Any, timeout: Optional[float]) -> None:
        self._adm = adm
        self._req = req
        self._timeout = timeout
        self._held: Any = None
        self._start = 0
        self._state = 0  # 0 idle, 1 entered, 2 exited

    def _claim(self) -> None:
        if self._state != 0:
            raise RuntimeError("this %s is already %s" % (
                self._what, "entered" if self._state == 1 else "used"))

    def _entered(self, held: Any) -> None:
        self._held = held
        self._state = 1

    def _abort(self) -> None:
        """Interrupted between its admission and its body: hold nothing, as if never
        entered (it may be entered again)."""
        if self._state == 1:
            self._adm._adm_release(self._req, self._held)
        self._state = 0
        self._held = None

    def _held_now(self) -> int:
        """No timeout: one decision, held; the ns to sleep before the body (a group's: its own)."""
        d = admit(self._adm, self._req, None, self._in_loop)
        self._entered(self._adm._adm_hold(self._req, d))
        return int(d[1])

    def __enter__(self: _E) -> _E:
        if self._timeout is None and self._state == 0:
            wait = self._held_now()
        else:
            self._claim()
            d = admit(self._adm, self._req, self._timeout, self._in_loop)
            self._entered(self._adm._adm_hold(self._req, d))
            wait = d[1]
        if wait > 0:  # a throttle's slot: interrupted, given back
            try:
                refuse_in_loop(*self._in_loop)
                time.sleep(wait / 1e9)
            except BaseException:
                self._abort()
                raise
        self._start = _monotonic_ns()
        return self

    async def __aenter__(self: _E) -> _E:
        if self._timeout is None and self._state == 0:
            wait = self._held_now()
        else:
            self._claim()
            d = await admit_async(self._adm, self._req, self._timeout)
            self._entered(self._adm._adm_hold(self._req, d))
            wait = d[1]
        if wait > 0:
            try:
                await asyncio.sleep(wait / 1e9)
            except BaseException:  # cancelled while waiting: give the admission back
                self._abort()
                raise
        self._start = _monotonic_ns()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if self._state != 1:
            raise RuntimeError("exit of a %s that is not entered" % self._what)
        err = self._adm._adm_exit(self._req, self._held, et, ev, _monotonic_ns() - self._start)
        self._state = 2
        self._held = None
        if err is not None:
            raise err from ev

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.__exit__(et, ev, tb)


from ._waiters import admit, admit_async  # noqa: E402 (it imports this module's names)
