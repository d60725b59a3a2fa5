"""What the sync and async Redis types share: settings, replies, on_error, the keyed part,
and the logic, each operation written once as a generator of round trips (a script call, a
sleep) run by the limiter's transport (_transport): the two kinds differ only there."""
from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Tuple, cast

from .._core import BlockedError
from .._limiter import _MISSING, _check_on_block, _check_timeout, _decorate_entries
from ._config import _LIMITER_KW, _ON_ERROR, MIN_LEASE_MS, _Config
from ._scripts import GROUP_INDEX
from ._scripts import SCRIPTS as _SCRIPTS
from ._scripts import _Script
from ._transport import _ERRORS, _AsyncTransport, _Held, _SyncTransport, _unrenew
from ._wire import (_OUT_BLOCK, _OUT_RENEW, BLOCK, F_ENTRY, F_LEAN, F_MINUTE, F_NO_BLOCK,
                    F_RETRY, NEVER, PASS, _bulk, _charge_reply, _check_exit_reply, _check_n,
                    _check_name, _decision, _encode_key, _evalsha, _keyed_prefix, _NO_TIME,
                    _OUT_EXCEPTION, _OUT_NONE, _OUT_SUCCESS, _SMALL, _stats_reply,
                    _time_args, _what)

if TYPE_CHECKING:
    from typing import Concatenate, Coroutine, ParamSpec, TypeVar

    _P = ParamSpec("_P")
    _R = TypeVar("_R")

log = logging.getLogger("slidewin.redis")
_LOG_EVERY_S = 60.0


def _awaited(f: Callable[Concatenate[Any, _P], _R]
             ) -> Callable[Concatenate[Any, _P], Coroutine[Any, Any, _R]]:
    """The asyncio twin of a sync type's method: the same call, its round trips (a
    coroutine on an asyncio transport or client) awaited."""
    async def face(self: Any, /, *a: _P.args, **k: _P.kwargs) -> _R:
        return cast("_R", await cast(Any, f(self, *a, **k)))
    functools.update_wrapper(face, f)
    return face


class _Base:
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
        _check_on_block(on_block)
        self._cfg = _Config(qps, kw, lease_ms)
        self._client = client
        self._t = (_AsyncTransport if self._is_async else _SyncTransport)(client)
        self._on_error = on_error
        self._on_block = on_block
        self._lock = threading.Lock()
        # random, not a counter: unique across forked (gunicorn --preload) workers too
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
        """A concurrency limiter's admission takes a lease of its own."""
        return self._lease if cfg.concurrency is None else os.urandom(8).hex()

    def _hold(self, hkey: Any, key: Any, cfg: _Config, lease: str, n: int, now_ns: Any) -> None:
        """A concurrency limiter's admission: held, renewed on the server's clock."""
        tok = None if now_ns is not None else self._t.renewer().add(self, key, cfg, lease)
        with self._lock:
            self._held.own().setdefault(hkey, []).append([lease, n, tok])

    def _flags(self, cfg: _Config, flags: int) -> int:
        if self._keyed:  # a key's state holds only what admission needs
            flags |= F_LEAN | (F_MINUTE if cfg.minute else 0)
        return flags

    def _args(self, cfg: _Config, n: int, flags: int, now_ns: Any, lease: str) -> List[Any]:
        ms, sub = _time_args(now_ns)
        return [ms, sub, str(n), str(self._flags(cfg, flags)), cfg.layout, str(cfg.ttl_ms),
                str(cfg.interval_ms), str(cfg.sample_count), lease, str(cfg.lease_ms)]

    def _charge_args(self, cfg: _Config, n: int, now_ns: Any) -> List[Any]:
        """A decision's, then the behavior's index (all_of's) and its parameters."""
        return (self._args(cfg, n, 0, now_ns, "") + [str(GROUP_INDEX[cfg.script.sha])]
                + cfg.params)

    def _log_error(self, what: str, err: BaseException, after: str) -> None:
        """One more error in `errors`, logged (once a minute at most)."""
        with self._lock:
            self.errors += 1
            now = time.monotonic()
            loud = now - self._last_log >= _LOG_EVERY_S
            if loud:
                self._last_log = now
        if loud:
            log.warning("slidewin.redis: %s of %r %s (%s: %s)%s (logged at most once a minute; "
                        "%d errors so far)", what, self._name, _what(err), type(err).__name__,
                        err, after, self.errors)

    def _charge_failed(self, err: BaseException, quiet: bool = False) -> None:
        """A charge Redis did not take: counted, logged, raised if on_error="raise"."""
        self._log_error("a charge", err, ": not counted")
        if self._on_error == "raise" and not quiet:
            raise err

    def _failed(self, err: BaseException, flags: int) -> Tuple[int, int, int]:
        self._log_error("a decision", err, "; on_error=%r" % (self._on_error,))
        if self._on_error == "raise":
            raise err
        allow = self._on_error == "allow"
        with self._lock:
            if allow:
                self.errors_allowed += 1
            else:
                self.errors_denied += 1
        return (PASS if allow else BLOCK), 0, -1

    def _blocked(self, n: int, verdict: int, retry_ns: int) -> BlockedError:
        retry = None if verdict == NEVER or retry_ns < 0 else retry_ns / 1e9
        return BlockedError("%s %r (%s) refused a request of %d" % (
            type(self).__name__, self._name, self._cfg.describe(), n), retry_after=retry,
            limiter=self)

    _keyed = False

    def _where(self, key: Any) -> Tuple[Any, Any, _Config]:
        """(Redis key, what holds its admissions, settings) of a call's key."""
        return self.key, None, self._cfg  # type: ignore[attr-defined]

    def _tally(self, v: int, n: int) -> None:
        """A keyed limiter counts its keys' PASS and BLOCK here (_KeyedMixin)."""

    @staticmethod
    def _op(script: _Script, key: Any, args: List[Any]) -> Tuple[Any, ...]:
        return script, key, _evalsha(script.sha, [key], args)

    def _g_decide(self, key: Any, cfg: _Config, n: int, flags: int, now_ns: Any,
                  lease: str) -> Any:
        try:  # the EVALSHA packed from the settings' static parts
            t = _NO_TIME if now_ns is None else b"".join(map(_bulk, _time_args(now_ns)))
            reply = yield cfg.script, key, b"".join((
                cfg.head, _bulk(key), t, _SMALL[n] if n < 256 else _bulk(str(n)),
                _SMALL[self._flags(cfg, flags)], cfg.mid, _bulk(lease), cfg.tail))
            return _decision(reply, self._name, cfg.interval_ms, cfg.sample_count)
        except _ERRORS as e:
            return self._failed(e, flags)

    def _g_exit(self, key: Any, cfg: _Config, n: int, outcome: int, rt_ms: int,
                leases: List[Tuple[str, int]]) -> Any:
        """An EXIT call (a renewal: _OUT_RENEW), False when it failed: the leases expire on
        their own (lease_ms); a renewal is tried again, an exit's outcome is lost (counted)."""
        args = self._args(cfg, n, 0, None, "") + [str(outcome), str(rt_ms)]
        for lid, k in leases:
            args += [lid, str(k)]
        try:
            _check_exit_reply((yield self._op(_SCRIPTS["exit"], key, args)), self._name)
            return True
        except (Exception if outcome == _OUT_RENEW else _ERRORS) as e:
            if outcome != _OUT_RENEW:
                with self._lock:
                    self.errors += 1
            log.debug("slidewin.redis: %s %r failed: %s", "renewing the leases of"
                      if outcome == _OUT_RENEW else "exit of", self._name, e)
            return False

    def _g_wait(self, key: Any, cfg: _Config, n: int, timeout: Optional[float], flags: int,
                lease: str) -> Any:
        def refused(res: Tuple[int, int, int], timed_out: bool) -> Any:
            if timed_out:  # the refusal's BLOCK (the decisions with F_NO_BLOCK counted none)
                yield from self._g_exit(key, cfg, n, _OUT_BLOCK, 0, [])
            return self._blocked(n, res[0], res[2])

        return (yield from _g_poll(
            lambda f: self._g_decide(key, cfg, n, f, None, lease), refused, timeout, flags))

    def _g_admit(self, key: Any, n: int, flags: int, now_ns: Any) -> Any:
        """try_acquire (F_TRY) and reserve: the wait (ns) when admitted, else None."""
        rk, hk, cfg = self._where(key)
        n = _check_n(n)
        lease = self._lease_for(cfg)
        v, wait, _ = yield from self._g_decide(rk, cfg, n, flags, now_ns, lease)
        self._tally(v, n)
        if v != PASS:
            return None
        if cfg.concurrency is not None:
            self._hold(hk, rk, cfg, lease, n, now_ns)
        return wait

    def _g_acquire(self, key: Any, n: int, timeout: Any) -> Any:
        rk, hk, cfg = self._where(key)
        n = _check_n(n)
        timeout = _wait_timeout(timeout, [(cfg, n)])
        lease = self._lease_for(cfg)
        try:
            wait_ns = yield from self._g_wait(rk, cfg, n, timeout, 0, lease)
            if wait_ns > 0:
                yield wait_ns / 1e9
        except BlockedError:
            self._tally(BLOCK, n)
            raise
        self._tally(PASS, n)
        if cfg.concurrency is not None:
            self._hold(hk, rk, cfg, lease, n, None)

    def _g_charge(self, key: Any, n: int, now_ns: Any) -> Any:
        rk, _, cfg = self._where(key)
        n = _check_n(n, 0)
        _time_args(now_ns)
        if n > 0 and cfg.concurrency is not None:
            what = "charge(%r, n=%d)" % (key, n) if self._keyed else "charge(n=%d)" % n
            raise ValueError("%s: a concurrency limiter counts requests in flight, not "
                             "amounts; charge a qps limiter (or charge it 0)" % what)
        if not n:
            return
        try:
            reply = yield self._op(_SCRIPTS["charge"], rk, self._charge_args(cfg, n, now_ns))
            _charge_reply(reply, self._name, cfg.interval_ms, cfg.sample_count)
        except _ERRORS as e:
            self._charge_failed(e)
            return
        self._tally(PASS, n)

    def _g_release(self, key: Any, n: int) -> Any:
        rk, hk, cfg = self._where(key)
        n = _check_n(n)
        what = "key %r" % (key,) if self._keyed else repr(self._name)
        with self._lock:
            pairs, done = self._held.take(hk, n, what)
        for tok in done:
            _unrenew(tok)
        yield from self._g_exit(rk, cfg, n, _OUT_NONE, 0, pairs)

    def _g_stats(self, key: Any, now_ns: Any) -> Any:
        rk, _, cfg = self._where(key)
        reply = yield self._op(_SCRIPTS["stats"], rk, self._args(cfg, 1, 0, now_ns, ""))
        return _stats_reply(reply, self._name, cfg.interval_ms, cfg.sample_count)

    def _entry(self, key: Any, n: int, timeout: Any) -> "_Entry":
        rk, _, cfg = self._where(key)
        n = _check_n(n)
        return _Entry(self, rk, cfg, n, _wait_timeout(timeout, [(cfg, n)]))

    def entry(self, n: int = 1, *, timeout: Optional[float] = None) -> "_Entry":
        """``with lim.entry(): ...`` (``async with`` on the asyncio types): acquire (waiting
        up to `timeout` s, as acquire()), then on exit record SUCCESS (and RT) or EXCEPTION
        and give back the in-flight lease."""
        return self._entry(None, n, timeout)

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING,
                 timeout: Optional[float] = None) -> Any:
        """Limiter's decorator (``@lim``, ``@lim(on_block=..., timeout=5)``)."""
        return _decorate(self, type(self).__name__, func, None, on_block, timeout)


def _decorate(obj: Any, what: str, func: Any, key: Any, on_block: Any, timeout: Any) -> Any:
    """Every type's decorator: `func`'s calls in obj's entries (a keyed limiter's: by key)."""
    timeout = _check_timeout(timeout)
    if func is None:
        return lambda f: _decorate(obj, what, f, key, on_block, timeout)
    if obj._keyed and (key is None or not callable(key)):
        raise TypeError("a keyed limiter decorates with key=callable(*args, **kwargs)")
    return _decorate_entries(obj, what, func, on_block, key, obj._t.is_async, timeout)


def _wait_timeout(timeout: Any, requests: List[Tuple[_Config, int]]) -> Optional[float]:
    """A wait's timeout, checked: 0 for a request one (settings, n) of which never passes."""
    t = _check_timeout(timeout)
    if t is not None and any(cfg.can_never_pass(n) for cfg, n in requests):
        t = 0.0
    return t


def _g_poll(decide: Any, refused: Any, timeout: Optional[float], flags: int) -> Any:
    """The wait loop of an acquire or entry: the admission's wait (ns). `decide(flags)`: a
    generator of (verdict, wait_ns, retry_ns, ...); `refused(result, timed_out)`: one of the
    BlockedError to raise. With a timeout, decide again at the refusal's retry."""
    if timeout is None:
        res = yield from decide(flags | F_RETRY)
        if res[0] != PASS:
            raise (yield from refused(res, False))
        return res[1]
    deadline = time.monotonic() + timeout
    step = 0.001
    while True:
        res = yield from decide(flags | F_NO_BLOCK | F_RETRY)
        if res[0] == PASS:
            return res[1]
        now = time.monotonic()
        if res[0] == NEVER or now >= deadline:
            raise (yield from refused(res, True))
        if res[2] > 0:
            sleep = res[2] / 1e9
        else:  # a refuser that cannot tell when: poll, up to 50 ms
            sleep, step = step, min(step * 2, 0.05)
        yield float(max(0.0, min(sleep, deadline - now)))


def _outcome(exc_type: Any) -> int:
    if exc_type is None:
        return _OUT_SUCCESS
    return _OUT_EXCEPTION if issubclass(exc_type, Exception) else _OUT_NONE


class _Driven:
    """An entry's ``with`` (a sync type's) and ``async with`` (an asyncio one's), running
    _enter/_exit on its owner's transport."""

    __slots__ = ("_by", "_held", "_t0")
    _by: Any  # the limiter (or group) entered
    _held: bool
    _give_back: Callable[[int, int], Any]  # (outcome, rt_ms)
    _admit: Callable[[], Any]  # returns the admission's wait (ns)

    def _enter(self) -> Any:
        """Admitted, the wait, then held; an interruption before the body gives back."""
        if self._held:
            raise RuntimeError("this entry is already entered")
        wait_s = (yield from self._admit()) / 1e9
        if wait_s > 0:
            try:
                yield wait_s
            except BaseException:
                yield from self._give_back(_OUT_NONE, 0)
                raise
        self._held = True
        self._t0 = time.monotonic()
        return self

    def _exit(self, exc_type: Any) -> Any:
        if self._held:
            self._held = False
            rt_ms = max(0, int((time.monotonic() - self._t0) * 1000))
            yield from self._give_back(_outcome(exc_type), rt_ms)
        return False

    def _kind(self, is_async: bool) -> Any:
        t = self._by._t
        if t.is_async != is_async:
            raise TypeError("the entry of a %s is entered with `%s`" % (
                type(self._by).__name__, "async with" if t.is_async else "with"))
        return t

    def __enter__(self) -> Any:
        return self._kind(False).drive(self._enter())

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        return self._kind(False).drive(self._exit(exc_type))  # type: ignore[no-any-return]

    async def __aenter__(self) -> Any:
        return await self._kind(True).drive(self._enter())

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return await self._kind(True).drive(self._exit(exc_type))  # type: ignore[no-any-return]


class _Entry(_Driven):
    __slots__ = ("_key", "_cfg", "n", "_lease", "_tok", "_timeout")

    def __init__(self, lim: Any, key: Any, cfg: _Config, n: int,
                 timeout: Optional[float] = None) -> None:
        self._by, self._key, self._cfg, self.n = lim, key, cfg, n
        self._timeout = timeout  # checked (_wait_timeout): None, refused at once
        self._lease = os.urandom(8).hex()
        self._held = False

    def _admit(self) -> Any:
        lim = self._by
        wait_ns = yield from lim._g_wait(self._key, self._cfg, self.n, self._timeout, F_ENTRY,
                                         self._lease)
        # renewed from the decision on: a throttle's wait may outlast the lease
        self._tok = lim._t.renewer().add(lim, self._key, self._cfg, self._lease)
        return wait_ns

    def _give_back(self, outcome: int, rt_ms: int) -> Any:
        _unrenew(self._tok)
        yield from self._by._g_exit(self._key, self._cfg, self.n, outcome, rt_ms,
                                    [(self._lease, self.n)])


class _KeyedMixin:
    """Per-key state: one Redis string per key, each its own hash tag, holding only what
    admission needs; BLOCK and the outcomes are counted by this client (``local_totals()``)."""

    # set by _Base._setup (the class this one is mixed with)
    _name: str
    _cfg: _Config
    _lock: threading.Lock
    _leased: Any = None  # lease=True: the leases (set by the keyed types' __init__)

    def _keyed_setup(self, overrides: Any) -> None:
        self._prefix = _keyed_prefix(self._name)
        # an override's other settings
        self._kw = {k: getattr(self._cfg, k) for k in _LIMITER_KW[1:]}
        self._overrides: Dict[bytes, _Config] = {}
        self._override_values: Dict[Any, Any] = {}
        self._held = _Held()
        self._totals = {"pass": 0, "block": 0}
        if overrides:
            self.overrides = overrides

    def _rkey(self, key: Any) -> bytes:
        return self._prefix + _encode_key(key) + b"}"

    _keyed = True

    def _where(self, key: Any) -> Tuple[Any, Any, _Config]:
        rk = self._rkey(key)
        return rk, rk, self._cfg_for(rk)

    def entry(self, key: Any, n: int = 1, *, timeout: Optional[float] = None) -> "_Entry":
        """``with lim.entry(key): ...`` (``async with`` on the asyncio type)."""
        return self._entry(key, n, timeout)  # type: ignore[attr-defined,no-any-return]

    def __call__(self, func: Any = None, *, key: Any = None, on_block: Any = _MISSING,
                 timeout: Optional[float] = None) -> Any:
        """``@per_user(key=lambda request, *a, **k: request.client_ip)`` (also on_block=,
        timeout=: KeyedLimiter's decorator)."""
        return _decorate(self, type(self).__name__, func, key, on_block, timeout)

    def _cfg_for(self, rk: bytes) -> _Config:
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
            kw, qps = dict(self._kw), v
            if self._cfg.concurrency is not None:
                kw["concurrency"], qps = v, None
            try:
                cfgs[enc] = _Config(qps, kw, self._cfg.lease_ms)
            except (TypeError, ValueError) as e:
                raise type(e)("overrides[%r]: %s" % (k, e)) from None
        self._overrides = cfgs
        self._override_values = dict(value)

    def _tally(self, v: int, n: int) -> None:
        with self._lock:
            self._totals["pass" if v == PASS else "block"] += n

    def local_totals(self) -> Dict[str, int]:
        """This client's admitted and refused requests over every key."""
        if self._leased is not None:
            self._leased.counters()  # folds the decisions made on slices into the totals
        with self._lock:
            return dict(self._totals)

