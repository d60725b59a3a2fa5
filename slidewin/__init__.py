"""slidewin: Sentinel-style sliding-window statistics and flow control with a C core.

- ``Metric``: a ring of time buckets (leap array) counting events over a sliding window.
- ``Limiter``: reject, warm_up, throttle, warm_up_throttle (by QPS) or a concurrency limit,
  with its own statistics; ``limit(...)`` builds one as a decorator, ``rate_limiter(
  "10/second;100/minute")`` one decision for several rates.
- ``KeyedLimiter``: one limit per key (user, client IP, tenant) in a bounded table.
- ``shared="name"`` (or ``shared=True``): one state for the processes of a host, in shared
  memory; ``unlink(name)`` removes a region's name.
- ``Breaker``: a circuit breaker on the window (Sentinel's degrade rules).
- ``Upstream``: the budgets of a rate-limited API this process calls, paused by its 429s,
  following its rate-limit headers (``slidewin.httpx``: under an httpx client).
- ``slidewin.asgi`` / ``slidewin.wsgi``: ``LimitMiddleware`` in front of a web app;
  ``client_ip(scope_or_environ, trusted_proxies=...)``: the client's address behind proxies.

``name=`` and ``limiters()`` (this process's named objects), ``totals()``, ``update(...)``
(state kept) and ``shadow=True`` (decide and count, admit everything) see and steer them.
Every time-dependent call takes ``now_ns`` (``time.monotonic_ns()``) for deterministic
tests; omitted, the library reads the clock.
"""
__version__ = "0.1.0"


def _load_installed_core() -> None:
    """Import the installed extension of this version when this package is a source checkout
    without one (run from the checkout's root, which leads ``sys.path``); else the usual
    ``ModuleNotFoundError``, with a hint."""
    import importlib.machinery
    import importlib.metadata
    import importlib.util
    import os
    import sys

    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = [(dist.version, str(dist.locate_file(f)))  # a checkout's own egg-info has none
             for dist in importlib.metadata.distributions()
             if (dist.metadata["Name"] or "").lower() == "slidewin" for f in dist.files or []
             if str(f).startswith("slidewin/_core") and str(f).endswith(suffixes)]
    same = [path for version, path in found if version == __version__ and os.path.isfile(path)]
    if not same:
        versions = ", ".join(sorted({version for version, _ in found})) or "none"
        raise ModuleNotFoundError(
            "slidewin is imported from a source checkout whose extension is not built "
            f"({os.path.dirname(os.path.abspath(__file__))}): build it in place with "
            "`pip install -e .`, or run from another directory (installed with an extension: "
            f"{versions}; this checkout: {__version__})", name=__name__ + "._core")
    spec = importlib.util.spec_from_file_location(__name__ + "._core", same[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # (a C module: it imports no part of this package)
    sys.modules[spec.name] = module
    setattr(sys.modules[__name__], "_core", module)


try:
    __import__(__name__ + "._core")
except ModuleNotFoundError as _e:
    if _e.name != __name__ + "._core":
        raise
    _load_installed_core()

from ._core import (  # noqa: E402
    BlockedError,
    Bucket,
    Metric,
    Stats,
    clock_ns,
    coarse_clock_ns,
    coarse_resolution_ns,
    unlink,
)
from ._event import Event  # noqa: E402
from ._group import Group, all_of, rate_limiter  # noqa: E402
from ._keyed import KeyedLimiter  # noqa: E402
from ._limiter import Limiter, limit  # noqa: E402
from ._adaptive import AdaptiveLimiter  # noqa: E402
from ._breaker import Breaker, BreakerOpenError  # noqa: E402
from ._upstream import Upstream  # noqa: E402

import typing as _typing  # noqa: E402

if _typing.TYPE_CHECKING:  # the objects users made: the public classes, not _core's bases
    def limiters() -> _typing.Dict[
            str, _typing.Union[Metric, Limiter, AdaptiveLimiter, KeyedLimiter, Breaker]]:
        """The live named objects of this process, by name."""
else:
    from ._core import limiters  # noqa: E402
from ._web import client_ip  # noqa: E402

__all__ = [
    "AdaptiveLimiter",
    "BlockedError",
    "Breaker",
    "BreakerOpenError",
    "Bucket",
    "Event",
    "Group",
    "KeyedLimiter",
    "all_of",
    "Limiter",
    "Metric",
    "Stats",
    "client_ip",
    "clock_ns",
    "coarse_clock_ns",
    "coarse_resolution_ns",
    "limit",
    "limiters",
    "rate_limiter",
    "unlink",
    "Upstream",
    "__version__",
]
