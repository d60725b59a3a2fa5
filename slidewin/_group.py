"""slidewin.all_of: one admission over several limiters, all or nothing. The decision is C
(the members' locks taken in one global order, all committed or none); the waiting, the
entries and the decorator are Python here.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, NoReturn, Optional, Tuple, Union, cast

from . import _core
from . import _rate as _ratespec
from ._admission import Admission, AdmissionEntry, _monotonic_ns
from ._core import F_ENTRY as _F_ENTRY, F_NO_BLOCK as _F_NO_BLOCK, F_RETRY as _F_RETRY
from ._core import NEVER as _NEVER, PASS as _PASS
from ._limiter import Limiter, _check_timeout, _Decorator
from ._waiters import _MAX_SLEEP_S, _SHARED_RECHECK_S, admit_async, waiters_of

__all__ = ["Group", "all_of", "rate_limiter"]

_OUT_SUCCESS, _OUT_EXCEPTION, _OUT_NONE = 0, 1, 2
_IN_LOOP = ("a group's acquire() or entry(timeout=...) that must wait",
            "await group.acquire_async(...), async with group.entry(...) or async with group")


class Group(_core.Group, _Decorator, Admission):
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

    __slots__ = ("_on_block", "_conc", "_unheld", "_waitq")
    _kind = "group"
    _on_block: Optional[Callable[..., Any]]
    # the concurrency members: index -> whether shared (its waiters also retry now and then:
    # a dead process's slots come back at a decision's reap)
    _conc: "dict[int, bool]"
    _unheld: bytes  # 1 for each member that an acquire() holds nothing of (no concurrency)
    _waitq: Any  # the waiting tasks and threads (slidewin._waiters), woken by releases

    def __new__(cls, *members: Any) -> "Group":
        self = cast("Group", super().__new__(cls, *members))
        self._on_block = None
        self._conc = {i: o.shared is not None for i, o in enumerate(self.limiters)
                      if o.concurrency is not None}
        self._unheld = bytes(i not in self._conc for i in range(len(self)))
        self._waitq = None
        return self

    def _count_blocks(self, ns: Tuple[int, ...], refused: Tuple[int, ...],
                      shadowed: Tuple[int, ...]) -> None:
        """The one BLOCK of a request that retried, on the members that refused its last
        decision, and on the shadow members that would have."""
        owners = self.limiters
        for shadow, which in ((False, refused), (True, shadowed)):
            for i in which:
                owners[i]._count_block(ns[i] if len(ns) > 1 else (ns[0] if ns else 1), shadow)

    # the admission protocol: req: (ns, flags); held: one byte per member, set when it
    # holds nothing (a shadow admission, a member an acquire does not hold) or has exited
    def _adm_refuse(self, req: Any, decision: Any) -> NoReturn:
        verdict, retry_ns, refused, who = decision[0], decision[2], decision[3], decision[5]
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
        raise _core.BlockedError(text, retry_after=retry,
                                 limiter=self.limiters[who] if who >= 0 else None)

    def _adm_decide(self, req: Any, flags: int) -> Any:
        ns = req[0]
        d = self._decide(ns, req[1] | flags, None)
        if d[0] == _PASS and d[4] and flags & _F_NO_BLOCK:
            # a retry of a wait: its shadow members would have refused (counted nothing)
            try:
                self._count_blocks(ns, (), d[4])
            except BaseException:  # a signal handler's exception: the caller never knew
                self._adm_release(req, self._adm_hold(req, d))
                raise
        return d

    def _adm_retry_in(self, req: Any, decision: Any, first: bool,
                      deadline: float) -> Optional[float]:
        verdict, retry_ns, refused = decision[0], decision[2], decision[3]
        if verdict == _NEVER or time.monotonic() >= deadline:
            self._count_blocks(req[0], refused, decision[4])
            self._adm_refuse(req, decision)
        if retry_ns > 0:
            return float(retry_ns / 1e9)
        if any(i in self._conc for i in refused):
            # a full concurrency member: until its release wakes the group's first waiter
            # (a shared one's waiters also recheck: a dead process's slots come back)
            return _SHARED_RECHECK_S if any(self._conc.get(i) for i in refused) else _MAX_SLEEP_S
        return None  # warm-up: no known time (the waiter polls, 1 ms growing to 50 ms)

    def _adm_hold(self, req: Any, decision: Any) -> bytearray:
        done = bytearray(len(self) if req[1] & _F_ENTRY else self._unheld)
        for i in decision[4]:  # the shadowed
            done[i] = 1
        return done

    def _adm_exit(self, req: Any, held: Any, et: Any, ev: Any,
                  rt_ns: int) -> Optional[BaseException]:
        failed = isinstance(et, type) and issubclass(et, Exception)
        outcome = _OUT_SUCCESS if et is None else (_OUT_EXCEPTION if failed else _OUT_NONE)
        # a shared member's lock given up on (OSError, a signal handler's exception): the
        # members not yet exited stay held, and calling again ends each exactly once
        self._exit(req[0] or None, outcome, max(0, rt_ns) // 1_000_000 if et is None else 0,
                   held)
        return None

    def _adm_release(self, req: Any, held: Any) -> None:
        self._exit(req[0] or None, _OUT_NONE, 0, held)

    def _adm_listen(self, wake: Any) -> None:
        for i in self._conc:
            lim = self.limiters[i]  # None: no more hooking of this group's Waiters.wake
            waiters_of(lim).hook(lim, wake or self._waitq.wake, wake is not None)

    def acquire(self, *ns: int, timeout: Optional[float] = None) -> None:
        """Admit by every member, sleeping a throttle member's wait; BlockedError on a
        refusal. With a timeout, retry until admitted or `timeout` seconds have passed (the
        retries count nothing; a request that finally fails counts one BLOCK on the members
        that refused it). Interrupted in the wait that follows an admission (KeyboardInterrupt),
        it gives back the concurrency members' slots: the caller never learned it was
        admitted."""
        GroupEntry(self, (ns, 0), _check_timeout(timeout)).__enter__()

    async def acquire_async(self, *ns: int, timeout: Optional[float] = None) -> None:
        """acquire() sleeping with asyncio; cancelled in the wait that follows an admission,
        it gives back the concurrency members' slots."""
        req = (ns, 0)
        d = await admit_async(self, req, _check_timeout(timeout))
        if d[1] > 0:  # a throttle member's wait
            try:
                await asyncio.sleep(d[1] / 1e9)
            except BaseException:
                self._adm_release(req, self._adm_hold(req, d))
                raise

    def entry(self, *ns: int, timeout: Optional[float] = None) -> "GroupEntry":
        """A context manager (``with`` / ``async with``): acquire on every member, holding an
        in-flight count on each while the body runs; on exit record SUCCESS (and RT) or
        EXCEPTION on each, and release."""
        return GroupEntry(self, (ns, _F_ENTRY), _check_timeout(timeout))


class GroupEntry(AdmissionEntry):
    """An entry of a group (``group.entry(*ns)``): usable once, with ``with`` or
    ``async with``. Its request: (ns, flags), flags 0 for a sync acquire()'s (never exited)."""

    __slots__ = ()
    _what = "group entry"
    _in_loop = _IN_LOOP

    @property
    def group(self) -> Group:
        return self._adm

    _adm: Group  # the base's slot

    def _held_now(self) -> int:  # the base's, spelled out without the protocol's calls
        group, req = self._adm, self._req
        d = group._decide(req[0], req[1] | _F_RETRY, None)
        if d[0] != _PASS:
            group._adm_refuse(req, d)
        self._held = group._adm_hold(req, d)
        self._state = 1
        return int(d[1])

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if et is not None or self._state != 1:
            return AdmissionEntry.__exit__(self, et, ev, tb)
        rt = max(0, _monotonic_ns() - self._start) // 1_000_000
        self._adm._exit(self._req[0] or None, _OUT_SUCCESS, rt, self._held)
        self._state = 2
        self._held = None
        return None

    def __repr__(self) -> str:
        return "<GroupEntry of %r ns=%r>" % (self._adm, self._req[0])


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
    set: giving one other than None (the default) is a TypeError.

    >>> rate_limiter("5/second")
    Limiter(rate='5/second', sample_count=50)
    >>> both = rate_limiter("10/second;100/minute")
    >>> [m.rate for m in both.members]
    ['10/second', '100/minute']
    """
    own = ("qps", "rate", "concurrency", "interval_ms")
    bad = sorted(k for k in own if kw.get(k) is not None)
    if bad:
        raise TypeError("rate_limiter() sets %s from its rate string; give the rates as "
                        "its first argument only" % ", ".join(bad))
    kw = {k: v for k, v in kw.items() if k not in own}  # None there: the default
    parsed = _ratespec.parse_rates(rates)
    if len(parsed) == 1:
        return Limiter(rate=parsed[0].text, **kw)
    if len({(r.count, r.period_ms) for r in parsed}) != len(parsed):
        raise ValueError("rates=%r gives the same rate twice" % (rates,))
    return Group(*(Limiter(**_ratespec.member_keywords(kw, r)) for r in parsed))
