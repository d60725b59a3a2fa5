"""Per-route limits for Starlette: a decorator for endpoints answering 429 / 503 with
Retry-After.

    from starlette.routing import Route
    from slidewin.starlette import limit

    @limit(rate="10/minute", key="ip")
    async def search(request): ...

    routes = [Route("/search", search)]

(FastAPI: use the dependency ``slidewin.fastapi.limit_route``, which keeps the endpoint's
signature for the OpenAPI schema.)
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Awaitable, Callable, TypeVar, Union

from . import _routes

try:
    from starlette.requests import Request
    from starlette.responses import Response
except ModuleNotFoundError as _e:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        'slidewin.starlette needs Starlette: pip install "slidewin[starlette]" '
        '(or pip install starlette)', name=_e.name) from None

__all__ = ["limit"]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def limit(
    limiter: Any = None,
    *,
    key: Union[None, str, Callable[[Request], Any]] = None,
    trusted_proxies: Any = (),
    status: int = 429,
    concurrency_status: int = 503,
    headers: bool = True,
    **limiter_kwargs: Any,
) -> Callable[[F], F]:
    """Decorate an ``async def endpoint(request)``: it runs inside the limiter's entry; a
    refusal answers 429 (rate) / 503 (concurrency) with ``Retry-After`` and a problem+json
    body. Arguments as ``slidewin.fastapi.limit_route``."""
    route = _routes.RouteLimit("slidewin.starlette.limit", True, limiter, key, trusted_proxies,
                               status, concurrency_status, headers, limiter_kwargs)
    from slidewin import BlockedError

    def decorate(endpoint: F) -> F:
        if not inspect.iscoroutinefunction(endpoint):
            raise TypeError("slidewin.starlette.limit decorates async endpoints "
                            "(async def endpoint(request)), not %r" % (endpoint,))

        @functools.wraps(endpoint)
        async def limited(request: Request, *args: Any, **kwargs: Any) -> Any:
            entry = route.entry(request, request.scope)
            if entry is None:  # key None: not limited
                return await endpoint(request, *args, **kwargs)
            try:
                await entry.__aenter__()
            except BlockedError as e:
                code, fields, body = route.refusal(e)
                return Response(body, code, headers=dict(fields))
            try:
                result = await endpoint(request, *args, **kwargs)
            except BaseException as exc:
                if not await entry.__aexit__(type(exc), exc, exc.__traceback__):
                    raise
                return None  # pragma: no cover - entry never swallows
            await entry.__aexit__(None, None, None)
            return result

        limited.limiter = route.limiter  # type: ignore[attr-defined]
        return limited  # type: ignore[return-value]

    return decorate
