"""Per-route limits for Flask: a decorator for views answering 429 / 503 with Retry-After.

    from flask import Flask
    from slidewin.flask import limit

    app = Flask(__name__)

    @app.get("/search")
    @limit(rate="10/minute", key="ip")
    def search(): ...
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar, Union

from . import _routes

try:
    import flask
except ModuleNotFoundError as _e:  # pragma: no cover - exercised without the extra
    raise ModuleNotFoundError(
        'slidewin.flask needs Flask: pip install "slidewin[flask]" '
        '(or pip install flask)', name=_e.name) from None

__all__ = ["limit"]

F = TypeVar("F", bound=Callable[..., Any])


def limit(
    limiter: Any = None,
    *,
    key: Union[None, str, Callable[[Any], Any]] = None,
    trusted_proxies: Any = (),
    status: int = 429,
    concurrency_status: int = 503,
    headers: bool = True,
    **limiter_kwargs: Any,
) -> Callable[[F], F]:
    """Decorate a Flask view (put it below ``@app.route``): the view runs inside the
    limiter's entry; a refusal answers 429 (rate) / 503 (concurrency) with ``Retry-After``
    and a problem+json body.

    ``limit(rate="10/minute")``: one limit for the view. ``key="ip"``: one per client
    address (``trusted_proxies`` as for ``slidewin.client_ip``); ``key=f``: per
    ``f(flask.request)``. Or a ready limiter (Limiter, KeyedLimiter, shared, or a sync
    ``slidewin.redis`` one).
    """
    route = _routes.RouteLimit("slidewin.flask.limit", False, limiter, key, trusted_proxies,
                               status, concurrency_status, headers, limiter_kwargs)
    from slidewin import BlockedError

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            request = flask.request
            try:
                entry = route.entry(request, request.environ)
                if entry is None:  # key None: not limited
                    return view(*args, **kwargs)
                entry.__enter__()
            except BlockedError as e:
                code, fields, body = route.refusal(e)
                return flask.Response(body, code, headers=fields)
            try:
                result = view(*args, **kwargs)
            except BaseException as exc:
                if not entry.__exit__(type(exc), exc, exc.__traceback__):
                    raise
                return None  # pragma: no cover - entry never swallows
            entry.__exit__(None, None, None)
            return result

        limited.limiter = route.limiter  # type: ignore[attr-defined]
        return limited  # type: ignore[return-value]

    return decorate
