"""What the per-route helpers (slidewin.fastapi, slidewin.starlette, slidewin.flask) share:
the route's limiter, its key, and the refusal (429 with Retry-After / 503), as the
middlewares answer it (slidewin._web)."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from . import _web

IP = "ip"  # key="ip": one limit per client address (slidewin.client_ip)


class RouteLimit:
    """One route's limiter and how a request picks its key.

    ``limiter``: a Limiter, KeyedLimiter (shared or not) or a Redis limiter of the right kind;
    or none, and the Limiter's keywords (``rate="10/minute"``, ``qps=``, ``concurrency=``, ...)
    build one: a KeyedLimiter when ``key`` is given. ``key``: None (one limit for the route;
    a KeyedLimiter then keys by client IP), ``"ip"`` (the client's address, read with
    ``trusted_proxies``) or a function of the request returning a str, bytes or int key,
    or None: that request is let through, unlimited and uncounted (as the middlewares do).
    """

    def __init__(self, where: str, is_async: bool, limiter: Any, key: Any,
                 trusted_proxies: Any, status: int, concurrency_status: int, headers: bool,
                 kwargs: Dict[str, Any]) -> None:
        if limiter is not None and kwargs:
            raise ValueError("%s: give a limiter or the Limiter's keywords (%s), not both"
                             % (where, ", ".join(sorted(kwargs))))
        if key is not None and key != IP and not callable(key):
            raise TypeError("%s: key must be None, 'ip' or a function of the request, not %r"
                            % (where, key))
        if limiter is None:
            if not kwargs:
                raise TypeError("%s needs a limiter or a limit, e.g. rate='10/minute'" % where)
            import slidewin

            limiter = (slidewin.KeyedLimiter if key is not None else slidewin.Limiter)(**kwargs)
        self.keyed = _web.check_limiter(limiter, where, is_async)
        if key is not None and not self.keyed:
            _web.check_key(key if callable(key) else (lambda r: r), False, limiter, where)
        self.limiter = limiter
        self.key = key if callable(key) else None
        _web._trusted_of(trusted_proxies)  # validated now, not at the first request
        self.trusted = trusted_proxies
        self.status = _web.check_status(status, "status", where)
        self.concurrency_status = _web.check_status(concurrency_status, "concurrency_status",
                                                    where)
        self.headers = bool(headers)

    def key_of(self, request: Any, scope_or_environ: Any) -> Any:
        if self.key is not None:
            return self.key(request)
        return _web.client_ip(scope_or_environ, self.trusted)

    def entry(self, request: Any, scope_or_environ: Any) -> Any:
        """The limiter's entry for this request; None when its key is None (not limited)."""
        if self.keyed:
            k = self.key_of(request, scope_or_environ)
            return None if k is None else self.limiter.entry(k)
        return self.limiter.entry()

    def fields(self, error: Any) -> Tuple[int, List[Tuple[str, str]]]:
        """(status, Retry-After and RateLimit fields) of a refused request."""
        return _web.refusal_fields(self.limiter, error, self.status, self.concurrency_status,
                                   self.headers)

    def refusal(self, error: Any) -> Tuple[int, List[Tuple[str, str]], bytes]:
        """(status, headers, body) of a refused request: 429 (rate) / 503 (concurrency),
        Retry-After, RateLimit fields, an RFC 9457 problem body."""
        return _web.refusal(self.limiter, error, self.status, self.concurrency_status, None,
                            "application/problem+json", self.headers)


def detail(status: int) -> str:
    return {429: "request rate limit exceeded; retry after the Retry-After seconds",
            503: "too many requests in progress; retry later"}.get(
                status, "request refused by the rate limiter")



def problem(status: int) -> bytes:
    """The middleware's default refusal body (RFC 9457 problem details)."""
    return _web.problem(status)
