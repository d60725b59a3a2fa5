"""``rate="100/minute"``: limits as users write them, turned into qps, interval_ms and
sample_count.

A rate is a count per period. The window is the period (``interval_ms``) and, unless
``sample_count`` is given, it slides in 60 steps (the largest divisor of the period up to
60 when 60 does not divide it, e.g. 50 for one second). ``qps`` is the count per second,
nudged up by at most a few ulps so that the core's window limit, ``qps * interval_ms /
1000`` in doubles, is never below the count (``7/day`` must admit 7, not 6).
"""
from __future__ import annotations

import math
import re
from typing import Any, Dict, Optional, Tuple

__all__ = ["parse_rate", "resolve", "INTERVAL_MS", "SAMPLE_COUNT"]


class _Default(int):
    """A keyword's default value, told apart (by identity) from the same value given: rate=
    with interval_ms=1000 given is an error, with the default it is not."""

    __slots__ = ()


INTERVAL_MS: int = _Default(1000)
SAMPLE_COUNT: int = _Default(2)

_UNITS = {
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hr": 3_600_000, "hrs": 3_600_000, "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}
# ASCII digits, at most 20 (int() of a longer string may raise its own error, not naming rate)
_RATE = re.compile(r"\s*([0-9]{1,20})\s*(?:/|\s+per\s+)\s*([0-9]{1,20})?\s*([a-z]+)\s*",
                   re.IGNORECASE)
MAX_PERIOD_MS = 2**40  # the core's largest interval_ms
# the largest count a period: the window limit qps_for gives it, in doubles, is then below
# count + 1 (above 2**52 a double's ulp is 1 and the nudge may land on count + 1)
MAX_COUNT = 2**52
DEFAULT_SAMPLES = 60
FORMS = ('"<count>/<period>" or "<count> per <period>", the period a unit or a number and '
         'a unit: second, minute, hour, day (plural or s, sec, min, h, hr, d too), e.g. '
         '"100/minute", "5/second", "10000/day", "30/5minutes", "100 per hour"')


def parse_rate(rate: Any) -> Tuple[int, int]:
    """``(count, period_ms)`` of a rate string; TypeError/ValueError naming ``rate``."""
    if not isinstance(rate, str):
        raise TypeError("rate must be a str such as '100/minute', not %s" % type(rate).__name__)
    m = _RATE.fullmatch(rate)
    unit = _UNITS.get(m.group(3).lower()) if m else None
    if m is None or unit is None:
        raise ValueError("rate must be %s; got %r" % (FORMS, rate))
    count, mult = int(m.group(1)), int(m.group(2) or 1)
    period_ms = mult * unit
    if mult < 1 or period_ms > MAX_PERIOD_MS:
        raise ValueError("rate %r: the period must be from 1 ms to 2**40 ms (about 34 years), "
                         "got %d ms" % (rate, period_ms))
    if count > MAX_COUNT:
        raise ValueError("rate %r: the count must be at most 2**52 (%d) a period, which a "
                         "window counts exactly, got %d" % (rate, MAX_COUNT, count))
    return count, period_ms


def qps_for(count: int, period_ms: int) -> float:
    """The qps whose window limit over ``period_ms`` (computed as the core computes it) is the
    smallest double not below ``count``."""
    q = count * 1000 / period_ms
    if period_ms == 1000 or count == 0:
        return float(count) if period_ms == 1000 else 0.0
    scale = period_ms / 1000.0
    while q * scale < count:  # a few ulps at most
        q = math.nextafter(q, math.inf)
    return q


def default_samples(period_ms: int) -> int:
    for sc in range(DEFAULT_SAMPLES, 0, -1):
        if period_ms % sc == 0:
            return sc
    return 1  # unreachable: 1 divides everything


def resolve(args: Dict[str, Any]) -> Optional[str]:
    """Resolve ``rate`` in a constructor's keywords in place (``qps``, ``interval_ms``,
    ``sample_count``; INTERVAL_MS / SAMPLE_COUNT there meaning "not given") and return the
    rate string, or None when no rate was given. Removes the ``rate`` key."""
    rate: Optional[str] = args.pop("rate", None)
    iv_given = args.get("interval_ms", INTERVAL_MS) is not INTERVAL_MS
    sc_given = args.get("sample_count", SAMPLE_COUNT) is not SAMPLE_COUNT
    if not iv_given:
        args["interval_ms"] = 1000
    if not sc_given:
        args["sample_count"] = 2
    if rate is None:
        return None
    clash = [k for k in ("qps", "concurrency") if args.get(k) is not None]
    if iv_given:
        clash.append("interval_ms")
    if clash:
        raise ValueError("rate=%r and %s cannot be given together: rate sets qps and "
                         "interval_ms (the count per period, the window the period); pass one "
                         "or the other" % (rate, " and ".join("%s=%r" % (k, args[k])
                                                              for k in clash)))
    count, period_ms = parse_rate(rate)
    args["qps"] = qps_for(count, period_ms)
    args["interval_ms"] = period_ms
    if not sc_given:
        args["sample_count"] = default_samples(period_ms)
    return rate
