"""Starlette: ``limit`` decorates endpoints; ``install(app)`` answers a BlockedError raised
in any route as the middleware's refusal (429 / 503, Retry-After). See docs/web.md.

    from starlette.routing import Route
    from slidewin.starlette import install, limit

    @limit("10/minute", key="ip")
    async def search(request): ...

    routes = [Route("/search", search)]
    app = install(Starlette(routes=routes))

(FastAPI: use the dependency ``slidewin.fastapi.limit``, which keeps the OpenAPI schema.)
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Awaitable, Callable, List, Tuple, TypeVar

from . import _io, _routes, _web

try:
    from starlette.requests import Request
    from starlette.responses import Response
except ModuleNotFoundError as _e:  # pragma: no cover - exercised without the extra
    raise _routes.missing_extra("starlette", "Starlette", _e) from None

__all__ = ["install", "limit", "blocked_handler"]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


async def blocked_handler(request: Request, exc: Exception) -> Response:
    """A ``BlockedError`` (``BreakerOpenError`` too) raised in a route, answered as a
    refusal: 429, or 503 for a concurrency or adaptive limit and an open breaker."""
    return _response(*_web.raised_refusal(exc))


def install(app: Any) -> Any:
    """Answer a ``BlockedError`` raised in a route with ``blocked_handler``, not a 500 (the
    app's own handler kept); returns app."""
    return _routes.install_blocked(app, blocked_handler)


def _response(code: int, headers: List[Tuple[str, str]], body: bytes) -> Response:
    return Response(body, code, headers=dict(headers))


def _refused(r: _routes.Refused) -> Any:
    return _response(*r.route.refusal(r.error))


def _build(route: _routes.RouteLimit) -> Any:
    def decorate(endpoint: F) -> F:
        if not inspect.iscoroutinefunction(endpoint):
            raise TypeError("slidewin.starlette.limit decorates async endpoints "
                            "(async def endpoint(request)), not %r" % (endpoint,))

        @functools.wraps(endpoint)
        async def limited(request: Request, *args: Any, **kwargs: Any) -> Any:
            result, fields = await _io.arun(_routes.around(
                _io.ASYNC, route.entry(request, request.scope),
                functools.partial(endpoint, request, *args, **kwargs), _refused, route.headers))
            if fields and isinstance(result, Response):
                _routes.add_missing(result.headers, fields)
            return result

        return _routes.marked(limited, route)  # type: ignore[no-any-return]

    return decorate


limit = _routes.limit_function("slidewin.starlette", True, _build, """
    Decorate an ``async def endpoint(request)``: it runs inside the limiter's entry.
""")
