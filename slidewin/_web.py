"""What the ASGI and WSGI middleware share: the client's address, and how a refusal is told.

``client_ip(scope_or_environ, trusted_proxies=())`` reads an ASGI scope or a WSGI environ.
The rest is private to slidewin.asgi and slidewin.wsgi: the middleware's arguments, checked
once (``Middleware``), which limiter kind is at hand, the refusal's status, headers and body,
the optional RateLimit header fields, and ``exempt``.
"""
from __future__ import annotations

import functools
import http
import ipaddress
import json
import math
import sys
from typing import (
    Any,
    Callable,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    Optional,
    Set,
    Tuple,
    Union,
)

from . import _core
from ._event import Event

__all__ = ["client_ip"]

_Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
_Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
TrustedProxies = Union[str, _Address, _Network, Iterable[Union[str, _Address, _Network]]]

# "unix" in trusted_proxies: a peer without an IP address (a Unix socket, as nginx in front
# of `uvicorn --uds`) is a trusted proxy
_UNIX = "unix"


# ---- client_ip ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _trusted(entries: Tuple[Any, ...]) -> Tuple[Tuple[_Network, ...], bool]:
    """Parse trusted_proxies once per distinct tuple: (networks, unix socket trusted)."""
    nets: List[_Network] = []
    unix = False
    for item in entries:
        if isinstance(item, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            nets.append(item)
            continue
        if isinstance(item, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
            nets.append(ipaddress.ip_network(item))
            continue
        if not isinstance(item, str):
            raise TypeError(
                "trusted_proxies holds %r (%s): each entry is an IP address or network as a "
                "str (\"10.0.0.0/8\", \"::1\") or an ipaddress object"
                % (item, type(item).__name__)
            )
        text = item.strip()
        if text == _UNIX:
            unix = True
            continue
        if text == "*":
            raise ValueError(
                "trusted_proxies holds '*': trusting every address would key each request on "
                "the leftmost X-Forwarded-For entry, which the client writes; list the proxies' "
                "addresses or networks (\"0.0.0.0/0\" and \"::/0\" if you really mean it)"
            )
        try:
            nets.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                "trusted_proxies holds %r, which is not an IP address or network (allowed: "
                "\"10.0.0.0/8\", \"192.168.1.7\", \"::1\", \"fd00::/8\", \"unix\")" % (item,)
            ) from None
    return tuple(nets), unix


def _trusted_of(trusted_proxies: Any) -> Tuple[Tuple[_Network, ...], bool]:
    if isinstance(trusted_proxies, (str, ipaddress.IPv4Network, ipaddress.IPv6Network,
                                    ipaddress.IPv4Address, ipaddress.IPv6Address)):
        entries: Tuple[Any, ...] = (trusted_proxies,)
    elif isinstance(trusted_proxies, tuple):
        entries = trusted_proxies
    else:
        try:
            entries = tuple(trusted_proxies)
        except TypeError:
            raise TypeError(
                "trusted_proxies must be an address or network, or an iterable of them, not %s"
                % type(trusted_proxies).__name__
            ) from None
    try:
        return _trusted(entries)
    except TypeError as exc:
        if "unhashable" not in str(exc):
            raise
        raise TypeError(
            "trusted_proxies holds an unhashable entry: each entry is an IP address or "
            "network as a str or an ipaddress object"
        ) from None


def _parse_ip(text: str) -> Optional[_Address]:
    """An X-Forwarded-For entry as an address: "1.2.3.4", "1.2.3.4:5678", "::1",
    "[::1]", "[::1]:443"; None when it is not one ("unknown", "_hidden", garbage)."""
    text = text.strip()
    if not text:
        return None
    if text[0] == "[":
        end = text.find("]")
        if end < 0:
            return None
        text = text[1:end]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.split(":", 1)[0]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    # an IPv4 client seen through a dual-stack (IPv6) socket, or written so by a proxy:
    # the same client as its IPv4 form, matched against IPv4 networks
    mapped = getattr(addr, "ipv4_mapped", None)
    return mapped if mapped is not None else addr


def _is_trusted(addr: _Address, nets: Tuple[_Network, ...]) -> bool:
    for net in nets:
        if addr.version == net.version and addr in net:
            return True
    return False


def _peer_and_forwarded(scope_or_environ: Mapping[str, Any]) -> Tuple[str, Optional[str]]:
    """(peer address or "", the X-Forwarded-For value or None) of a scope or an environ."""
    if "REMOTE_ADDR" in scope_or_environ or "wsgi.version" in scope_or_environ:
        peer = scope_or_environ.get("REMOTE_ADDR") or ""
        return peer, scope_or_environ.get("HTTP_X_FORWARDED_FOR")
    if "type" not in scope_or_environ and "client" not in scope_or_environ:
        raise TypeError(
            "client_ip() takes an ASGI scope (with 'client' and 'headers') or a WSGI environ "
            "(with 'REMOTE_ADDR'); got a mapping with neither"
        )
    client = scope_or_environ.get("client")
    peer = client[0] if client else ""
    values = [
        v.decode("latin-1")
        for k, v in scope_or_environ.get("headers") or ()
        if k.lower() == b"x-forwarded-for"
    ]
    return peer, (",".join(values) if values else None)


def client_ip(scope_or_environ: Mapping[str, Any], trusted_proxies: TrustedProxies = ()) -> str:
    """The client's address of an ASGI scope or a WSGI environ.

    The peer (``scope["client"][0]`` / ``environ["REMOTE_ADDR"]``) when it is not a trusted
    proxy. When it is one, ``X-Forwarded-For`` is read right to left, skipping the trusted
    proxies: the first address that is not one is the client. Never the leftmost value
    (which the client writes) unless every hop to its right is trusted.

    ``trusted_proxies``: addresses and networks (``"10.0.0.0/8"``, ``"::1"``, ipaddress
    objects, one or an iterable of them); ``"unix"`` trusts a peer that has no IP address (a
    Unix socket). A bad entry is a ValueError naming trusted_proxies.

    An entry of the header that is not an address (``unknown``, garbage) ends the walk: the
    last trusted hop is returned, as the client cannot be told. Forwarded entries are
    returned normalised (``str(ipaddress.ip_address(...))``; a port is dropped). A peer
    that is unknown (no ``client``, no ``REMOTE_ADDR``) and not trusted gives ``""``.
    """
    peer, forwarded = _peer_and_forwarded(scope_or_environ)
    if peer.startswith("::ffff:") or peer.startswith("::FFFF:"):
        mapped = _parse_ip(peer)  # an IPv4 peer on a dual-stack socket: its IPv4 form
        if mapped is not None and mapped.version == 4:
            peer = str(mapped)
    if trusted_proxies == ():
        return peer
    nets, unix = _trusted_of(trusted_proxies)
    if not forwarded:
        return peer
    if peer:
        peer_addr = _parse_ip(peer)
        if peer_addr is None or not _is_trusted(peer_addr, nets):
            return peer
    elif not unix:
        return peer
    last = peer
    for item in reversed(forwarded.split(",")):
        if not item.strip():
            continue  # "a,,b": an empty element is no hop
        addr = _parse_ip(item)
        if addr is None:
            return last
        last = str(addr)
        if not _is_trusted(addr, nets):
            return last
    return last  # every hop trusted: the leftmost, written by a trusted proxy


# ---- the limiter at hand --------------------------------------------------------------------


def is_keyed(limiter: Any) -> bool:
    """A limiter whose methods take a key first: slidewin.KeyedLimiter, or one that looks
    like it (RedisKeyedLimiter and the like: a ``KeyedLimiter`` class name or ``max_keys``)."""
    import slidewin

    keyed_type = getattr(slidewin, "KeyedLimiter", None)
    if keyed_type is not None and isinstance(limiter, keyed_type):
        return True
    if isinstance(limiter, _core.Limiter):
        return False
    if any(c.__name__.endswith("KeyedLimiter") for c in type(limiter).__mro__):
        return True
    return hasattr(limiter, "max_keys")


def check_limiter(limiter: Any, where: str, is_async: bool) -> bool:
    """Validate the middleware's limiter (`is_async`: for ASGI); True when it is keyed."""
    if not callable(getattr(limiter, "entry", None)):
        raise TypeError(
            "%s takes a slidewin Limiter or KeyedLimiter (anything with entry()), not %s"
            % (where, type(limiter).__name__)
        )
    _check_redis_kind(limiter, where, is_async)
    return is_keyed(limiter)


def _check_redis_kind(limiter: Any, where: str, is_async: bool) -> None:
    """A Redis limiter of the wrong kind for the server is refused here, not at the first
    request: a sync one's entry() has no ``async with`` (and its waits would stall the event
    loop), an async one's has no ``with``."""
    # a Redis limiter exists only once slidewin.redis is imported: never import it (nor
    # redis-py, an optional extra) here
    redis = sys.modules.get("slidewin.redis")
    if redis is None:
        return
    keyed = isinstance(limiter, (redis.RedisKeyedLimiter, redis.AsyncRedisKeyedLimiter))
    if is_async and isinstance(limiter, (redis.RedisLimiter, redis.RedisKeyedLimiter)):
        raise TypeError(
            "%s: limiter is a %s, whose entry() is sync; an ASGI app needs the asyncio one: "
            "use slidewin.redis.%s (with a redis.asyncio client)"
            % (where, type(limiter).__name__,
               "AsyncRedisKeyedLimiter" if keyed else "AsyncRedisLimiter")
        )
    if not is_async and isinstance(limiter, redis.AsyncRedisLimiter):
        raise TypeError(
            "%s: limiter is an %s, whose entry() needs an event loop (async with); a WSGI app "
            "is served without one: use slidewin.redis.%s (with a sync redis client)"
            % (where, type(limiter).__name__,
               "RedisKeyedLimiter" if keyed else "RedisLimiter")
        )


def check_key(key: Any, keyed: bool, limiter: Any, where: str) -> None:
    if key is None:
        return
    if not callable(key):
        raise TypeError("%s: key must be callable, not %s" % (where, type(key).__name__))
    if not keyed:
        raise ValueError(
            "%s: key= picks a KeyedLimiter's key, but %r has one limit for every request; "
            "give a KeyedLimiter, or leave key out" % (where, limiter)
        )


def is_concurrency(limiter: Any) -> bool:
    return getattr(limiter, "concurrency", None) is not None


# ---- the middleware's arguments -------------------------------------------------------------


class Middleware:
    """What slidewin.asgi.LimitMiddleware and slidewin.wsgi.LimitMiddleware share: their
    arguments, checked and kept here. A subclass names its app's kind (``_APP``) and whether
    it serves asyncio (``_ASYNC``)."""

    __slots__ = (
        "app", "limiter", "_keyed", "_key", "_exempt", "_exempt_path", "_status",
        "_concurrency_status", "_body", "_content_type", "_headers",
    )
    _APP = "an app"
    _ASYNC = False
    _WHERE = "LimitMiddleware"

    def __init__(
        self,
        app: Any,
        limiter: Any,
        key: Any,
        exempt: Any,
        status: Any,
        concurrency_status: Any,
        body: Any,
        content_type: Any,
        headers: Any,
    ) -> None:
        where = self._WHERE
        if not callable(app):
            raise TypeError("%s: app must be %s, not %s" % (where, self._APP, type(app).__name__))
        self.app = app
        self.limiter = limiter
        self._keyed = check_limiter(limiter, where, self._ASYNC)
        check_key(key, self._keyed, limiter, where)
        # key(scope) / key(environ); a KeyedLimiter's default is the peer address
        self._key: Optional[Callable[[Any], Any]] = (
            key if key is not None else (client_ip if self._keyed else None)
        )
        if exempt is not None and callable(exempt) and not isinstance(exempt, str):
            self._exempt: Optional[Callable[[Any], bool]] = exempt
            self._exempt_path: Optional[Callable[[str], bool]] = None
        else:
            self._exempt = None
            self._exempt_path = path_matcher(exempt, where)
        self._status = check_status(status, "status", where)
        self._concurrency_status = check_status(concurrency_status, "concurrency_status", where)
        self._body, self._content_type = check_body(body, content_type, where)
        if not isinstance(headers, bool):
            raise TypeError("%s: headers must be a bool, not %s" % (where, type(headers).__name__))
        self._headers = headers

    def __repr__(self) -> str:
        return "LimitMiddleware(%r, %r)" % (self.app, self.limiter)


# ---- exempt ---------------------------------------------------------------------------------


def path_matcher(exempt: Any, where: str) -> Optional[Callable[[str], bool]]:
    """exempt as paths: a str or an iterable of str; "/x" matches exactly, "/x/*" any path
    starting with "/x/". None when exempt is None; a callable is handled by the caller."""
    if exempt is None:
        return None
    paths = (exempt,) if isinstance(exempt, str) else exempt
    try:
        items = list(paths)
    except TypeError:
        raise TypeError(
            "%s: exempt must be a predicate, a path or an iterable of paths, not %s"
            % (where, type(exempt).__name__)
        ) from None
    exact: Set[str] = set()
    prefixes: List[str] = []
    for p in items:
        if not isinstance(p, str):
            raise TypeError(
                "%s: exempt holds %r (%s); paths are str" % (where, p, type(p).__name__)
            )
        if not p.startswith("/"):
            raise ValueError(
                "%s: exempt holds %r; a path starts with '/' (\"/health\", \"/static/*\")"
                % (where, p)
            )
        if p.endswith("*"):
            prefixes.append(p[:-1])
        else:
            exact.add(p)
    frozen: FrozenSet[str] = frozenset(exact)
    pre = tuple(prefixes)
    if not pre:
        return frozen.__contains__
    return lambda path: path in frozen or path.startswith(pre)


# ---- refusals -------------------------------------------------------------------------------


def check_status(status: Any, name: str, where: str) -> int:
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError("%s: %s must be an int, not %s" % (where, name, type(status).__name__))
    if not 400 <= status <= 599:
        raise ValueError(
            "%s: %s must be an HTTP error status (400..599), got %r" % (where, name, status)
        )
    return status


def reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(status: int) -> bytes:
    """The default body: RFC 9457 problem details."""
    detail = {
        429: "request rate limit exceeded; retry after the Retry-After seconds",
        503: "too many requests in progress; retry later",
    }.get(status, "request refused by the rate limiter")
    doc = {"type": "about:blank", "title": reason(status), "status": status, "detail": detail}
    return json.dumps(doc, separators=(",", ":")).encode()


def check_body(body: Any, content_type: Any, where: str) -> Tuple[Optional[bytes], str]:
    if body is None:
        ctype = "application/problem+json" if content_type is None else content_type
        raw: Optional[bytes] = None
    elif isinstance(body, str):
        raw = body.encode("utf-8")
        ctype = "text/plain; charset=utf-8" if content_type is None else content_type
    elif isinstance(body, (bytes, bytearray, memoryview)):
        raw = bytes(body)
        ctype = "text/plain; charset=utf-8" if content_type is None else content_type
    else:
        raise TypeError(
            "%s: body must be bytes, str or None, not %s" % (where, type(body).__name__)
        )
    if not isinstance(ctype, str):
        raise TypeError(
            "%s: content_type must be a str, not %s" % (where, type(ctype).__name__)
        )
    return raw, ctype


def retry_after_s(retry_after: Optional[float]) -> int:
    """Retry-After in whole seconds: rounded up, at least 1 (also when unknown)."""
    if retry_after is None or retry_after != retry_after:
        return 1
    return max(1, math.ceil(retry_after))


# ---- RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-10) -------------------------


def _policy_name(limiter: Any) -> str:
    name = getattr(limiter, "name", None)
    if not isinstance(name, str) or not name:
        name = "default"
    # a structured-field string holds printable ASCII only: other characters are escaped
    # as \uXXXX (a header value must stay Latin-1, or the server answers 500)
    name = name.encode("ascii", "backslashreplace").decode("ascii")
    name = "".join(c if " " <= c <= "~" else "?" for c in name)
    return '"%s"' % name.replace("\\", "\\\\").replace('"', '\\"')


def policy_header(limiter: Any) -> str:
    """``RateLimit-Policy``: the quota ``q`` per window ``w`` (whole seconds; a window that is
    not is told by ``slidewin-window-ms``), or a concurrency quota."""
    name = _policy_name(limiter)
    conc = getattr(limiter, "concurrency", None)
    if conc is not None:
        return '%s;q=%d;qu="concurrent-requests"' % (name, conc)
    qps = getattr(limiter, "qps", None) or 0.0
    interval_ms = int(getattr(limiter, "interval_ms", 1000) or 1000)
    quota = int(math.floor(qps * interval_ms / 1000.0 + 1e-9))
    if interval_ms % 1000 == 0:
        return "%s;q=%d;w=%d" % (name, quota, interval_ms // 1000)
    return "%s;q=%d;slidewin-window-ms=%d" % (name, quota, interval_ms)


def remaining(limiter: Any, keyed: bool) -> Optional[int]:
    """``r`` of an admitted response: known for a Limiter that rejects by window or by
    concurrency; None (no ``RateLimit`` field) for a throttle or a keyed limiter."""
    if keyed or not isinstance(limiter, _core.Limiter):
        return None
    conc = limiter.concurrency
    if conc is not None:
        return max(0, conc - limiter.in_flight)
    if limiter.behavior not in ("reject", "warm_up"):
        return None
    qps = limiter.qps or 0.0
    quota = int(math.floor(qps * limiter.interval_ms / 1000.0 + 1e-9))
    return max(0, quota - limiter.metric.sum(Event.PASS))


def admitted_headers(limiter: Any, keyed: bool) -> List[Tuple[str, str]]:
    out = [("RateLimit-Policy", policy_header(limiter))]
    r = remaining(limiter, keyed)
    if r is not None:
        out.append(("RateLimit", "%s;r=%d" % (_policy_name(limiter), r)))
    return out


def refusal(
    limiter: Any,
    error: Any,
    status: int,
    concurrency_status: int,
    body: Optional[bytes],
    content_type: str,
    headers: bool,
) -> Tuple[int, List[Tuple[str, str]], bytes]:
    """(status, headers, body) of a refused request."""
    conc = is_concurrency(limiter)
    code = concurrency_status if conc else status
    raw = problem(code) if body is None else body
    out = [("Content-Type", content_type), ("Content-Length", str(len(raw)))]
    retry_after = getattr(error, "retry_after", None)
    seconds: Optional[int] = None
    if not conc or retry_after is not None:
        seconds = retry_after_s(retry_after)
        out.append(("Retry-After", str(seconds)))
    if headers:
        out.append(("RateLimit-Policy", policy_header(limiter)))
        item = "%s;r=0" % _policy_name(limiter)
        if seconds is not None:
            item += ";t=%d" % seconds
        out.append(("RateLimit", item))
    return code, out, raw
