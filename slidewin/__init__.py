"""slidewin: Sentinel-style sliding-window statistics and flow control with a C core.

- ``Metric``: a ring of time buckets (leap array) counting events over a sliding window.
- ``Limiter``: flow control with its own statistics: reject, warm_up, throttle,
  warm_up_throttle (by QPS) or a concurrency limit; prioritized requests may borrow from the
  next window. ``limit(...)`` builds one for use as a decorator.
- ``KeyedLimiter``: one limit per key (user, client IP, tenant) in a bounded table, with
  per-key overrides; ``@per_user(key=...)`` decorates functions.
- ``shared="name"`` (or ``shared=True``) on either: one state for all the processes of a
  host, in shared memory; ``unlink(name)`` removes a region's name.
- ``slidewin.asgi.LimitMiddleware`` / ``slidewin.wsgi.LimitMiddleware`` put a limiter in
  front of a web app (429 / 503 with Retry-After); ``client_ip(scope_or_environ,
  trusted_proxies=...)`` is the client's address behind proxies.

Seeing and steering: ``name=`` on each type and ``limiters()`` (the live named objects of
this process); ``lim.totals()`` (lifetime counts); ``lim.update(...)`` (new settings, state
kept); ``shadow=True`` (decide and count, admit everything).

Every time-dependent call takes ``now_ns`` (CLOCK_MONOTONIC nanoseconds, as
``time.monotonic_ns()``) for deterministic tests; omitted, the library reads the clock.
"""
from ._core import (
    BlockedError,
    Bucket,
    Metric,
    Stats,
    clock_ns,
    coarse_clock_ns,
    coarse_resolution_ns,
    limiters,
    unlink,
)
from ._event import Event
from ._keyed import KeyedLimiter
from ._limiter import Limiter, limit
from ._web import client_ip

__version__ = "0.1.0"

__all__ = [
    "BlockedError",
    "Bucket",
    "Event",
    "KeyedLimiter",
    "Limiter",
    "Metric",
    "Stats",
    "client_ip",
    "clock_ns",
    "coarse_clock_ns",
    "coarse_resolution_ns",
    "limit",
    "limiters",
    "unlink",
    "__version__",
]
