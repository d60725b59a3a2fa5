"""Per-route limits for FastAPI: a dependency answering 429 / 503 with Retry-After.

    from fastapi import Depends, FastAPI
    from slidewin.fastapi import limit_route

    app = FastAPI()

    @app.get("/search", dependencies=[Depends(limit_route(rate="10/minute", key="ip"))])
    async def search(q: str): ...

The route stays in the OpenAPI schema (it is an ordinary route with one more dependency).
The admission is held while the endpoint runs (a concurrency limit counts it in flight).
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Union

from . import _routes

try:
    from fastapi import HTTPException, Request
except ModuleNotFoundError as _e:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        "slidewin.fastapi needs FastAPI: pip install fastapi", name=_e.name) from None

__all__ = ["limit_route"]


def limit_route(
    limiter: Any = None,
    *,
    key: Union[None, str, Callable[[Request], Any]] = None,
    trusted_proxies: Any = (),
    status: int = 429,
    concurrency_status: int = 503,
    headers: bool = True,
    **limiter_kwargs: Any,
) -> Callable[[Request], AsyncIterator[None]]:
    """A FastAPI dependency limiting the routes that depend on it.

    ``limit_route(rate="10/minute")``: one limit for the route(s) (``Depends`` it on one
    route, or pass the same dependency to several to share it). ``key="ip"``: one limit
    per client address (``trusted_proxies`` as for ``slidewin.client_ip``); ``key=f``: per
    ``f(request)``. Or a ready limiter: ``limit_route(KeyedLimiter(...))``, a shared one,
    or a ``slidewin.redis.AsyncRedis*`` one.

    A refusal raises ``HTTPException`` 429 (rate) or 503 (concurrency) with ``Retry-After``
    (and the RateLimit fields when ``headers``); FastAPI answers it as ``{"detail": ...}``.
    """
    route = _routes.RouteLimit("slidewin.fastapi.limit_route", True, limiter, key,
                               trusted_proxies, status, concurrency_status, headers,
                               limiter_kwargs)
    from slidewin import BlockedError

    async def slidewin_limit(request: Request) -> AsyncIterator[None]:
        entry = route.entry(request, request.scope)
        if entry is None:  # key None: not limited
            yield
            return
        try:
            await entry.__aenter__()
        except BlockedError as e:
            code, fields = route.fields(e)
            raise HTTPException(code, _routes.detail(code), dict(fields)) from None
        try:
            yield
        except BaseException as exc:
            if not await entry.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await entry.__aexit__(None, None, None)

    slidewin_limit.limiter = route.limiter  # type: ignore[attr-defined]
    return slidewin_limit
