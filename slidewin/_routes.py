"""What the per-route helpers (slidewin.fastapi, slidewin.starlette, slidewin.flask) share:
the route's limiter, its key, and the refusal (429 with Retry-After / 503), as the
middlewares answer it (slidewin._web)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _core, _io, _rate, _web
from ._web import _has_quota, is_concurrency, own_threshold, ratelimit_fields, remaining
from ._group import all_of
from ._keyed import KeyedLimiter
from ._limiter import Limiter

HEADER = "header:"  # key="header:X-Api-Key": one limit per value of that header
_T = TypeVar("_T")


def header_key(spec: str, where: str) -> Callable[[Any], Any]:
    """The key of ``"header:Name"``: a function of the request, the header's value."""
    name = spec[len(HEADER):].strip()
    if not name or not _web._TOKEN.match(name):
        raise ValueError("%s: key %r names no header; write key=\"header:X-Api-Key\""
                         % (where, spec))
    return lambda request: request.headers.get(name)


class Own:
    """One of an Admission's limits: a middleware's own limiter, or a RouteLimit's parts."""

    __slots__ = ("limiters", "keyed", "native", "headers", "groups")

    def __init__(self, limiters: Sequence[Any], keyed: bool, headers: bool) -> None:
        self.limiters: Tuple[Any, ...] = tuple(limiters)
        self.keyed = keyed
        self.headers = headers
        # one all_of decision takes all: each a member all_of takes (not Redis, nor a Breaker)
        self.native = all(isinstance(lim, (_core.Limiter, KeyedLimiter))
                          for lim in limiters)
        self.groups: Dict[Tuple[int, ...], Any] = {}  # the all_of groups it decides in


class RouteLimit(Own):
    """One route's limiter (given, or built of the Limiter's keywords: a KeyedLimiter when
    ``key`` is given) and how a request picks its key: None (one limit; a KeyedLimiter
    keys by client IP), ``"ip"``, ``"header:Name"`` or a function of the request (a key of
    None: unlimited and uncounted)."""

    def __init__(self, where: str, is_async: bool, limiter: Any, key: Any,
                 trusted_proxies: Any, status: int, concurrency_status: int, headers: bool,
                 kwargs: Dict[str, Any]) -> None:
        if isinstance(limiter, str):  # limit("10/second"): a rate, positionally
            if "rate" in kwargs:
                raise ValueError("%s: the rate is given twice (positionally and as rate=)"
                                 % where)
            kwargs = dict(kwargs, rate=limiter)
            limiter = None
        if limiter is not None and kwargs:
            raise ValueError("%s: give a limiter or the Limiter's keywords (%s), not both"
                             % (where, ", ".join(sorted(kwargs))))
        self.key: Any = key if callable(key) else None
        if isinstance(key, str) and key.startswith(HEADER):
            self.key = header_key(key, where)
        elif key is not None and key != "ip" and not callable(key):
            raise TypeError("%s: key must be None, 'ip', 'header:Name' or a function of the "
                            "request, not %r" % (where, key))
        rate = kwargs.get("rate")
        cls = KeyedLimiter if key is not None else Limiter
        if limiter is not None:
            limiters = [limiter]
        elif not kwargs:
            raise TypeError("%s needs a limiter or a limit, e.g. rate='10/minute'" % where)
        elif not isinstance(rate, str) or not _rate._SEPARATORS.search(rate):
            limiters = [cls(**kwargs)]
        else:  # one per rate, each shared and named as slidewin.rate_limiter does
            try:
                parts = _rate.parse_rates(rate, "rate")
                if len({(r.count, r.period_ms) for r in parts}) != len(parts):
                    raise ValueError("rate=%r gives the same rate twice" % (rate,))
            except ValueError as e:
                raise ValueError("%s: %s" % (where, e)) from None
            limiters = [cls(**_rate.member_keywords(kwargs, part)) for part in parts]
        for lim in limiters:
            keyed = _web.check_limiter(lim, where, is_async)
        if key is not None and not keyed:
            _web.check_key(key if callable(key) else (lambda r: r), False, limiters[0], where)
        _web._trusted_of(trusted_proxies)  # validated now, not at the first request
        self.trusted = trusted_proxies
        self.status, self.concurrency_status, headers = _web.check_refusal_arguments(
            status, concurrency_status, headers, where)
        super().__init__(limiters, keyed, headers)
        self.limiter = limiters[0] if len(limiters) == 1 else self.limiters
        (ASGI_ROUTES if is_async else WSGI_ROUTES)[0] = True

    def pair(self, request: Any, scope_or_environ: Any) -> Optional[Tuple["RouteLimit", Any]]:
        """A keyed limit's (self, the request's key); None when the key is None (unlimited)."""
        k = (self.key(request) if self.key is not None
             else _web.client_ip(scope_or_environ, self.trusted))
        return None if k is None else (self, k)

    def entry(self, request: Any, scope_or_environ: Any) -> Any:
        """The limit's Admission for this request; None when its key is None, or when a
        middleware decided it with its own (scope[DECIDED])."""
        done = scope_or_environ.get(DECIDED)
        if done is not None and self in done:
            return None
        pair = self.pair(request, scope_or_environ) if self.keyed else (self, None)
        return None if pair is None else Admission([pair])

    def fields(self, error: Any) -> Tuple[int, List[Tuple[str, str]]]:
        """(status, Retry-After and RateLimit fields) of a refused request: those of the part
        that refused (the error's limiter), else of the first."""
        lim = getattr(error, "limiter", None)
        part = next((p for p in self.limiters if p is lim), self.limiters[0])
        return _web.refusal_fields(part, error, self.status, self.concurrency_status,
                                   self.headers)

    def refusal(self, error: Any) -> Tuple[int, List[Tuple[str, str]], bytes]:
        return _web._framed(*self.fields(error))


class Refused(Exception):
    """An Admission was refused: ``route`` is the limit that refused (a RouteLimit, or a
    middleware's ``Own``), ``error`` its BlockedError."""

    def __init__(self, route: Any, error: BaseException) -> None:
        super().__init__(str(error))
        self.route = route
        self.error = error


class Admission:
    """One request's admission by several limits, ``[(route, key), ...]``. The slidewin
    limiters among them decide in one ``all_of`` decision: admitted by all, or charged to
    none. A Redis limiter decides on its own, after them: a request it refuses has been
    counted by them (their entries end with no outcome). ``with`` / ``async with`` raise
    ``Refused`` on a refusal."""

    __slots__ = ("_pairs", "_entries")

    def __init__(self, pairs: Sequence[Tuple[RouteLimit, Any]]) -> None:
        self._pairs = pairs
        self._entries: List[Any] = []

    def _plan(self) -> List[Any]:
        members: List[Any] = []
        grouped: Dict[int, Any] = {}
        done: List[Tuple[Any, Any]] = []  # (limiter, key) decided (keys: compared, not hashed)
        rest: List[Any] = []
        for route, k in self._pairs:
            for lim in route.limiters:
                if any(d is lim and dk == k for d, dk in done):
                    continue  # the same limit twice (global and route): decided once
                done.append((lim, k))
                if not route.native or id(lim) in grouped:
                    rest.append(lim.entry(k) if route.keyed else lim.entry())
                    continue
                grouped[id(lim)] = k
                members.append((lim, k) if route.keyed else lim)
        if len(members) == 1:
            m = members[0]
            return [m[0].entry(m[1]) if isinstance(m, tuple) else m.entry()] + rest
        return ([_group(members, self._pairs[0][0].groups).entry()] if members else []) + rest

    def entering(self, io: Any) -> _io.Steps:
        """Enter every limit, the I/O yielded to the driver of `io`: ``Refused`` on a
        refusal, everything entered so far given back (ended with no outcome)."""
        for e in self._plan():
            try:
                yield io.enter(e)
            except BaseException as exc:  # refused, interrupted, cancelled: all given back
                yield from self.exiting(io, GeneratorExit, None, None)
                if isinstance(exc, _core.BlockedError):  # the refusing limiter's route
                    lim = getattr(exc, "limiter", None)
                    raise Refused(next((route for route, _ in self._pairs
                                        if any(part is lim for part in route.limiters)),
                                       self._pairs[0][0]), exc) from None
                raise
            self._entries.append(e)
        return self

    def exiting(self, io: Any, et: Any, ev: Any, tb: Any) -> _io.Steps:
        """End every limit entered, newest first. An exit that raises (a Redis round trip
        cancelled, KeyboardInterrupt) does not leave the others held: the first such
        exception is raised once every limit has ended."""
        entries, self._entries = self._entries, []
        error: Optional[BaseException] = None
        for e in reversed(entries):
            try:
                yield io.exit(e, et, ev, tb)
            except GeneratorExit:  # the steps themselves closed: nothing left to drive
                raise
            except BaseException as exc:
                if error is None:
                    error = exc
        if error is not None:
            raise error

    def __enter__(self) -> "Admission":
        return _io.run(self.entering(_io.SYNC))  # type: ignore[no-any-return]

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        _io.run(self.exiting(_io.SYNC, et, ev, tb))

    async def __aenter__(self) -> "Admission":
        return await _io.arun(self.entering(_io.ASYNC))  # type: ignore[no-any-return]

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        await _io.arun(self.exiting(_io.ASYNC, et, ev, tb))

    def headers(self) -> List[Tuple[str, str]]:
        """The RateLimit fields of the limit with the least ``r`` (else quota) among the parts
        of the routes that tell ``headers``."""
        best: Optional[Tuple[float, Any, Optional[int]]] = None
        for lim, keyed in [(lim, r.keyed) for r, _ in self._pairs if r.headers
                           for lim in r.limiters]:
            if not _has_quota(lim):
                continue
            r = remaining(lim, keyed)
            if r is not None:
                left = float(r)
            else:  # the window's quota (a concurrency limit's: its concurrency)
                left = float(own_threshold(lim)) * (1.0 if is_concurrency(lim) else
                                                    (getattr(lim, "interval_ms", 0) or 1000) / 1e3)
            if best is None or left < best[0]:
                best = (left, lim, r)
        return [] if best is None else ratelimit_fields(best[1], None, best[2])


def _group(members: List[Any], cache: Dict[Tuple[int, ...], Any]) -> Any:
    """The all_of group of `members`; one without keys is built once, kept in `cache`, the
    first limit's, so that the group lives no longer than the limits do."""
    if any(isinstance(m, tuple) for m in members):
        return all_of(*members)  # keyed: a group per key
    ids = tuple(id(m) for m in members)
    g = cache.get(ids)
    if g is None or any(a is not b for a, b in zip(g.members, members)):
        g = _kept(cache, ids, all_of(*members), 64)
    return g


def around(io: Any, admission: Optional[Admission], endpoint: Callable[[], Any],
           refused: "Callable[[Refused], Any]", headers: bool) -> _io.Steps:
    """(the endpoint's result, the RateLimit fields to add to it), called inside `admission`
    (None: unlimited). A refusal is answered by ``refused(r)``: its response (say, from
    ``r.route.refusal(r.error)``), or None to call the endpoint unlimited."""
    if admission is not None:
        try:
            yield from admission.entering(io)
        except Refused as r:
            response = refused(r)
            if response is not None:
                return response, []
            admission = None
    if admission is None:
        return (yield endpoint), []
    try:
        result = yield endpoint
    except BaseException as exc:
        yield from admission.exiting(io, type(exc), exc, exc.__traceback__)
        raise
    yield from admission.exiting(io, None, None, None)
    return result, (admission.headers() if headers else [])


def limit_function(module: str, is_async: bool, build: Callable[[RouteLimit], Any],
                   doc: str) -> Callable[..., Any]:
    """A framework's ``limit(...)``: the route limit of its arguments, handed to `build`."""
    where = module + ".limit"

    def limit(
        limiter: Any = None,
        *,
        key: Union[None, str, Callable[[Any], Any]] = None,
        trusted_proxies: Any = (),
        status: int = 429,
        concurrency_status: int = 503,
        headers: bool = True,
        **limiter_kwargs: Any,
    ) -> Any:
        return build(RouteLimit(where, is_async, limiter, key, trusted_proxies, status,
                                concurrency_status, headers, limiter_kwargs))

    limit.__module__ = module
    limit.__doc__ = doc + _LIMIT_DOC
    return limit


_LIMIT_DOC = """
    ``limit("10/minute")`` (or ``rate=``; several at once: ``"10/second;100/minute"``, all
    must admit), or a ready limiter (a KeyedLimiter, a shared one, a ``slidewin.redis`` one
    of the app's kind). ``key="ip"``: one limit per client address (``trusted_proxies`` as
    for ``slidewin.client_ip``); ``key="header:X-Api-Key"``: per value of that header;
    ``key=f``: per ``f(request)`` (None: not limited). A refusal answers 429 (rate) / 503
    (concurrency) with ``Retry-After`` and a problem+json body; an admitted response gets
    the RateLimit fields of the most restrictive limit (``headers=False``: none).
    """


def add_missing(headers: Any, fields: Sequence[Tuple[str, str]]) -> None:
    for name, value in fields:
        if name not in headers:
            headers[name] = value


def marked(wrapper: Any, route: RouteLimit) -> Any:
    """A route's wrapper, telling its limit: ``limiter`` for the user, ``slidewin_route``
    for the middlewares."""
    wrapper.limiter = route.limiter
    wrapper.slidewin_route = route
    return wrapper


def missing_extra(extra: str, name: str, error: ModuleNotFoundError) -> ModuleNotFoundError:
    return ModuleNotFoundError(
        'slidewin.%s needs %s: pip install "slidewin[%s]" (or pip install %s)'
        % (extra, name, extra, extra), name=error.name)


def install_blocked(app: Any, handler: Any, *more: Any) -> Any:
    """Add `handler` for BlockedError (and each (exception, handler) of `more`) to a
    Starlette or FastAPI app, keeping those it has."""
    handlers = getattr(app, "exception_handlers", None)
    if not isinstance(handlers, dict) or not callable(getattr(app, "add_exception_handler",
                                                              None)):
        raise TypeError("install() takes a %s app, not %s"
                        % ("FastAPI or Starlette" if more else "Starlette", type(app).__name__))
    for exc, h in ((_core.BlockedError, handler),) + more:
        if exc not in handlers:
            app.add_exception_handler(exc, h)
    return app


# scope["slidewin.decided"]: the route limits an outer middleware has decided for this
# request, together with its own limit (the route's helper then lets the request through)
DECIDED = "slidewin.decided"


# set once an ASGI route limit exists (slidewin.fastapi, slidewin.starlette): only then does
# slidewin.asgi.LimitMiddleware look for the route limits of a request
ASGI_ROUTES = [False]
WSGI_ROUTES = [False]  # the same for slidewin.wsgi.LimitMiddleware (slidewin.flask)
# id(route) -> (route, its route limits): a Starlette route's limits, found once
_LIMITS: Dict[int, Tuple[Any, Tuple[RouteLimit, ...]]] = {}
# (id(router), its number of routes, root_path, path, method) -> (router, route limits)
_PATHS: Dict[Tuple[Any, ...], Tuple[Any, Tuple[RouteLimit, ...]]] = {}


def _limits_of(route: Any) -> Tuple[RouteLimit, ...]:
    """The route limits of a Starlette route: its endpoint's and its FastAPI dependencies'."""
    hit = _LIMITS.get(id(route))
    if hit is not None and hit[0] is route:
        return hit[1]
    found: List[RouteLimit] = []
    own = getattr(getattr(route, "endpoint", None), "slidewin_route", None)
    if isinstance(own, RouteLimit):
        found.append(own)
    stack = [getattr(route, "dependant", None)]
    while stack:
        dep = stack.pop()
        if dep is None:
            continue
        r = getattr(getattr(dep, "call", None), "slidewin_route", None)
        if isinstance(r, RouteLimit) and r not in found:
            found.append(r)
        stack.extend(getattr(dep, "dependencies", ()) or ())
    return _kept(_LIMITS, id(route), (route, tuple(found)))[1]


def starlette_limits(scope: Any, app: Any) -> Tuple[RouteLimit, ...]:
    """The route limits of the route a Starlette (FastAPI) app will route this request to."""
    router = getattr(scope.get("app"), "router", None) or getattr(app, "router", None)
    routes = getattr(router, "routes", None)
    if routes is None:
        return ()
    try:
        from starlette.routing import Host, Match
    except ModuleNotFoundError:  # pragma: no cover - a router without Starlette
        return ()
    # the route of a path is found once (a path with parameters, once per value): matching
    # tries the routes' patterns in order, a few microseconds each
    key = (id(router), len(routes), scope.get("root_path", ""), scope.get("path", ""),
           scope.get("method", ""))
    hit = _PATHS.get(key)
    if hit is not None and hit[0] is router:
        return hit[1]
    found = _match(routes, scope, Match.FULL)
    if any(isinstance(r, Host) for r in routes):  # a Host route: the host decides too
        return found
    return _kept(_PATHS, key, (router, found))[1]


def _kept(cache: Dict[Any, Any], key: Any, value: _T, most: int = 4096) -> _T:
    """`value` kept in `cache` (emptied when it holds `most`), returned."""
    if len(cache) >= most:
        cache.clear()
    cache[key] = value
    return value


def _match(routes: Any, scope: Any, full: Any) -> Tuple[RouteLimit, ...]:
    for route in routes:
        try:
            m, child = route.matches(scope)
        except Exception:  # a route that cannot match this scope
            continue
        if m != full:
            continue
        sub = getattr(route, "routes", None)
        if sub is not None and getattr(route, "endpoint", None) is None:  # Mount, Host
            return _match(sub, {**scope, **child}, full)
        return _limits_of(route)
    return ()

