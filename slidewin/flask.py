"""Flask: ``limit`` decorates views; ``install(app)`` answers a BlockedError raised in any
view as the middleware's refusal (429 / 503, Retry-After). See docs/web.md.

    from flask import Flask
    from slidewin.flask import install, limit

    app = Flask(__name__)
    install(app)

    @app.get("/search")
    @limit("10/minute", key="ip")
    def search(): ...
"""
from __future__ import annotations

import functools
from typing import Any, Callable, List, Tuple, TypeVar

from . import _core, _io, _routes, _web

try:
    import flask
except ModuleNotFoundError as _e:  # pragma: no cover - exercised without the extra
    raise _routes.missing_extra("flask", "Flask", _e) from None

__all__ = ["install", "limit", "blocked_handler"]

F = TypeVar("F", bound=Callable[..., Any])


def blocked_handler(error: Exception) -> Any:
    """A ``BlockedError`` (``BreakerOpenError`` too) raised in a view, answered as a refusal:
    429, or 503 for a concurrency or adaptive limit and an open breaker."""
    return _response(*_web.raised_refusal(error))


def install(app: Any) -> Any:
    """Answer a ``BlockedError`` raised in a view with ``blocked_handler``, not a 500 (the
    app's own handler kept); returns app."""
    if not isinstance(app, (flask.Flask, flask.Blueprint)):
        raise TypeError("install() takes a Flask app or Blueprint, not %s"
                        % type(app).__name__)
    if _core.BlockedError not in app.error_handler_spec.get(None, {}).get(None, {}):
        app.register_error_handler(_core.BlockedError, blocked_handler)
    return app


def _response(code: int, headers: List[Tuple[str, str]], body: bytes) -> Any:
    return flask.Response(body, code, headers=headers)


def _refused(r: _routes.Refused) -> Any:
    return _response(*r.route.refusal(r.error))


def _build(route: _routes.RouteLimit) -> Any:
    def decorate(view: F) -> F:
        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            request = flask.request
            result, fields = _io.run(_routes.around(
                _io.SYNC, route.entry(request, request.environ),
                functools.partial(view, *args, **kwargs), _refused, route.headers))
            if fields:
                result = flask.make_response(result)
                _routes.add_missing(result.headers, fields)
            return result

        return _routes.marked(limited, route)  # type: ignore[no-any-return]

    return decorate


limit = _routes.limit_function("slidewin.flask", False, _build, """
    Decorate a Flask view (put it below ``@app.route``): the view runs inside the
    limiter's entry (``key=f``: ``f(flask.request)``).
""")
