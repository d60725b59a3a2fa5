"""``with lim:`` and ``async with lim:`` over any limiter's ``entry()``, and the guard that
keeps a thread-API wait off a running event loop.

``async with lim:`` waits for admission as ``asyncio.Semaphore`` and aiolimiter do: it is
``async with lim.entry(timeout=math.inf):`` (a Breaker's ``entry()``, which never waits). The
entry is kept for the exit in a context variable, a stack per task (or thread), so that any
number of tasks and threads may hold the same limiter at once, nested too.
"""
from __future__ import annotations

import asyncio
import contextvars
from typing import Any, NoReturn, Optional, Tuple

__all__ = ["SyncAdmission", "AsyncAdmission", "Admission", "NeedsKey", "refuse_in_loop"]

# the entries held by `with lim:` / `async with lim:` in this context: ((lim, entry), ...)
_HELD: "contextvars.ContextVar[Tuple[Tuple[Any, Any], ...]]" = contextvars.ContextVar(
    "slidewin_held", default=())
_FOREVER = float("inf")
_running_loop = asyncio.events._get_running_loop


def refuse_in_loop(what: str, async_form: str) -> None:
    """RuntimeError when this thread runs an event loop: a sleep here would stop it. Called
    only on a path that is about to sleep, never on an admission that goes at once."""
    if _running_loop() is not None:
        raise RuntimeError(
            "%s would sleep in the thread that runs an asyncio event loop, blocking every "
            "task of it: inside a running event loop use %s" % (what, async_form))


def _push(lim: Any, entry: Any) -> None:
    _HELD.set(_HELD.get() + ((lim, entry),))


def _pop(lim: Any) -> Any:
    held = _HELD.get()
    for i in range(len(held) - 1, -1, -1):
        if held[i][0] is lim:
            _HELD.set(held[:i] + held[i + 1:])
            return held[i][1]
    raise RuntimeError("exit of `with %r:` that this task or thread did not enter" % (lim,))


class SyncAdmission:
    """``with lim:``: ``with lim.entry(timeout=math.inf):``, waiting until admitted."""

    __slots__ = ()

    def _whole_entry(self) -> Any:
        return self.entry(timeout=_FOREVER)  # type: ignore[attr-defined]

    def __enter__(self) -> None:
        entry = self._whole_entry()
        entry.__enter__()
        _push(self, entry)

    def __exit__(self, et: Any, ev: Any, tb: Any) -> Optional[bool]:
        return _pop(self).__exit__(et, ev, tb)  # type: ignore[no-any-return]


class AsyncAdmission:
    """``async with lim:``: ``async with lim.entry(timeout=math.inf):``, waiting (with
    asyncio) until admitted, as ``asyncio.Semaphore`` and aiolimiter do."""

    __slots__ = ()

    def _whole_entry(self) -> Any:
        return self.entry(timeout=_FOREVER)  # type: ignore[attr-defined]

    async def __aenter__(self) -> None:
        entry = self._whole_entry()
        await entry.__aenter__()
        _push(self, entry)

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> Optional[bool]:
        return await _pop(self).__aexit__(et, ev, tb)  # type: ignore[no-any-return]


class Admission(SyncAdmission, AsyncAdmission):
    """Both: the in-process types, whose entries enter either way."""

    __slots__ = ()


class NeedsKey:
    """A keyed limiter: ``with`` and ``async with`` need a key, so they say so."""

    __slots__ = ()

    def _no_key(self) -> NoReturn:
        name = type(self).__name__
        raise TypeError("a %s limits each key on its own: `async with lim:` has no key; use "
                        "`async with lim.entry(key):` (or `with lim.entry(key):`)" % name)

    def __enter__(self) -> NoReturn:
        self._no_key()

    def __exit__(self, et: Any, ev: Any, tb: Any) -> NoReturn:
        self._no_key()

    async def __aenter__(self) -> NoReturn:
        self._no_key()

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> NoReturn:
        self._no_key()
