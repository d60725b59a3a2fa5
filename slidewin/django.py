"""Django: a project-wide limit from settings, ``@ratelimit`` on views, refusals as Django
responses.

    # settings.py
    MIDDLEWARE = [..., "slidewin.django.LimitMiddleware", ...]  # after Security/CORS
    SLIDEWIN = {"rate": "100/second", "key": "ip", "shared": "site"}
    SLIDEWIN_ENABLED = False                                      # e.g. in test settings

    # views.py
    from slidewin.django import ratelimit

    @ratelimit("5/minute", key="ip", method="POST")
    def login(request): ...

A refusal (a ``BlockedError`` raised in a view too) is a Django ``HttpResponse``, so the
middleware around it (CORS, security headers) applies. Sync and async alike. See
docs/web.md.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, FrozenSet, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

from . import _core, _io, _routes, _web

try:
    from asgiref.sync import iscoroutinefunction, markcoroutinefunction
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]
    from django.http import HttpResponse  # type: ignore[import-untyped,unused-ignore]
    from django.utils.module_loading import (  # type: ignore[import-untyped,unused-ignore]
        import_string,
    )
except ModuleNotFoundError as _e:  # pragma: no cover - exercised without the extra
    raise _routes.missing_extra("django", "Django", _e) from None

__all__ = ["LimitMiddleware", "ratelimit", "refusal_response", "ALL", "UNSAFE"]

F = TypeVar("F", bound=Callable[..., Any])

ALL: Optional[Tuple[str, ...]] = None  # method=ALL: every method (the default)
UNSAFE: Tuple[str, ...] = ("DELETE", "PATCH", "POST", "PUT")  # the methods that change state
_HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE")

# the settings.SLIDEWIN entries that configure the middleware; the others are the limiter's
_OWN_KEYS = frozenset(("limiter", "key", "trusted_proxies", "exempt", "headers", "status",
                       "concurrency_status"))


def _enabled() -> bool:
    return bool(getattr(settings, "SLIDEWIN_ENABLED", True))


def _trusted_proxies() -> Any:
    t = getattr(settings, "SLIDEWIN_TRUSTED_PROXIES", None)
    if t is None:
        conf = getattr(settings, "SLIDEWIN", None)
        t = conf.get("trusted_proxies") if isinstance(conf, dict) else None
    return () if t is None else t


def _ip(request: Any) -> str:
    meta = request.META  # an ASGI request without a peer address has no REMOTE_ADDR
    ip = _web.client_ip(meta if "REMOTE_ADDR" in meta else {**meta, "REMOTE_ADDR": ""},
                        _trusted_proxies())
    if not ip:
        raise ValueError(
            "slidewin.django: key='ip', but the request has no client address (served on a "
            "Unix socket?): put the proxy's address in SLIDEWIN_TRUSTED_PROXIES (\"unix\" "
            "for a socket), or give key= a function of the request")
    return ip


def _user_key(user: Any, request: Any) -> str:
    if user is not None and getattr(user, "is_authenticated", False):
        return "user:%s" % (user.pk,)
    return "ip:" + _ip(request)


class _Key:
    """A request's key: "ip" (None too), "user", "header:Name", a dotted path or a function
    of the request (a coroutine function for async views)."""

    __slots__ = ("user", "sync")

    def __init__(self, spec: Any, where: str) -> None:
        self.user = spec in ("user", "user_or_ip")  # the authenticated user's pk, else the IP
        self.sync: Callable[[Any], Any] = _ip  # the key of a request, in a thread
        if self.user:
            self.sync = lambda request: _user_key(getattr(request, "user", None), request)
        elif isinstance(spec, str) and spec.startswith(_routes.HEADER):
            self.sync = _routes.header_key(spec, where)
        elif isinstance(spec, str) and spec != "ip":
            try:
                self.sync = import_string(spec)
            except ImportError:
                raise ValueError(
                    "%s: key %r is not 'ip', 'user', 'header:Name' nor the dotted path of a "
                    "function of the request" % (where, spec)) from None
        elif callable(spec):
            self.sync = spec
        elif not isinstance(spec, (str, type(None))):
            raise TypeError("%s: key must be 'ip', 'user', 'header:Name', a dotted path or a "
                            "function of the request, not %s" % (where, type(spec).__name__))

    async def async_(self, request: Any) -> Any:
        if self.user:
            auser = getattr(request, "auser", None)  # request.user would query in the loop
            user = await auser() if auser is not None else getattr(request, "user", None)
            return _user_key(user, request)
        k = self.sync(request)
        return await k if inspect.isawaitable(k) else k


def _key_of(spec: Any, limiter: Any, where: str) -> Optional[_Key]:
    """The _Key of `spec`; without one, a ready KeyedLimiter's default: the address."""
    return _Key(spec, where) if spec is not None or _web.is_keyed(limiter) else None


def _response(code: int, fields: Sequence[Tuple[str, str]], body: bytes) -> HttpResponse:
    return HttpResponse(body, status=code, headers=dict(fields))  # Content-Type among them


def refusal_response(error: BaseException, *, headers: bool = True) -> HttpResponse:
    """The response to a ``BlockedError`` (``BreakerOpenError`` too): 429, or 503 for a
    concurrency or adaptive limit and an open breaker, with ``Retry-After`` (whole
    seconds, rounded up), the RateLimit fields of its limiter (``headers``) and a
    problem+json body. What the middleware answers for one raised in a view."""
    return _response(*_web.raised_refusal(error, headers))


class _ViewLimit(NamedTuple):
    route: _routes.RouteLimit
    key: Optional[_Key]
    methods: Optional[FrozenSet[str]]
    block: bool

    def applies(self, request: Any) -> bool:
        return self.methods is None or request.method in self.methods


class _State:
    """What the middleware knows of a request (set on it as ``request._slidewin``)."""

    admission: Optional[_routes.Admission] = None  # the limits decided, held
    decided: Optional[Tuple[Any, ...]] = None  # the views' limits among them (None: no view)
    exc: Any = None  # the exception the view raised
    headers: Sequence[Tuple[str, str]] = ()  # the RateLimit fields to add


def _methods(method: Any, where: str) -> Optional[FrozenSet[str]]:
    if method is None:
        return None
    items = (method,) if isinstance(method, str) else method
    try:
        out = frozenset(m.upper() for m in items)
    except (TypeError, AttributeError):
        raise TypeError("%s: method must be a str, a tuple of str or ALL, not %r"
                        % (where, method)) from None
    if not out:
        raise ValueError("%s: method is empty; leave it out (ALL) to limit every method"
                         % where)
    unknown = sorted(out.difference(_HTTP_METHODS))
    if unknown:
        raise ValueError("%s: method %s is not an HTTP method; give one or a tuple of %s "
                         "(UNSAFE: the state-changing ones), or ALL"
                         % (where, ", ".join(map(repr, unknown)), ", ".join(_HTTP_METHODS)))
    return out


def ratelimit(
    rate: Any = None,
    *,
    key: Any = None,
    method: Union[None, str, Sequence[str]] = ALL,
    block: bool = True,
    headers: bool = True,
    status: int = 429,
    concurrency_status: int = 503,
    **limiter_kwargs: Any,
) -> Callable[[F], F]:
    """Limit a Django view, sync or async.

    ``rate``: ``"5/minute"``, several at once ``"10/second;100/minute"`` (all must admit),
    or a ready limiter (a ``slidewin.redis`` one of the view's kind too); or the Limiter's
    keywords (``qps=``, ``concurrency=``, ``shared=``, ...). ``key``: None (one limit; the
    client's address for a ready KeyedLimiter), ``"ip"`` (through
    ``SLIDEWIN_TRUSTED_PROXIES``), ``"user"`` (the authenticated user's pk, else the
    address), ``"header:X-Api-Key"``, a dotted path or ``fn(request)`` (None: not limited).
    ``method``: a method or a tuple of them (``UNSAFE``); ``ALL`` by default.
    ``block=True`` answers a refusal 429 (503 for a concurrency limit); ``block=False``
    sets ``request.limited = True`` and calls the view. Under ``LimitMiddleware`` the
    view's limit and the project's decide together. ``SLIDEWIN_ENABLED = False`` lets every
    request through.
    """
    where = "slidewin.django.ratelimit"
    if not isinstance(block, bool):
        raise TypeError("%s: block must be a bool, not %s" % (where, type(block).__name__))
    methods = _methods(method, where)
    k = _key_of(key, rate, where)

    def decorate(view: F) -> F:
        is_async = iscoroutinefunction(view)
        route = _routes.RouteLimit(where, is_async, rate, k.sync if k is not None else None,
                                   (), status, concurrency_status, headers, limiter_kwargs)
        vl = _ViewLimit(route, k, methods, block)

        io = _io.ASYNC if is_async else _io.SYNC

        def limited(request: Any, *args: Any, **kwargs: Any) -> Any:
            return io.run(_view_steps(io, vl, request, functools.partial(
                view, request, *args, **kwargs)))

        wrapper: Any = functools.wraps(view)(limited)
        if is_async:
            markcoroutinefunction(wrapper)
        # the limits of the view, outermost last (stacked decorators), for the middleware
        wrapper.slidewin_limits = getattr(view, "slidewin_limits", ()) + (vl,)
        wrapper.limiter = route.limiter
        return wrapper  # type: ignore[no-any-return]

    return decorate


def _admission(io: Any, limits: Sequence[_ViewLimit], request: Any) -> _io.Steps:
    """The Admission of the request by `limits`, each with its key (a key of None leaves its
    limit out); None when none is left."""
    pairs = []
    for vl in limits:
        k = None
        if vl.key is not None:
            k = yield functools.partial(vl.key.async_ if io.is_async else vl.key.sync, request)
            if k is None:
                continue
        pairs.append((vl.route, k))
    return _routes.Admission(pairs) if pairs else None


def _view_steps(io: Any, vl: _ViewLimit, request: Any, view: Callable[[], Any]
                ) -> _io.Steps:
    """A ``@ratelimit`` view called: its limit decided unless the middleware decided it
    with its own (or the method, SLIDEWIN_ENABLED or a key of None leave it out)."""
    admission = None
    if _enabled() and vl.applies(request):
        state = getattr(request, "_slidewin", None)
        if state is None or vl not in (state.decided or ()):
            admission = yield from _admission(io, (vl,), request)

    def refused(r: _routes.Refused) -> Any:
        if vl.block:
            return _response(*r.route.refusal(r.error))
        request.limited = True
        return None  # the view is called, unlimited

    def call() -> Any:  # (a refused block=True view leaves request.limited unset)
        request.limited = getattr(request, "limited", False)  # an outer @ratelimit's True kept
        return view()

    response, fields = yield from _routes.around(io, admission, call, refused, vl.route.headers)
    _routes.add_missing(response, fields)
    return response


class LimitMiddleware:
    """The project-wide limit of ``settings.SLIDEWIN``, for ``settings.MIDDLEWARE``.

    ``SLIDEWIN`` (a dict; empty: no project-wide limit): ``"rate"``, ``"qps"``,
    ``"concurrency"`` and any Limiter keyword, or ``"limiter"`` (an object or a dotted
    path); ``"key"`` as ``@ratelimit``'s; ``"trusted_proxies"``; ``"exempt"`` (paths);
    ``"headers"`` (True), ``"status"`` (429), ``"concurrency_status"`` (503).

    Decided in ``process_view``, together with the view's blocking ``@ratelimit`` limits; a
    request routed to no view (a 404) when its response is ready. The admission is held
    until the response is finished (a streaming one's last chunk).
    ``SLIDEWIN_ENABLED = False``: nothing is limited. See docs/web.md.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)
            # Django calls process_view in the handler's mode: an async one without a thread
            self.process_view = self._process_view_async  # type: ignore[method-assign]
        conf = getattr(settings, "SLIDEWIN", None) or {}
        if not isinstance(conf, dict):
            raise TypeError("settings.SLIDEWIN must be a dict, not %s" % type(conf).__name__)
        _web._trusted_of(_trusted_proxies())  # a bad entry fails here, not at each request
        self.route: Optional[_routes.RouteLimit] = None
        self.key: Optional[_Key] = None
        where = "settings.SLIDEWIN"
        kwargs = {k: v for k, v in conf.items() if k not in _OWN_KEYS}
        limiter = conf.get("limiter")
        if isinstance(limiter, str):
            try:
                limiter = import_string(limiter)
            except ImportError as e:
                raise ValueError("settings.SLIDEWIN[\"limiter\"] %r is not the dotted path of "
                                 "a limiter: %s" % (limiter, e)) from None
        if limiter is None and not kwargs:
            given = sorted(k for k in _OWN_KEYS - {"limiter", "trusted_proxies"} if k in conf)
            if given:
                raise ValueError(
                    "settings.SLIDEWIN gives %s but no limit: add \"rate\" (\"100/second\"), "
                    "\"qps\", \"concurrency\" or \"limiter\"" % ", ".join(given))
            return  # no project-wide limit
        self.key = _key_of(conf.get("key"), limiter, where)
        try:
            self.route = _routes.RouteLimit(
                where, self.is_async, limiter, self.key.sync if self.key is not None else None,
                (), conf.get("status", 429), conf.get("concurrency_status", 503),
                conf.get("headers", True), kwargs)
        except (TypeError, ValueError) as e:  # the Limiter's own errors name no setting
            if str(e).startswith(where) or type(e) not in (TypeError, ValueError):
                raise
            raise type(e)("%s: %s" % (where, e)) from e
        self._global = _ViewLimit(self.route, self.key, None, True)
        self._exempt = _web.path_matcher(conf.get("exempt"), where)

    def __repr__(self) -> str:
        return "LimitMiddleware(%r)" % (self.route.limiter if self.route else None,)

    def __call__(self, request: Any) -> Any:
        io = _io.ASYNC if self.is_async else _io.SYNC
        return io.run(self._serving(io, request))

    def _serving(self, io: Any, request: Any) -> _io.Steps:
        get_response = functools.partial(self.get_response, request)
        if not _enabled():
            return (yield get_response)
        request._slidewin = state = _State()
        try:
            response = yield get_response
        except BaseException as exc:  # not answered by Django (KeyboardInterrupt,
            if state.admission is not None:  # SystemExit), cancelled (the client left)
                yield from state.admission.exiting(io, type(exc), exc, None)
            raise
        if state.decided is None and self._global_applies(request):
            late = yield from self._deciding(io, request, None)  # routed to no view
            if late is not None:
                return late
        if state.headers:
            _routes.add_missing(response, state.headers)
        admission = state.admission
        if admission is not None:
            if getattr(response, "streaming", False) and \
                    getattr(response, "file_to_stream", None) is None:
                # held until its last chunk has been sent, or it is closed
                response.streaming_content = _holding(response, admission, state.exc)
            else:
                yield from admission.exiting(io, state.exc, None, None)
        return response

    def _global_applies(self, request: Any) -> bool:
        return self.route is not None and (
            self._exempt is None or not self._exempt(request.path_info))

    def process_view(self, request: Any, view_func: Any, view_args: Any,
                     view_kwargs: Any) -> Any:
        return _io.run(self._deciding(_io.SYNC, request, view_func))

    async def _process_view_async(self, request: Any, view_func: Any, view_args: Any,
                                  view_kwargs: Any) -> Any:
        return await _io.arun(self._deciding(_io.ASYNC, request, view_func))

    def _deciding(self, io: Any, request: Any, view_func: Any) -> _io.Steps:
        """The project's limit and the view's blocking limits, decided together: None
        (admitted, held until the response is finished), or the refusal's response.
        `view_func` None: a request routed to no view, decided once its response is ready."""
        state = getattr(request, "_slidewin", None)
        if state is None:
            return None  # switched off, or not through __call__
        views = [vl for vl in getattr(view_func, "slidewin_limits", ())
                 if vl.block and vl.applies(request)]
        state.decided = tuple(views)
        limits = [self._global] + views if self._global_applies(request) else views
        admission = yield from _admission(io, limits, request)
        if admission is not None:
            try:
                yield from admission.entering(io)
            except _routes.Refused as r:
                return _response(*r.route.refusal(r.error))
            state.admission = admission
            state.headers = admission.headers()
        return None

    def process_exception(self, request: Any, exception: BaseException) -> Any:
        """A BlockedError (BreakerOpenError) raised in the view: its refusal, not a 500."""
        state = getattr(request, "_slidewin", None)
        if state is not None:
            state.exc = type(exception)
        if isinstance(exception, _core.BlockedError):
            return refusal_response(exception)
        return None


def _holding(response: Any, admission: _routes.Admission, exc: Any) -> Any:
    content = response.streaming_content
    if getattr(response, "is_async", False):
        async def agen() -> Any:
            try:
                async for chunk in content:
                    yield chunk
            finally:
                await admission.__aexit__(exc, None, None)
        return agen()

    def gen() -> Any:
        try:
            yield from content
        finally:
            admission.__exit__(exc, None, None)
    return gen()
