"""slidewin.Upstream: the budgets of a rate-limited API that this process calls.

Each budget is a throttle ``Limiter``, the in-flight bound a concurrency one, decided together
by one ``all_of`` group. New here is the "board": the pause (a "not before" time that a
429/503 raises, never lowers) and, per budget, the server's view (the pace its headers allow,
followed while slower than the configured one, until its reset). It lives in this process, in
a /dev/shm file for ``shared=`` (an ``fcntl`` lock, which the kernel drops with a killed
holder; CLOCK_MONOTONIC is common to the host) or on Redis for ``redis=``. Both expire by
time: a crashed caller leaves nothing behind.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import math
import mmap
import os
import re
import struct
import tempfile
import threading
import time
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import _core, _headers, _io, _rate
from ._breaker import Breaker
from ._group import _IN_LOOP, GroupEntry, all_of
from ._limiter import Limiter, _check_timeout
from ._observe import _shm_dir
from ._waiters import admit, admit_async

__all__ = ["Upstream", "UpstreamCall"]

_F_ENTRY = _core.F_ENTRY
_BACKOFF_FIRST_S = 1.0  # a 429/503 without Retry-After: 1 s, 2 s, 4 s, ... up to
_BACKOFF_MAX_S = 60.0
_FOREVER_S = 1e7  # timeout=None: a wait this long is no bound (an Event's wait takes no inf)
_QUEUE_MS = 10**9  # the throttles queue without a bound: call() checks its own timeout
_NAME = re.compile(r"[A-Za-z0-9._-]{1,180}")
_monotonic_ns = time.monotonic_ns

# the board: pause_until_ns, backoff_k, then per budget (requests, tokens): the view's
# reset_ns, its cost in ns per unit (a double), and the next free slot of its pace
_LAYOUT = struct.Struct("<qq" + "qdq" * 2)
_BUDGETS = ("requests", "tokens")
_I64_MAX = 2**63 - 1  # a time on the board saturates (a huge cost x tokens is no error)


class _Board:
    """The pause and the server's view as _LAYOUT behind a thread lock, and (``shared``) in a
    file of the regions' folder (/dev/shm, else /tmp) behind an fcntl lock too."""

    def __init__(self, shared: Any = None) -> None:
        self._mu = threading.Lock()
        self._fd = -1
        self._map: Any = bytearray(_LAYOUT.size)  # zeros: no pause, no view
        _BOARDS.add(self)
        if shared is None:
            return
        folder = _shm_dir()  # as the C core's regions: /tmp where there is no /dev/shm
        if shared is True:  # an unlinked file, shared with the forked processes
            fd, tmp = tempfile.mkstemp(prefix="slidewin-upstream-", dir=folder)
            os.unlink(tmp)
        else:
            path = os.path.join(folder, "slidewin-upstream-%s" % shared)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size < _LAYOUT.size:
                    os.ftruncate(fd, _LAYOUT.size)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, _LAYOUT.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            self._map.close()
        finally:
            os.close(fd)

    __del__ = close

    @contextlib.contextmanager
    def _locked(self) -> Iterator[List[Any]]:  # a change is packed back by the caller
        with self._mu:
            if self._fd >= 0:
                fcntl.lockf(self._fd, fcntl.LOCK_EX)
            try:
                yield list(_LAYOUT.unpack_from(self._map, 0))
            finally:
                if self._fd >= 0:
                    fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def pause_left(self, now: int) -> int:
        """ns until the pause ends (0: not paused)."""
        with self._locked() as v:
            return max(0, int(v[0]) - now)

    def reserve_view(self, ns: Tuple[int, int], at: int, now: int) -> int:
        """Take the slots of the server's view for (requests, tokens) no earlier than `at`:
        the ns from now until all of them (0 when no view is in force)."""
        with self._locked() as v:
            wait = -1  # a slot taken: >= 0
            for b in range(2):
                reset, cost, nxt = v[2 + 3 * b], v[3 + 3 * b], v[4 + 3 * b]
                if reset <= now or ns[b] <= 0:
                    continue
                slot = max(at, nxt)
                if slot > reset:  # the view ends before this slot: the configured pace rules
                    continue
                v[4 + 3 * b] = min(slot + int(cost * ns[b]), _I64_MAX)
                wait = max(wait, slot - now)
            if wait >= 0:
                _LAYOUT.pack_into(self._map, 0, *v)
            return max(0, int(wait))

    def refund_view(self, b: int, n: int, now: int) -> None:
        """Give back the view's slots of n units of budget b not used (never before now)."""
        with self._locked() as v:
            reset, cost, nxt = v[2 + 3 * b], v[3 + 3 * b], v[4 + 3 * b]
            if reset > now and nxt > now and n > 0:
                v[4 + 3 * b] = max(now, nxt - int(cost * n))
                _LAYOUT.pack_into(self._map, 0, *v)

    def pause(self, seconds: Optional[float], now: int) -> int:
        """Raise the pause to now + seconds (None: the next step of the backoff); never
        lowers it. Returns the ns by which it was extended."""
        with self._locked() as v:
            if seconds is None:
                k = v[1]
                seconds = min(_BACKOFF_FIRST_S * (2.0 ** min(k, 30)), _BACKOFF_MAX_S)
                v[1] = k + 1
            until = min(now + int(seconds * 1e9), _I64_MAX)
            grew = max(0, until - max(v[0], now))
            v[0] = max(v[0], until)
            _LAYOUT.pack_into(self._map, 0, *v)
            return int(grew)

    def settle(self) -> None:
        """A response that was not a 429/503: the backoff starts again from its first step."""
        with self._locked() as v:
            if v[1]:
                v[1] = 0
                _LAYOUT.pack_into(self._map, 0, *v)

    def view(self, b: int, remaining: int, reset_s: float, floor_cost: float,
             now: int) -> None:
        """The server's count for budget b: `remaining` more until `reset_s` from now. Its
        pace (reset / remaining per unit) is followed while slower than `floor_cost` (the
        configured ns per unit); none left: nothing of that budget until the reset."""
        reset = min(now + int(reset_s * 1e9), _I64_MAX)
        with self._locked() as v:
            i = 2 + 3 * b
            cost = reset_s * 1e9 / remaining if remaining > 0 else 0.0
            if remaining > 0 and cost <= floor_cost:
                if not (v[i] > now and v[i + 2] > now):
                    return
                v[i] = now  # room again: drop a stricter view, keep its slots
            else:  # the slots already taken stay taken; none left: none until the reset
                v[i], v[i + 1] = reset, cost
                v[i + 2] = max(v[i + 2], now if remaining > 0 else reset)
            _LAYOUT.pack_into(self._map, 0, *v)


_BOARDS: "weakref.WeakSet[_Board]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """fork(): a board's thread lock held by another thread of the parent is not held by
    any thread of the child (the fcntl lock is the parent's, never inherited)."""
    for board in list(_BOARDS):
        board._mu = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_rate(name: str, rate: Any) -> Optional[Tuple[int, int]]:
    if rate is None:
        return None
    try:
        count, period_ms = _rate.parse_rate(rate)
    except TypeError:
        raise TypeError("%s must be None or a rate string such as '500/minute', not %s"
                        % (name, type(rate).__name__)) from None
    except ValueError as e:
        raise ValueError("%s: %s" % (name, e)) from None
    if count < 1:
        raise ValueError("%s=%r admits nothing: give a count of at least 1" % (name, rate))
    return count, period_ms


def _check_int(name: str, value: Any, low: int, optional: bool = True, note: str = "") -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be %san int%s, not %s"
                        % (name, "None or " if optional else "", note, type(value).__name__))
    if value < low:
        raise ValueError("%s must be >= %d, got %d" % (name, low, value))
    return value


class Upstream:
    """The budgets of a rate-limited API, paced, paused by its 429s, lowered by its headers.

    ``requests`` / ``tokens``: rate strings (``"500/minute"``); ``concurrency``: calls in
    flight; ``burst``: the requests admitted back to back after an idle spell (1: the pace
    alone); ``breaker``: a ``Breaker`` that counts 5xx and transport errors as failures and
    429s as cancels; ``shared``: a name (or True) shared by this host's processes;
    ``redis``: a redis-py client shared by hosts; ``name``: shown in Prometheus and top.
    """

    def __init__(self, *, requests: Optional[str] = None, tokens: Optional[str] = None,
                 concurrency: Optional[int] = None, burst: Optional[int] = None,
                 breaker: Optional[Breaker] = None, shared: Any = None, redis: Any = None,
                 name: Optional[str] = None) -> None:
        req = _check_rate("requests", requests)
        tok = _check_rate("tokens", tokens)
        conc = _check_int("concurrency", concurrency, 1)
        b = _check_int("burst", burst, 1)
        if b is not None and b > 1:
            raise ValueError("burst=%d: only 1 is supported (the pace admits one request "
                             "after an idle spell, and one call's tokens however many)" % b)
        if breaker is not None and not isinstance(breaker, Breaker):
            raise TypeError("breaker must be None or a slidewin.Breaker, not %s"
                            % type(breaker).__name__)
        if shared is not None and not isinstance(shared, (bool, str)):
            raise TypeError("shared must be None, True or a name, not %s"
                            % type(shared).__name__)
        if shared is False:
            shared = None
        if isinstance(shared, str) and not _NAME.fullmatch(shared):
            raise ValueError("shared must be a name of 1-180 characters from A-Z a-z 0-9 . _ "
                             "-, got %r" % (shared,))
        if name is not None and not isinstance(name, str):
            raise TypeError("name must be None or a str, not %s" % type(name).__name__)
        if redis is not None and shared is not None:
            raise ValueError("shared and redis cannot be given together: redis= already "
                             "shares the upstream with every process that uses the server")
        if redis is not None and not (hasattr(redis, "evalsha") and hasattr(redis, "time")):
            raise TypeError("redis must be a redis-py client (redis.Redis), not %s"
                            % type(redis).__name__)
        if req is None and tok is None and conc is None:
            raise ValueError("Upstream needs at least one of requests=, tokens=, concurrency=")
        self._given = dict(requests=requests, tokens=tokens, concurrency=conc, shared=shared,
                           name=name, redis=redis)  # what repr() shows
        self._breaker = breaker
        self._name = name
        self._redis = redis
        # the configured ns per request and per token
        self._costs = tuple(1e9 * r[1] / 1000 / r[0] if r else 0.0 for r in (req, tok))
        if redis is not None:
            from .redis import RedisLimiter
            from .redis import all_of as redis_all_of
            from .redis._upstream import RedisBoard

        def member(what: str, **kw: Any) -> Any:
            if redis is not None:  # one key per budget, shared by every host
                return RedisLimiter(redis, "upstream:%s:%s" % (name or "upstream", what), **kw)
            region = "upstream-%s.%s" % (shared, what) if isinstance(shared, str) else shared
            return Limiter(shared=region, name=None if name is None else "%s.%s" % (name, what),
                           **kw)

        self._req_lim, self._tok_lim = (
            member(what, qps=_rate.qps_for(*r), behavior="throttle", max_queueing_ms=_QUEUE_MS)
            if r else None for what, r in zip(_BUDGETS, (req, tok)))
        self._conc_lim = member("concurrency", concurrency=conc) if conc else None
        # the groups: every member; and without tokens for a call of 0 tokens (n >= 1 each)
        group = all_of if redis is None else redis_all_of
        self._full: Any = group(*self._members())
        others = self._members(False)
        self._no_tokens = (self._full if self._tok_lim is None
                           else group(*others) if others else None)
        self._board: Any = (_Board(shared) if redis is None
                            else RedisBoard(redis, name or "upstream"))
        self._mu = threading.Lock()
        self._stats: Dict[str, float] = dict(
            sent=0, retried=0, refused=0, upstream_429=0, upstream_503=0, upstream_5xx=0,
            errors=0, paused_s=0.0, estimated_tokens=0, used_tokens=0, refunded_tokens=0,
            charged_tokens=0)

    def _members(self, with_tokens: bool = True) -> Tuple[Any, ...]:
        return tuple(m for m in (self._req_lim, self._tok_lim if with_tokens else None,
                                 self._conc_lim) if m is not None)

    @property
    def name(self) -> Optional[str]:
        return self._name

    @property
    def breaker(self) -> Optional[Breaker]:
        return self._breaker

    @property
    def limiters(self) -> Tuple[Any, ...]:
        """The member limiters: requests, tokens, concurrency (those configured)."""
        return self._members()

    def __repr__(self) -> str:
        return "Upstream(%s)" % ", ".join(
            "%s=%r" % kv for kv in self._given.items() if kv[1] is not None)

    def paused_until(self) -> Optional[float]:
        """Seconds until the pause that a 429/503 started ends, or None when not paused."""
        left = self._board.pause_left(_monotonic_ns())
        return left / 1e9 if left > 0 else None

    def stats(self) -> Dict[str, float]:
        """This object's counts: sent (admitted calls), retried (the transports' retries),
        refused (BlockedError), upstream_429 / upstream_503 / upstream_5xx (responses),
        errors (calls that raised), paused_s (how much the pauses that its responses
        started or extended added), estimated_tokens, used_tokens, refunded_tokens,
        charged_tokens; and paused_until (seconds, 0 when not paused)."""
        with self._mu:
            out = dict(self._stats)
        out["paused_until"] = self.paused_until() or 0.0
        return out

    def _count(self, key: str, n: float = 1) -> None:
        with self._mu:
            self._stats[key] += n

    def _refund(self, b: int, n: int) -> None:
        """Give back the pace of n units of budget b (on Redis the view's only: under-use,
        never over)."""
        self._board.refund_view(b, n, _monotonic_ns())
        lim = self._tok_lim if b else self._req_lim
        if lim is not None and self._redis is None:
            lim._refund(n)

    def call(self, *, tokens: int = 0, timeout: Optional[float] = None) -> "UpstreamCall":
        """One call (``with`` or ``async with``): waits its turn (paced on every budget,
        a free slot, the pause over, the breaker closed) for at most ``timeout`` seconds
        (None: as long as it takes), else ``BlockedError`` with ``retry_after``, at once
        when the wait is known to be longer. ``tokens``: the estimate, settled by
        ``observe(tokens=used)``."""
        _check_int("tokens", tokens, 0, False, " (the estimate)")
        return UpstreamCall(self, tokens, _check_timeout(timeout))

    def _refused(self, why: str, wait_ns: int) -> BaseException:
        self._count("refused")
        retry = wait_ns / 1e9
        text = "%s: %s; retry after %.3f s" % (self._name or "upstream", why, retry)
        return _core.BlockedError(text, retry_after=retry, limiter=self._members()[0])


class UpstreamCall:
    """One call of an ``Upstream`` (``api.call(...)``): usable once, with ``with`` or
    ``async with``; ``observe(status, headers, tokens=None)`` tells it the response."""

    __slots__ = ("_up", "_tokens", "_timeout", "_entry", "_ticket", "_start", "_state",
                 "_group", "_ns", "_observed", "status")

    def __init__(self, up: Upstream, tokens: int, timeout: Optional[float]) -> None:
        self._up = up
        self._tokens = tokens
        self._timeout = timeout
        self._entry: Any = None  # a GroupEntry, or slidewin.redis's
        self._ticket: Optional[int] = None
        self._start = 0
        self._state = 0  # 0 idle, 1 entered, 2 exited
        self._group: Any = up._full if tokens > 0 else up._no_tokens
        self._ns = tuple(tokens if m is up._tok_lim else 1  # in the group's order
                         for m in up._members(tokens > 0))
        self._observed = False  # (not `status`: a caller may set that one)
        self.status: Optional[int] = None  # observe()'s

    @property
    def upstream(self) -> Upstream:
        return self._up

    @property
    def tokens(self) -> int:
        """The estimate this call was admitted with."""
        return self._tokens

    def _left(self, deadline: float) -> float:
        return min(max(0.0, deadline - time.monotonic()), _FOREVER_S)

    def _undo(self) -> None:
        """Give back what the admission took: the pace's slots and the in-flight count."""
        for b, n in enumerate((1, self._tokens)):
            if n > 0:
                self._up._refund(b, n)
        if self._entry is not None:
            self._entry._abort()
            self._entry = None

    def _admitted(self) -> "UpstreamCall":
        up = self._up
        br = up._breaker
        if br is not None:
            ticket = br._pass()
            if ticket is None:
                self._undo()
                up._count("refused")
                raise br._open_error()
            self._ticket = ticket
        self._state = 1
        self._start = _monotonic_ns()
        entry = self._entry  # its response time starts here
        if entry is not None and up._redis is None:
            entry._start = self._start
        elif entry is not None:  # slidewin.redis's, on time.monotonic()
            entry._t0 = self._start / 1e9
        up._count("sent")
        up._count("estimated_tokens", self._tokens)
        return self

    def _entering(self, io: Any) -> _io.Steps:
        """The admission, its waits yielded to the driver of `io` (threads or asyncio)."""
        if self._state != 0:
            raise RuntimeError("this call was already %s" % (
                "entered" if self._state == 1 else "used"))
        deadline = math.inf if self._timeout is None else time.monotonic() + self._timeout
        up = self._up
        while True:
            pause: int = up._board.pause_left(_monotonic_ns())
            if pause > 0:  # sleep it, unless it outlasts the deadline
                if pause / 1e9 > self._left(deadline):
                    raise up._refused("paused by the upstream's 429/503", pause)
                yield io.sleep(pause / 1e9)
                continue
            wait_ns, entry = 0, None
            group = self._group
            if group is not None and up._redis is None:  # waiting for a free in-flight slot
                req, left = (self._ns, _F_ENTRY), self._left(deadline)
                got = yield (functools.partial(admit_async, group, req, left) if io.is_async
                             else functools.partial(admit, group, req, left, _IN_LOOP))
                wait_ns, entry = got[1], GroupEntry(group, req, None)
                entry._entered(group._adm_hold(entry._req, got))
            elif group is not None:  # a redis-py client blocks: under asyncio, in a thread
                entry = group.entry(*self._ns, timeout=self._left(deadline))
                step: Any = entry._admit_held
                if io.is_async:
                    step = functools.partial(asyncio.get_running_loop().run_in_executor, None,
                                             step)
                wait_ns = yield step
            self._entry = entry  # admitted with wait_ns of pace: add the server's view
            try:  # refused, interrupted or failed from here: everything given back
                now = _monotonic_ns()
                wait_ns = max(wait_ns,
                              up._board.reserve_view((1, self._tokens), now + wait_ns, now))
                if wait_ns / 1e9 > self._left(deadline):
                    raise up._refused("the budget's next free slot is too far", wait_ns)
                if wait_ns > 0:
                    yield io.sleep(wait_ns / 1e9)
                paused = up._board.pause_left(_monotonic_ns()) > 0
            except BaseException:
                self._undo()
                raise
            if paused:
                self._undo()  # paused while it waited its slot: nothing is sent
                continue
            return self._admitted()

    def __enter__(self) -> "UpstreamCall":
        return _io.run(self._entering(_io.SYNC))  # type: ignore[no-any-return]

    async def __aenter__(self) -> "UpstreamCall":
        return await _io.arun(self._entering(_io.ASYNC))  # type: ignore[no-any-return]

    def observe(self, status: int, headers: Any = None, tokens: Optional[int] = None) -> None:
        """Tell the call its response: the status (429/503 pause the upstream; a 429 is a
        cancel on the breaker, 5xx a failure), the headers (Retry-After, retry-after-ms,
        the server's remaining counts) and the tokens used (the difference from the
        estimate given back or charged)."""
        if isinstance(status, bool) or not isinstance(status, int):
            raise TypeError("status must be an int HTTP status, not %s" % type(status).__name__)
        if not 100 <= status <= 599:
            raise ValueError("status must be an HTTP status from 100 to 599, got %d" % status)
        _check_int("tokens", tokens, 0, note=" (the tokens used)")
        h = _headers.lower_headers(headers)
        if self._state != 1:
            raise RuntimeError("observe() belongs inside the call's with-block")
        if self._observed:
            raise RuntimeError("observe() was already called for this call")
        self._observed = True
        self.status = status
        up = self._up
        now = _monotonic_ns()
        if status == 429 or status == 503:
            up._count("upstream_%d" % status)
            grew = up._board.pause(_headers.retry_after_s(h, time.time()), now)
            up._count("paused_s", grew / 1e9)  # (0 when the pause was longer already)
        else:
            up._board.settle()
            if status >= 500:
                up._count("upstream_5xx")
        for budget, remaining, reset_s in _headers.server_view(h, time.time()):
            b = _BUDGETS.index(budget)
            up._board.view(b, remaining, reset_s, up._costs[b], now)
        if tokens is not None:
            up._count("used_tokens", tokens)
            diff = tokens - self._tokens
            if diff < 0:
                up._refund(1, -diff)
                up._count("refunded_tokens", -diff)
            elif diff > 0:
                if up._tok_lim is not None:
                    up._tok_lim.charge(diff)
                up._count("charged_tokens", diff)
        self._tell_breaker(None if status == 429 else status >= 500)

    def _tell_breaker(self, failure: Optional[bool]) -> None:
        """The call's outcome on the breaker, once: a failure or not; None: a cancel."""
        br, ticket = self._up._breaker, self._ticket
        if br is None or ticket is None:
            return
        self._ticket = None
        if failure is None:
            br._cancel(ticket)
        else:
            br._record(ticket, (_monotonic_ns() - self._start) / 1e6, failure)

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if self._state != 1:
            raise RuntimeError("exit of an upstream call that is not entered")
        self._state = 2
        up = self._up
        failed = et is not None and isinstance(et, type) and issubclass(et, Exception)
        if failed:
            up._count("errors")
        if et is None:
            self._tell_breaker(False)
        elif (failed and not issubclass(et, _core.BlockedError) and up._breaker is not None
              and self._ticket is not None):
            self._tell_breaker(up._breaker._is_failure(et, ev))
        else:
            self._tell_breaker(None)
        entry = self._entry
        if entry is not None:
            self._entry = None
            entry.__exit__(et, ev, tb)

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.__exit__(et, ev, tb)

    def __repr__(self) -> str:
        return "<UpstreamCall of %r tokens=%d>" % (self._up, self._tokens)
