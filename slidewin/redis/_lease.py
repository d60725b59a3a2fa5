"""Leased quotas (``lease=True``): ``try_acquire`` decided locally on a slice of the current
bucket's quota leased from Redis ahead of need (docs/redis.md, "Leased quotas"). A grant
counts its permits as PASS in the bucket current then and is valid only while that bucket
is (the fleet is never over the limit in any window); unused permits go back out of it.
Grants and give-backs carry a lease id recorded in Redis: a retried grant gets the recorded
one, a give-back applies once. Top-ups run in the background (a thread, or an asyncio
limiter's task), inline with an explicit ``now_ns`` (virtual time stays deterministic)."""
from __future__ import annotations

import asyncio
import heapq
import logging
import math
import os
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple, cast

from .._core import _KeyedSlices, _LeaseSlice

from ._config import _Config
from ._scripts import COMMON, GENERIC, HEAD, _read, _Script
from ._transport import _ERRORS
from ._wire import (BLOCK, F_TRY, PASS, RedisReplyError, _check_layout, _evalsha, _fmt, _ints,
                    _time_args)

log = logging.getLogger("slidewin.redis")

LEASE_SCRIPT = _Script(HEAD + GENERIC + COMMON + _read("lease_return") + _read("lease_grant"))

HORIZON = 0.25      # a slice: the key's demand for this fraction of a bucket
CAP = 1.0 / 32      # ... and at most this fraction of the window's limit
DRY = 0.125         # a key granted nothing asks again after this fraction of a bucket
ERROR_BACKOFF_NS = 50_000_000  # a failed grant: the next is tried no sooner
CLOSE_WAIT_NS = 2_000_000_000  # close(): how long it waits for a grant in flight


def lease_engine(lim: Any, lease: Any) -> Optional["_Leases"]:
    if not isinstance(lease, bool):
        raise TypeError("lease must be a bool, not %s" % type(lease).__name__)
    if not lease:
        return None
    cfg: _Config = lim._cfg
    if cfg.concurrency is not None or cfg.behavior != "reject":
        what = ("concurrency=%d" % cfg.concurrency if cfg.concurrency is not None
                else "behavior=%r" % cfg.behavior)
        raise ValueError("lease=True leases slices of a qps= or rate= limit with "
                         "behavior='reject'; got %s" % what)
    return _Leases(lim)


def keyed_slices(lim: Any) -> _KeyedSlices:
    """A leased keyed limiter's try_acquire: decided in C on a key's slice, the first
    decision on a key here (its slice registered by the key as given)."""
    ref = weakref.ref(lim._leased)

    def first(key: Any, n: int, now_ns: Optional[int]) -> object:
        eng = ref()
        if eng is None:
            raise RuntimeError("slidewin.redis: the limiter is gone")
        rk = lim._rkey(key)  # its TypeError / ValueError
        c = eng.c_slice(rk)
        if type(key) in _EXACT:  # (a subclass's == and hash are its own: never cached)
            with eng._cond:
                if not eng._closed and eng._cs.get(rk) is c:  # (not dropped meanwhile)
                    eng._ukeys[rk] = key
                    cast(_KeyedSlices, eng._ks).set(key, c)
        r = c.take(n, now_ns=now_ns)
        return r if r is _SLOW else bool(r)

    ks = lim._leased._ks = _KeyedSlices(first)
    return ks


_EXACT = (str, bytes, int)


def _now(now_ns: Optional[int]) -> int:
    return time.monotonic_ns() if now_ns is None else now_ns


def _before(mark: Optional[Tuple[bool, int]], explicit: bool, t: int) -> bool:
    """Whether t is before a (clock, time) mark set on its own clock."""
    return mark is not None and mark[0] == explicit and t < mark[1]
_SLOW = object()  # an asyncio limiter's slice: the decision needs a round trip (awaited)


class _Slice:
    """One key's lease state (under the engine's lock). Its permits are its C slice's
    (``c``): taken there without the lock, changed here only by c's one-step methods."""

    __slots__ = ("c", "leases", "start", "end", "explicit", "backs", "busy", "dry_until",
                 "err_until", "retry", "blocks", "rate", "demand", "rate_t", "last_k",
                 "used", "err", "queued", "last")

    def __init__(self, c: Any) -> None:
        self.c: _LeaseSlice = c                 # the permits in hand, decided on in C
        self.leases: List[List[Any]] = []       # [lease id, granted] of the current slice
        self.start = 0                          # the slice's bucket, ns on its clock
        self.end = 0
        self.explicit = False                   # its clock: now_ns given, or monotonic
        self.backs: List[Tuple[str, int]] = []  # (lease id, unused) to give back
        self.busy = False                       # a grant in flight
        self.queued = False                     # a top-up asked of the thread
        self.last: Optional[Tuple[bool, int]] = None  # the latest decision's clock, time
        self.dry_until: Optional[Tuple[bool, int]] = None
        self.err_until: Optional[Tuple[bool, int]] = None
        self.retry: Optional[Tuple[str, bool, int]] = None  # a grant that may have applied
        self.blocks = 0                         # refusals not yet counted in Redis
        self.rate = 0.0                         # demand per ns
        self.demand = 0                         # requested since rate_t
        self.rate_t: Optional[Tuple[bool, int]] = None
        self.last_k = 0
        self.used = 0                           # admitted on the current slice
        self.err: Optional[BaseException] = None  # the last grant's error


class _Leases:
    """The slices of one limiter's keys, its counters and its background work: a thread (an
    asyncio limiter's: one task on the event loop, its round trips awaited)."""

    def __init__(self, lim: Any) -> None:
        self._lim = lim
        self._async = lim._is_async
        # each key's C slice (a RedisLimiter keeps its one: its try_acquire)
        self._cs: Dict[Any, _LeaseSlice] = {}
        self._keyed = hasattr(lim, "_cfg_for")
        self._ks: Optional[_KeyedSlices] = None  # a keyed limiter's slices by the caller's key
        self._ukeys: Dict[Any, Any] = {}           # ... and each Redis key's caller's key
        self._seq = 0
        self._closed = False
        self._fresh()
        _ENGINES.add(self)
        self.decisions = 0     # try_acquire calls decided here
        self.round_trips = 0   # grant and give-back scripts run (tried)
        self.granted = 0       # permits leased
        self.returned = 0      # permits given back unused

    def _fresh(self) -> None:
        """No slice, no job, no thread: a new engine's state, and a forked child's."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._slices: Dict[Any, _Slice] = {}
        self._topup: List[Any] = []
        self._ends: List[Tuple[int, int, Any]] = []
        self._thread: Optional[threading.Thread] = None
        self._task: Optional["asyncio.Task[None]"] = None  # an asyncio engine's
        self._wake: Optional[asyncio.Event] = None  # ... whose task waits on it for a job
        self._changed: Optional[asyncio.Event] = None  # ... set by _notify (a grant ended)

    def _cfg(self, rk: Any) -> _Config:
        lim = self._lim
        return cast(_Config, lim._cfg_for(rk) if self._keyed else lim._cfg)

    def c_slice(self, rk: Any) -> _LeaseSlice:
        """The key's C slice (made on first use): its take() is the decision."""
        c = self._cs.get(rk)
        if c is None:
            ref = weakref.ref(self)

            def refill() -> None:  # the C slice crossed its low-water mark
                eng = ref()
                if eng is not None:
                    with eng._cond:
                        s = eng._slices.get(rk)
                        if s is not None:
                            eng._queue_topup(rk, s)

            def slow(n: int, now_ns: Optional[int]) -> Any:
                eng = ref()
                if eng is None:
                    raise RuntimeError("slidewin.redis: the limiter is gone")
                if eng._async:  # awaited by the caller (AsyncRedisLimiter.try_acquire)
                    return _SLOW
                return eng._try_slow(rk, n, now_ns)

            c = self._cs[rk] = _LeaseSlice(refill, slow)
        return c

    def _queue_topup(self, rk: Any, s: _Slice) -> None:  # under the lock
        if not s.queued and not self._closed:
            s.queued = True
            self._topup.append(rk)
            self._start_thread()
            self._notify()

    def _fold(self, s: _Slice) -> None:  # under the lock: C's decisions since the last fold
        calls, taken = s.c.harvest()
        if calls:
            self.decisions += calls
            s.used += taken
            s.demand += taken
            self._lim._tally(PASS, taken)  # (a keyed limiter's local totals)

    def _try_slow(self, rk: Any, n: int, now_ns: Optional[int]) -> Any:
        """The decision the C slice could not make: a bool (a coroutine of it, async)."""
        return self._lim._t.drive(self._g_tallied(rk, n, now_ns))

    def _g_tallied(self, rk: Any, n: int, now_ns: Optional[int]) -> Any:
        ok = bool((yield from self._g_slow(rk, self._cfg(rk), n, now_ns)))
        self._lim._tally(PASS if ok else BLOCK, n)  # a keyed limiter's local totals
        return ok

    def _g_slow(self, rk: Any, cfg: _Config, n: int, now_ns: Optional[int]) -> Any:
        """The decision without a slice in hand; the lock is never held across a round trip."""
        _time_args(now_ns)  # its TypeError / ValueError
        explicit = now_ns is not None
        cond = self._cond
        err: Optional[BaseException] = None
        with cond:
            self.decisions += 1
            if cfg.can_never_pass(n):
                return False
            s = self._slices.get(rk) or self._slices.setdefault(rk, _Slice(self.c_slice(rk)))
            s.demand += n
            s.last = (explicit, now_ns or 0)
            asked = 0
            # the decision's instant, kept across its own grants (one that came back before
            # its bucket ended serves it: counted in that bucket), renewed after a wait
            t = _now(now_ns)
            while True:
                got = self._take(s, n, t, explicit)
                if got is not None:
                    break
                if s.busy or self._closed:  # another's grant in flight, or a close
                    yield from self._g_wait()
                    if rk not in self._slices:  # closed meanwhile: a fresh slice
                        s = self._slices[rk] = _Slice(self.c_slice(rk))
                    t = _now(now_ns)
                    continue
                if _before(s.err_until, explicit, t):
                    err = s.err
                    break
                # granted less than n, or after its bucket ended here: asked once more
                if asked == 2:
                    got = False
                    break
                asked += 1
                cond.release()
                try:
                    served = yield from self._g_grant(rk, cfg, s, n, now_ns, serve=True)
                except _ERRORS as e:
                    err = e
                finally:
                    cond.acquire()
                if err is not None:
                    s.err_until, s.err = (explicit, t + ERROR_BACKOFF_NS), err
                    break
                if served:  # its permits came back after their bucket ended here
                    s.used += n
                    got = True
                    break
            if got is False:
                s.blocks += n
                return False
            if got:
                low = not s.busy and s.c.left * 2 < s.last_k
                if low and not explicit:
                    self._queue_topup(rk, s)
                    return True
        if got:
            if low:
                try:
                    yield from self._g_grant(rk, cfg, s, 1, now_ns)
                except _ERRORS as e:  # decided: the next decision tries again
                    with cond:
                        s.err_until, s.err = (True, cast(int, now_ns) + ERROR_BACKOFF_NS), e
                    log.debug("slidewin.redis: a lease top-up of %r failed: %s",
                              self._lim._name, e)
            return True
        assert err is not None
        return bool(self._lim._failed(err, F_TRY)[0] == PASS)

    def _take(self, s: _Slice, n: int, t: int, explicit: bool) -> Optional[bool]:
        """True: taken from the slice; False: refused (the window is full); None: a grant
        is needed. Under the lock."""
        if s.leases and (s.explicit != explicit or t >= s.end):
            self._retire(s)
        if s.leases and explicit and t < s.start:
            return False  # a bucket that begins later (a clock ahead counted it)
        if s.c.debit(n):
            s.used += n
            return True
        return False if _before(s.dry_until, explicit, t) else None

    def _retire(self, s: _Slice) -> None:  # the slice ends: what is left goes back, newest first
        self._fold(s)
        left = s.c.drain()
        for lease in reversed(s.leases):
            back = min(left, lease[1])
            if back > 0:
                s.backs.append((lease[0], back))
                left -= back
        s.leases = []
        s.used = 0

    def _want(self, s: _Slice, cfg: _Config, need: int, t: int, explicit: bool) -> int:
        """The permits to ask: the key's demand (per ns: an average over about half a bucket)
        for HORIZON of a bucket, at most CAP of the window's limit."""
        self._fold(s)
        win_ns = cfg.interval_ms * 1e6 / cfg.sample_count
        r = s.rate_t
        if r is None or r[0] != explicit or t < r[1]:
            s.rate_t = (explicit, t)
        elif t > r[1]:
            dt = t - r[1]
            s.rate += min(1.0, dt / (win_ns / 2)) * (s.demand / dt - s.rate)
            s.demand = 0
            s.rate_t = (explicit, t)
        horizon = win_ns * HORIZON
        if s.leases:
            horizon = min(horizon, max(0, s.end - t))
        return max(min(math.ceil(s.rate * horizon), max(1, int(cfg.limit * CAP))), need, 1)

    def _g_grant(self, rk: Any, cfg: _Config, s: _Slice, need: int, now_ns: Optional[int],
                 want: Optional[int] = None, serve: bool = False) -> Any:
        """One round trip for a key: give back what its ended slices left, and lease up to
        `want` permits (sized here when None; 0: only give back). Raises what the call raised
        (the slice as it was, retried with the same lease id). serve: a decision waits on
        it; a grant back after its bucket ended here serves it with `need` permits (the rest
        go back) and returns True."""
        explicit = now_ns is not None
        served = False
        with self._cond:
            if s.busy or (self._closed and want != 0):  # a close takes no new grant
                return served
            t = _now(now_ns)
            if s.leases and (s.explicit != explicit or t >= s.end):
                self._retire(s)
            if want is None:
                want = self._want(s, cfg, need, t, explicit)
            r = s.retry
            if r is not None and r[1] == explicit and 0 <= t - r[2] < cfg.interval_ms * 1e6:
                lid = r[0]
                serve = False  # a retried id: its grant may be of a bucket long gone
            else:
                lid = os.urandom(8).hex()
                s.retry = (lid, explicit, t)
            backs = list(s.backs)
            blocks = s.blocks
            s.blocks = 0
            s.busy = True
        try:
            t_send = time.monotonic_ns()
            k, rem = yield from self._g_call(rk, cfg, lid, want, need, blocks, backs, now_ns)
            rtt = time.monotonic_ns() - t_send
        except BaseException:
            with self._cond:
                s.busy = False
                s.blocks += blocks
                self._notify()
            raise
        with self._cond:
            s.busy = False
            s.retry = None
            self.returned += sum(b for _, b in backs)
            del s.backs[:len(backs)]
            end = (t if explicit else t_send) + rem
            win_ns = int(cfg.interval_ms * 1_000_000 // cfg.sample_count)
            if want > 0:
                self.granted += k
                if k >= 1 and end > _now(now_ns):
                    if s.leases and s.explicit == explicit and abs(end - s.end) < win_ns // 2:
                        s.end = min(s.end, end)      # a top-up: the same bucket
                    else:
                        self._retire(s)
                        s.end, s.start = end, end - win_ns
                        s.explicit = explicit
                    s.leases.append([lid, k])
                    s.last_k = max(k, 2 * need)
                    # taken in C only on the monotonic clock (explicit now_ns: the slow path)
                    s.c.add(k, 0 if explicit else s.end, (s.last_k + 1) // 2)
                    s.dry_until = None
                elif k >= 1:  # a grant of a bucket gone by here: back, but what serves
                    served = serve and k >= need
                    if k > need or not served:
                        s.backs.append((lid, k - need if served else k))
                else:
                    s.dry_until = (explicit, min(end, _now(now_ns) + int(win_ns * DRY)))
            if not explicit and s.leases:
                self._seq += 1
                heapq.heappush(self._ends, (s.end + rtt + 1_000_000, self._seq, rk))
                self._start_thread()
            self._notify()
        return served

    def _g_call(self, rk: Any, cfg: _Config, lid: str, want: int, need: int, blocks: int,
                backs: List[Tuple[str, int]], now_ns: Optional[int]) -> Any:
        """The lease script's round trip: (permits granted, ns left in their bucket)."""
        lim = self._lim
        key = rk.encode() if isinstance(rk, str) else rk
        keys = [key, key + b"|lease:" + lid.encode()]
        keys += [key + b"|lease:" + b.encode() for b, _ in backs]
        rttl = max(2 * cfg.interval_ms, cfg.ttl_ms) + 1000
        args = lim._args(cfg, want, 0, now_ns, lid) + [_fmt(cfg.limit), str(need), str(blocks),
                                                       str(rttl)]
        args += [str(b) for _, b in backs]
        with self._cond:
            self.round_trips += 1
        reply = yield LEASE_SCRIPT, key, _evalsha(LEASE_SCRIPT.sha, keys, args)
        _check_layout(reply, lim._name, cfg.interval_ms, cfg.sample_count)
        if not _ints(reply, 4) or reply[0] != 1 or reply[1] < 0 or reply[3] < 0:
            raise RedisReplyError("unexpected reply from Redis to a lease of %r: %.200r"
                                  % (lim._name, reply))
        return reply[1], reply[3]

    def _start_thread(self) -> None:  # (an asyncio engine's task: started if none, woken)
        if self._closed:
            return
        if not self._async:
            if self._thread is None:
                self._thread = threading.Thread(target=self._lim._t.drive,
                                                args=(_g_loop(weakref.ref(self)),),
                                                name="slidewin-redis-lease", daemon=True)
                self._thread.start()
            return
        if self._task is None or self._task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop here: the next decision in one starts it
                return
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._lim._t.drive(_g_loop(weakref.ref(self))))
        assert self._wake is not None
        self._wake.set()

    def _job(self) -> Tuple[Optional[Tuple[str, Any]], float]:  # under the lock
        """The next job, or how long to wait for one."""
        if self._topup:
            return ("topup", self._topup.pop(0)), 0.0
        if self._ends:
            at, _, rk = self._ends[0]
            wait = (at - time.monotonic_ns()) / 1e9
            if wait <= 0:
                heapq.heappop(self._ends)
                return ("end", rk), 0.0
            return None, min(wait, 1.0)
        return None, 1.0

    def _g_run(self, job: Tuple[str, Any]) -> Any:
        kind, rk = job
        lim = self._lim
        cfg = self._cfg(rk)
        with self._cond:
            s = self._slices.get(rk)
            if s is not None and kind == "topup":
                s.queued = False
            if s is None or s.busy:
                return
            now = time.monotonic_ns()
            self._fold(s)
            if kind == "end":
                if s.leases and now < s.end:
                    return  # a later slice: its own end is queued
                active = s.used > 0 or s.demand > 0
                if not active and not s.leases and not s.backs:
                    self._drop(rk)
                    return
                want: Optional[int] = None if active else 0
            elif not s.leases or s.c.left * 2 >= s.last_k:
                return
            else:
                want = None
        try:
            yield from self._g_grant(rk, cfg, s, 1, None, want)
        except Exception as e:  # the decisions try again (and apply on_error)
            log.debug("slidewin.redis: a lease of %r failed in the background: %s", lim._name, e)
            return
        if want == 0:
            with self._cond:
                self._fold(s)
                if not s.leases and not s.backs and not s.busy and s.demand == 0:
                    self._drop(rk)

    def _drop(self, rk: Any) -> None:  # under the lock: an idle key's slices go
        self._slices.pop(rk, None)
        if self._keyed:
            self._cs.pop(rk, None)
            if rk in self._ukeys and self._ks is not None:
                self._ks.pop(self._ukeys.pop(rk))

    def close(self) -> None:
        """Give back every key's unused permits now (one round trip per key holding any)."""
        self._lim._t.drive(self._g_close())

    async def aclose(self) -> None:
        """close(), awaited: gives back every key's unused permits; the task ends."""
        await self._lim._t.drive(self._g_close())
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _notify(self) -> None:  # under the lock: wakes the waits on a grant (and a close)
        ev, self._changed = self._changed, None
        if ev is not None:
            ev.set()
        self._cond.notify_all()

    def _g_wait(self) -> Any:  # up to 50 ms for a grant or a close to end (_g_idle)
        if self._async:
            self._changed = self._changed or asyncio.Event()
        return _g_idle(self._cond, self._changed, 0.05)

    def _g_close(self) -> Any:
        cond = self._cond
        with cond:
            # no new grant starts (decisions wait); a top-up in flight brings permits that go
            # back too: waited for, at most CLOSE_WAIT_NS
            self._closed = True
            try:
                until = time.monotonic_ns() + CLOSE_WAIT_NS
                while (any(s.busy for s in self._slices.values())
                       and time.monotonic_ns() < until):
                    yield from self._g_wait()
                items = list(self._slices.items())
                for _, s in items:
                    self._retire(s)
                self._ends.clear()
                self._topup.clear()
                cond.release()
                try:
                    for rk, s in items:
                        r = s.last  # a slice on explicit time: given back at its latest now_ns
                        try:
                            if s.backs:
                                yield from self._g_grant(rk, self._cfg(rk), s, 1,
                                                         r[1] if r and r[0] else None, 0)
                        except Exception as e:  # they count until their bucket leaves
                            log.debug("slidewin.redis: giving back the leases of %r failed: "
                                      "%s", self._lim._name, e)
                finally:
                    cond.acquire()
                self._slices.clear()
                if self._keyed:
                    self._cs.clear()
                    self._ukeys.clear()
                    if self._ks is not None:
                        self._ks.clear()
            finally:  # interrupted: the slices stay (what is to go back rides on a grant)
                self._closed = False
                self._notify()

    def counters(self) -> Dict[str, int]:
        with self._cond:
            for s in self._slices.values():
                self._fold(s)
            return {"decisions": self.decisions, "round_trips": self.round_trips,
                    "granted": self.granted, "returned": self.returned}


_ENGINES: "weakref.WeakSet[_Leases]" = weakref.WeakSet()


def _forget_in_child() -> None:  # a forked child leases its own
    for eng in list(_ENGINES):
        eng._fresh()
        for c in eng._cs.values():  # the parent's permits: not the child's to spend
            c.drain()
            c.harvest()


os.register_at_fork(after_in_child=_forget_in_child)


def _g_idle(cond: threading.Condition, ev: Optional[asyncio.Event], timeout: float) -> Any:
    """Wait up to `timeout` s on the condition (or an asyncio engine's event), unlocked."""
    if ev is None:
        cond.wait(timeout)
        return
    cond.release()
    try:
        yield lambda: asyncio.wait_for(ev.wait(), timeout)
    except asyncio.TimeoutError:
        pass
    finally:
        cond.acquire()


def _g_loop(ref: "weakref.ref[_Leases]") -> Any:
    """An engine's background jobs, run by its thread (an asyncio engine's: by its task);
    it ends with the engine (within a wait), held only while a job runs."""
    while True:
        eng = ref()
        if eng is None:
            return
        cond, wake = eng._cond, eng._wake
        with cond:
            if wake is not None:
                wake.clear()
            job, wait = eng._job()
            if job is None:
                if eng._closed:
                    eng._thread = None
                    return
                del eng  # waits without holding it: a dropped engine (in a cycle too) goes
                yield from _g_idle(cond, wake, wait)
                continue
        try:
            yield from eng._g_run(job)
        except Exception as e:  # never dies: the decisions decide on their own
            log.debug("slidewin.redis: lease thread: %s", e)
        del eng
