"""slidewin.Upstream across hosts (``redis=``): the budgets as RedisLimiter members of one
``slidewin.redis.all_of`` group (throttles and a concurrency lease), the board (the pause, the
server's view) in a hash updated by lua/upstream.lua on the server's clock."""
from __future__ import annotations

import time
from importlib.resources import files
from typing import Any, List, Optional, Tuple

from ._base import _outcome
from ._group import RedisGroup
from ._wire import _OUT_NONE, F_ENTRY

_SOURCE = (files("slidewin.redis") / "lua" / "upstream.lua").read_text(encoding="utf-8")


class RedisBoard:
    """The board of slidewin._upstream on Redis: the same operations, each one script call
    (times on the server's clock: the `now` and `at` of the callers only give offsets)."""

    def __init__(self, client: Any, name: str) -> None:
        self._script = client.register_script(_SOURCE)
        self._key = "slidewin:upstream:{%s}" % name

    def _run(self, *args: Any) -> int:
        return int(self._script(keys=[self._key], args=list(args)))

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def pause_left(self, now: int) -> int:
        return self._run("left") * 1000

    def reserve_view(self, ns: Tuple[int, int], at: int, now: int) -> int:
        return self._run("reserve", ns[0], ns[1], max(0, at - now) // 1000) * 1000

    def pause(self, seconds: Optional[float], now: int) -> int:
        us = -1 if seconds is None else int(seconds * 1e6)
        return self._run("pause", us) * 1000

    def settle(self) -> None:
        self._run("settle")

    def view(self, b: int, remaining: int, reset_s: float, floor_cost: float, now: int) -> None:
        self._run("view", b, remaining, int(reset_s * 1e6), repr(floor_cost / 1000.0))

    def refund_view(self, b: int, n: int, now: int) -> None:
        self._run("refund", b, n)


class RedisHeld:
    """What a call admitted by the Redis group holds (its leases, renewed while held): given
    back by ``_release()`` (nothing recorded) or ``__exit__`` (the outcome)."""

    __slots__ = ("_g", "_ns", "_leases", "_toks", "_start")

    def __init__(self, g: RedisGroup, ns: List[int], leases: List[str]) -> None:
        self._g, self._ns, self._leases = g, ns, leases
        self._toks = g._renew_all(leases)
        self._start = 0

    def _give_back(self, outcome: int, rt_ms: int) -> None:
        g = self._g
        g._t.drive(g._g_give_back(self._ns, self._leases, self._toks, outcome, rt_ms))

    def _release(self) -> None:
        self._give_back(_OUT_NONE, 0)

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        rt_ms = max(0, (time.monotonic_ns() - self._start) // 1_000_000) if self._start else 0
        self._give_back(_outcome(et), rt_ms)


def admit(g: RedisGroup, ns: Tuple[int, ...], timeout: float) -> Tuple[int, RedisHeld]:
    """One admission by the group, waiting (at most `timeout`) for a free concurrency
    lease: (the pace's wait in ns, what it holds), or BlockedError."""
    n = list(ns)
    leases = g._leases(True)
    wait = g._t.drive(g._g_wait(n, g._timeout(n, timeout), F_ENTRY, leases))
    return wait, RedisHeld(g, n, leases)
