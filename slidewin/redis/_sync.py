"""The sync Redis types of slidewin.redis: RedisLimiter and RedisKeyedLimiter (a sync
redis-py client; a decision blocks for its round trip)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

from .. import _rate
from .._admission import NeedsKey, SyncAdmission
from .._core import Stats
from ._base import _Base, _KeyedMixin
from ._config import _LIMITER_KW
from ._lease import keyed_slices, lease_engine
from ._transport import _Held
from ._wire import F_PRIO, F_TRY, _limiter_key


class RedisLimiter(_Base, SyncAdmission):
    """Limiter's surface with its state in Redis (a sync redis-py client); takes the
    Limiter's keywords, and on_error, lease_ms and lease (docs/redis.md)."""

    def __init__(self, client: Any, name: str, qps: Union[int, float, str, None] = None, *,
                 rate: Optional[str] = None,
                 concurrency: Optional[int] = None, behavior: str = "reject",
                 warm_up_s: float = 10, cold_factor: float = 3, max_queueing_ms: int = 500,
                 occupy_timeout_ms: int = 500, interval_ms: Optional[int] = None,
                 sample_count: Optional[int] = None,
                 on_error: str = "allow", lease_ms: int = 5_000,
                 on_block: Optional[Callable[..., Any]] = None, lease: bool = False) -> None:
        kw = {k: v for k, v in locals().items() if k in _LIMITER_KW}
        self._setup(client, name, qps, kw, on_error, lease_ms, on_block)
        self.key = _limiter_key(self._name)
        self._held = _Held()
        self._leased = lease_engine(self, lease)
        if self._leased is not None:  # the decision: the slice's C method, no frame between
            setattr(self, "_take" if self._is_async else "try_acquire",
                    self._leased.c_slice(self.key).take)

    def try_acquire(self, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        """Admit now or refuse; never waits. Counts PASS or BLOCK in Redis."""
        if self._leased is not None:  # (the instance's try_acquire is its slice's take)
            return bool(self._leased.c_slice(self.key).take(n, now_ns=now_ns))
        return self._t.drive(self._g_admit(None, n, F_TRY, now_ns)) is not None

    def reserve(self, n: int = 1, *, now_ns: Optional[int] = None,
                prioritized: bool = False) -> Optional[int]:
        """The wait in ns (0 = go now), already counted as admitted; None = blocked."""
        return self._t.drive(  # type: ignore[no-any-return]
            self._g_admit(None, n, F_PRIO if prioritized else 0, now_ns))

    def acquire(self, n: int = 1, *, timeout: Optional[float] = None) -> None:
        """One decision, sleeping its wait; with a timeout, retry until admitted or the
        timeout passed. Raises BlockedError."""
        return self._t.drive(self._g_acquire(None, n, timeout))  # type: ignore[no-any-return]

    def charge(self, n: int, *, now_ns: Optional[int] = None) -> None:
        """Count n more as admitted now, without a decision (Limiter.charge): what a request
        used beyond its admission. Never refuses; n=0 charges nothing (no round trip); a
        concurrency limiter can only be charged 0 (ValueError)."""
        return self._t.drive(self._g_charge(None, n, now_ns))  # type: ignore[no-any-return]

    def release(self, n: int = 1) -> None:
        """Give back n of what this client holds (try_acquire/reserve/acquire of a
        concurrency limiter)."""
        return self._t.drive(self._g_release(None, n))  # type: ignore[no-any-return]

    def stats(self, now_ns: Optional[int] = None) -> Stats:
        """The window's rates in Redis (all clients together). Errors propagate."""
        return self._t.drive(self._g_stats(None, now_ns))  # type: ignore[no-any-return]

    def reset(self) -> None:
        """Delete this limiter's state in Redis (every client starts fresh)."""
        self._client.delete(self.key)

    def close(self) -> None:
        """Nothing to close: decisions use the client's own pool (close the client). Kept
        for callers of earlier versions. With lease=True: gives back the unused slice."""
        if self._leased is not None:
            self._leased.close()


class RedisKeyedLimiter(NeedsKey, _KeyedMixin, _Base):  # type: ignore[misc]
    """KeyedLimiter's surface with one Redis string per key (a sync redis-py client); takes
    RedisLimiter's keywords, and overrides."""

    def __init__(self, client: Any, name: str, qps: Union[int, float, str, None] = None, *,
                 rate: Optional[str] = None,
                 concurrency: Optional[int] = None, behavior: str = "reject",
                 warm_up_s: float = 10, cold_factor: float = 3, max_queueing_ms: int = 500,
                 occupy_timeout_ms: int = 500, interval_ms: Optional[int] = None,
                 sample_count: Optional[int] = None,
                 overrides: Optional[Dict[Any, Any]] = None, on_error: str = "allow",
                 lease_ms: int = 5_000, on_block: Optional[Callable[..., Any]] = None,
                 lease: bool = False) -> None:
        kw = {k: v for k, v in locals().items() if k in _LIMITER_KW or k == "qps"}
        _rate.keyed_samples(kw)  # as KeyedLimiter: a rate's default steps are fewer
        self._setup(client, name, kw.pop("qps"), kw, on_error, lease_ms, on_block)
        self._keyed_setup(overrides)
        self._leased = lease_engine(self, lease)
        if self._leased is not None:  # the decision: in C while the key's slice has permits
            setattr(self, "_take" if self._is_async else "try_acquire", keyed_slices(self).take)

    def try_acquire(self, key: Any, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        return self._t.drive(self._g_admit(key, n, F_TRY, now_ns)) is not None

    def reserve(self, key: Any, n: int = 1, *, now_ns: Optional[int] = None) -> Optional[int]:
        return self._t.drive(self._g_admit(key, n, 0, now_ns))  # type: ignore[no-any-return]

    def acquire(self, key: Any, n: int = 1, *, timeout: Optional[float] = None) -> None:
        return self._t.drive(self._g_acquire(key, n, timeout))  # type: ignore[no-any-return]

    def charge(self, key: Any, n: int, *, now_ns: Optional[int] = None) -> None:
        """Count n more as admitted for key now, without a decision (KeyedLimiter.charge);
        counted in local_totals()["pass"] once Redis took it."""
        return self._t.drive(self._g_charge(key, n, now_ns))  # type: ignore[no-any-return]

    def release(self, key: Any, n: int = 1) -> None:
        return self._t.drive(self._g_release(key, n))  # type: ignore[no-any-return]

    def stats(self, key: Any, now_ns: Optional[int] = None) -> Stats:
        """One key's window: pass_qps, concurrency (in-flight leases) and waiting; BLOCK and
        the outcomes of keys are counted by each client (``local_totals()``)."""
        return self._t.drive(self._g_stats(key, now_ns))  # type: ignore[no-any-return]

    def reset(self, key: Any) -> None:
        self._client.delete(self._rkey(key))

    def close(self) -> None:
        """With lease=True: gives back every key's unused slice (else nothing to close)."""
        if self._leased is not None:
            self._leased.close()
