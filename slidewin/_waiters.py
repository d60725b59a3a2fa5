"""Asyncio tasks waiting for a limiter's admission: woken, not polling.

One FIFO queue per limiter, and per key for a KeyedLimiter (made at the first waiting task).
A task that is refused queues and sleeps on a future of its own event loop:

- a release (``release()``, an entry's exit, an ``update()``) wakes the first task not yet
  woken: the C limiter calls ``wake`` while tasks wait (``_set_waker``), private limiters; a
  KeyedLimiter passes the released key's fingerprint, so only that key's queue wakes (an
  ``update()`` wakes every key's);
- a task that is admitted wakes the next one of its queue (the baton), so a release of several
  slots admits several tasks, one after the other; a refused one keeps its place;
- the first task of a queue alone sleeps until the core's ``retry_after`` (a rate limit) or
  polls with a growing step (warm-up, whose retry time is unknown); the others wait for the
  baton;
- a shared limiter: one helper thread per limiter, only while tasks wait, sleeps on the
  region's release sequence (a futex, the GIL released) and wakes the first task when any
  process releases (this one included: one path, one wake-up a release; a shared
  KeyedLimiter's sequence does not say which key, so every key's first task wakes and
  decides again); the first task also retries every ``_SHARED_RECHECK_S`` (a process that
  died holding slots is reaped then);
- a task that leaves without being admitted (timeout, cancellation) after it was woken, or
  while first, passes the wake-up on: none is lost;
- a group (slidewin.all_of) with concurrency members queues its waiting tasks and threads in
  a queue of its own (_GroupWaiters), hooked on those members' queues while any waits: a
  release of any of them wakes the group's first waiter too, with the same baton.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections import deque
from typing import Any, Deque, Dict, Optional, Tuple

from . import _core

_PASS = _core.PASS
_NEVER = _core.NEVER
_SHADOWED = _core.SHADOWED
_F_NO_BLOCK = _core.F_NO_BLOCK
_F_RETRY = _core.F_RETRY

_SHARED_RECHECK_S = 0.25  # the first waiter of a shared concurrency limit retries this often
_POLL_MIN_S = 0.001       # unknown retry time (warm-up): the first waiter's poll, doubling ...
_POLL_MAX_S = 0.05        # ... up to this
_WATCH_SLICE_NS = 500_000_000  # the helper thread checks whether tasks still wait this often

_get_running_loop = asyncio._get_running_loop  # no exception when there is none


def _set(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class _Waiter:
    __slots__ = ("loop", "fut", "woken", "q")

    def __init__(self, loop: asyncio.AbstractEventLoop, q: "Deque[_Waiter]") -> None:
        self.loop = loop
        self.fut: "asyncio.Future[None]" = loop.create_future()
        self.woken = False
        self.q = q  # the queue it waits in (its limiter's, or its key's)


class _Waiters:
    """The queues of one limiter's waiting tasks (see the module's docstring)."""

    __slots__ = ("_lim", "_qs", "_n", "_room", "_mu", "_shared", "_watching", "_hooks",
                 "__weakref__")

    def __init__(self, lim: Any) -> None:
        self._lim = weakref.ref(lim)  # the limiter holds the queues, not the other way round
        # the queue of each key's fingerprint (a Limiter: the one queue, under None)
        self._qs: Dict[Optional[int], Deque[_Waiter]] = {}
        self._n = 0  # tasks waiting, in all the queues
        # the keys whose first task waits for room in a full table (its key holds nothing: a
        # release of any key may make room): woken by every release, not only their key's
        self._room: "set[Optional[int]]" = set()
        self._mu = threading.Lock()
        self._shared = lim.shared is not None
        self._watching = False
        # the wake functions of the groups waiting on this limiter (_GroupWaiters.wake)
        self._hooks: "list[Any]" = []

    # -- waking (any thread) ------------------------------------------------------------

    def wake(self, fp: Optional[int] = None) -> None:
        """Wake the first waiter not yet woken of the key's queue (a release, or the baton);
        fp None: of every queue (a Limiter's one queue; new settings; a shared region)."""
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
                self._post(w)
                return

    @staticmethod
    def _post(w: _Waiter) -> None:
        if _get_running_loop() is w.loop:
            _set(w.fut)
        else:
            try:
                w.loop.call_soon_threadsafe(_set, w.fut)
            except RuntimeError:  # its loop is closed: the task is gone with it
                pass

    # -- the queue (the waiting task's loop) --------------------------------------------

    def _add(self, lim: Any, loop: asyncio.AbstractEventLoop, fp: Optional[int]) -> _Waiter:
        with self._mu:
            if not self._n and not self._hooks:
                self._listen(lim)
            q = self._qs.get(fp)
            if q is None:
                q = self._qs[fp] = deque()
            w = _Waiter(loop, q)
            q.append(w)
            self._n += 1
        return w

    def _listen(self, lim: Any) -> None:
        """The first waiter or hook: hear the limiter's releases (self._mu held)."""
        if not self._shared:
            lim._set_waker(self.wake)  # shared: the helper sees every release
        elif not self._watching:
            seq = lim._watch(1)  # from now on every release bumps the sequence
            self._watching = True
            threading.Thread(target=self._watch, args=(lim, seq),
                             name="slidewin-waiters", daemon=True).start()

    def hook(self, lim: Any, fn: Any) -> None:
        """Call fn() at every release of the limiter (a group's waiters; see unhook)."""
        with self._mu:
            if not self._n and not self._hooks:
                self._listen(lim)
            self._hooks.append(fn)

    def unhook(self, lim: Any, fn: Any) -> None:
        with self._mu:
            self._hooks.remove(fn)
            if not self._n and not self._hooks and not self._shared:
                lim._set_waker(None)

    def _rearm(self, w: _Waiter) -> bool:
        """A new future for the next sleep, before the next decision (a wake-up after the
        decision then sets it). Returns whether w is first of its queue."""
        with self._mu:
            w.fut = w.loop.create_future()
            w.woken = False
            return w.q[0] is w

    def _remove(self, lim: Any, w: _Waiter, admitted: bool, fp: Optional[int]) -> None:
        q = w.q
        with self._mu:
            first = q[0] is w
            q.remove(w)
            self._n -= 1
            if not q:
                del self._qs[fp]
                self._room.discard(fp)
            if not self._n and not self._hooks and not self._shared:
                lim._set_waker(None)
            if q and (admitted or w.woken or first):
                self._wake_first(q)  # the baton, or a wake-up this waiter will not use

    def _watch(self, lim: Any, seq: int) -> None:
        """The helper thread of a shared limiter: releases in any process wake the first."""
        try:
            while True:
                new = lim._release_wait(seq, _WATCH_SLICE_NS)
                with self._mu:
                    if not self._n and not self._hooks:
                        self._watching = False
                        lim._watch(-1)
                        return
                if new != seq:
                    seq = new
                    self.wake()
        except BaseException:  # interpreter shutdown: the tasks go with it
            with self._mu:
                self._watching = False
            raise

    def _wait_for_room(self, fp: int, room: bool) -> None:
        with self._mu:
            if room:
                self._room.add(fp)
            else:
                self._room.discard(fp)

    # -- the wait ---------------------------------------------------------------------------

    async def admit(self, lim: Any, at: Tuple[Any, ...], fp: Optional[int], flags: int,
                    deadline: float, first: Tuple[int, int, int]) -> Tuple[int, int]:
        """Queue, and wait until admitted: (verdict, the ns to sleep before going on), or
        BlockedError at the deadline (time.monotonic()), one BLOCK counted. `at`: (n,) of a
        Limiter, (key, n) of a KeyedLimiter, whose key has the fingerprint `fp` (a Limiter:
        None). `first`: the refusal that made the task wait."""
        loop = asyncio.get_running_loop()
        w = self._add(lim, loop, fp)
        admitted = False
        poll = _POLL_MIN_S
        verdict, wait_ns, retry_ns = first
        try:
            while True:
                is_first = self._rearm(w)
                verdict, wait_ns, retry_ns = lim._decide(*at, flags | _F_NO_BLOCK | _F_RETRY,
                                                         None)
                if verdict == _PASS or verdict == _SHADOWED:
                    admitted = True
                    return verdict, wait_ns
                if verdict != _NEVER and self._shared and lim._reap():
                    continue  # a dead process's slots came back
                if is_first and fp is not None and lim.concurrency is not None:
                    # refused while its key holds nothing: the table is full of keys in
                    # flight, and a release of any key may make room
                    self._wait_for_room(fp, lim.in_flight(at[0]) == 0)
                now = time.monotonic()
                if verdict == _NEVER or now >= deadline:
                    break
                sleep = deadline - now
                if is_first:
                    if retry_ns > 0:
                        step = retry_ns / 1e9
                    elif lim.concurrency is not None:
                        step = _SHARED_RECHECK_S if self._shared else sleep
                    else:
                        step, poll = poll, min(poll * 2, _POLL_MAX_S)
                    sleep = min(sleep, step)
                timer = loop.call_later(sleep, _set, w.fut)
                try:
                    await w.fut
                finally:
                    timer.cancel()
        finally:
            self._remove(lim, w, admitted, fp)
        lim._count_block(at[-1])
        lim._raise_blocked(*at, verdict, retry_ns)
        raise AssertionError("unreachable")  # _raise_blocked raises


class _GWaiter:
    """A task (its loop and a future) or a thread (an Event) waiting on a group."""

    __slots__ = ("loop", "fut", "ev", "woken")

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop]) -> None:
        self.loop = loop
        self.fut: "Optional[asyncio.Future[None]]" = None
        self.ev = threading.Event() if loop is None else None
        self.woken = False


class _GroupWaiters:
    """The tasks and threads waiting on one group with concurrency members: one FIFO queue,
    woken by a release of any of those members (a hook on their queues while any waits), and
    the baton of _Waiters: an admitted waiter, or one leaving after a wake-up or while first,
    wakes the next. The first waiter alone sleeps until its refusal's retry time; the others
    wait for the baton (or their deadline)."""

    __slots__ = ("_members", "_q", "_mu", "_hook_mu", "_users", "__weakref__")

    def __init__(self, members: Tuple[Any, ...]) -> None:
        self._members = members  # the group's concurrency limiters (Limiter, KeyedLimiter)
        self._q: "Deque[_GWaiter]" = deque()
        self._mu = threading.Lock()
        self._hook_mu = threading.Lock()  # the hooks put on and taken off in order
        self._users = 0
        _GROUPS.add(self)

    def wake(self) -> None:
        """A release of a member (any thread): wake the first waiter not yet woken."""
        with self._mu:
            self._wake_first()

    def _wake_first(self) -> None:
        for w in self._q:
            if not w.woken:
                w.woken = True
                if w.ev is not None:
                    w.ev.set()
                else:
                    _Waiters._post(w)  # type: ignore[arg-type]
                return

    def _add(self, loop: Optional[asyncio.AbstractEventLoop]) -> _GWaiter:
        with self._hook_mu:
            if not self._users:
                for lim in self._members:
                    waiters_of(lim).hook(lim, self.wake)
            self._users += 1
        w = _GWaiter(loop)
        with self._mu:
            self._q.append(w)
        return w

    def _rearm(self, w: _GWaiter) -> bool:
        """Ready for the next sleep, before the next decision (a release after the decision
        then wakes it). Returns whether w is first."""
        with self._mu:
            if w.ev is not None:
                w.ev.clear()
            else:
                w.fut = w.loop.create_future()  # type: ignore[union-attr]
            w.woken = False
            return self._q[0] is w

    def _remove(self, w: _GWaiter, admitted: bool) -> None:
        with self._mu:
            first = self._q[0] is w
            self._q.remove(w)
            if self._q and (admitted or w.woken or first):
                self._wake_first()  # the baton, or a wake-up this waiter will not use
        with self._hook_mu:
            self._users -= 1
            if not self._users:
                for lim in self._members:
                    waiters_of(lim).unhook(lim, self.wake)

    def admit(self, group: Any, ns: Tuple[int, ...], flags: int, deadline: float) -> Any:
        """A thread's wait: group._retry until admitted (its result), or BlockedError at the
        deadline (time.monotonic())."""
        w = self._add(None)
        admitted = False
        try:
            while True:
                first = self._rearm(w)
                got, sleep_s = group._retry(ns, flags, deadline)
                if got is not None:
                    admitted = True
                    return got
                if not first:
                    sleep_s = deadline - time.monotonic()
                # at most a minute a wait (then one more try, counting nothing): an
                # Event's wait cannot take timeout=inf (an entry that waits without end)
                w.ev.wait(min(max(sleep_s, 0.0), 60.0))  # type: ignore[union-attr]
        finally:
            self._remove(w, admitted)

    async def admit_async(self, group: Any, ns: Tuple[int, ...], flags: int,
                          deadline: float) -> Any:
        """admit() for an asyncio task."""
        loop = asyncio.get_running_loop()
        w = self._add(loop)
        admitted = False
        try:
            while True:
                first = self._rearm(w)
                got, sleep_s = group._retry(ns, flags, deadline)
                if got is not None:
                    admitted = True
                    return got
                if not first:
                    sleep_s = deadline - time.monotonic()
                fut = w.fut
                assert fut is not None
                timer = loop.call_later(max(sleep_s, 0.0), _set, fut)
                try:
                    await fut
                finally:
                    timer.cancel()
        finally:
            self._remove(w, admitted)


_GROUPS: "weakref.WeakSet[_GroupWaiters]" = weakref.WeakSet()
_ALL: "weakref.WeakSet[_Waiters]" = weakref.WeakSet()


def waiters_of(lim: Any) -> _Waiters:
    q: Optional[_Waiters] = lim._waitq
    if q is None:
        q = lim._waitq = _Waiters(lim)
        _ALL.add(q)
    return q


def _after_fork_in_child() -> None:
    """fork(): the parent's tasks and helper threads are not the child's; its queues start
    empty (the parent's helper keeps its own count of the region's watchers)."""
    for q in list(_ALL):
        q._mu = threading.Lock()
        q._qs.clear()
        q._room.clear()
        q._hooks.clear()
        q._n = 0
        q._watching = False
        lim = q._lim()
        if lim is not None:
            lim._set_waker(None)
    for g in list(_GROUPS):
        g._mu = threading.Lock()
        g._hook_mu = threading.Lock()
        g._q.clear()
        g._users = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
