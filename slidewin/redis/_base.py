"""What the sync and async Redis types share: settings, arguments, replies, on_error, and
the per-key part of the keyed types."""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from .._core import BlockedError, Stats
from .._limiter import _check_timeout
from ._config import _ON_ERROR, MIN_LEASE_MS, _Config
from ._scripts import GROUP_INDEX
from ._transport import _arenewer, _Held, _is_cluster, _renewer, _unrenew
from ._wire import (BLOCK, F_LEAN, F_MINUTE, NEVER, PASS, _bulk, _check_name, _decision,
                    _encode_key, _keyed_prefix, _NO_TIME, _OUT_EXCEPTION, _OUT_NONE,
                    _OUT_SUCCESS, _small_bulk, _SMALL, _stats_reply, _time_args, _what)

log = logging.getLogger("slidewin.redis")
_LOG_EVERY_S = 60.0


class _Base:
    """What the sync and async types share: settings, arguments, replies, on_error."""

    _kind = "RedisLimiter"
    _is_async = False
    _held: "_Held"

    def _setup(self, client: Any, name: Any, qps: Any, kw: Dict[str, Any], on_error: Any,
               lease_ms: Any, on_block: Any) -> None:
        if client is None:
            raise TypeError("client must be a redis-py client, not None")
        self._name = _check_name(name)
        if not isinstance(on_error, str):
            raise TypeError("on_error must be a str ('allow', 'deny' or 'raise'), not %s"
                            % type(on_error).__name__)
        if on_error not in _ON_ERROR:
            raise ValueError("on_error must be one of 'allow', 'deny', 'raise', got %r"
                             % (on_error,))
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int):
            raise TypeError("lease_ms must be an int, not %s" % type(lease_ms).__name__)
        if not MIN_LEASE_MS <= lease_ms <= 2**40:  # renewed every lease_ms / 3
            raise ValueError("lease_ms must be in [%d, 2**40] ms, got %d"
                             % (MIN_LEASE_MS, lease_ms))
        if on_block is not None and not callable(on_block):
            raise TypeError("on_block must be callable, not %s" % type(on_block).__name__)
        self._cfg = _Config(qps, kw, lease_ms)
        self._client = client
        self._cluster = _is_cluster(client)
        self._on_error = on_error
        self._on_block = on_block
        self._lock = threading.Lock()
        # this client's lease id (entries); a concurrency limiter's admissions take a random
        # one each (_lease_for: unique across forked processes too, where a prefix and a
        # counter would repeat in every gunicorn --preload worker)
        self._lease = os.urandom(8).hex()
        self.errors = 0          # decisions that could not reach Redis
        self.errors_allowed = 0  # ... of which on_error admitted
        self.errors_denied = 0   # ... of which on_error refused
        self._last_log = -math.inf

    # settings, read-only
    name = property(lambda self: self._name)
    qps = property(lambda self: self._cfg.qps)
    rate = property(lambda self: self._cfg.rate)
    concurrency = property(lambda self: self._cfg.concurrency)
    behavior = property(lambda self: self._cfg.behavior)
    interval_ms = property(lambda self: self._cfg.interval_ms)
    sample_count = property(lambda self: self._cfg.sample_count)
    max_queueing_ms = property(lambda self: self._cfg.max_queueing_ms)
    occupy_timeout_ms = property(lambda self: self._cfg.occupy_timeout_ms)
    warm_up_s = property(lambda self: self._cfg.warm_up_s)
    cold_factor = property(lambda self: self._cfg.cold_factor)
    lease_ms = property(lambda self: self._cfg.lease_ms)
    on_error = property(lambda self: self._on_error)
    client = property(lambda self: self._client)

    def __repr__(self) -> str:
        return "%s(%r, %s, on_error=%r)" % (type(self).__name__, self._name,
                                             self._cfg.describe(), self._on_error)

    def _lease_for(self, cfg: _Config) -> str:
        """The lease an admission takes: one of its own for a concurrency limiter (each
        renewed and released by name), else this client's (unused: no lease is taken)."""
        if cfg.concurrency is None:
            return self._lease
        return os.urandom(8).hex()

    def _hold(self, hkey: Any, key: Any, cfg: _Config, lease: str, n: int,
              now_ns: Any) -> None:
        """An admission of a concurrency limiter: held (release()) and renewed while held
        (on the server's clock only)."""
        tok = None
        if now_ns is None:
            tok = (_arenewer() if self._is_async else _renewer(self._client)).add(
                self, key, cfg, lease)
        with self._lock:
            self._held.add(hkey, lease, n, tok)

    def _unhold(self, hkey: Any, n: int, what: str) -> List[Tuple[str, int]]:
        with self._lock:
            pairs, done = self._held.take(hkey, n, what)
        for tok in done:
            _unrenew(tok)
        return pairs

    def _args(self, cfg: _Config, n: int, flags: int, now_ns: Any, lease: str) -> List[Any]:
        ms, sub = _time_args(now_ns)
        if self._lean:
            flags |= F_LEAN | (F_MINUTE if cfg.minute else 0)
        return [ms, sub, str(n), str(flags), cfg.layout, str(cfg.ttl_ms),
                str(cfg.interval_ms), str(cfg.sample_count), lease, str(cfg.lease_ms)]

    _lean = False

    def _packed_decision(self, cfg: _Config, key: Any, n: int, flags: int, now_ns: Any,
                         lease: str) -> bytes:
        """The decision's EVALSHA as RESP bytes, its constant parts packed once (_Config)."""
        if self._lean:
            flags |= F_LEAN | (F_MINUTE if cfg.minute else 0)
        if now_ns is None:
            t = _NO_TIME
        else:
            ms, sub = _time_args(now_ns)
            t = _bulk(ms) + _bulk(sub)
        return b"".join((cfg.head, _bulk(key), t, _SMALL[n] if n < 256 else _small_bulk(n),
                         _SMALL[flags], cfg.mid, _bulk(lease), cfg.tail))

    def _charge_args(self, cfg: _Config, n: int, now_ns: Any) -> List[Any]:
        """The CHARGE script's arguments: a decision's, then the behavior's index (all_of's
        order) and its parameters."""
        return (self._args(cfg, n, 0, now_ns, "") + [str(GROUP_INDEX[cfg.script.sha])]
                + cfg.params)

    @staticmethod
    def _chargeable(cfg: _Config, n: int, what: str) -> None:
        if n > 0 and cfg.concurrency is not None:
            raise ValueError("%s: a concurrency limiter counts requests in flight, not "
                             "amounts; charge a qps limiter (or charge it 0)" % what)

    def _charge_failed(self, err: BaseException, quiet: bool = False) -> None:
        """A charge Redis did not take (unreachable, an error reply, a reply no script
        returns): counted in `errors` and logged (at most once a minute); raised when
        on_error="raise" (else the charge is lost, as an exit's outcome is)."""
        with self._lock:
            self.errors += 1
            now = time.monotonic()
            loud = now - self._last_log >= _LOG_EVERY_S
            if loud:
                self._last_log = now
        if loud:
            log.warning("slidewin.redis: a charge of %r %s (%s: %s): not counted "
                        "(logged at most once a minute; %d errors so far)", self._name,
                        _what(err), type(err).__name__, err, self.errors)
        if self._on_error == "raise" and not quiet:
            raise err

    def _parse(self, reply: Any, cfg: _Config) -> Tuple[int, int, int]:
        return _decision(reply, self._name, cfg.interval_ms, cfg.sample_count)

    def _failed(self, err: BaseException, flags: int) -> Tuple[int, int, int]:
        """on_error: the decision when Redis could not decide."""
        with self._lock:
            self.errors += 1
            now = time.monotonic()
            quiet = now - self._last_log < _LOG_EVERY_S
            if not quiet:
                self._last_log = now
        if not quiet:
            log.warning("slidewin.redis: a decision of %r %s (%s: %s); on_error=%r "
                        "(logged at most once a minute; %d errors so far)", self._name,
                        _what(err), type(err).__name__, err, self._on_error, self.errors)
        if self._on_error == "raise":
            raise err
        if self._on_error == "allow":
            with self._lock:
                self.errors_allowed += 1
            return PASS, 0, -1
        with self._lock:
            self.errors_denied += 1
        return BLOCK, 0, -1

    def _blocked(self, n: int, verdict: int, retry_ns: int) -> BlockedError:
        retry = None if verdict == NEVER or retry_ns < 0 else retry_ns / 1e9
        return BlockedError(
            "%s %r (%s) refused a request of %d" % (type(self).__name__, self._name,
                                                    self._cfg.describe(), n),
            retry_after=retry,
            limiter=self,
        )

    @staticmethod
    def _stats(reply: Any, cfg: _Config, name: str) -> Stats:
        return _stats_reply(reply, name, cfg.layout, cfg.interval_ms)


def _wait_timeout(cfg: _Config, n: int, timeout: Any) -> Optional[float]:
    """A wait's timeout (acquire, entry), checked: a request that can never pass waits 0."""
    t = _check_timeout(timeout)
    if t is not None and cfg.can_never_pass(n):
        t = 0.0
    return t


def _step(retry_ns: int, step: float) -> Tuple[float, float]:
    """How long a refused acquire sleeps before deciding again, and the next poll step."""
    if retry_ns > 0:
        return retry_ns / 1e9, step
    return step, min(step * 2, 0.05)  # a refuser that cannot tell when: poll, up to 50 ms


def _elapsed_ms(t0: float) -> int:
    return max(0, int((time.monotonic() - t0) * 1000))


def _outcome(exc_type: Any) -> int:
    if exc_type is None:
        return _OUT_SUCCESS
    if issubclass(exc_type, Exception):
        return _OUT_EXCEPTION
    return _OUT_NONE


class _KeyedMixin:
    """Per-key state: one Redis string per key, each with its own hash tag (keys spread over a
    cluster's nodes); only what admission needs is stored per key (PASS counts, the pacing
    time, warm-up tokens, leases). BLOCK, SUCCESS, EXCEPTION and RT of a keyed limiter are
    counted by this client in ``local_totals()``, not in Redis."""

    _lean = True
    # set by _Base._setup (the class this one is mixed with)
    _name: str
    _cfg: _Config
    _lock: threading.Lock

    def _keyed_setup(self, overrides: Any) -> None:
        self._prefix = _keyed_prefix(self._name)
        self._kw = dict(concurrency=self._cfg.concurrency, behavior=self._cfg.behavior,
                        warm_up_s=self._cfg.warm_up_s, cold_factor=self._cfg.cold_factor,
                        max_queueing_ms=self._cfg.max_queueing_ms,
                        occupy_timeout_ms=self._cfg.occupy_timeout_ms,
                        interval_ms=self._cfg.interval_ms, sample_count=self._cfg.sample_count)
        self._overrides: Dict[bytes, _Config] = {}
        self._override_values: Dict[Any, Any] = {}
        self._held = _Held()
        self._totals = {"pass": 0, "block": 0}
        if overrides:
            self.overrides = overrides

    def _rkey(self, key: Any) -> bytes:
        return self._prefix + _encode_key(key) + b"}"

    def _cfg_for(self, rk: bytes) -> _Config:
        """The settings of a Redis key of this limiter (its overrides, else the limiter's)."""
        if not self._overrides:
            return self._cfg
        return self._overrides.get(rk[len(self._prefix):-1], self._cfg)

    @property
    def overrides(self) -> Dict[Any, Any]:
        """Per-key thresholds (qps, or concurrency for a concurrency limiter)."""
        return dict(self._override_values)

    @overrides.setter
    def overrides(self, value: Any) -> None:
        if not isinstance(value, dict):
            raise TypeError("overrides must be a dict {key: threshold}, not %s"
                            % type(value).__name__)
        cfgs: Dict[bytes, _Config] = {}
        for k, v in value.items():
            try:
                enc = _encode_key(k)
            except (TypeError, ValueError) as e:
                raise type(e)("overrides: %s" % e) from None
            kw = dict(self._kw)
            try:
                if self._cfg.concurrency is not None:
                    kw["concurrency"] = v
                    cfgs[enc] = _Config(None, kw, self._cfg.lease_ms)
                else:
                    cfgs[enc] = _Config(v, kw, self._cfg.lease_ms)
            except (TypeError, ValueError) as e:
                raise type(e)("overrides[%r]: %s" % (k, e)) from None
        self._overrides = cfgs
        self._override_values = dict(value)

    def _tally(self, v: int, n: int) -> None:
        with self._lock:
            if v == PASS:
                self._totals["pass"] += n
            else:
                self._totals["block"] += n

    def local_totals(self) -> Dict[str, int]:
        """This client's admitted and refused requests over every key."""
        with self._lock:
            return dict(self._totals)

