"""A limiter in front of any WSGI app (Flask, Django, ...): the ASGI middleware's twin.

    from slidewin.wsgi import LimitMiddleware
    app.wsgi_app = LimitMiddleware(app.wsgi_app, Limiter(qps=100))      # Flask
    application = LimitMiddleware(get_wsgi_application(), limiter)       # Django (wsgi.py)

Refusals as in slidewin.asgi; a throttled request waits in its worker thread (the GIL
released). An admission is held until the server closes the response iterable (PEP 3333
``close()``); the server's ``wsgi.file_wrapper`` is returned as it is (so it still sends
with sendfile). See docs/web.md.
"""
from __future__ import annotations

import sys
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Tuple,
)

from . import _core, _io, _routes, _web

__all__ = ["LimitMiddleware", "Environ", "StartResponse", "WSGIApp"]

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


class LimitMiddleware(_web.Middleware):
    """A limiter in front of a WSGI app: the arguments of ``slidewin.asgi.LimitMiddleware``,
    taking the WSGI environ (``key(environ)``, ``exempt(environ)``, ``on_block(error,
    environ)``; exempt paths match ``PATH_INFO``, a non-ASCII one given as text,
    ``"/café"``). ``on_block`` is a plain function and may return a WSGI app (a werkzeug
    ``Response``). The limiter is used synchronously: a sync ``RedisLimiter`` /
    ``RedisKeyedLimiter`` across hosts.
    """

    app: WSGIApp

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        limited, k = self._limited_key(environ, environ.get("PATH_INFO", ""))
        if not limited:
            return self.app(environ, start_response)
        entry, admission = self._entry(environ, k)
        try:
            entry.__enter__()
        except (_core.BlockedError, _routes.Refused) as exc:  # the limiter's, an Admission's
            app, code, hdrs, raw = _io.run(self._refusing(environ, exc, k))
            if app is not None:  # on_block's response: the app's own iterable
                return app(environ, _adding(start_response, hdrs))  # type: ignore[no-any-return]
            start_response("%d %s" % (code, _web.REASONS.get(code, "Error")), hdrs)
            return [raw]
        fields = self._admitted_fields(admission, k)
        try:
            result = self.app(environ, start_response if fields is None
                              else _adding(start_response, fields, only_missing=False))
        except BaseException as exc:
            entry.__exit__(type(exc), exc, None)
            raise
        wrapper = environ.get("wsgi.file_wrapper")
        # PEP 3333 lets wsgi.file_wrapper be any callable: only a type has instances
        if (isinstance(wrapper, type) and type(result) is not list
                and isinstance(result, wrapper)):
            # returned as it is, so that the server still sends it with sendfile()
            try:
                result.close = _Closing(  # type: ignore[attr-defined]
                    _WRAPPER, entry, getattr(result, "close", None)).close
                return result
            except (AttributeError, TypeError):
                pass  # its close cannot be replaced (a C type, __slots__): wrapped below
        return _Closing(result, entry)

    def _route_limits(self, environ: Environ) -> Tuple[Tuple[Any, ...], Any]:
        """Those of the request's Flask view; none unless the app is a Flask ``wsgi_app``."""
        if not _routes.WSGI_ROUTES[0]:
            return (), None
        flask_app: Any = getattr(self.app, "__self__", None)  # the app's bound method
        url_map = getattr(flask_app, "url_map", None)
        if url_map is None:
            return (), None
        try:
            endpoint, _ = url_map.bind_to_environ(environ).match()
        except Exception:  # no route (a 404, 405, a redirect): no route limit
            return (), None
        r = getattr(flask_app.view_functions.get(endpoint), "slidewin_route", None)
        if not isinstance(r, _routes.RouteLimit):
            return (), None
        return (r,), (flask_app.request_class(environ) if r.key is not None else None)


def _adding(start_response: StartResponse, fields: List[Tuple[str, str]],
            only_missing: bool = True) -> StartResponse:
    """start_response, adding `fields` (only those the response does not set: a refusal's)."""

    def adding(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        extra = (_web.missing_fields([k for k, _ in headers], fields) if only_missing
                 else fields)
        return start_response(status, list(headers) + extra, exc_info)

    return adding


_WRAPPER: Any = object()  # the `result` of a _Closing that is a file wrapper's close()


class _Closing:
    """The app's iterable, the entry held until close() (werkzeug's ClosingIterator); or,
    with the result _WRAPPER, the close() of a server's file wrapper returned as it is
    (`close`: the wrapper's own)."""

    __slots__ = ("_result", "_it", "_entry", "_outcome", "_close")

    def __init__(self, result: Iterable[bytes], entry: Any,
                 close: Optional[Callable[[], Any]] = None) -> None:
        self._result: Any = result
        self._it: Optional[Iterator[bytes]] = None
        self._entry: Any = entry
        self._close = close
        # what close() counts: nothing while unfinished (closed early: the client is gone),
        # SUCCESS once exhausted (None), the exception's type when the iteration raised
        self._outcome: Optional[type] = GeneratorExit

    def __iter__(self) -> "_Closing":
        return self

    def __next__(self) -> bytes:
        if self._it is None:
            self._it = iter(self._result)
        try:
            return next(self._it)
        except StopIteration:
            self._outcome = None
            raise
        except BaseException as exc:
            self._outcome = type(exc)  # the server closes next; counted then
            raise

    def close(self) -> None:
        """Close the result, then end the entry (once) with the outcome or close's error. A
        file wrapper may be sent with sendfile() and never iterated, so its end cannot be
        seen: closed while an OSError propagates (the server's `finally` after a failed send:
        the client is gone) counts nothing, closed otherwise SUCCESS."""
        entry, self._entry = self._entry, None
        if entry is None:
            return
        outcome = self._outcome
        close, self._close = self._close, None  # (drops the cycle wrapper -> close -> wrapper)
        if self._result is _WRAPPER:
            outcome = GeneratorExit if isinstance(sys.exc_info()[1], OSError) else None
        try:
            # the result's looked up inside the try: a `close` that raises ends the entry too
            close = close or getattr(self._result, "close", None)
            if close is not None:
                close()
        except BaseException as exc:
            entry.__exit__(type(exc), exc, None)
            raise
        entry.__exit__(outcome, None, None)
