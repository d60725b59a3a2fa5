"""``rate="100/minute"``: limits as flask-limiter users write them (``FORMS``), turned into
qps, interval_ms (the period) and sample_count (``default_samples``).
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["Rate", "parse_rate", "parse_rates", "resolve", "INTERVAL_MS", "SAMPLE_COUNT"]


# interval_ms and sample_count when not given (None) and no rate= sets them: Sentinel's
INTERVAL_MS = 1000
SAMPLE_COUNT = 2

_UNITS = {unit: ms for ms, units in (
    (1000, "s sec secs second seconds"), (60_000, "m min mins minute minutes"),
    (3_600_000, "h hr hrs hour hours"), (86_400_000, "d day days")) for unit in units.split()}
# ASCII digits, at most 20 (int() of a longer string may raise its own error, not naming rate)
_RATE = re.compile(r"\s*([0-9]{1,20})\s*(?:/|\s+per\s+)\s*([0-9]{1,20})?\s*([a-z]+)\s*",
                   re.IGNORECASE)
MAX_PERIOD_MS = 2**40  # the core's largest interval_ms
# the largest count a period: the window limit qps_for gives it, in doubles, is then below
# count + 1 (above 2**52 a double's ulp is 1 and the nudge may land on count + 1)
MAX_COUNT = 2**52
DEFAULT_SAMPLES = 60
# A KeyedLimiter's default steps for rate=: a step is 8 bytes in every key's entry, and 6 keep
# it within 2x of qps='s 2 steps (88 vs 48 bytes)
KEYED_SAMPLES = 6
FORMS = ('"<count>/<period>" or "<count> per <period>", the period a unit or a number and '
         'a unit: second, minute, hour, day (plural or s, sec, m, min, h, hr, d too), e.g. '
         '"100/minute", "5/m", "5/s", "10000/day", "30/5minutes", "100 per hour", '
         '"10 per 5 minutes"')
_SEPARATORS = re.compile(r"[;,|]")


@dataclasses.dataclass(frozen=True)
class Rate:
    """One rate of a rate string: ``count`` per ``period_ms``; ``text`` as written."""

    count: int
    period_ms: int
    text: str


def empty_rate(what: str, text: str) -> ValueError:  # "5/min;", "5/min;;1/s"
    return ValueError("%s=%r has an empty rate; each of its rates, separated by ';', "
                      "must be %s" % (what, text, FORMS))


def parse_rate(rate: Any, what: str = "rate", keyed: bool = False) -> Tuple[int, int]:
    """``(count, period_ms)`` of one rate string; TypeError/ValueError naming ``what``.
    ``keyed``: the rate of a keyed limiter (the advice for several rates differs)."""
    if not isinstance(rate, str):
        raise TypeError("%s must be a str such as '100/minute', not %s"
                        % (what, type(rate).__name__))
    if _SEPARATORS.search(rate):
        if not all(part.strip() for part in _SEPARATORS.split(rate)):
            raise empty_rate("rate", rate)
        how = ("build one KeyedLimiter per rate and decide with slidewin.all_of() over "
               "(limiter, key) pairs, e.g. all_of((per_second, key), (per_minute, key))"
               if keyed else "use slidewin.rate_limiter(%r) (one all_of group of a Limiter "
               "per rate), or slidewin.all_of() over limiters of one rate each" % (rate,))
        raise ValueError("rate=%r holds several rates, but a %s's rate= takes one: for all of "
                         "them at once %s" % (rate, "keyed limiter" if keyed else "limiter", how))
    m = _RATE.fullmatch(rate)
    unit = _UNITS.get(m.group(3).lower()) if m else None
    if m is None or unit is None:
        raise ValueError("%s must be %s; got %r" % (what, FORMS, rate))
    count, mult = int(m.group(1)), int(m.group(2) or 1)
    period_ms = mult * unit
    if mult < 1 or period_ms > MAX_PERIOD_MS:
        raise ValueError("rate %r: the period must be from 1 ms to 2**40 ms (about 34 years), "
                         "got %d ms" % (rate, period_ms))
    if count > MAX_COUNT:
        raise ValueError("rate %r: the count must be at most 2**52 (%d) a period, which a "
                         "window counts exactly, got %d" % (rate, MAX_COUNT, count))
    return count, period_ms


def parse_rates(text: Any, what: str = "rates") -> List[Rate]:
    """The rates of a string of one or several, separated by ``;`` (also ``,`` or ``|``):
    ``parse_rates("10/second;100/minute")`` is ``[Rate(10, 1000, '10/second'), Rate(100,
    60000, '100/minute')]``. TypeError when not a str, ValueError naming ``what``."""
    if not isinstance(text, str):
        raise TypeError("%s must be a str such as '10/second;100/minute', not %s"
                        % (what, type(text).__name__))
    out = []
    for part in _SEPARATORS.split(text):
        if not part.strip():
            raise empty_rate(what, text)
        count, period_ms = parse_rate(part, "each rate of %s=%r" % (what, text))
        out.append(Rate(count, period_ms, part.strip()))
    return out


def member_keywords(kw: Dict[str, Any], rate: Rate) -> Dict[str, Any]:
    """The keywords of one rate's limiter among several: ``kw`` with ``rate``, ``shared``
    ``"<shared>.<count>-per-<period_ms>ms"`` (the same wherever the rates are written, in any
    order) and ``name`` ``"<name>[<rate>]"``."""
    one = dict(kw, rate=rate.text)
    shared = kw.get("shared")
    if isinstance(shared, str):
        one["shared"] = "%s.%d-per-%dms" % (shared, rate.count, rate.period_ms)
    if kw.get("name") is not None:
        one["name"] = "%s[%s]" % (kw["name"], rate.text)
    return one


def qps_for(count: int, period_ms: int) -> float:
    """The qps whose window limit over ``period_ms`` (computed as the core computes it) is the
    smallest double not below ``count`` (``7/day`` admits 7, not 6)."""
    q = count * 1000 / period_ms
    scale = period_ms / 1000.0
    while q * scale < count:  # a few ulps at most
        q = math.nextafter(q, math.inf)
    return q


def default_samples(period_ms: int, most: int = DEFAULT_SAMPLES) -> int:
    """The largest divisor of ``period_ms`` up to ``most``: the default sample_count."""
    return next((sc for sc in range(most, 0, -1) if period_ms % sc == 0), 1)


def take_positional(args: Dict[str, Any]) -> None:
    """``Limiter("100/minute")``: a str given as the first argument (``qps``) is the rate
    when it reads as one (a "/" or "per" in it); any other str there is qps's TypeError."""
    qps = args.get("qps")
    if isinstance(qps, str):
        if "/" not in qps and not re.search(r"\sper\s", qps, re.IGNORECASE):
            raise TypeError("qps must be an int or float (or, as the first argument, a rate "
                            "string such as '100/minute'), not str %r" % (qps,))
        if args.get("rate") is not None:
            raise ValueError("a rate string given both as the first argument (%r) and as "
                             "rate=%r: give it once" % (args["qps"], args["rate"]))
        args["rate"], args["qps"] = args["qps"], None


def keyed_samples(args: Dict[str, Any]) -> None:
    """A positional rate taken and the keyed default sample_count set, in place, for a keyed
    type that resolves its rate later (the Redis ones)."""
    take_positional(args)
    rate = args.get("rate")
    if rate is not None and args.get("sample_count") is None:
        args["sample_count"] = default_samples(parse_rate(rate, keyed=True)[1], KEYED_SAMPLES)


def resolve(args: Dict[str, Any], most_samples: int = DEFAULT_SAMPLES,
            keyed: bool = False) -> Optional[str]:
    """Resolve and remove ``rate`` (or a str ``qps``, the first positional argument) in a
    constructor's keywords, setting ``qps``, ``interval_ms``, ``sample_count`` (None there:
    not given) in place; return the rate string or None. ``most_samples``: the default
    sample_count's bound."""
    take_positional(args)
    rate: Optional[str] = args.pop("rate", None)
    if rate is not None:
        clash = [k for k in ("qps", "concurrency", "interval_ms") if args.get(k) is not None]
        if clash:
            raise ValueError("rate=%r and %s cannot be given together: rate sets qps and "
                             "interval_ms (the count per period, the window the period); pass "
                             "one or the other" % (rate, " and ".join("%s=%r" % (k, args[k])
                                                                      for k in clash)))
        count, period_ms = parse_rate(rate, keyed=keyed)
        args["qps"] = qps_for(count, period_ms)
        args["interval_ms"] = period_ms
        if args.get("sample_count") is None:
            args["sample_count"] = default_samples(period_ms, most_samples)
        rate = str.__str__(rate)  # a str subclass (a StrEnum member) kept as its plain text
    for k, default in (("interval_ms", INTERVAL_MS), ("sample_count", SAMPLE_COUNT)):
        if args.get(k) is None:
            args[k] = default
    return rate
