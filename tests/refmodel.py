"""A small, deliberately naive pure-Python reference model of docs/design.md.

Nothing here is optimised: every rule is written the way docs/design.md states it, so that
the hypothesis tests can compare the C core against it read for read.

- ``LeapArray``: a ring of ``sample_count`` buckets (docs/design.md §2), with the clamp of
  times behind the newest bucket start, reads refreshing the slot of ``t``,
  ``previous()`` reading without refreshing, and optionally the "future" ring used for
  borrowing (§4).
- ``MetricModel``: the public ``Metric`` surface (§3) over one ``LeapArray``.
- ``LimiterModel``: a node (second window + minute window + in-flight count) and the
  controllers of §5 (reject for QPS and concurrency, warm_up, throttle,
  warm_up_throttle), counting as docs/design.md §6 says.
"""

from __future__ import annotations

import math

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
MAX_RT = 5000  # Sentinel's statisticMaxRt: initial min_rt of a bucket

DEFAULT_EVENTS = ("pass", "block", "exception", "success", "rt", "occupied_pass")
PASS, BLOCK, EXCEPTION, SUCCESS, RT, OCCUPIED_PASS = range(6)


class _Bucket:
    __slots__ = ("start", "counts", "min_rt")

    def __init__(self, start: int, nevents: int) -> None:
        self.start = start
        self.counts = [0] * nevents
        self.min_rt = MAX_RT


class LeapArray:
    """docs/design.md §2 (and §4 when ``borrowable``)."""

    def __init__(self, interval_ms: int, sample_count: int, nevents: int,
                 borrowable: bool = False) -> None:
        assert interval_ms > 0 and sample_count > 0 and interval_ms % sample_count == 0
        self.interval_ms = interval_ms
        self.sample_count = sample_count
        self.window_ms = interval_ms // sample_count
        self.nevents = nevents
        self.borrowable = borrowable
        self.reset()

    def reset(self) -> None:
        self.slots: list[_Bucket | None] = [None] * self.sample_count
        self.future: list[_Bucket | None] = [None] * self.sample_count
        self.newest: int | None = None  # newest bucket start seen by any read or write

    # -- time -----------------------------------------------------------------------
    def start_of(self, t: int) -> int:
        return t - t % self.window_ms

    def index_of(self, t: int) -> int:
        return (t // self.window_ms) % self.sample_count

    def clamp(self, now_ns: int) -> int:
        """ms time of ``now_ns``, clamped to the newest bucket start; records it."""
        t = now_ns // NS_PER_MS
        if self.newest is not None and t < self.newest:
            t = self.newest
        s = self.start_of(t)
        if self.newest is None or s > self.newest:
            self.newest = s
        return t

    # -- slots ----------------------------------------------------------------------
    def _refresh(self, t: int) -> _Bucket:
        """The bucket of ``t``, (re)started in place if its slot is older."""
        idx = self.index_of(t)
        s = self.start_of(t)
        b = self.slots[idx]
        if b is None or b.start != s:
            assert b is None or b.start < s, "clamp guarantees slots never run ahead"
            b = _Bucket(s, self.nevents)
            if self.borrowable:
                f = self.future[idx]
                if f is not None and f.start == s:
                    b.counts[PASS] += f.counts[PASS]
            self.slots[idx] = b
        return b

    def _held(self, start: int) -> _Bucket | None:
        """The bucket with exactly this start if its slot still holds it (no refresh)."""
        if start < 0:
            return None
        b = self.slots[self.index_of(start)]
        if b is not None and b.start == start:
            return b
        return None

    def _valid(self, t: int) -> list[_Bucket]:
        self._refresh(t)
        return [b for b in self.slots
                if b is not None and b.start <= t and t - b.start <= self.interval_ms]

    # -- writes ---------------------------------------------------------------------
    def add(self, event: int, n: int, now_ns: int) -> None:
        t = self.clamp(now_ns)
        self._refresh(t).counts[event] += n

    def add_rt(self, rt: int, now_ns: int) -> None:
        t = self.clamp(now_ns)
        b = self._refresh(t)
        b.counts[RT] += rt
        if rt < b.min_rt:
            b.min_rt = rt

    # -- reads ----------------------------------------------------------------------
    def sum(self, event: int, now_ns: int) -> int:
        t = self.clamp(now_ns)
        return sum(b.counts[event] for b in self._valid(t))

    def current(self, event: int, now_ns: int) -> int:
        t = self.clamp(now_ns)
        return self._refresh(t).counts[event]

    def previous(self, event: int, now_ns: int) -> int:
        t = self.clamp(now_ns)
        b = self._held(self.start_of(t) - self.window_ms)
        return 0 if b is None else b.counts[event]

    def min_rt(self, now_ns: int) -> int:
        t = self.clamp(now_ns)
        return max(1, min(b.min_rt for b in self._valid(t)))

    def buckets(self, now_ns: int) -> list[tuple[int, tuple[int, ...], int]]:
        """(start_ms, counts, min_rt) for the window at now, oldest first, dense."""
        t = self.clamp(now_ns)
        self._refresh(t)
        cur = self.start_of(t)
        out = []
        for k in range(self.sample_count - 1, -1, -1):
            s = cur - k * self.window_ms
            if s < 0:
                continue
            b = self._held(s)
            if b is None:
                out.append((s, (0,) * self.nevents, MAX_RT))
            else:
                out.append((s, tuple(b.counts), b.min_rt))
        return out

    # -- borrowing (§4) -------------------------------------------------------------
    def waiting(self, t: int) -> int:
        """PASS granted ahead in future buckets with start > t (t already clamped)."""
        return sum(f.counts[PASS] for f in self.future if f is not None and f.start > t)

    def add_waiting(self, time_ms: int, n: int) -> None:
        idx = self.index_of(time_ms)
        s = self.start_of(time_ms)
        f = self.future[idx]
        if f is None or f.start != s:
            f = _Bucket(s, self.nevents)
            self.future[idx] = f
        f.counts[PASS] += n

    def pass_of(self, start: int) -> int:
        b = self._held(start)
        return 0 if b is None else b.counts[PASS]


class MetricModel:
    """The public Metric surface (README, API) over one LeapArray."""

    def __init__(self, interval_ms: int = 1000, sample_count: int = 2,
                 events: tuple[str, ...] | None = None) -> None:
        self.events = DEFAULT_EVENTS if events is None else tuple(events)
        self.has_rt = events is None
        self.interval_ms = interval_ms
        self.sample_count = sample_count
        self.window_ms = interval_ms // sample_count
        self.leap = LeapArray(interval_ms, sample_count, len(self.events))

    def index(self, event: int | str) -> int:
        if isinstance(event, str):
            return self.events.index(event)
        assert 0 <= event < len(self.events)
        return int(event)

    def add(self, event, n: int = 1, *, now_ns: int) -> None:
        self.leap.add(self.index(event), n, now_ns)

    def add_rt(self, rt_ms: int, *, now_ns: int) -> None:
        assert self.has_rt
        self.leap.add_rt(rt_ms, now_ns)

    def sum(self, event, *, now_ns: int) -> int:
        return self.leap.sum(self.index(event), now_ns)

    def rate(self, event, *, now_ns: int) -> float:
        return self.sum(event, now_ns=now_ns) / (self.interval_ms / 1000)

    def current(self, event, *, now_ns: int) -> int:
        return self.leap.current(self.index(event), now_ns)

    def previous(self, event, *, now_ns: int) -> int:
        return self.leap.previous(self.index(event), now_ns)

    def min_rt(self, *, now_ns: int) -> int:
        assert self.has_rt
        return self.leap.min_rt(now_ns)

    def avg_rt(self, *, now_ns: int) -> float:
        assert self.has_rt
        t = self.leap.clamp(now_ns)
        valid = self.leap._valid(t)
        rt = sum(b.counts[RT] for b in valid)
        success = sum(b.counts[SUCCESS] for b in valid)
        return rt / success if success else 0.0

    def buckets(self, *, now_ns: int):
        return self.leap.buckets(now_ns)

    def reset(self) -> None:
        self.leap.reset()


def throttle_cost_ns(n: int, rate: float) -> int:
    """``round(1e9 * n / rate)``, half up, at least 1 ns (docs/design.md §5 throttle)."""
    return max(1, math.floor(1e9 * n / rate + 0.5))


class LimiterModel:
    """A node (docs/design.md §3) and one controller (§5), counting as §6 says."""

    def __init__(self, qps=None, *, concurrency=None, behavior="reject", warm_up_s=10,
                 cold_factor=3, max_queueing_ms=500, occupy_timeout_ms=500,
                 interval_ms=1000, sample_count=2) -> None:
        assert (qps is None) != (concurrency is None)
        assert behavior in ("reject", "warm_up", "throttle", "warm_up_throttle")
        assert concurrency is None or behavior == "reject"
        self.behavior = behavior
        self.concurrency = concurrency
        self.q = float(qps) if qps is not None else None
        self.interval_ms = interval_ms
        self.sample_count = sample_count
        self.window_ms = interval_ms // sample_count
        self.max_queueing_ns = max_queueing_ms * NS_PER_MS
        self.occupy_timeout_ms = occupy_timeout_ms
        # node: the limiter's window (borrowable), the minute window, in-flight count
        self.sec = LeapArray(interval_ms, sample_count, 6, borrowable=True)
        self.minute = LeapArray(60_000, 60, 6)
        self.in_flight = 0
        if self.q is not None:
            self.L = self.q * interval_ms / 1000  # the window's limit
        # throttle
        self.last: int | None = None
        # warm-up
        if behavior in ("warm_up", "warm_up_throttle") and self.q is not None and self.q > 0:
            q, W, cf = self.q, warm_up_s, cold_factor
            self.cold_factor = cf
            self.warning = int(W * q) // (cf - 1)
            self.max_token = self.warning + int(2 * W * q / (1.0 + cf))
            if self.max_token > self.warning:
                self.slope = (cf - 1.0) / q / (self.max_token - self.warning)
            else:
                self.slope = None  # no ramp (docs/design.md §8, "tiny q * W")
            self.stored = self.max_token  # a fresh limiter starts cold
            self.last_filled: int | None = None
        # an oversize request admitted into an empty window is paid back until this ms
        self.paid_until: int | None = None

    # -- node counting --------------------------------------------------------------
    def _count(self, event: int, n: int, now_ns: int) -> None:
        self.sec.add(event, n, now_ns)
        self.minute.add(event, n, now_ns)

    # -- warm-up tokens ---------------------------------------------------------------
    def _sync_tokens(self, now_ns: int) -> None:
        t = now_ns // NS_PER_MS
        cur = t - t % 1000
        if self.last_filled is not None and cur <= self.last_filled:
            return
        prev = self.minute.previous(PASS, now_ns)  # last whole second's passes
        old = self.stored
        new = old
        # paying back an oversize request during the last whole second counts as busy
        busy = getattr(self, "paid_until", None) is not None and self.paid_until > cur - 1000
        if self.last_filled is not None:
            elapsed = cur - self.last_filled
            if old < self.warning:
                new = int(old + elapsed * self.q / 1000)
            elif old > self.warning:
                if prev < int(self.q) // self.cold_factor and not busy:
                    new = int(old + elapsed * self.q / 1000)
        new = min(new, self.max_token)
        self.stored = max(0, new - prev)
        self.last_filled = cur

    def warm_rate(self) -> float:
        """The allowed rate per second from the stored tokens (after a sync)."""
        q = self.q
        if self.slope is not None and self.stored >= self.warning:
            above = self.stored - self.warning
            rate = math.nextafter(1.0 / (above * self.slope + 1.0 / q), math.inf)
        else:
            rate = q
        # "differs" (c): never below min(q, one request per window)
        return max(rate, min(q, 1000 / self.interval_ms))

    # -- controllers ------------------------------------------------------------------
    def _decide(self, n: int, now_ns: int, *, try_only: bool, prioritized: bool):
        """Return the wait in ns (0 = now) or None; count PASS/BLOCK/OCCUPIED_PASS."""
        b = self.behavior
        if self.concurrency is not None:
            if self.in_flight + n <= self.concurrency:
                self.in_flight += n
                self._count(PASS, n, now_ns)
                return 0
            self._count(BLOCK, n, now_ns)
            return None
        if self.q == 0:
            self._count(BLOCK, n, now_ns)
            return None
        if b == "reject":
            cur = self.sec.sum(PASS, now_ns)
            if cur + n <= self.L:
                self._count(PASS, n, now_ns)
                return 0
            if prioritized and not try_only:
                wait = self._try_occupy(n, now_ns)
                if wait is not None:
                    return wait
            self._count(BLOCK, n, now_ns)
            return None
        if b == "warm_up":
            cur = self.sec.sum(PASS, now_ns)
            t = self.sec.clamp(now_ns)
            self._sync_tokens(now_ns)
            rate = self.warm_rate()
            if n <= self.L and (self.paid_until is None or t >= self.paid_until):
                if cur + n <= rate * self.interval_ms / 1000:
                    self._count(PASS, n, now_ns)
                    return 0
                if cur == 0:
                    # (c): an empty window admits one request of any size n <= L, paid
                    # back: nothing more passes until n / rate seconds have gone by
                    self.paid_until = t + math.ceil(n * 1000.0 / rate)
                    self._count(PASS, n, now_ns)
                    return 0
            self._count(BLOCK, n, now_ns)
            return None
        # throttle / warm_up_throttle
        if b == "warm_up_throttle":
            self._sync_tokens(now_ns)
            rate = self.warm_rate()
        else:
            rate = self.q
        c = throttle_cost_ns(n, rate)
        if self.last is None or self.last + c <= now_ns:
            self.last = now_ns
            self._count(PASS, n, now_ns)
            return 0
        wait = self.last + c - now_ns
        if try_only or wait > self.max_queueing_ns:
            self._count(BLOCK, n, now_ns)
            return None
        self.last += c
        self._count(PASS, n, now_ns)
        return wait

    def _try_occupy(self, n: int, now_ns: int):
        """docs/design.md §4 try-occupy; on a grant count it and return the wait in ns."""
        sec = self.sec
        t = sec.clamp(now_ns)
        waiting = sec.waiting(t)
        if waiting >= self.L:
            return None
        w = sec.window_ms - t % sec.window_ms
        cur = sec.sum(PASS, now_ns)
        oldest = sec.pass_of(sec.start_of(t) - (sec.sample_count - 1) * sec.window_ms)
        if w < self.occupy_timeout_ms and cur + waiting + n - oldest <= self.L:
            sec.add_waiting(t + w, n)
            self.sec.add(OCCUPIED_PASS, n, now_ns)
            self.minute.add(OCCUPIED_PASS, n, now_ns)
            self.minute.add(PASS, n, now_ns)  # Sentinel's addOccupiedPass
            return (sec.start_of(t) + sec.window_ms) * NS_PER_MS - now_ns
        return None

    # -- public surface ---------------------------------------------------------------
    def try_acquire(self, n: int = 1, *, now_ns: int) -> bool:
        return self._decide(n, now_ns, try_only=True, prioritized=False) == 0

    def reserve(self, n: int = 1, *, now_ns: int, prioritized: bool = False):
        return self._decide(n, now_ns, try_only=False, prioritized=prioritized)

    def release(self, n: int = 1) -> None:
        assert n <= self.in_flight
        self.in_flight -= n

    def waiting(self, now_ns: int) -> int:
        return self.sec.waiting(self.sec.clamp(now_ns))
