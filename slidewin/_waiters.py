"""The one waiter: tasks and threads waiting for any admitter's admission
(slidewin._admission.Admitter), woken, not polling.

One FIFO queue per admitter (per key for a KeyedLimiter); a waiter sleeps on a future of its
loop (a task) or an Event (a thread). The decisions and the sleeps between them are the
admitter's (``_adm_decide``, ``_adm_retry_in``), the wake-ups its hook's (``_adm_listen``):

- a release wakes the first waiter not yet woken (a KeyedLimiter's, of the released key's
  queue); an admitted waiter wakes the next (the baton), a refused one keeps its place;
- only the first of a queue sleeps until ``retry_after`` or polls (warm-up); the others wait
  for the baton;
- a shared limiter: while tasks wait, a helper thread sleeps on the region's release sequence
  (a futex) and wakes the first waiter of every queue at any process's release; the first
  also retries every ``_SHARED_RECHECK_S`` (a dead process's slots are reaped then);
- a waiter that leaves unadmitted after it was woken, or while first, passes the wake-up on:
  none is lost;
- a group queues its own waiters, hooked on its concurrency members' queues while any waits.

A Limiter's and a KeyedLimiter's threads wait in C, the fast path of the same FIFO.
"""
from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional, Tuple

from . import _io
from ._admission import Admitter, Decision, _running_loop, refuse_in_loop
from ._core import F_NO_BLOCK as _F_NO_BLOCK, F_RETRY as _F_RETRY, PASS as _PASS
from ._core import SHADOWED as _SHADOWED

_SHARED_RECHECK_S = 0.25  # the first waiter of a shared concurrency limit retries this often
_POLL_MIN_S = 0.001       # unknown retry time (warm-up): the first waiter's poll, doubling ...
_POLL_MAX_S = 0.05        # ... up to this
_WATCH_SLICE_NS = 500_000_000  # the helper thread checks whether tasks still wait this often
_MAX_SLEEP_S = 3600.0     # a wait without end sleeps at most this long, then decides again


async def _sleep_async(w: Any, sleep: float) -> None:
    """A task's sleep until woken or `sleep` s passed (a thread's: its Event's wait)."""
    timer = w.loop.call_later(sleep, _set, w.fut)
    try:
        await w.fut
    finally:
        timer.cancel()


def _set(fut: "Optional[asyncio.Future[None]]") -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


class _Waiter:
    """A task (its loop and a future) or a thread (an Event) waiting in a queue."""

    __slots__ = ("loop", "fut", "ev", "woken", "q")

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop], q: "Deque[_Waiter]") -> None:
        self.loop = loop
        self.fut: "Optional[asyncio.Future[None]]" = None
        self.ev = threading.Event() if loop is None else None
        self.woken = False
        self.q = q  # the queue it waits in (its admitter's, or its key's)


class Waiters:
    """The queues of one admitter's waiting tasks and threads (see the module's docstring)."""

    __slots__ = ("_adm", "_qs", "_n", "_room", "_mu", "_shared", "_watching", "_hooks",
                 "__weakref__")

    def __init__(self, adm: Any) -> None:
        self._adm = weakref.ref(adm)  # the admitter holds the queues, not the other way round
        # the queue of each key's fingerprint (one queue: under None)
        self._qs: Dict[Optional[int], Deque[_Waiter]] = {}
        self._n = 0  # waiters, in all the queues
        # the keys whose first task waits for room in a full table (its key holds nothing: a
        # release of any key may make room): woken by every release, not only their key's
        self._room: "set[Optional[int]]" = set()
        self._mu = threading.Lock()
        # a shared limiter: its releases in any process are heard by a helper thread
        self._shared = hasattr(adm, "_watch") and adm.shared is not None
        self._watching = False
        # the wake functions of the groups waiting on this limiter (their Waiters.wake)
        self._hooks: "list[Any]" = []

    def wake(self, fp: Optional[int] = None) -> None:
        """From any thread: wake the first waiter not yet woken of the key's queue (a
        release, or the baton); fp None: of every queue."""
        with self._mu:
            if fp is None:
                for q in self._qs.values():
                    self._wake_first(q)
            else:
                one = self._qs.get(fp)
                if one is not None:
                    self._wake_first(one)
                for other in self._room:
                    if other != fp:
                        self._wake_first(self._qs[other])
            hooks = tuple(self._hooks) if self._hooks else ()
        for hook in hooks:  # a group's first waiter: any release of the limiter may admit it
            hook()

    def _wake_first(self, q: "Deque[_Waiter]") -> None:
        for w in q:
            if not w.woken:
                w.woken = True
                if w.ev is not None:
                    w.ev.set()
                elif _running_loop() is w.loop:
                    _set(w.fut)
                else:
                    try:
                        w.loop.call_soon_threadsafe(_set, w.fut)  # type: ignore[union-attr]
                    except RuntimeError:  # its loop is closed: the task is gone with it
                        pass
                return

    def _listen(self, adm: Any) -> None:
        """A waiter or hook comes: the first hears the admitter's releases (self._mu held)."""
        if self._n or self._hooks:
            return
        if not self._shared:
            adm._adm_listen(self.wake)
        elif not self._watching:  # shared: the helper sees every release
            seq = adm._watch(1)  # from now on every release bumps the sequence
            self._watching = True
            threading.Thread(target=self._watch, args=(adm, seq),
                             name="slidewin-waiters", daemon=True).start()

    def _unlisten(self, adm: Any) -> None:
        """The last waiter or hook gone (self._mu held)."""
        if not self._n and not self._hooks and not self._shared:
            adm._adm_listen(None)

    def hook(self, adm: Any, fn: Callable[[], None], on: bool) -> None:
        """Call fn() at every release of the admitter from now on, or no more (a group's)."""
        with self._mu:
            if on:
                self._listen(adm)
                self._hooks.append(fn)
            else:
                self._hooks.remove(fn)
                self._unlisten(adm)

    def _leave(self, adm: Any, req: Any, w: _Waiter, got: Optional[Decision],
               fp: Optional[int]) -> None:
        """Out of the queue; `got`: the admission, given back when leaving is interrupted (a
        signal handler's exception): its caller never learns of it."""
        q = w.q
        try:
            with self._mu:
                first = q[0] is w
                q.remove(w)
                self._n -= 1
                if not q:
                    del self._qs[fp]
                    self._room.discard(fp)
                self._unlisten(adm)
                if q and (got is not None or w.woken or first):
                    self._wake_first(q)  # the baton, or a wake-up this waiter will not use
        except BaseException:
            if got is not None:
                adm._adm_release(req, adm._adm_hold(req, got))
            raise

    def _watch(self, adm: Any, seq: int) -> None:
        """The helper thread of a shared limiter: releases in any process wake the first."""
        try:
            while True:
                new = adm._release_wait(seq, _WATCH_SLICE_NS)
                with self._mu:
                    if not self._n and not self._hooks:
                        self._watching = False
                        adm._watch(-1)
                        return
                if new != seq:
                    seq = new
                    self.wake()
        except BaseException:  # interpreter shutdown: the tasks go with it
            with self._mu:
                self._watching = False
            raise

    def wait_for_room(self, fp: int, room: bool) -> None:
        """A key's first waiter waits for room in a full table (True) or for its key."""
        with self._mu:
            (self._room.add if room else self._room.discard)(fp)

    def _admit(self, adm: Any, req: Any, deadline: float, fp: Optional[int],
               loop: Optional[asyncio.AbstractEventLoop]) -> _io.Steps:
        """The wait of a thread (`loop` None) or a task: decide until admitted, or the
        refusal at the deadline (the admitter raises it), one BLOCK counted. `fp`: a
        KeyedLimiter's key's fingerprint."""
        with self._mu:
            self._listen(adm)
            w = _Waiter(loop, self._qs.setdefault(fp, deque()))
            w.q.append(w)
            self._n += 1
        got: Optional[Decision] = None
        poll = _POLL_MIN_S
        try:
            while True:
                # ready for the next sleep before deciding: a wake-up after the decision ends it
                with self._mu:
                    if w.ev is not None:
                        w.ev.clear()
                    else:
                        w.fut = w.loop.create_future()  # type: ignore[union-attr]
                    w.woken = False
                    first = w.q[0] is w
                d = adm._adm_decide(req, _F_NO_BLOCK | _F_RETRY)
                if d[0] == _PASS or d[0] == _SHADOWED:
                    got = d
                    return got
                step = adm._adm_retry_in(req, d, first, deadline)
                sleep = deadline - time.monotonic()
                if first:
                    if step is None:  # unknown: poll with a growing step
                        step, poll = poll, min(poll * 2, _POLL_MAX_S)
                    sleep = min(sleep, step)
                sleep = min(max(sleep, 0.0), _MAX_SLEEP_S)
                yield (functools.partial(w.ev.wait, sleep) if w.ev is not None
                       else functools.partial(_sleep_async, w, sleep))
        finally:
            self._leave(adm, req, w, got, fp)


_ALL: "weakref.WeakSet[Waiters]" = weakref.WeakSet()
_MADE = threading.Lock()  # one Waiters an admitter, when threads race for its first


def waiters_of(adm: Any) -> Waiters:
    q: Optional[Waiters] = adm._waitq
    if q is None:
        with _MADE:
            q = adm._waitq
            if q is None:
                q = adm._waitq = Waiters(adm)
                _ALL.add(q)
    return q


def _first_try(adm: Admitter, req: Any, timeout: Optional[float]) -> Any:
    """The decision of an admission that goes at once: a Decision, or the deadline of a wait
    (a float), or the refusal raised."""
    if timeout is not None:
        deadline = time.monotonic() + timeout
    d = adm._adm_decide(req, _F_RETRY if timeout is None else _F_NO_BLOCK | _F_RETRY)
    if d[0] == _PASS or d[0] == _SHADOWED:
        return d
    if timeout is None:
        adm._adm_refuse(req, d)
    adm._adm_retry_in(req, d, False, deadline)  # raises: no time left, or never
    return deadline


def admit(adm: Admitter, req: Any, timeout: Optional[float], in_loop: Tuple[str, str]
          ) -> Decision:
    """An admission of a thread: one decision (timeout None), or a wait in the admitter's
    queue of at most `timeout` seconds (`in_loop`: refuse_in_loop's words). The decision, or
    the refusal raised."""
    got = _first_try(adm, req, timeout)
    if not isinstance(got, float):
        return got  # type: ignore[no-any-return]
    refuse_in_loop(*in_loop)
    steps = waiters_of(adm)._admit(adm, req, got, None, None)
    return _io.run(steps)  # type: ignore[no-any-return]


async def admit_async(adm: Admitter, req: Any, timeout: Optional[float],
                      fp: Optional[int] = None) -> Decision:
    got = _first_try(adm, req, timeout)
    if not isinstance(got, float):
        return got  # type: ignore[no-any-return]
    return await _io.arun(  # type: ignore[no-any-return]
        waiters_of(adm)._admit(adm, req, got, fp, asyncio.get_running_loop()))


def _after_fork_in_child() -> None:
    """fork(): the parent's tasks, threads and helper threads are not the child's; its queues
    start empty (the parent's helper keeps its own count of the region's watchers)."""
    for q in list(_ALL):
        adm = q._adm()
        if adm is not None:
            q.__init__(adm)  # type: ignore[misc]
            if hasattr(adm, "_watch"):  # a limiter (a group's hooks: gone with __init__)
                adm._adm_listen(None)


os.register_at_fork(after_in_child=_after_fork_in_child)
