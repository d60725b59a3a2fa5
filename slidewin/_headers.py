"""What a rate-limited API's response says about its limits, read defensively.

Every function takes header values as a server sent them (untrusted text) and returns None
for anything malformed, negative, non-finite or absurdly large: a bad header is ignored,
never an exception and never a pause of a day.
"""
from __future__ import annotations

import email.utils
import math
import re
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["lower_headers", "parse_duration", "retry_after_s", "server_view"]

MAX_S = 3600.0  # a pause or a reset further out than this is not believed (clamped)
_MAX_COUNT = 10**15
_MAX_LEN = 256  # a longer value is garbage

_DURATION = re.compile(r"(?:([0-9]+(?:\.[0-9]+)?)(h|ms|us|\u00b5s|ns|m|s))")
_DURATIONS = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:h|ms|us|\u00b5s|ns|m|s))+")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6,
           "ns": 1e-9}
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_INT = re.compile(r"[0-9]{1,16}")
_FRACTION = re.compile(r"\.[0-9]+")


def lower_headers(headers: Any) -> Dict[str, str]:
    """The headers as a dict of lower-case names (the last value of a repeated name wins):
    from a Mapping, httpx.Headers, or an iterable of (name, value) pairs; bytes decoded as
    latin-1. TypeError naming ``headers`` for anything else."""
    if headers is None:
        return {}
    items = getattr(headers, "items", None)
    pairs = items() if callable(items) else headers
    out: Dict[str, str] = {}
    try:
        for name, value in pairs:
            if isinstance(name, bytes):
                name = name.decode("latin-1")
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            if isinstance(name, str) and isinstance(value, str):
                out[name.lower()] = value
    except (TypeError, ValueError):
        raise TypeError("headers must be a mapping of names to values (dict, httpx.Headers) "
                        "or (name, value) pairs, not %s" % type(headers).__name__) from None
    return out


def _finite(x: float) -> Optional[float]:
    if not math.isfinite(x) or x < 0:
        return None
    return min(x, MAX_S)


def _number_s(text: Optional[str], per_s: float = 1.0) -> Optional[float]:
    """Seconds of a bare number of 1/`per_s` seconds (never None for one of at most
    _MAX_LEN characters); None when it is not one."""
    if text is None or len(text) > _MAX_LEN or not _NUMBER.fullmatch(text.strip()):
        return None
    return _finite(float(text.strip()) / per_s)


def parse_duration(text: Any) -> Optional[float]:
    """Seconds of an OpenAI-style duration (``"1s"``, ``"6m0s"``, ``"20ms"``,
    ``"1m30.5s"``) or a bare number of seconds; None when malformed."""
    if not isinstance(text, str):
        return None
    got = _number_s(text)
    if got is not None or len(text) > _MAX_LEN or not _DURATIONS.fullmatch(text.strip()):
        return got
    return _finite(sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(text)))


def _count(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    text = text.strip()  # (str.strip() takes more than int() ignores: \x1c-\x1f too)
    if not _INT.fullmatch(text):
        return None
    n = int(text)
    return n if n <= _MAX_COUNT else None


def _rfc3339_in(text: Optional[str], wall: float) -> Optional[float]:
    """Seconds from `wall` (time.time()) to an RFC 3339 time; None when malformed or naive."""
    if text is None or len(text) > _MAX_LEN:
        return None
    text = text.strip()
    if text[-1:] in ("Z", "z"):  # before 3.11 fromisoformat takes only an offset
        text = text[:-1] + "+00:00"
    # exactly microseconds: before 3.11 fromisoformat takes only 3 or 6 digits
    text = _FRACTION.sub(lambda m: m.group(0)[:7].ljust(7, "0"), text)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is None:
        return None
    return _finite(max(0.0, t.timestamp() - wall))


def retry_after_s(h: Dict[str, str], wall: float) -> Optional[float]:
    """The pause a response asks for: ``retry-after-ms`` (milliseconds), else
    ``Retry-After`` (delta-seconds or an HTTP date); None when absent or malformed."""
    ra = h.get("retry-after")
    got = _number_s(h.get("retry-after-ms"), 1000.0)
    if got is None:
        got = _number_s(ra)
    if got is not None or ra is None or len(ra) > _MAX_LEN:
        return got
    try:
        when = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return _finite(max(0.0, when.timestamp() - wall))


def _ietf(value: str) -> Optional[Tuple[int, float]]:
    """The most restrictive item of an IETF ``RateLimit`` field:
    ``"name";r=<remaining>;t=<seconds>`` (comma-separated items)."""
    best: Optional[Tuple[int, float]] = None
    if len(value) > 4 * _MAX_LEN:
        return None
    for item in value.split(","):
        params: Dict[str, str] = {}
        for part in item.split(";")[1:]:
            k, sep, v = part.partition("=")
            if sep:
                params[k.strip().lower()] = v.strip()
        r = _count(params.get("r"))
        t = parse_duration(params.get("t"))
        if r is None or t is None:
            continue
        if best is None or r * max(best[1], 1e-9) < best[0] * max(t, 1e-9):
            best = (r, t)
    return best


def server_view(h: Dict[str, str], wall: float) -> List[Tuple[str, int, float]]:
    """What the server says is left: ``[(budget, remaining, seconds to reset), ...]`` with
    budget ``"requests"`` or ``"tokens"``, from OpenAI's ``x-ratelimit-*``, Anthropic's
    ``anthropic-ratelimit-*`` and the IETF ``RateLimit`` field; malformed pairs left out."""
    found: List[Tuple[str, Optional[int], Optional[float]]] = []
    for budget in ("requests", "tokens"):
        found += [(budget, _count(h.get("x-ratelimit-remaining-" + budget)),
                   parse_duration(h.get("x-ratelimit-reset-" + budget))),
                  (budget, _count(h.get("anthropic-ratelimit-%s-remaining" % budget)),
                   _rfc3339_in(h.get("anthropic-ratelimit-%s-reset" % budget), wall))]
    field = h.get("ratelimit")
    if field is not None:
        r, t = _ietf(field) or (None, None)
    else:  # the older draft's separate fields
        r, t = _count(h.get("ratelimit-remaining")), parse_duration(h.get("ratelimit-reset"))
    found.append(("requests", r, t))
    return [(b, r, t) for b, r, t in found if r is not None and t is not None]
