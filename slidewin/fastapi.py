"""Per-route limits for FastAPI: a dependency answering 429 / 503 with Retry-After.

    from fastapi import Depends, FastAPI
    from slidewin.fastapi import limit_route

    app = FastAPI()

    @app.get("/search", dependencies=[Depends(limit_route(rate="10/minute", key="ip"))])
    async def search(q: str): ...

The route stays in the OpenAPI schema (it is an ordinary route with one more dependency).
The admission is held while the endpoint runs (a concurrency limit counts it in flight).
A refusal is answered as slidewin.asgi.LimitMiddleware answers it (an RFC 9457
application/problem+json body): the dependency raises ``RouteRefused`` (an HTTPException)
and, the first time, adds the handler ``refused_handler`` for it to the app.
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Callable, List, Tuple, Union

from . import _routes

try:
    from fastapi import HTTPException, Request
    from fastapi.responses import Response
except ModuleNotFoundError as _e:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        'slidewin.fastapi needs FastAPI: pip install "slidewin[fastapi]" '
        '(or pip install fastapi)', name=_e.name) from None

__all__ = ["limit_route", "RouteRefused", "refused_handler"]


class RouteRefused(HTTPException):
    """A request refused by a ``limit_route`` dependency: ``status_code``, ``headers``
    (Retry-After, RateLimit fields) and ``body`` (problem+json) of the refusal. Register
    your own handler for it (``app.add_exception_handler(RouteRefused, ...)``) to answer
    otherwise; without one, ``refused_handler`` answers."""

    def __init__(self, status: int, fields: List[Tuple[str, str]], body: bytes) -> None:
        super().__init__(status, _routes.detail(status), dict(fields))
        self.body = body


async def refused_handler(request: Request, exc: Exception) -> Response:
    """The middleware's refusal: the problem+json body with its status and fields."""
    assert isinstance(exc, RouteRefused)
    return Response(exc.body, exc.status_code, headers=exc.headers,
                    media_type="application/problem+json")


def _install_handler(request: Request) -> None:
    """Add ``refused_handler`` for ``RouteRefused`` unless the app has one: to the app (for
    a stack built later) and to the handlers of the running stack, which Starlette copied
    from the app when it started."""
    app_handlers = getattr(request.app, "exception_handlers", None)
    if isinstance(app_handlers, dict):
        app_handlers.setdefault(RouteRefused, refused_handler)
    running = request.scope.get("starlette.exception_handlers")
    if isinstance(running, tuple) and running and isinstance(running[0], dict):
        running[0].setdefault(RouteRefused,
                              (app_handlers or {}).get(RouteRefused, refused_handler))


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

    A refusal answers 429 (rate) or 503 (concurrency) with ``Retry-After`` (and the
    RateLimit fields when ``headers``) and a problem+json body, as the middleware does: the
    dependency raises ``RouteRefused``, handled by ``refused_handler`` (or your handler).
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
            _install_handler(request)
            raise RouteRefused(code, fields, _routes.problem(code)) from None
        try:
            yield
        except BaseException as exc:
            if not await entry.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await entry.__aexit__(None, None, None)

    slidewin_limit.limiter = route.limiter  # type: ignore[attr-defined]
    return slidewin_limit
