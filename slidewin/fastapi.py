"""FastAPI: route limits as a dependency, and refusals raised anywhere answered 429 / 503.

    from fastapi import Depends, FastAPI
    import slidewin.fastapi

    app = FastAPI()
    slidewin.fastapi.install(app)     # a BlockedError raised in a route: 429 / 503

    @app.get("/search", dependencies=[Depends(slidewin.fastapi.limit("10/minute", key="ip"))])
    async def search(q: str): ...

The route stays in the OpenAPI schema; the admission is held while the endpoint runs; a
refusal raises ``RouteRefused``. See docs/web.md.
"""
from __future__ import annotations

from typing import Any, AsyncIterator, List, Tuple

from . import _routes, _web

try:
    from fastapi import HTTPException, Request
    from fastapi.responses import Response
except ModuleNotFoundError as _e:  # pragma: no cover - exercised without the extra
    raise _routes.missing_extra("fastapi", "FastAPI", _e) from None

from .starlette import blocked_handler  # noqa: E402  (FastAPI's responses are Starlette's)

__all__ = ["install", "limit", "limit_route", "RouteRefused", "refused_handler",
           "blocked_handler"]


class RouteRefused(HTTPException):
    """A request refused by a ``limit`` dependency: ``status_code``, ``headers`` and
    ``body`` (problem+json) of the middleware's refusal. Answered by ``refused_handler``
    unless the app has its own (``app.add_exception_handler(RouteRefused, ...)``)."""

    def __init__(self, status: int, fields: List[Tuple[str, str]], body: bytes) -> None:
        super().__init__(status, _web.detail(status), dict(fields))
        self.body = body


async def refused_handler(request: Request, exc: Exception) -> Response:
    """The middleware's refusal: the problem+json body with its status and fields."""
    assert isinstance(exc, RouteRefused)
    return Response(exc.body, exc.status_code, headers=exc.headers,
                    media_type="application/problem+json")


def install(app: Any) -> Any:
    """Answer a ``BlockedError`` raised in a route with ``blocked_handler``, not a 500, and
    ``RouteRefused`` with ``refused_handler`` (the app's own handlers kept); returns app."""
    return _routes.install_blocked(app, blocked_handler, (RouteRefused, refused_handler))


def _build(route: _routes.RouteLimit) -> Any:
    async def slidewin_limit(request: Request, response: Response) -> AsyncIterator[None]:
        entry = route.entry(request, request.scope)
        if entry is None:  # not limited here
            yield
            return
        try:
            async with entry:
                if route.headers:
                    for name, value in entry.headers():
                        response.headers[name] = value
                yield
        except _routes.Refused as r:  # on entering: no endpoint lets a Refused out
            code, fields = r.route.fields(r.error)
            # its handler, to the app and to the running stack's (copied when the app started)
            app_handlers = getattr(request.app, "exception_handlers", None)
            if isinstance(app_handlers, dict):
                app_handlers.setdefault(RouteRefused, refused_handler)
            running = request.scope.get("starlette.exception_handlers")
            if isinstance(running, tuple) and running and isinstance(running[0], dict):
                running[0].setdefault(RouteRefused,
                                      (app_handlers or {}).get(RouteRefused, refused_handler))
            raise RouteRefused(code, fields, _web.problem(code)) from None

    return _routes.marked(slidewin_limit, route)


limit = _routes.limit_function("slidewin.fastapi", True, _build, """
    A FastAPI dependency limiting the routes that depend on it (the same dependency on
    several routes shares its limit). A refusal raises ``RouteRefused``, answered by
    ``refused_handler`` (or your handler). Under ``slidewin.asgi.LimitMiddleware``, the
    route's limit and the middleware's decide together.
""")
limit_route = limit  # its former name
