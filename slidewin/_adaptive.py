"""AdaptiveLimiter: a concurrency Limiter whose limit is state, learned in the C core from
its own window (docs/adaptive.md); everything else is the Limiter's.
"""

import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, Optional, Tuple, Union

from . import _core
from ._limiter import _MISSING, Limiter, _check_on_block, _new

__all__ = ["AdaptiveLimiter"]

_ALGORITHMS = {"bbr": 1, "gradient": 2}
_MAX_LIMIT = 1_000_000
_SETTINGS = ("algorithm", "min_limit", "max_limit", "initial_limit", "cpu_threshold")


def _check_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int, not %s" % (name, type(value).__name__))
    if not 1 <= value <= _MAX_LIMIT:
        raise ValueError("%s must be an int in [1, %d], got %r" % (name, _MAX_LIMIT, value))
    return value


def _check(settings: Dict[str, Any], initial: int = 20) -> Dict[str, Any]:
    algorithm = settings["algorithm"]
    if not isinstance(algorithm, str):
        raise TypeError("algorithm must be a str ('bbr' or 'gradient'), not %s"
                        % type(algorithm).__name__)
    if algorithm not in _ALGORITHMS:
        raise ValueError("algorithm must be 'bbr' or 'gradient', got %r" % (algorithm,))
    lo = _check_int(settings["min_limit"], "min_limit")
    hi = _check_int(settings["max_limit"], "max_limit")
    if lo > hi:
        raise ValueError("min_limit (%d) must not be above max_limit (%d)" % (lo, hi))
    if settings["initial_limit"] is None:  # not given: `initial`, within the bounds
        settings["initial_limit"] = min(max(initial, lo), hi)
    init = _check_int(settings["initial_limit"], "initial_limit")
    if not lo <= init <= hi:
        raise ValueError("initial_limit must be in [min_limit, max_limit] = [%d, %d], got %d"
                         % (lo, hi, init))
    cpu = settings["cpu_threshold"]
    if cpu is not None:
        if isinstance(cpu, bool) or not isinstance(cpu, (int, float)):
            raise TypeError("cpu_threshold must be None or a number in [0, 1], not %s"
                            % type(cpu).__name__)
        if not (0.0 <= cpu <= 1.0):
            raise ValueError("cpu_threshold must be None or a fraction of the CPU in [0, 1] "
                             "(0.8 for 80 %%), got %r" % (cpu,))
    return settings


_UPDATE_MU = threading.Lock()  # AdaptiveLimiter.update()s, one at a time (they are rare)


class _CpuSampler:
    """One daemon thread per process, while a limiter has a cpu_threshold: every 0.5 s, the
    host's CPU use (/proc/stat, else the load average per CPU), smoothed, to every such
    limiter."""

    PERIOD_S = 0.5

    def __init__(self) -> None:
        self._lims: "weakref.WeakSet[AdaptiveLimiter]" = weakref.WeakSet()
        self._mu = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._pid = 0
        self._prev: Optional[Tuple[int, int]] = None
        self.value = 0.0

    def add(self, lim: "AdaptiveLimiter") -> None:
        with self._mu:
            self._lims.add(lim)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="slidewin-cpu",
                                                daemon=True)
                self._thread.start()

    def sample(self) -> float:
        try:
            with open("/proc/stat", "rb") as f:
                ticks = [int(x) for x in f.readline().split()[1:9]]
            now = (sum(ticks), ticks[3] + (ticks[4] if len(ticks) > 4 else 0))  # all, idle
        except (OSError, ValueError, IndexError):  # no /proc: the load average per CPU
            try:
                use = os.getloadavg()[0] / (os.cpu_count() or 1)
            except OSError:
                use = 0.0
        else:
            prev, self._prev = self._prev, now
            if prev is None or now[0] <= prev[0]:
                return self.value
            use = 1.0 - (now[1] - prev[1]) / (now[0] - prev[0])
        self.value = 0.5 * self.value + 0.5 * min(1.0, max(0.0, use))
        return self.value

    def _run(self) -> None:
        while True:
            value = self.sample()
            with self._mu:
                lims = list(self._lims)
                if not lims:  # the last such limiter is gone: the next add() starts another
                    self._thread = None
                    return
            for lim in lims:  # held alive by the list; a permille in [0, 1000] never raises
                lim._set_cpu(int(round(value * 1000)))
            del lims
            time.sleep(self.PERIOD_S)


_cpu = _CpuSampler()


def _after_fork_in_child() -> None:
    global _UPDATE_MU  # locks held by another thread of the parent: no thread of the child
    _UPDATE_MU = threading.Lock()
    _cpu._mu = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class AdaptiveLimiter(Limiter):
    """A concurrency limiter whose limit follows the measured capacity.

    - ``"bbr"``: Sentinel's system rule / go-kratos BBR: admit while in flight <= the
      window's max completions per second x min response time (with the queue taken out,
      measured against a drained probe as TCP BBR's ProbeRTT does: docs/adaptive.md),
      enforced only under pressure: while the host's CPU use is at or above
      ``cpu_threshold`` (a fraction, 0.8 for 80 %), or, without one, while the fastest
      calls run 25 % slower than drained (a queue); otherwise the limit follows the demand
      and refuses nothing.
    - ``"gradient"``: Netflix Gradient2's update: the limit grows while the fastest
      response time stays near its drained baseline and shrinks as queueing inflates it.

    Both judge queueing by the fastest calls: response times that do not grow with the
    calls in flight are no queue, however they spread; a backend that gets slower moves the
    limit within seconds instead of parking it at ``min_limit``.

    The limit (``limit``) stays in ``[min_limit, max_limit]`` and starts at
    ``initial_limit`` (20 clamped to the bounds when not given). Refusals raise
    :class:`slidewin.BlockedError`. A call teaches it its response time in ``entry()`` or
    the decorator, or by ``release(rt_ms=...)`` after ``try_acquire()``.
    """

    __slots__ = ("_adaptive",)
    _adaptive: Dict[str, Any]
    _PICKLED = _SETTINGS + ("interval_ms", "sample_count", "shared", "name")

    def __new__(
        cls,
        *,
        algorithm: str = "bbr",
        min_limit: int = 1,
        max_limit: int = 1000,
        initial_limit: Optional[int] = None,
        interval_ms: int = 1000,
        sample_count: int = 10,
        cpu_threshold: Optional[float] = None,
        shared: Union[None, bool, str] = None,
        name: Optional[str] = None,
        on_block: Optional[Callable[..., Any]] = None,
    ) -> "AdaptiveLimiter":
        args = dict(locals(), qps=None, concurrency=max_limit)
        for k in ("interval_ms", "sample_count"):  # (a Limiter's None: its own default)
            if args[k] is None:
                raise TypeError("%s must be an int, not None" % k)
        settings = _check({k: args.pop(k) for k in _SETTINGS})
        self: AdaptiveLimiter = _new(_core.Limiter, cls, args)  # the layout, name, on_block
        self._apply(settings)
        return self

    def _apply(self, settings: Dict[str, Any]) -> None:
        cpu = settings["cpu_threshold"]
        self._adapt(_ALGORITHMS[settings["algorithm"]], settings["min_limit"],
                    settings["max_limit"], settings["initial_limit"],
                    -1 if cpu is None else int(round(cpu * 1000)))
        self._adaptive = dict(settings)
        if cpu is not None:
            _cpu.add(self)

    @property
    def limit(self) -> int:
        """The limit in force: at most this many calls in flight (as the latest decision
        computed it). Also ``concurrency``, which the middlewares' RateLimit fields and the
        Limiter's own readers report."""
        return int(self._adaptive_limit(None) or 0)

    concurrency = limit

    @property
    def algorithm(self) -> str:
        return str(self._adaptive["algorithm"])

    @property
    def min_limit(self) -> int:
        return int(self._adaptive["min_limit"])

    @property
    def max_limit(self) -> int:
        return int(self._adaptive["max_limit"])

    @property
    def initial_limit(self) -> int:
        return int(self._adaptive["initial_limit"])

    @property
    def cpu_threshold(self) -> Optional[float]:
        return self._adaptive["cpu_threshold"]  # type: ignore[no-any-return]

    def release(self, n: int = 1, *, rt_ms: Optional[float] = None,
                now_ns: Optional[int] = None) -> None:
        """Give back n in flight. With ``rt_ms`` (the call's response time, ms), the
        completion is recorded as entry() records it, and the limit learns from it;
        ``now_ns`` is the time of the completion (default: now)."""
        if rt_ms is None:
            super().release(n)
            return
        if isinstance(rt_ms, bool) or not isinstance(rt_ms, (int, float)):
            raise TypeError("rt_ms must be a number of ms, not %s" % type(rt_ms).__name__)
        if not (0 <= rt_ms < 9.2e12):
            raise ValueError("rt_ms must be a finite number >= 0, got %r" % (rt_ms,))
        self._exit_rt(n, int(round(rt_ms * 1e6)), now_ns)

    def update(self, **settings: Any) -> None:
        """Change algorithm, min_limit, max_limit, initial_limit, cpu_threshold or on_block in
        place; the learned limit carries over (clamped to the new bounds). The layout
        (interval_ms, sample_count, shared) and name cannot change (ValueError)."""
        handler = _check_on_block(settings.pop("on_block", _MISSING))  # assigned only if given
        for key in settings:
            if key in ("interval_ms", "sample_count", "shared", "name"):
                raise ValueError("%s cannot change: build a new AdaptiveLimiter" % key)
            if key not in _SETTINGS:
                raise TypeError("update() got an unexpected keyword argument %r" % key)
        with _UPDATE_MU:  # read, changed and applied whole: concurrent updates lose none
            new = {**self._adaptive, "initial_limit": None, **settings}
            if "initial_limit" in settings:
                self._apply(_check(new))
            else:  # the one in force, clamped to the new bounds
                self._apply(_check(new, self._adaptive["initial_limit"]))
        if handler is not _MISSING:
            self._on_block = handler

    def __repr__(self) -> str:
        a = self._adaptive
        parts = ["%s=%r" % (k, a[k]) for k in _SETTINGS[:4]]
        for k, v, default in (("interval_ms", self.interval_ms, 1000),
                              ("sample_count", self.sample_count, 10),
                              ("cpu_threshold", a["cpu_threshold"], None),
                              ("shared", self.shared, None),
                              ("name", self.name, self.shared)):
            if v != default and v is not None:
                parts.append("%s=%r" % (k, v))
        return "AdaptiveLimiter(%s)" % ", ".join(parts)
