"""slidewin.Upstream across hosts (``redis=``): the budgets as RedisLimiter members of one
``slidewin.redis.all_of`` group (throttles and a concurrency lease), the board (the pause, the
server's view) in a hash updated by lua/upstream.lua on the server's clock."""
from __future__ import annotations

from importlib.resources import files
from typing import Any, Optional, Tuple

_SOURCE = (files("slidewin.redis") / "lua" / "upstream.lua").read_text(encoding="utf-8")


class RedisBoard:
    """The board of slidewin._upstream on Redis: the same operations, each one script call
    (times on the server's clock: the `now` and `at` of the callers only give offsets)."""

    def __init__(self, client: Any, name: str) -> None:
        self._script = client.register_script(_SOURCE)
        self._key = "slidewin:upstream:{%s}" % name

    def _run(self, *args: Any) -> int:
        return int(self._script(keys=[self._key], args=list(args)))

    def pause_left(self, now: int) -> int:
        return self._run("left") * 1000

    def reserve_view(self, ns: Tuple[int, int], at: int, now: int) -> int:
        return self._run("reserve", ns[0], ns[1], max(0, at - now) // 1000) * 1000

    def pause(self, seconds: Optional[float], now: int) -> int:
        return self._run("pause", -1 if seconds is None else int(seconds * 1e6)) * 1000

    def settle(self) -> None:
        self._run("settle")

    def view(self, b: int, remaining: int, reset_s: float, floor_cost: float, now: int) -> None:
        self._run("view", b, remaining, int(reset_s * 1e6), repr(floor_cost / 1000.0))

    def refund_view(self, b: int, n: int, now: int) -> None:
        self._run("refund", b, n)
