"""The sync Redis types of slidewin.redis: RedisLimiter and RedisKeyedLimiter (a sync
redis-py client; a decision blocks for its round trip)."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union

from .. import _rate
from .._admission import NeedsKey, SyncAdmission, refuse_in_loop
from .._core import BlockedError, Stats
from .._limiter import _MISSING, _check_timeout, _decorate_entries
from ._base import _Base, _elapsed_ms, _wait_timeout, _KeyedMixin, _outcome, _step
from ._config import _Config
from ._lease import keyed_take, lease_engine
from ._scripts import SCRIPTS as _SCRIPTS
from ._scripts import _Script
from ._transport import _UNREACHABLE, _Held, _renew_args, _renewer, _sync_call, _unrenew
from ._wire import (_OUT_BLOCK, _OUT_NONE, BLOCK, F_ENTRY, F_NO_BLOCK, F_PRIO, F_RETRY, F_TRY,
                    NEVER, PASS, _charge_reply, _check_charge_n, _check_exit_reply, _check_n,
                    _limiter_key, _pack, _time_args)

log = logging.getLogger("slidewin.redis")


def _refuse_in_loop() -> None:
    refuse_in_loop("a Redis limiter's acquire() or entry(timeout=...) that must wait",
                   "its asyncio twin (AsyncRedisLimiter: await lim.acquire(), "
                   "async with lim.entry(), async with lim)")


class _SyncOps(_Base):
    def _run(self, script: _Script, key: Any, args: List[Any]) -> Any:
        return _sync_call(self._client, self._cluster, script, key,
                          _pack(["EVALSHA", script.sha, "1", key] + args))

    def _decide_on(self, key: Any, cfg: _Config, n: int, flags: int, now_ns: Any,
                   lease: str) -> Tuple[int, int, int]:
        try:
            packed = self._packed_decision(cfg, key, n, flags, now_ns, lease)
            reply = _sync_call(self._client, self._cluster, cfg.script, key, packed)
            return self._parse(reply, cfg)
        except _UNREACHABLE as e:
            return self._failed(e, flags)

    def _exit_on(self, key: Any, cfg: _Config, n: int, outcome: int, rt_ms: int,
                 leases: List[Tuple[str, int]], quiet: bool = True) -> None:
        args = self._args(cfg, n, 0, None, "") + [str(outcome), str(rt_ms)]
        for lid, k in leases:
            args += [lid, str(k)]
        try:
            _check_exit_reply(self._run(_SCRIPTS["exit"], key, args), self._name)
        except _UNREACHABLE as e:
            if not quiet:
                raise
            # the lease expires on its own (lease_ms); the outcome is lost: counted
            with self._lock:
                self.errors += 1
            log.debug("slidewin.redis: exit of %r failed: %s", self._name, e)

    def _charge_on(self, key: Any, cfg: _Config, n: int, now_ns: Any) -> bool:
        """One CHARGE round trip; False when Redis did not take it (on_error not "raise")."""
        args = self._charge_args(cfg, n, now_ns)
        try:
            _charge_reply(self._run(_SCRIPTS["charge"], key, args), self._name,
                          cfg.interval_ms, cfg.sample_count)
            return True
        except _UNREACHABLE as e:
            self._charge_failed(e)
            return False

    def _renew(self, key: Any, cfg: _Config, ids: List[str]) -> bool:
        """Renew this client's leases on a key (the renewal thread); False if it failed."""
        try:
            _check_exit_reply(self._run(_SCRIPTS["exit"], key, _renew_args(self, cfg, ids)),
                              self._name)
            return True
        except Exception as e:  # the next renewal tries again; the leases may run out
            log.debug("slidewin.redis: renewing the leases of %r failed: %s", self._name, e)
            return False

    def _acquire_on(self, key: Any, cfg: _Config, n: int, timeout: Optional[float],
                    flags: int, lease: str, sleep_wait: bool = True) -> int:
        """The shared loop of acquire() and entry(): returns the wait slept (ns), or to
        sleep (sleep_wait False: entry() registers its lease for renewal first)."""
        if timeout is None:
            verdict, wait_ns, retry_ns = self._decide_on(key, cfg, n, flags | F_RETRY, None,
                                                         lease)
            if verdict != PASS:
                raise self._blocked(n, verdict, retry_ns)
        else:
            deadline = time.monotonic() + timeout
            step = 0.001
            while True:
                verdict, wait_ns, retry_ns = self._decide_on(
                    key, cfg, n, flags | F_NO_BLOCK | F_RETRY, None, lease)
                if verdict == PASS:
                    break
                now = time.monotonic()
                if verdict == NEVER or now >= deadline:
                    self._exit_on(key, cfg, n, _OUT_BLOCK, 0, [])
                    raise self._blocked(n, verdict, retry_ns)
                sleep, step = _step(retry_ns, step)
                _refuse_in_loop()
                time.sleep(max(0.0, min(sleep, deadline - now)))
        if wait_ns > 0 and sleep_wait:
            _refuse_in_loop()
            time.sleep(wait_ns / 1e9)
        return wait_ns


class _SyncEntry:
    __slots__ = ("_lim", "_key", "_cfg", "n", "_lease", "_t0", "_held", "_tok", "_timeout")

    def __init__(self, lim: Any, key: Any, cfg: _Config, n: int,
                 timeout: Optional[float] = None) -> None:
        self._lim, self._key, self._cfg, self.n = lim, key, cfg, n
        self._timeout = timeout  # checked (_wait_timeout): None, refused at once
        self._lease = os.urandom(8).hex()
        self._held = False

    def __enter__(self) -> "_SyncEntry":
        if self._held:
            raise RuntimeError("this entry is already entered")
        wait_ns = self._lim._acquire_on(self._key, self._cfg, self.n, self._timeout, F_ENTRY,
                                        self._lease, False)
        # renewed from the decision on: a throttle's wait may outlast the lease
        self._tok = _renewer(self._lim._client).add(self._lim, self._key, self._cfg,
                                                    self._lease)
        if wait_ns > 0:
            try:
                _refuse_in_loop()
                time.sleep(wait_ns / 1e9)
            except BaseException:  # interrupted before the body: given back
                _unrenew(self._tok)
                self._lim._exit_on(self._key, self._cfg, self.n, _OUT_NONE, 0,
                                   [(self._lease, self.n)])
                raise
        self._held = True
        self._t0 = time.monotonic()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        if self._held:
            self._held = False
            _unrenew(self._tok)
            self._lim._exit_on(self._key, self._cfg, self.n, _outcome(exc_type),
                               _elapsed_ms(self._t0), [(self._lease, self.n)])
        return False


class RedisLimiter(_SyncOps, SyncAdmission):
    """Limiter's surface with its state in Redis (a sync redis-py client).

    RedisLimiter(client, name, qps=None, *, concurrency=None, behavior="reject",
                 warm_up_s=10, cold_factor=3, max_queueing_ms=500, occupy_timeout_ms=500,
                 interval_ms=1000, sample_count=2, on_error="allow", lease_ms=5000,
                 on_block=None)
    """

    def __init__(self, client: Any, name: str, qps: Union[int, float, str, None] = None, *,
                 rate: Optional[str] = None,
                 concurrency: Optional[int] = None, behavior: str = "reject",
                 warm_up_s: float = 10, cold_factor: float = 3, max_queueing_ms: int = 500,
                 occupy_timeout_ms: int = 500, interval_ms: int = _rate.INTERVAL_MS,
                 sample_count: int = _rate.SAMPLE_COUNT,
                 on_error: str = "allow", lease_ms: int = 5_000,
                 on_block: Optional[Callable[..., Any]] = None, lease: bool = False) -> None:
        kw = dict(rate=rate, concurrency=concurrency, behavior=behavior, warm_up_s=warm_up_s,
                  cold_factor=cold_factor, max_queueing_ms=max_queueing_ms,
                  occupy_timeout_ms=occupy_timeout_ms, interval_ms=interval_ms,
                  sample_count=sample_count)
        self._setup(client, name, qps, kw, on_error, lease_ms, on_block)
        self.key = _limiter_key(self._name)
        self._held = _Held()
        self._leased = lease_engine(self, lease)
        if self._leased is not None:  # the decision: the slice's C method, no frame between
            setattr(self, "try_acquire", self._leased.c_slice(self.key).take)

    def try_acquire(self, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        """Admit now or refuse; never waits. Counts PASS or BLOCK in Redis."""
        n = _check_n(n)
        if self._leased is not None:
            return self._leased.try_take(self.key, self._cfg, n, now_ns)
        lease = self._lease_for(self._cfg)
        v, _, _ = self._decide_on(self.key, self._cfg, n, F_TRY, now_ns, lease)
        if v == PASS and self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, now_ns)
        return v == PASS

    def reserve(self, n: int = 1, *, now_ns: Optional[int] = None,
                prioritized: bool = False) -> Optional[int]:
        """The wait in ns (0 = go now), already counted as admitted; None = blocked."""
        n = _check_n(n)
        flags = F_PRIO if prioritized else 0
        lease = self._lease_for(self._cfg)
        v, wait, _ = self._decide_on(self.key, self._cfg, n, flags, now_ns, lease)
        if v != PASS:
            return None
        if self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, now_ns)
        return wait

    def acquire(self, n: int = 1, *, timeout: Optional[float] = None) -> None:
        """One decision, sleeping its wait; with a timeout, retry until admitted or the
        timeout passed. Raises BlockedError."""
        n = _check_n(n)
        timeout = _wait_timeout(self._cfg, n, timeout)
        lease = self._lease_for(self._cfg)
        self._acquire_on(self.key, self._cfg, n, timeout, 0, lease)
        if self._cfg.concurrency is not None:
            self._hold(None, self.key, self._cfg, lease, n, None)

    def charge(self, n: int, *, now_ns: Optional[int] = None) -> None:
        """Count n more as admitted now, without a decision (Limiter.charge): what a request
        used beyond its admission. Never refuses; n=0 charges nothing (no round trip); a
        concurrency limiter can only be charged 0 (ValueError)."""
        n = _check_charge_n(n)
        _time_args(now_ns)
        self._chargeable(self._cfg, n, "charge(n=%d)" % n)
        if n:
            self._charge_on(self.key, self._cfg, n, now_ns)

    def release(self, n: int = 1) -> None:
        """Give back n of what this client holds (try_acquire/reserve/acquire of a
        concurrency limiter)."""
        n = _check_n(n)
        pairs = self._unhold(None, n, repr(self._name))
        self._exit_on(self.key, self._cfg, n, _OUT_NONE, 0, pairs)

    def entry(self, n: int = 1, *, timeout: Optional[float] = None) -> _SyncEntry:
        """``with lim.entry(): ...``: acquire (waiting up to `timeout` s, as acquire()),
        then on exit record SUCCESS (and RT) or EXCEPTION and give back the in-flight
        lease."""
        n = _check_n(n)
        return _SyncEntry(self, self.key, self._cfg, n, _wait_timeout(self._cfg, n, timeout))

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING,
                 timeout: Optional[float] = None) -> Any:
        """Limiter's decorator (``@lim``, ``@lim(on_block=..., timeout=5)``)."""
        timeout = _check_timeout(timeout)
        if func is None:
            return lambda f: self.__call__(f, on_block=on_block, timeout=timeout)
        return _decorate_entries(self, type(self).__name__, func, on_block, None, False,
                                 timeout)

    def stats(self, now_ns: Optional[int] = None) -> Stats:
        """The window's rates in Redis (all clients together). Errors propagate."""
        args = self._args(self._cfg, 1, 0, now_ns, "")
        return self._stats(self._run(_SCRIPTS["stats"], self.key, args), self._cfg,
                           self._name)

    def reset(self) -> None:
        """Delete this limiter's state in Redis (every client starts fresh)."""
        self._client.delete(self.key)

    def close(self) -> None:
        """Nothing to close: decisions use the client's own pool (close the client). Kept
        for callers of earlier versions. With lease=True: gives back the unused slice."""
        if self._leased is not None:
            self._leased.close()


class RedisKeyedLimiter(NeedsKey, _KeyedMixin, _SyncOps):
    """KeyedLimiter's surface with one Redis string per key (a sync redis-py client).

    RedisKeyedLimiter(client, name, qps=None, *, <Limiter's keywords>, overrides=None,
                      on_error="allow", lease_ms=5000, on_block=None)
    """

    _kind = "RedisKeyedLimiter"

    def __init__(self, client: Any, name: str, qps: Union[int, float, str, None] = None, *,
                 rate: Optional[str] = None,
                 concurrency: Optional[int] = None, behavior: str = "reject",
                 warm_up_s: float = 10, cold_factor: float = 3, max_queueing_ms: int = 500,
                 occupy_timeout_ms: int = 500, interval_ms: int = _rate.INTERVAL_MS,
                 sample_count: int = _rate.SAMPLE_COUNT,
                 overrides: Optional[Dict[Any, Any]] = None, on_error: str = "allow",
                 lease_ms: int = 5_000, on_block: Optional[Callable[..., Any]] = None,
                 lease: bool = False) -> None:
        kw = dict(rate=rate, concurrency=concurrency, behavior=behavior, warm_up_s=warm_up_s,
                  cold_factor=cold_factor, max_queueing_ms=max_queueing_ms,
                  occupy_timeout_ms=occupy_timeout_ms, interval_ms=interval_ms,
                  sample_count=sample_count, qps=qps)
        _rate.keyed_samples(kw)  # as KeyedLimiter: a rate's default steps are fewer
        self._setup(client, name, kw.pop("qps"), kw, on_error, lease_ms, on_block)
        self._keyed_setup(overrides)
        self._leased = lease_engine(self, lease)

    def _one(self, key: Any, n: int, flags: int, now_ns: Any) -> Tuple[int, int, int]:
        rk = self._rkey(key)
        n = _check_n(n)
        cfg = self._cfg_for(rk)
        lease = self._lease_for(cfg)
        v, wait, retry = self._decide_on(rk, cfg, n, flags, now_ns, lease)
        self._tally(v, n)
        if v == PASS and cfg.concurrency is not None:
            self._hold(rk, rk, cfg, lease, n, now_ns)
        return v, wait, retry

    def local_totals(self) -> Dict[str, int]:
        if self._leased is not None:
            self._leased.counters()  # folds the decisions made on slices into the totals
        return super().local_totals()

    def try_acquire(self, key: Any, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        if self._leased is not None:
            return keyed_take(self, key, n, now_ns)
        return self._one(key, n, F_TRY, now_ns)[0] == PASS

    def reserve(self, key: Any, n: int = 1, *, now_ns: Optional[int] = None) -> Optional[int]:
        v, wait, _ = self._one(key, n, 0, now_ns)
        return wait if v == PASS else None

    def acquire(self, key: Any, n: int = 1, *, timeout: Optional[float] = None) -> None:
        rk = self._rkey(key)
        n = _check_n(n)
        cfg = self._cfg_for(rk)
        timeout = _wait_timeout(cfg, n, timeout)
        lease = self._lease_for(cfg)
        try:
            self._acquire_on(rk, cfg, n, timeout, 0, lease)
        except BlockedError:
            self._tally(BLOCK, n)
            raise
        self._tally(PASS, n)
        if cfg.concurrency is not None:
            self._hold(rk, rk, cfg, lease, n, None)

    def charge(self, key: Any, n: int, *, now_ns: Optional[int] = None) -> None:
        """Count n more as admitted for key now, without a decision (KeyedLimiter.charge);
        counted in local_totals()["pass"] once Redis took it."""
        rk = self._rkey(key)
        n = _check_charge_n(n)
        _time_args(now_ns)
        cfg = self._cfg_for(rk)
        self._chargeable(cfg, n, "charge(%r, n=%d)" % (key, n))
        if n and self._charge_on(rk, cfg, n, now_ns):
            self._tally(PASS, n)

    def release(self, key: Any, n: int = 1) -> None:
        rk = self._rkey(key)
        n = _check_n(n)
        pairs = self._unhold(rk, n, "key %r" % (key,))
        self._exit_on(rk, self._cfg_for(rk), n, _OUT_NONE, 0, pairs)

    def entry(self, key: Any, n: int = 1, *, timeout: Optional[float] = None) -> _SyncEntry:
        rk = self._rkey(key)
        n = _check_n(n)
        cfg = self._cfg_for(rk)
        return _SyncEntry(self, rk, cfg, n, _wait_timeout(cfg, n, timeout))

    def __call__(self, func: Any = None, *, key: Any = None, on_block: Any = _MISSING,
                 timeout: Optional[float] = None) -> Any:
        """``@per_user(key=lambda request, *a, **k: request.client_ip)`` (also on_block=,
        timeout=: KeyedLimiter's decorator)."""
        timeout = _check_timeout(timeout)
        if func is None:
            return lambda f: self.__call__(f, key=key, on_block=on_block, timeout=timeout)
        if key is None or not callable(key):
            raise TypeError("a keyed limiter decorates with key=callable(*args, **kwargs)")
        return _decorate_entries(self, type(self).__name__, func, on_block, key,
                                 self._is_async, timeout)

    def stats(self, key: Any, now_ns: Optional[int] = None) -> Stats:
        """One key's window: pass_qps, concurrency (in-flight leases) and waiting; BLOCK and
        the outcomes of keys are counted by each client (``local_totals()``)."""
        rk = self._rkey(key)
        cfg = self._cfg_for(rk)
        args = self._args(cfg, 1, 0, now_ns, "")
        return self._stats(self._run(_SCRIPTS["stats"], rk, args), cfg, self._name)

    def reset(self, key: Any) -> None:
        self._client.delete(self._rkey(key))

    def close(self) -> None:
        """With lease=True: gives back every key's unused slice (else nothing to close)."""
        if self._leased is not None:
            self._leased.close()

