"""What the web middlewares and route helpers share: ``client_ip`` (public), the middleware
(``Middleware``), the refusal and the RateLimit fields. The user's guide: docs/web.md."""
from __future__ import annotations

import functools
import http
import inspect
import ipaddress
import json
import math
import re
import sys
import time
from typing import (
    Any,
    Callable,
    Iterable,
    List,
    Mapping,
    Optional,
    Set,
    Tuple,
    Union,
)

from . import _core
from ._breaker import BreakerOpenError
from ._event import Event
from ._keyed import KeyedLimiter

__all__ = ["client_ip"]

_Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
_Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
_IP_OBJECTS = (ipaddress.IPv4Address, ipaddress.IPv6Address, ipaddress.IPv4Network,
               ipaddress.IPv6Network)
TrustedProxies = Union[str, _Address, _Network, Iterable[Union[str, _Address, _Network]]]


# ---- client_ip ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _trusted(entries: Tuple[Any, ...]) -> Tuple[Tuple[_Network, ...], bool]:
    """Parse trusted_proxies once per distinct tuple: (networks, unix socket trusted)."""
    nets: List[_Network] = []
    unix = False
    for item in entries:
        if isinstance(item, _IP_OBJECTS):
            nets.append(ipaddress.ip_network(item))
            continue
        if not isinstance(item, str):
            raise TypeError(
                "trusted_proxies holds %r (%s): each entry is an IP address or network as a "
                "str (\"10.0.0.0/8\", \"::1\") or an ipaddress object"
                % (item, type(item).__name__)
            )
        text = item.strip()
        if text == "unix":  # a peer without an IP address (a Unix socket) is a trusted proxy
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
    if isinstance(trusted_proxies, (str,) + _IP_OBJECTS):
        entries: Tuple[Any, ...] = (trusted_proxies,)
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
    except TypeError:  # an unhashable entry, or a bad one: parsed uncached, the error named
        pass
    return _trusted.__wrapped__(entries)


def _parse_ip(text: str) -> Optional[_Address]:
    """"1.2.3.4", "1.2.3.4:5678", "::1", "[::1]:443" as an address; None for "unknown",
    "_hidden", garbage."""
    text = text.strip()
    if text[:1] == "[":
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
    # an IPv4-mapped IPv6 address (a dual-stack socket) is matched as its IPv4 form
    mapped = getattr(addr, "ipv4_mapped", None)
    return mapped if mapped is not None else addr


def _is_trusted(addr: _Address, nets: Tuple[_Network, ...]) -> bool:
    return any(addr.version == net.version and addr in net for net in nets)


# RFC 9110 token; "_" left out: a WSGI environ spells "-" and "_" alike (HTTP_X_REAL_IP)
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^`|~-]+\Z")


@functools.lru_cache(maxsize=16)
def _header_keys(header: str) -> Tuple[bytes, str, bool]:
    """(ASGI header name, WSGI environ key, is RFC 7239 Forwarded) of a header name."""
    if not _TOKEN.match(header):
        raise ValueError(
            "header %r is not a header name (letters, digits and '-': \"x-forwarded-for\", "
            "\"forwarded\", \"x-real-ip\"; '_' is refused, as WSGI cannot tell it from '-')"
            % (header,)
        )
    name = header.lower()
    return name.encode("ascii"), "HTTP_" + name.upper().replace("-", "_"), name == "forwarded"


# a piece of an RFC 7239 Forwarded value: a quoted string (which may hold "," and ";"; one
# left open runs to the end), other text, or a separator
_FORWARDED_PIECE = re.compile(r'"(?:[^"\\]|\\.)*"?|[^",;]+|[,;]', re.S)


def _forwarded_nodes(value: str) -> List[Optional[str]]:
    """The ``for=`` node of each element of a ``Forwarded`` value (RFC 7239): None for one
    without ``for=``, with two, or that does not parse; empty elements left out."""
    out: List[Optional[str]] = []
    pairs = [""]  # the element's pairs so far, the last one open
    for piece in _FORWARDED_PIECE.findall(value + ","):
        if piece == ";":
            pairs.append("")
        elif piece != ",":
            pairs[-1] += piece
        else:
            if any(p.strip() for p in pairs):  # "a,,b": no hop
                out.append(_for_node(pairs))
            pairs = [""]
    if pairs[-1]:
        out.append(None)  # the quote opened here never closed
    return out


def _for_node(pairs: List[str]) -> Optional[str]:
    split = [pair.strip().partition("=") for pair in pairs]
    nodes = [val.strip() for name, _, val in split if name.strip().lower() == "for"]
    if len(nodes) != 1 or any(name and not eq for name, eq, _ in split):  # "x": no pair
        return None
    val = nodes[0]
    if val.startswith('"'):
        if len(val) < 2 or not val.endswith('"'):
            return None
        val = re.sub(r"\\(.)", r"\1", val[1:-1], flags=re.S)  # a quoted-pair: the character
    return val


def client_ip(
    scope_or_environ: Mapping[str, Any],
    trusted_proxies: TrustedProxies = (),
    *,
    header: str = "x-forwarded-for",
) -> str:
    """The client's address of an ASGI scope or a WSGI environ.

    The peer (``scope["client"][0]`` / ``environ["REMOTE_ADDR"]``) unless it is a trusted
    proxy; then the forwarding header is read right to left, skipping trusted proxies: the
    first address that is not one is the client (never the leftmost, which the client
    writes, unless every hop to its right is trusted).

    ``trusted_proxies``: addresses and networks (``"10.0.0.0/8"``, ``"::1"``, ipaddress
    objects, one or an iterable); ``"unix"`` trusts a peer without an IP address (a Unix
    socket). ``header``: the one header your proxies write: ``"x-forwarded-for"``,
    ``"forwarded"`` (RFC 7239 ``for=``) or another list of addresses (``"x-real-ip"``).

    An entry that is not an address (``unknown``, ``_name``, garbage) ends the walk at the
    last trusted hop. Addresses are returned normalised (a port dropped); an unknown peer
    that is not trusted gives ``""``. See docs/web.md.
    """
    if not isinstance(header, str):
        raise TypeError("header must be a str (a header name), not %s" % type(header).__name__)
    name, environ_key, is_forwarded = _header_keys(header)
    forwarded: Optional[str]
    if "REMOTE_ADDR" in scope_or_environ or "wsgi.version" in scope_or_environ:
        peer = scope_or_environ.get("REMOTE_ADDR") or ""
        forwarded = scope_or_environ.get(environ_key)
    elif "type" not in scope_or_environ and "client" not in scope_or_environ:
        raise TypeError(
            "client_ip() takes an ASGI scope (with 'client' and 'headers') or a WSGI environ "
            "(with 'REMOTE_ADDR'); got a mapping with neither"
        )
    else:
        client = scope_or_environ.get("client")
        peer = client[0] if client else ""
        values = [v.decode("latin-1") for k, v in scope_or_environ.get("headers") or ()
                  if k.lower() == name]
        forwarded = ",".join(values) if values else None
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
    nodes: List[Optional[str]] = (
        _forwarded_nodes(forwarded) if is_forwarded
        else [item for item in forwarded.split(",") if item.strip()])  # "a,,b": no hop
    last = peer
    for item in reversed(nodes):
        addr = _parse_ip(item) if item is not None else None
        if addr is None:
            return last
        last = str(addr)
        if not _is_trusted(addr, nets):
            return last
    return last  # every hop trusted: the leftmost, written by a trusted proxy


# ---- the limiter at hand --------------------------------------------------------------------


def is_keyed(limiter: Any) -> bool:
    """slidewin.KeyedLimiter, or one that looks like it (a ``*KeyedLimiter`` class name or
    ``max_keys``: RedisKeyedLimiter and the like)."""
    if isinstance(limiter, (KeyedLimiter, _core.Limiter)):
        return isinstance(limiter, KeyedLimiter)
    return (any(c.__name__.endswith("KeyedLimiter") for c in type(limiter).__mro__)
            or hasattr(limiter, "max_keys"))


def check_limiter(limiter: Any, where: str, is_async: bool) -> bool:
    """Validate the limiter (`is_async`: for ASGI), a Redis one of the wrong kind refused
    now, not at the first request; True when it is keyed."""
    if not callable(getattr(limiter, "entry", None)):
        raise TypeError(
            "%s takes a slidewin Limiter or KeyedLimiter (anything with entry()), not %s"
            % (where, type(limiter).__name__)
        )
    redis = sys.modules.get("slidewin.redis")
    if redis is None or not isinstance(limiter, (redis.RedisLimiter, redis.RedisKeyedLimiter)
                                       if is_async else redis.AsyncRedisLimiter):
        return is_keyed(limiter)
    why = ("a %s, whose entry() is sync; an ASGI app needs the asyncio one: use "
           "slidewin.redis.Async%s (with a redis.asyncio client)" if is_async else
           "an %s, whose entry() needs an event loop (async with); a WSGI app is served "
           "without one: use slidewin.redis.%s (with a sync redis client)")
    keyed = isinstance(limiter, (redis.RedisKeyedLimiter, redis.AsyncRedisKeyedLimiter))
    raise TypeError("%s: limiter is " % where + why % (
        type(limiter).__name__, "RedisKeyedLimiter" if keyed else "RedisLimiter"))


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


# ---- the middleware -------------------------------------------------------------------------


_OVERRIDES_TTL_S = 1.0  # how long a copy of a KeyedLimiter's overrides serves the headers
_NO_LOOP = "%s: on_block %s; a WSGI server has no event loop to run it: give a plain function"


class Middleware:
    """slidewin.asgi's and slidewin.wsgi's LimitMiddleware: the arguments, checked, and one
    request's steps; its class attributes are WSGI's (slidewin.asgi's sets its own)."""

    __slots__ = (
        "app", "limiter", "_keyed", "_key", "_exempt", "_exempt_path", "_status",
        "_concurrency_status", "_body", "_content_type", "_body_type", "_headers",
        "_on_block", "_overrides", "_overrides_at", "_own",
    )
    _APP = "a WSGI app"
    _ASYNC = False
    _ARG = "environ"  # what key(), exempt() and on_block() are given
    _WHERE = "LimitMiddleware"
    # (the route limits of the request's route, a request object for their keys)
    _route_limits: Callable[[Any], Tuple[Tuple[Any, ...], Any]]

    def __init__(
        self,
        app: Any,
        limiter: Any,
        *,
        key: Optional[Callable[[Any], Union[str, bytes, int, None]]] = None,
        exempt: Union[None, str, Callable[[Any], bool], Any] = None,
        status: int = 429,
        concurrency_status: int = 503,
        body: Union[bytes, str, None] = None,
        content_type: Optional[str] = None,
        headers: bool = True,
        on_block: Optional[Callable[[Any, Any], Any]] = None,
    ) -> None:
        where = self._WHERE
        if not callable(app):
            raise TypeError("%s: app must be %s, not %s" % (where, self._APP, type(app).__name__))
        self.app = app
        self.limiter = limiter
        self._keyed = check_limiter(limiter, where, self._ASYNC)
        check_key(key, self._keyed, limiter, where)
        self._key: Optional[Callable[[Any], Any]] = (
            key if key is not None else (self._peer_key if self._keyed else None)
        )
        self._exempt: Optional[Callable[[Any], bool]] = exempt if callable(exempt) else None
        self._exempt_path: Optional[Callable[[str], bool]] = (
            None if callable(exempt) else path_matcher(exempt, where, wsgi=not self._ASYNC))
        self._status, self._concurrency_status, self._headers = check_refusal_arguments(
            status, concurrency_status, headers, where)
        self._body = None if body is None else _body_bytes(body, "body", where)
        if content_type is not None:
            if not isinstance(content_type, str):
                raise TypeError("%s: content_type must be a str, not %s"
                                % (where, type(content_type).__name__))
            if not content_type.strip():
                raise ValueError("%s: content_type is empty" % where)
            check_field_value(content_type, "content_type", where)
        # the type of a body on_block gives, and of the refusal's
        self._body_type = "text/plain; charset=utf-8" if content_type is None else content_type
        self._content_type = ("application/problem+json" if body is None and content_type is None
                              else self._body_type)
        if on_block is not None and not callable(on_block):
            raise TypeError("%s: on_block must be callable, on_block(error, %s), not %s"
                            % (where, self._ARG, type(on_block).__name__))
        if on_block is not None and not self._ASYNC and inspect.iscoroutinefunction(on_block):
            raise TypeError(_NO_LOOP % (where, "is a coroutine function"))
        self._on_block: Optional[Callable[..., Any]] = on_block
        self._overrides: Optional[Mapping[Any, Any]] = None
        self._overrides_at = -math.inf
        self._own = _routes.Own((limiter,), self._keyed, headers)

    def __repr__(self) -> str:
        return "LimitMiddleware(%r, %r)" % (self.app, self.limiter)

    def _peer_key(self, scope_or_environ: Mapping[str, Any]) -> str:
        """A KeyedLimiter's default key, the peer address (none: an error, not one key "")."""
        ip = client_ip(scope_or_environ)
        if not ip:
            raise ValueError(
                "%s: the request has no client address (served on a Unix socket?), so the "
                "default key, the peer address, would put every client under one key; give "
                "key= (behind a proxy on the socket: key=lambda %s: slidewin.client_ip(%s, "
                "trusted_proxies=\"unix\"))" % (self._WHERE, self._ARG, self._ARG))
        return ip

    def _threshold(self, key: Any) -> Any:
        """The key's override, else the limiter's own limit (overrides copied once a second)."""
        lim = self.limiter
        if key is not None and self._keyed:
            now = time.monotonic()
            if now - self._overrides_at >= _OVERRIDES_TTL_S:
                ov = getattr(lim, "overrides", None)
                self._overrides = ov if isinstance(ov, Mapping) and ov else None
                self._overrides_at = now
            ov = self._overrides
            if ov is not None:
                try:
                    v = ov.get(key)
                except TypeError:
                    v = None
                if v is not None:
                    return v
        return own_threshold(lim)

    def _limited_key(self, scope_or_environ: Any, path: str) -> Tuple[bool, Any]:
        """(whether the request is limited: not exempt, key() not None; its key)."""
        if self._exempt_path is not None and self._exempt_path(path):
            return False, None
        if self._exempt is not None and self._exempt(scope_or_environ):
            return False, None
        if self._key is None:
            return True, None
        k = self._key(scope_or_environ)
        return k is not None, k

    def _entry(self, scope_or_environ: Any, k: Any) -> Tuple[Any, Any]:
        """(what the request enters, its Admission or None); with route limits, one
        Admission of all, marked decided so that their helpers let the request through."""
        routes, request = self._route_limits(scope_or_environ)
        if not routes:
            lim = self.limiter
            return (lim.entry(k) if self._key is not None else lim.entry()), None
        pairs: List[Tuple[Any, Any]] = [(self._own, k)]
        for route in routes:
            pair = route.pair(request, scope_or_environ) if route.keyed else (route, None)
            if pair is not None:  # else not limited by that route limit
                pairs.append(pair)
        scope_or_environ[_routes.DECIDED] = frozenset(routes)
        admission = _routes.Admission(pairs)
        return admission, admission

    def _admitted_fields(self, admission: Any, k: Any) -> Optional[List[Tuple[str, str]]]:
        if admission is not None:
            return admission.headers()  # type: ignore[no-any-return]
        lim = self.limiter
        if not self._headers or isinstance(lim, _core.Breaker):  # a breaker tells no quota
            return None
        return ratelimit_fields(lim, self._threshold(k), remaining(lim, self._keyed))

    def _refusing(self, scope_or_environ: Any, exc: Any, key: Any) -> Any:
        """``(app, status, headers, body)`` refusing `exc` (a BlockedError or a Refused);
        app: on_block's response, else None."""
        if isinstance(exc, _routes.Refused):
            if exc.route is not self._own:
                return (None,) + exc.route.refusal(exc.error)  # a route limit's own refusal
            exc = exc.error
        # the limit tells "never" (a limit of 0) from "unknown" without a retry_after
        threshold = (self._threshold(key)
                     if self._headers or getattr(exc, "retry_after", None) is None else None)
        code, fields = refusal_fields(self.limiter, exc, self._status, self._concurrency_status,
                                      self._headers, threshold)
        if self._on_block is not None:
            result = yield functools.partial(self._on_block, exc, scope_or_environ)
            if inspect.isawaitable(result):  # left unawaited by a sync driver: WSGI
                close = getattr(result, "close", None)
                if close is not None:
                    close()  # a coroutine never awaited: no warning on top of the error
                raise TypeError(_NO_LOOP % (self._WHERE, "returned an awaitable"))
            if result is not None:
                if callable(result) and not isinstance(result, tuple):
                    return result, code, fields, b""  # a response
                return (None,) + self._custom_refusal(result, code, fields)
        return (None,) + _framed(code, fields, self._body, self._content_type)

    def _custom_refusal(self, result: Any, code: int, fields: List[Tuple[str, str]]
                        ) -> Tuple[int, List[Tuple[str, str]], bytes]:
        """The refusal of on_block's ``(status, headers, body)``: None keeps the refusal's
        status / body; `headers` replace the fields of their names (Content-Type included, a
        new body's default ``_body_type``); Content-Length is always computed."""
        where = self._WHERE
        if not isinstance(result, tuple) or len(result) != 3:
            raise TypeError(
                "%s: on_block returned %s; it returns None (the default refusal), a (status, "
                "headers, body) tuple, or a response (an app, which the middleware calls)"
                % (where, "a tuple of %d" % len(result) if isinstance(result, tuple)
                   else "an object of type %s" % type(result).__name__)
            )
        status, hdrs, new_body = result
        if status is not None:
            code = check_status(status, "on_block's status", where)
        if hdrs is None:
            hdrs = ()
        if isinstance(hdrs, (str, bytes)) or not isinstance(hdrs, Iterable):
            raise TypeError(
                "%s: on_block's headers must be (name, value) pairs of str, not %s"
                % (where, type(hdrs).__name__)
            )
        given: List[Tuple[str, str]] = []
        ctype: Optional[str] = None
        for pair in hdrs:
            if (not isinstance(pair, tuple) or len(pair) != 2
                    or not isinstance(pair[0], str) or not isinstance(pair[1], str)):
                raise TypeError(
                    "%s: on_block's headers hold %r; each is a (name, value) pair of str"
                    % (where, pair)
                )
            name, value = pair
            if not _FIELD_NAME.match(name):
                raise ValueError("%s: on_block's header name %r is not a token" % (where, name))
            check_field_value(value, "on_block's header %s" % name, where)
            low = name.lower()
            if low == "content-type":
                ctype = value
            elif low != "content-length":
                given.append((name, value))
        body, content_type = self._body, self._content_type
        if new_body is not None:
            body, content_type = _body_bytes(new_body, "on_block's body", where), self._body_type
        kept = missing_fields([n for n, _ in given], fields)
        return _framed(code, kept + given, body, content_type if ctype is None else ctype)


# ---- exempt ---------------------------------------------------------------------------------


def path_matcher(exempt: Any, where: str, wsgi: bool = False) -> Optional[Callable[[str], bool]]:
    """A str or an iterable of paths: "/x" matches exactly, "/x/*" any path under "/x/".
    `wsgi`: matched against PATH_INFO, the path's bytes as latin-1 (PEP 3333)."""
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
        if wsgi:
            try:
                p = p.encode("utf-8", "surrogateescape").decode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(
                    "%s: exempt holds %r, which has no UTF-8 form (a lone surrogate)"
                    % (where, p)
                ) from None
        if p.endswith("*"):
            prefixes.append(p[:-1])
        else:
            exact.add(p)
    pre = tuple(prefixes)
    if not pre:
        return exact.__contains__
    return lambda path: path in exact or path.startswith(pre)


# ---- refusals -------------------------------------------------------------------------------


def check_refusal_arguments(status: Any, concurrency_status: Any, headers: Any,
                            where: str) -> Tuple[int, int, bool]:
    status = check_status(status, "status", where)
    concurrency_status = check_status(concurrency_status, "concurrency_status", where)
    if not isinstance(headers, bool):
        raise TypeError("%s: headers must be a bool, not %s" % (where, type(headers).__name__))
    return status, concurrency_status, headers


def check_status(status: Any, name: str, where: str) -> int:
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError("%s: %s must be an int, not %s" % (where, name, type(status).__name__))
    if not 400 <= status <= 599:
        raise ValueError(
            "%s: %s must be an HTTP error status (400..599), got %r" % (where, name, status)
        )
    return status


REASONS = {s.value: s.phrase for s in http.HTTPStatus}  # a status outside it: "Error"


def detail(status: int) -> str:
    return {
        429: "request rate limit exceeded; retry after the Retry-After seconds",
        503: "too many requests in progress, or a backend is failing; retry later",
    }.get(status, "request refused by the rate limiter")


@functools.lru_cache(maxsize=32)
def problem(status: int) -> bytes:
    """The default body: RFC 9457 problem details."""
    doc = {"type": "about:blank", "title": REASONS.get(status, "Error"), "status": status,
           "detail": detail(status)}
    return json.dumps(doc, separators=(",", ":")).encode()


def _body_bytes(body: Any, what: str, where: str) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise TypeError("%s: %s must be bytes, str or None, not %s"
                    % (where, what, type(body).__name__))


# a header field name (RFC 9110 token) and value (visible ASCII, obs-text, space and tab)
_FIELD_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+\Z")
_BAD_VALUE = re.compile(r"[^\t\x20-\x7e\x80-\xff]")


def check_field_value(value: str, what: str, where: str) -> None:
    """A header value the server can send: Latin-1, no CR, LF or other control character
    (one would split the header: response splitting; a server answers 500 to it)."""
    bad = _BAD_VALUE.search(value)
    if bad is not None:
        raise ValueError(
            "%s: %s %r holds %r at %d; a header value is Latin-1 text without control "
            "characters (no CR or LF)" % (where, what, value, bad.group(), bad.start())
        )


def retry_after_s(retry_after: Optional[float]) -> int:
    """Retry-After in whole seconds: rounded up, at least 1 (also when unknown)."""
    if retry_after is None or retry_after != retry_after:
        return 1
    return max(1, math.ceil(retry_after))


def own_threshold(limiter: Any) -> Any:
    conc = getattr(limiter, "concurrency", None)
    return conc if conc is not None else getattr(limiter, "qps", None)


# ---- RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-10) -------------------------


def ratelimit_fields(limiter: Any, threshold: Any = None, r: Optional[int] = None,
                     t: Optional[int] = None) -> List[Tuple[str, str]]:
    """``RateLimit-Policy``: quota ``q`` per window ``w`` (seconds; else
    ``slidewin-window-ms``), or a concurrency quota (``threshold``: the key's override);
    then ``RateLimit`` with ``r`` left and ``t`` seconds to wait when ``r`` is known."""
    name = getattr(limiter, "name", None)
    if not isinstance(name, str) or not name:
        name = "default"
    # a structured-field string holds printable ASCII only: other characters are escaped
    # as \uXXXX (a header value must stay Latin-1, or the server answers 500)
    name = name.encode("ascii", "backslashreplace").decode("ascii")
    if not name.isprintable():  # (ASCII: printable is " " to "~"; a control character: "?")
        name = "".join(c if " " <= c <= "~" else "?" for c in name)
    name = '"%s"' % name.replace("\\", "\\\\").replace('"', '\\"')
    if threshold is None:
        threshold = own_threshold(limiter)
    if is_concurrency(limiter):
        policy = '%s;q=%d;qu="concurrent-requests"' % (name, int(threshold))
    else:
        ms = int(getattr(limiter, "interval_ms", 1000) or 1000)
        quota = _window_quota(threshold, ms)
        policy = ("%s;q=%d;w=%d" % (name, quota, ms // 1000) if ms % 1000 == 0
                  else "%s;q=%d;slidewin-window-ms=%d" % (name, quota, ms))
    out = [("RateLimit-Policy", policy)]
    if r is not None:
        out.append(("RateLimit", "%s;r=%d" % (name, r) + ("" if t is None else ";t=%d" % t)))
    return out


def remaining(limiter: Any, keyed: bool) -> Optional[int]:
    """``r`` of an admitted response; None (unknown) for a throttle or a keyed limiter."""
    if keyed or not isinstance(limiter, _core.Limiter):
        return None
    conc = limiter.concurrency
    if conc is not None:
        return max(0, conc - limiter.in_flight)
    if limiter.behavior not in ("reject", "warm_up"):
        return None
    quota = _window_quota(limiter.qps, limiter.interval_ms)
    return max(0, quota - limiter.metric.sum(Event.PASS))


def _window_quota(qps: Optional[float], interval_ms: int) -> int:
    # a float product a hair under an int is that int
    return int(math.floor((qps or 0.0) * interval_ms / 1000.0 + 1e-9))


def _has_quota(limiter: Any) -> bool:
    """A qps or a concurrency, not a breaker: RateLimit fields can be told."""
    return not isinstance(limiter, _core.Breaker) and own_threshold(limiter) is not None


def refusal_fields(
    limiter: Any,
    error: Any,
    status: int,
    concurrency_status: int,
    headers: bool,
    threshold: Any = None,
) -> Tuple[int, List[Tuple[str, str]]]:
    """(status, fields): ``Retry-After`` when a retry can pass (never for a limit of 0; for
    a concurrency limit only with a known retry_after)."""
    if isinstance(limiter, _core.Breaker) or isinstance(error, BreakerOpenError):
        # a circuit breaker is open: the service behind is failing, not the client too fast
        return 503, [("Retry-After", str(retry_after_s(getattr(error, "retry_after", None))))]
    conc = is_concurrency(limiter)
    if threshold is None:
        threshold = own_threshold(limiter)
    retry_after = getattr(error, "retry_after", None)
    seconds: Optional[int] = None  # none for a limit of 0 (never passes)
    if threshold != 0 and (not conc or retry_after is not None):
        seconds = retry_after_s(retry_after)
    out = [] if seconds is None else [("Retry-After", str(seconds))]
    if headers:
        out += ratelimit_fields(limiter, threshold, 0, seconds)
    return (concurrency_status if conc else status), out


def raised_refusal(error: Any, headers: bool = True) -> Tuple[int, List[Tuple[str, str]], bytes]:
    """(status, headers, problem body) of a BlockedError raised in a route or view."""
    lim = getattr(error, "limiter", None)
    return _framed(*refusal_fields(lim, error, 429, 503, headers and _has_quota(lim)))


def _framed(code: int, fields: List[Tuple[str, str]], body: Optional[bytes] = None,
            content_type: str = "application/problem+json"
            ) -> Tuple[int, List[Tuple[str, str]], bytes]:
    raw = problem(code) if body is None else body  # None: the problem document
    return code, [("Content-Type", content_type), ("Content-Length", str(len(raw)))] + fields, raw


def missing_fields(present: Iterable[str], fields: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    names = {n.lower() for n in present}
    return [(n, v) for n, v in fields if n.lower() not in names]


# the route limits the middlewares decide with their own (it imports this module: last)
from . import _routes  # noqa: E402
