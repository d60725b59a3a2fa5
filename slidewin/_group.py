"""slidewin.all_of: one admission over several limiters, all or nothing.

The decision is C (slidewin._core.Group over the core's sw_group: the members' locks taken in
one global order, every member decided without counting, then all committed or none); the
waiting, the entries and the decorator are plain Python here, as for Limiter.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional, Tuple, TypeVar, Union, cast, overload

from . import _core
from . import _rate as _ratespec
from ._admission import Admission, refuse_in_loop
from ._limiter import _MISSING, Limiter, _check_timeout, _decorate_entries
from ._waiters import _SHARED_RECHECK_S, _GroupWaiters

__all__ = ["Group", "all_of", "rate_limiter"]

F = TypeVar("F", bound=Callable[..., Any])

_PASS = _core.PASS
_NEVER = _core.NEVER
_F_NO_BLOCK = _core.F_NO_BLOCK
_F_ENTRY = _core.F_ENTRY
_F_RETRY = _core.F_RETRY
_OUT_SUCCESS, _OUT_EXCEPTION, _OUT_NONE = 0, 1, 2
# a refusal whose members do not know when it could pass (warm-up) is retried this often; a
# full concurrency member's waiters are woken by its release instead
_POLL_S = 0.001
# the longest one sleep of a wait: a wait without end (timeout inf, 1e300) sleeps in steps
# this long, deciding again after each (a thread's sleep cannot reach past the clock's end)
_MAX_SLEEP_S = 3600.0


def _refuse_in_loop() -> None:
    refuse_in_loop("a group's acquire() or entry(timeout=...) that must wait",
                   "await group.acquire_async(...), async with group.entry(...) or "
                   "async with group")


class Group(_core.Group, Admission):
    """A group of limiters admitting a request all together or not at all.

    Made by ``slidewin.all_of(*members)``: members are Limiters and ``(KeyedLimiter, key)``
    pairs, private or shared, each at most once. Every method takes the request sizes as
    ``*ns``: nothing (1 for every member), one int (the same for every member), or one int
    per member, in the members' order.

    One decision over every member: all admit, or none is charged (no PASS, no in-flight
    count, no throttle slot, no warm-up tokens); a refused request counts BLOCK on the
    members that refused it and nothing on the others. ``BlockedError.retry_after`` is the
    largest of the refusing members' (None when one of them cannot tell), and its
    ``limiter`` is the refusing member with the largest. A wait (throttle members) is the
    largest of the members' waits.
    """

    __slots__ = ("_on_block", "_conc", "_waitq")
    _on_block: Optional[Callable[..., Any]]
    # the concurrency members: index -> whether shared (its waiters also retry now and then:
    # a dead process's slots come back at a decision's reap)
    _conc: "dict[int, bool]"
    _waitq: Optional[_GroupWaiters]  # the waiting tasks and threads, woken by their releases

    def __new__(cls, *members: Any) -> "Group":
        self = cast("Group", super().__new__(cls, *members))
        self._on_block = None
        owners = self.limiters
        self._conc = {i: o.shared is not None for i, o in enumerate(owners)
                      if o.concurrency is not None}
        self._waitq = _GroupWaiters(tuple(owners[i] for i in self._conc)) if self._conc else None
        return self

    # -- refusals -----------------------------------------------------------------------

    def _blocked(self, ns: Tuple[int, ...], verdict: int, retry_ns: int,
                 refused: Tuple[int, ...], who: int) -> BaseException:
        owners = self.limiters
        names = ", ".join("member %d (%r)" % (i, self.members[i]) for i in refused)
        if verdict == _NEVER:  # who: a member that can never admit it (others may be full)
            if who >= 0:
                names = "member %d (%r)" % (who, self.members[who])
            text = "all_of: the request can never pass %s as configured" % names
        else:
            text = "all_of: refused by %s" % names
        retry = retry_ns / 1e9 if retry_ns >= 0 and verdict != _NEVER else None
        if retry is not None:
            text += "; retry after %.3f s" % retry
        return _core.BlockedError(text, retry_after=retry,
                                  limiter=owners[who] if who >= 0 else None)

    def _count_blocks(self, ns: Tuple[int, ...], refused: Tuple[int, ...],
                      shadowed: Tuple[int, ...]) -> None:
        """The one BLOCK of a request that retried, on the members that refused its last
        decision (a failure), and on the shadow members that would have (its retries
        counted nothing on them either)."""
        owners = self.limiters
        for i in refused:
            owners[i]._count_block(ns[i] if len(ns) > 1 else (ns[0] if ns else 1))
        for i in shadowed:
            owners[i]._count_block(ns[i] if len(ns) > 1 else (ns[0] if ns else 1), True)

    # -- admission ----------------------------------------------------------------------

    def _admit(self, ns: Tuple[int, ...], timeout: Optional[float], flags: int
               ) -> Tuple[int, Tuple[int, ...]]:
        """One decision (timeout None) or retries until `timeout`: (the ns to wait before
        going on, the shadow members admitted without holding anything), or BlockedError."""
        if timeout is None:
            verdict, wait_ns, retry_ns, refused, shadowed, who = self._decide(
                ns, flags | _F_RETRY, None)
            if verdict == _PASS:
                return wait_ns, shadowed
            raise self._blocked(ns, verdict, retry_ns, refused, who)
        deadline = time.monotonic() + timeout
        admitted, sleep_s = self._retry(ns, flags, deadline)
        if admitted is not None:
            return admitted
        _refuse_in_loop()
        if self._waitq is not None:  # woken by a release of a concurrency member
            return cast("Tuple[int, Tuple[int, ...]]",
                        self._waitq.admit(self, ns, flags, deadline))
        while True:
            time.sleep(sleep_s)
            admitted, sleep_s = self._retry(ns, flags, deadline)
            if admitted is not None:
                return admitted

    def _retry(self, ns: Tuple[int, ...], flags: int, deadline: float
               ) -> Tuple[Optional[Tuple[int, Tuple[int, ...]]], float]:
        """One try of a wait with a timeout, for _admit and _admit_async: ((the ns to wait,
        the shadow members), 0) when admitted, else (None, the seconds to sleep before the
        next try); BlockedError, one BLOCK counted on the refusers, at the deadline."""
        verdict, wait_ns, retry_ns, refused, shadowed, who = self._decide(
            ns, flags | _F_NO_BLOCK | _F_RETRY, None)
        if verdict == _PASS:
            if shadowed:
                try:
                    self._count_blocks(ns, (), shadowed)
                except BaseException:  # a signal handler's exception: the caller never knew
                    self._give_back(ns, flags, shadowed)
                    raise
            return (wait_ns, shadowed), 0.0
        now = time.monotonic()
        if verdict == _NEVER or now >= deadline:
            self._count_blocks(ns, refused, shadowed)
            raise self._blocked(ns, verdict, retry_ns, refused, who)
        if retry_ns > 0:
            step = retry_ns / 1e9
        elif any(i in self._conc for i in refused):
            # a full concurrency member: until its release wakes the group's first waiter
            # (a shared one's waiters also recheck: a dead process's slots come back)
            shared = any(self._conc.get(i) for i in refused)
            step = _SHARED_RECHECK_S if shared else deadline - now
        else:
            step = _POLL_S  # warm-up: no known time
        return None, min(step, deadline - now, _MAX_SLEEP_S)

    def _give_back(self, ns: Tuple[int, ...], flags: int, shadowed: Tuple[int, ...]) -> None:
        """Undo the in-flight counts of an admission that its caller never learned of (a
        cancelled task, KeyboardInterrupt in the wait that followed it): on every member for
        an entry (flags _F_ENTRY), on the concurrency members for acquire(); a shadow member
        admitted where it would have refused holds nothing. Counts nothing."""
        done = bytearray(len(self))
        entry = flags & _F_ENTRY
        for i in range(len(done)):
            if i in shadowed or not (entry or i in self._conc):
                done[i] = 1
        self._exit(ns or None, _OUT_NONE, 0, done)

    def _sleep_admitted(self, ns: Tuple[int, ...], admitted: Tuple[int, Tuple[int, ...]],
                        flags: int) -> None:
        """Sleep an admitted request's wait; interrupted, give back what it holds."""
        wait_ns = admitted[0]
        if wait_ns > 0:
            try:
                _refuse_in_loop()
                time.sleep(wait_ns / 1e9)
            except BaseException:
                self._give_back(ns, flags, admitted[1])
                raise

    async def _sleep_admitted_async(self, ns: Tuple[int, ...],
                                    admitted: Tuple[int, Tuple[int, ...]], flags: int) -> None:
        wait_ns = admitted[0]
        if wait_ns > 0:
            try:
                await asyncio.sleep(wait_ns / 1e9)
            except BaseException:  # cancelled: the caller never learned it was admitted
                self._give_back(ns, flags, admitted[1])
                raise

    async def _admit_async(self, ns: Tuple[int, ...], timeout: Optional[float], flags: int
                           ) -> Tuple[int, Tuple[int, ...]]:
        if timeout is None:
            return self._admit(ns, None, flags)  # one decision: never sleeps
        deadline = time.monotonic() + timeout
        admitted, sleep_s = self._retry(ns, flags, deadline)
        if admitted is not None:
            return admitted
        if self._waitq is not None:  # woken by a release of a concurrency member
            return cast("Tuple[int, Tuple[int, ...]]",
                        await self._waitq.admit_async(self, ns, flags, deadline))
        while True:
            await asyncio.sleep(sleep_s)
            admitted, sleep_s = self._retry(ns, flags, deadline)
            if admitted is not None:
                return admitted

    def acquire(self, *ns: int, timeout: Optional[float] = None) -> None:
        """Admit by every member, sleeping a throttle member's wait; BlockedError on a
        refusal. With a timeout, retry until admitted or `timeout` seconds have passed (the
        retries count nothing; a request that finally fails counts one BLOCK on the members
        that refused it). Interrupted in the wait that follows an admission (KeyboardInterrupt),
        it gives back the concurrency members' slots: the caller never learned it was
        admitted."""
        self._sleep_admitted(ns, self._admit(ns, _check_timeout(timeout), 0), 0)

    async def acquire_async(self, *ns: int, timeout: Optional[float] = None) -> None:
        """acquire() sleeping with asyncio; cancelled in the wait that follows an admission,
        it gives back the concurrency members' slots."""
        await self._sleep_admitted_async(
            ns, await self._admit_async(ns, _check_timeout(timeout), 0), 0)

    def entry(self, *ns: int, timeout: Optional[float] = None) -> "GroupEntry":
        """A context manager (``with`` / ``async with``): acquire on every member, holding an
        in-flight count on each while the body runs; on exit record SUCCESS (and RT) or
        EXCEPTION on each, and release."""
        return GroupEntry(self, ns, _check_timeout(timeout))

    @overload
    def __call__(self, func: F) -> F: ...

    @overload
    def __call__(self, func: None = None, *, on_block: Any = ...,
                 timeout: Optional[float] = ...) -> Callable[[F], F]: ...

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING,
                 timeout: Optional[float] = None) -> Any:
        """Decorate a function (sync or async, generators too): each call is an entry of
        n=1 on every member."""
        timeout = _check_timeout(timeout)
        if func is None:
            return lambda f: _decorate_entries(self, "group", f, on_block, timeout=timeout)
        return _decorate_entries(self, "group", func, on_block, timeout=timeout)


class GroupEntry:
    """An entry of a group (``group.entry(*ns)``): usable once, with ``with`` or
    ``async with``."""

    __slots__ = ("_group", "_ns", "_timeout", "_done", "_start", "_state")

    def __init__(self, group: Group, ns: Tuple[int, ...], timeout: Optional[float]) -> None:
        self._group = group
        self._ns = ns
        self._timeout = timeout
        # one byte per member: set when it holds nothing (a shadow admission) or has exited
        self._done = bytearray()
        self._start = 0
        self._state = 0  # 0 idle, 1 entered, 2 exited

    @property
    def group(self) -> Group:
        return self._group

    def _claim(self) -> None:
        if self._state != 0:
            raise RuntimeError("this entry was already %s" % (
                "entered" if self._state == 1 else "used"))

    def __enter__(self) -> "GroupEntry":
        self._claim()
        admitted = self._group._admit(self._ns, self._timeout, _F_ENTRY)
        try:
            self._entered(admitted[1])
            if admitted[0] > 0:
                _refuse_in_loop()
                time.sleep(admitted[0] / 1e9)
        except BaseException:
            self._abort(admitted[1])
            raise
        self._start = time.monotonic_ns()
        return self

    async def __aenter__(self) -> "GroupEntry":
        self._claim()
        admitted = await self._group._admit_async(self._ns, self._timeout, _F_ENTRY)
        try:
            self._entered(admitted[1])
            if admitted[0] > 0:
                await asyncio.sleep(admitted[0] / 1e9)
        except BaseException:  # cancelled while waiting: give the counts back
            self._abort(admitted[1])
            raise
        self._start = time.monotonic_ns()
        return self

    def _abort(self, skip: Tuple[int, ...]) -> None:
        """Interrupted between its admission and its body: hold nothing, as if never entered
        (it may be entered again)."""
        if self._state == 1:
            self._release()
        else:
            self._group._give_back(self._ns, _F_ENTRY, skip)
        self._state = 0
        self._done = bytearray()

    def _entered(self, skip: Tuple[int, ...]) -> None:
        done = bytearray(len(self._group))
        for i in skip:
            done[i] = 1
        self._done = done
        self._state = 1

    def _finish(self, outcome: int, rt: int) -> None:
        """End the entry on the members not yet done. A shared member's lock given up on (a
        stuck owner: OSError; a signal handler's exception): the entry stays entered, the
        members not yet exited still held; calling again ends those, each exactly once."""
        self._state = 2
        try:
            self._group._exit(self._ns or None, outcome, rt, self._done)
        except BaseException:
            self._state = 1
            raise

    def _release(self) -> None:
        self._finish(_OUT_NONE, 0)

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if self._state != 1:
            raise RuntimeError("exit of a group entry that is not entered")
        if et is None:
            outcome = _OUT_SUCCESS
            rt = max(0, time.monotonic_ns() - self._start) // 1_000_000
        elif isinstance(et, type) and issubclass(et, Exception):
            outcome, rt = _OUT_EXCEPTION, 0
        else:
            outcome, rt = _OUT_NONE, 0
        self._finish(outcome, rt)

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.__exit__(et, ev, tb)

    def __repr__(self) -> str:
        return "<GroupEntry of %r ns=%r>" % (self._group, self._ns)


def all_of(*members: Union[Any, Tuple[Any, Any]]) -> Group:
    """A group admitting a request by every member or charging none of them.

    Members: ``Limiter`` objects and ``(KeyedLimiter, key)`` pairs, private or shared
    (``shared=``), of any behavior, each limiter at most once (``ValueError``); anything
    else is a ``TypeError`` naming the member. Threads and processes deciding on
    overlapping groups, in any order, never deadlock: the members' locks are taken in one
    global order.

    >>> rpm = Limiter(rate="500/minute")
    >>> tpm = Limiter(rate="30000/minute")
    >>> both = all_of(rpm, tpm)
    >>> both.try_acquire(1, 1200)      # one request of 1200 tokens
    True
    """
    return Group(*members)


def rate_limiter(rates: Any, **kw: Any) -> Union[Limiter, Group]:
    """One decision for a rate string of one or several rates, as flask-limiter's
    ``"10/second;100/minute"``: a ``Limiter(rate=...)`` for one rate, an ``all_of`` group
    of one Limiter per rate for several (admitted by all or charged to none).

    ``kw``: the Limiter's other keywords (``behavior``, ``shared``, ``name``, ``shadow``,
    ``sample_count``, ...), given to every member. A group's member ``i`` is named
    ``"<name>[<rate>]"`` and shared as ``"<shared>.<count>-per-<period_ms>ms"`` (each rate its
    own region). ``qps``, ``rate``, ``concurrency`` and ``interval_ms`` are the string's to
    set: giving one is a TypeError.

    >>> rate_limiter("5/second")
    Limiter(rate='5/second', sample_count=50)
    >>> both = rate_limiter("10/second;100/minute")
    >>> [m.rate for m in both.members]
    ['10/second', '100/minute']
    """
    bad = sorted(set(kw) & {"qps", "rate", "concurrency", "interval_ms"})
    if bad:
        raise TypeError("rate_limiter() sets %s from its rate string; give the rates as "
                        "its first argument only" % ", ".join(bad))
    parsed = _ratespec.parse_rates(rates)
    if len(parsed) == 1:
        return Limiter(rate=parsed[0].text, **kw)
    if len({(r.count, r.period_ms) for r in parsed}) != len(parsed):
        raise ValueError("rates=%r gives the same rate twice" % (rates,))
    return Group(*(Limiter(**_ratespec.member_keywords(kw, r)) for r in parsed))
