"""Logic written once for sync and asyncio callers: a generator yields each I/O it needs as
a callable of no argument and is sent its result (or thrown its exception); ``run`` drives it
in this thread, ``arun`` under asyncio (awaiting an awaitable result). ``SYNC`` and ``ASYNC``
name the I/O that differs: entering and exiting a context manager, sleeping.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, Callable, Generator

from . import _core

Steps = Generator[Callable[[], Any], Any, Any]

# entries whose exit is a C call (sync, also under asyncio); the others' is awaited
_NATIVE_ENTRIES = (_core.Entry, _core.KeyedEntry)


async def arun(steps: Steps, awaiting: bool = True) -> Any:
    value: Any = None
    error: Any = None
    while True:
        try:
            if error is None:
                op = steps.send(value)
            else:
                op, error = steps.throw(error), None
        except StopIteration as stop:
            return stop.value
        try:
            value = op()
            if awaiting and inspect.isawaitable(value):
                value = await value
        except BaseException as e:
            value, error = None, e


def run(steps: Steps) -> Any:
    """Drive `steps` in this thread (the asyncio driver told not to await: it never
    suspends, so one send() runs it to its end)."""
    try:
        arun(steps, False).send(None)
    except StopIteration as done:
        return done.value


class IO:
    """The I/O of a thread (``with``, ``time.sleep``) or, ``is_async``, of asyncio (``async
    with``, but a C decision that never sleeps and a C exit are called as they are;
    ``asyncio.sleep``)."""

    def __init__(self, is_async: bool) -> None:
        self.is_async = is_async
        self.run: Callable[[Steps], Any] = arun if is_async else run

    def enter(self, cm: Any) -> Callable[[], Any]:
        # a reject or warm-up Limiter's entry never sleeps (one decision in C): entered
        # without a coroutine; a throttle's or a group's sleeps with asyncio
        if self.is_async and not (isinstance(cm, _NATIVE_ENTRIES) and cm.timeout is None
                                  and cm.limiter.behavior in ("reject", "warm_up")):
            return cm.__aenter__  # type: ignore[no-any-return]
        return cm.__enter__  # type: ignore[no-any-return]

    def exit(self, cm: Any, et: Any = None, ev: Any = None, tb: Any = None) -> Callable[[], Any]:
        native = not self.is_async or isinstance(cm, _NATIVE_ENTRIES)
        return functools.partial(cm.__exit__ if native else cm.__aexit__, et, ev, tb)

    def sleep(self, seconds: float) -> Callable[[], Any]:
        return functools.partial(asyncio.sleep if self.is_async else time.sleep, seconds)


SYNC = IO(False)
ASYNC = IO(True)
