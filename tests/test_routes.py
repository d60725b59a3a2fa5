"""Per-route limits: FastAPI's dependency, Starlette's and Flask's decorators (429 / 503,
Retry-After, the route kept in OpenAPI, per client IP)."""
import re

import pytest

from slidewin import KeyedLimiter, Limiter

fastapi = pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from fastapi import Depends, FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402


def _fastapi_app(dep):
    app = FastAPI()

    @app.get("/items/{item_id}", dependencies=[Depends(dep)])
    async def item(item_id: int, q: str = ""):
        return {"id": item_id}

    @app.get("/free")
    async def free():
        return "ok"

    return app


def test_fastapi_429_with_retry_after_and_the_route_in_openapi():
    from slidewin.fastapi import limit_route

    app = _fastapi_app(limit_route(rate="2/minute"))
    paths = app.openapi()["paths"]
    assert "/items/{item_id}" in paths
    params = {p["name"] for p in paths["/items/{item_id}"]["get"]["parameters"]}
    assert params == {"item_id", "q"}  # the dependency adds nothing to the schema
    client = TestClient(app)
    assert [client.get("/items/1").status_code for _ in range(2)] == [200, 200]
    r = client.get("/items/1")
    assert r.status_code == 429
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    assert r.headers["RateLimit-Policy"] == '"default";q=2;w=60'
    assert "rate limit" in r.json()["detail"]
    assert client.get("/free").status_code == 200  # other routes are not limited


def test_fastapi_per_client_ip():
    from slidewin.fastapi import limit_route

    dep = limit_route(rate="1/minute", key="ip")
    assert isinstance(dep.limiter, KeyedLimiter)
    app = _fastapi_app(dep)
    a = TestClient(app, client=("192.0.2.1", 5000))
    b = TestClient(app, client=("192.0.2.2", 5000))
    assert a.get("/items/1").status_code == 200
    assert a.get("/items/1").status_code == 429
    assert b.get("/items/1").status_code == 200
    # behind a trusted proxy: the forwarded address is the key
    dep2 = limit_route(rate="1/minute", key="ip", trusted_proxies="10.0.0.0/8")
    proxy = TestClient(_fastapi_app(dep2), client=("10.0.0.5", 5000))
    h = {"X-Forwarded-For": "198.51.100.7"}
    assert proxy.get("/items/1", headers=h).status_code == 200
    assert proxy.get("/items/1", headers=h).status_code == 429
    assert proxy.get("/items/1", headers={"X-Forwarded-For": "198.51.100.8"}).status_code == 200


def test_fastapi_custom_key_and_concurrency_503():
    from slidewin.fastapi import limit_route

    dep = limit_route(rate="1/hour", key=lambda request: request.headers.get("x-api-key", ""))
    client = TestClient(_fastapi_app(dep))
    assert client.get("/items/1", headers={"x-api-key": "a"}).status_code == 200
    assert client.get("/items/1", headers={"x-api-key": "a"}).status_code == 429
    assert client.get("/items/1", headers={"x-api-key": "b"}).status_code == 200

    lim = Limiter(concurrency=1)
    client = TestClient(_fastapi_app(limit_route(lim)))
    assert client.get("/items/1").status_code == 200
    assert lim.in_flight == 0  # released after the endpoint
    assert lim.try_acquire()   # someone else holds the only slot
    assert client.get("/items/1").status_code == 503
    lim.release()
    assert client.get("/items/1").status_code == 200


def test_starlette_decorator():
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from slidewin.starlette import limit

    @limit(rate="2/minute", key="ip")
    async def hello(request):
        return PlainTextResponse("hi")

    app = Starlette(routes=[Route("/hello", hello)])
    a = TestClient(app, client=("192.0.2.1", 1))
    assert [a.get("/hello").status_code for _ in range(3)] == [200, 200, 429]
    r = a.get("/hello")
    assert r.headers["content-type"] == "application/problem+json"
    assert int(r.headers["Retry-After"]) >= 1 and r.json()["status"] == 429
    assert TestClient(app, client=("192.0.2.2", 1)).get("/hello").status_code == 200
    with pytest.raises(TypeError, match="async"):
        limit(rate="1/minute")(lambda request: None)


def test_flask_decorator():
    flask = pytest.importorskip("flask")
    from slidewin.flask import limit

    app = flask.Flask(__name__)

    @app.get("/hello/<name>")
    @limit(rate="2/minute", key="ip")
    def hello(name):
        return "hi " + name

    @app.get("/one")
    @limit(rate="1/day")
    def one():
        return "one"

    a = app.test_client()
    a.environ_base["REMOTE_ADDR"] = "192.0.2.1"
    b = app.test_client()
    b.environ_base["REMOTE_ADDR"] = "192.0.2.2"
    assert [a.get("/hello/x").status_code for _ in range(3)] == [200, 200, 429]
    r = a.get("/hello/x")
    assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
    assert r.json["status"] == 429
    assert b.get("/hello/y").get_data(as_text=True) == "hi y"
    assert a.get("/one").status_code == 200 and b.get("/one").status_code == 429
    assert "hello" in app.view_functions  # the endpoint keeps its name


def test_flask_concurrency_503_and_errors_release():
    flask = pytest.importorskip("flask")
    from slidewin.flask import limit

    lim = Limiter(concurrency=1)
    app = flask.Flask(__name__)

    @app.get("/boom")
    @limit(lim)
    def boom():
        raise RuntimeError("boom")

    c = app.test_client()
    assert c.get("/boom").status_code == 500
    assert lim.in_flight == 0 and lim.totals()["exception"] == 1
    lim.try_acquire()
    assert c.get("/boom").status_code == 503


@pytest.mark.parametrize("modname,fn", [("slidewin.fastapi", "limit_route"),
                                        ("slidewin.starlette", "limit"),
                                        ("slidewin.flask", "limit")])
def test_bad_arguments(modname, fn):
    import importlib

    make = getattr(importlib.import_module(modname), fn)
    with pytest.raises(TypeError, match="rate='10/minute'"):
        make()
    with pytest.raises(ValueError, match="not both"):
        make(Limiter(qps=1), rate="1/minute")
    with pytest.raises(TypeError, match="key"):
        make(rate="1/minute", key=5)
    with pytest.raises(ValueError, match="rate"):
        make(rate="1/fortnight")
    with pytest.raises(ValueError, match="key="):
        make(Limiter(qps=1), key="ip")
    with pytest.raises(ValueError, match="status"):
        make(rate="1/minute", status=200)
    with pytest.raises(TypeError, match="headers must be a bool"):
        make(rate="1/minute", headers="no")  # a str is truthy: it would turn the fields on



def test_fastapi_key_none_is_unlimited_and_uncounted():
    from slidewin.fastapi import limit_route

    dep = limit_route(rate="1/hour", key=lambda request: request.headers.get("x-api-key"))
    client = TestClient(_fastapi_app(dep))
    assert [client.get("/items/1").status_code for _ in range(3)] == [200] * 3
    assert len(dep.limiter) == 0  # nothing counted for anonymous requests
    assert client.get("/items/1", headers={"x-api-key": "a"}).status_code == 200
    assert client.get("/items/1", headers={"x-api-key": "a"}).status_code == 429


def test_starlette_key_none_is_unlimited_and_uncounted():
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from slidewin.starlette import limit

    @limit(rate="1/hour", key=lambda request: request.headers.get("x-api-key"))
    async def hello(request):
        return PlainTextResponse("hi")

    client = TestClient(Starlette(routes=[Route("/hello", hello)]))
    assert [client.get("/hello").status_code for _ in range(3)] == [200] * 3
    assert len(hello.limiter) == 0
    assert client.get("/hello", headers={"x-api-key": "a"}).status_code == 200
    assert client.get("/hello", headers={"x-api-key": "a"}).status_code == 429


def test_flask_key_none_is_unlimited_and_uncounted():
    flask = pytest.importorskip("flask")
    from slidewin.flask import limit

    app = flask.Flask(__name__)

    @app.get("/hello")
    @limit(rate="1/hour", key=lambda request: request.headers.get("X-Api-Key"))
    def hello():
        return "hi"

    c = app.test_client()
    assert [c.get("/hello").status_code for _ in range(3)] == [200] * 3
    assert len(hello.limiter) == 0
    assert c.get("/hello", headers={"X-Api-Key": "a"}).status_code == 200
    assert c.get("/hello", headers={"X-Api-Key": "a"}).status_code == 429



def _middleware_refusal(limiter, path="/"):
    """What slidewin.asgi.LimitMiddleware answers (headers=True) once `limiter` refuses."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from slidewin.asgi import LimitMiddleware

    async def ok(request):
        return PlainTextResponse("ok")

    app = LimitMiddleware(Starlette(routes=[Route(path, ok)]), limiter, headers=True)
    return TestClient(app).get(path)


@pytest.mark.parametrize("make", [lambda: Limiter(rate="1/minute"),
                                  lambda: Limiter(concurrency=1)])
def test_fastapi_refusal_is_the_middlewares_problem_json(make):
    from slidewin.fastapi import limit_route

    lim, mid = make(), make()
    client = TestClient(_fastapi_app(limit_route(lim)))
    if lim.concurrency:
        assert lim.try_acquire() and mid.try_acquire()  # the only slot is held
    else:
        assert client.get("/items/1").status_code == 200
        assert _middleware_refusal(mid, "/items/1").status_code == 200
    r = client.get("/items/1")
    want = _middleware_refusal(mid, "/items/1")
    assert r.status_code == want.status_code == (503 if lim.concurrency else 429)
    assert r.headers["content-type"] == "application/problem+json"
    assert r.content == want.content and r.json()["status"] == r.status_code
    for name in ("Retry-After", "RateLimit-Policy", "RateLimit"):
        # the two refusals are two decisions a moment apart: a count of seconds may have
        # ticked between them (60 then 59), nothing else may differ
        assert _same_but_a_second(r.headers.get(name), want.headers.get(name)), name
    assert "/items/{item_id}" in client.app.openapi()["paths"]


def _same_but_a_second(a, b):
    """Whether header values a and b are the same text but for numbers one apart."""
    if a is None or b is None:
        return a is b
    pa, pb = re.split(r"(\d+)", a), re.split(r"(\d+)", b)
    return len(pa) == len(pb) and all(
        x == y if i % 2 == 0 else abs(int(x) - int(y)) <= 1
        for i, (x, y) in enumerate(zip(pa, pb)))


def test_fastapi_own_handler_for_route_refused_wins():
    from fastapi.responses import PlainTextResponse

    from slidewin.fastapi import RouteRefused, limit_route

    app = _fastapi_app(limit_route(rate="1/minute"))

    async def mine(request, exc):
        return PlainTextResponse("slow down", exc.status_code, headers=exc.headers)

    app.add_exception_handler(RouteRefused, mine)
    client = TestClient(app)
    assert client.get("/items/1").status_code == 200
    r = client.get("/items/1")
    assert (r.status_code, r.text) == (429, "slow down") and int(r.headers["Retry-After"]) >= 1


def test_starlette_refusal_is_the_middlewares():
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from slidewin.starlette import limit

    lim, mid = Limiter(rate="1/minute"), Limiter(rate="1/minute")

    @limit(lim)
    async def hello(request):
        return PlainTextResponse("hi")

    client = TestClient(Starlette(routes=[Route("/", hello)]))
    assert client.get("/").status_code == _middleware_refusal(mid).status_code == 200
    r, want = client.get("/"), _middleware_refusal(mid)
    assert r.status_code == want.status_code == 429 and r.content == want.content
    for name in ("Content-Type", "Retry-After", "RateLimit-Policy", "RateLimit"):
        # the two refusals are made at two instants: a whole second of the wait may tick
        # between them (CI saw Retry-After 60 and 59)
        got, exp = (re.sub(r"\d+", "#", h.headers.get(name) or "") for h in (r, want))
        assert got == exp, name
        nums = [[int(x) for x in re.findall(r"\d+", h.headers.get(name) or "")]
                for h in (r, want)]
        assert all(abs(a - b) <= 1 for a, b in zip(*nums)), name


@pytest.mark.parametrize("extra,dist", [("fastapi", "fastapi"), ("starlette", "starlette"),
                                        ("flask", "flask"), ("django", "django")])
def test_framework_extras_exist_and_are_documented(extra, dist):
    """pip install "slidewin[fastapi]" (or [starlette], [flask]) brings the framework of a
    route helper; docs/rates-and-routes.md and docs/web.md say so, and so does the helper's
    ImportError."""
    import pathlib
    import re

    import importlib.metadata

    root = pathlib.Path(__file__).resolve().parent.parent
    # the installed distribution's metadata (every Python; tomllib is 3.11+): the extra
    # exists and requires the framework
    meta = importlib.metadata.metadata("slidewin")
    assert extra in (meta.get_all("Provides-Extra") or []), meta.get_all("Provides-Extra")
    reqs = [r for r in importlib.metadata.requires("slidewin") or []
            if re.search(r"extra\s*==\s*['\"]%s['\"]" % extra, r)]
    assert any(re.match(r"%s\b" % dist, req, re.I) for req in reqs), reqs
    for page in ("docs/rates-and-routes.md", "docs/web.md"):
        assert 'pip install "slidewin[%s]"' % extra in (root / page).read_text(), page
    mod = {"fastapi": "fastapi", "starlette": "starlette", "flask": "flask",
           "django": "django"}[extra]
    src = (root / "slidewin" / ("%s.py" % mod)).read_text()
    # the module's ImportError without its framework: _routes.missing_extra(<extra>, ...)
    assert 'missing_extra("%s",' % extra in src
    from slidewin import _routes
    err = _routes.missing_extra(extra, dist, ModuleNotFoundError(dist, name=dist))
    assert 'pip install "slidewin[%s]"' % extra in str(err) and err.name == dist


# ---- install(app): a BlockedError raised in a route is answered, not a 500 ----------------


def _raising_routes():
    """Functions a route calls: limited by a plain @Limiter, a concurrency one, a breaker."""
    from slidewin import Breaker, BreakerOpenError

    api = Limiter(rate="1/minute")

    @api
    def upstream():
        return "done"

    conc = Limiter(concurrency=0)

    @conc
    def busy():
        return "never"

    breaker = Breaker(error_count=1, min_requests=1, recovery_s=30)

    def broken():
        raise BreakerOpenError("open", retry_after=2.5, limiter=breaker)

    return upstream, busy, broken


def _check_raised(get):
    assert get("/up").status_code == 200
    r = get("/up")
    assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
    assert r.headers["content-type"] == "application/problem+json"
    assert r.headers["RateLimit-Policy"] == '"default";q=1;w=60'
    assert get("/busy").status_code == 503
    r = get("/open")
    assert (r.status_code, r.headers["Retry-After"]) == (503, "3")


def test_fastapi_install_answers_a_blocked_error_raised_in_a_route():
    import slidewin.fastapi

    upstream, busy, broken = _raising_routes()
    app = FastAPI()
    app.get("/up")(lambda: upstream())
    app.get("/busy")(lambda: busy())
    app.get("/open")(lambda: broken())
    assert slidewin.fastapi.install(app) is app
    _check_raised(TestClient(app).get)


def test_fastapi_without_install_a_raised_blocked_error_is_a_500():
    upstream, _, _ = _raising_routes()
    app = FastAPI()
    app.get("/up")(lambda: upstream())
    client = TestClient(app, raise_server_exceptions=False)
    assert [client.get("/up").status_code for _ in range(2)] == [200, 500]


def test_starlette_install_keeps_cors_on_the_refusal():
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    import slidewin.starlette

    upstream, busy, broken = _raising_routes()

    def route(fn):
        async def endpoint(request):
            return PlainTextResponse(fn())
        return endpoint

    app = Starlette(routes=[Route("/up", route(upstream)), Route("/busy", route(busy)),
                            Route("/open", route(broken))],
                    middleware=[Middleware(CORSMiddleware, allow_origins=["https://a.example"])])
    slidewin.starlette.install(app)
    client = TestClient(app)
    _check_raised(client.get)
    r = client.get("/busy", headers={"Origin": "https://a.example"})
    assert r.status_code == 503
    assert r.headers["access-control-allow-origin"] == "https://a.example"


def test_flask_install_answers_a_blocked_error_raised_in_a_view():
    flask = pytest.importorskip("flask")
    import slidewin.flask

    upstream, busy, broken = _raising_routes()
    app = flask.Flask(__name__)
    app.get("/up")(lambda: upstream())
    app.get("/busy", endpoint="busy")(lambda: busy())
    app.get("/open", endpoint="open")(lambda: broken())
    slidewin.flask.install(app)
    _check_raised(app.test_client().get)


def test_install_refuses_what_is_not_an_app():
    import slidewin.fastapi
    import slidewin.flask
    import slidewin.starlette

    for mod in (slidewin.fastapi, slidewin.starlette, slidewin.flask):
        with pytest.raises(TypeError, match="install"):
            mod.install(object())


# ---- limit("10/second"), several rates, RateLimit fields on admitted responses -------------


def test_fastapi_limit_positional_rate_and_admitted_ratelimit_fields():
    from slidewin.fastapi import limit

    app = _fastapi_app(limit("3/minute"))
    client = TestClient(app)
    r = client.get("/items/1")
    assert r.status_code == 200
    assert r.headers["RateLimit-Policy"] == '"default";q=3;w=60'
    assert r.headers["RateLimit"] == '"default";r=2'
    r = TestClient(_fastapi_app(limit("3/minute", headers=False))).get("/items/1")
    assert "RateLimit" not in r.headers and "RateLimit-Policy" not in r.headers


def test_fastapi_several_rates_are_one_decision_charging_none_on_refusal():
    from slidewin.fastapi import limit

    dep = limit("2/minute;3/hour", key="header:X-Api-Key")
    minute, hour = dep.limiter
    client = TestClient(_fastapi_app(dep))
    h = {"X-Api-Key": "a"}
    assert [client.get("/items/1", headers=h).status_code for _ in range(3)] == [200, 200, 429]
    assert hour.totals()["pass"] == 2 and minute.totals()["block"] == 1
    r = client.get("/items/1", headers=h)
    assert r.headers["RateLimit-Policy"] == '"default";q=2;w=60'  # the one that refused
    assert [client.get("/items/1").status_code for _ in range(3)] == [200] * 3  # no key
    with pytest.raises(ValueError, match="empty rate"):
        limit("2/minute;")


def test_route_limits_take_every_separator_parse_rates_reads():
    from slidewin.fastapi import limit

    for text in ("5/m,100/h", "5/m|100 per hour", "5/m; 100/h"):
        minute, hour = limit(text).limiter
        assert (minute.interval_ms, hour.interval_ms) == (60_000, 3_600_000), text


def test_flask_and_starlette_positional_rate_and_admitted_fields():
    flask = pytest.importorskip("flask")
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    import slidewin.flask
    import slidewin.starlette

    app = flask.Flask(__name__)

    @app.get("/a")
    @slidewin.flask.limit("2/minute")
    def a():
        return "a"

    c = app.test_client()
    r = c.get("/a")
    assert r.status_code == 200 and r.headers["RateLimit"] == '"default";r=1'
    assert [c.get("/a").status_code for _ in range(2)] == [200, 429]

    @slidewin.starlette.limit("2/minute")
    async def hello(request):
        return PlainTextResponse("hi")

    client = TestClient(Starlette(routes=[Route("/", hello)]))
    r = client.get("/")
    assert r.status_code == 200 and r.headers["RateLimit-Policy"] == '"default";q=2;w=60'


# ---- the route's limit and the middleware's decide together ---------------------------------


def test_fastapi_route_refusal_charges_the_middleware_limit_nothing():
    from slidewin.asgi import LimitMiddleware
    from slidewin.fastapi import limit_route

    glob = Limiter(rate="10/minute")
    app = _fastapi_app(limit_route(rate="1/minute"))
    app.add_middleware(LimitMiddleware, limiter=glob, headers=True)
    client = TestClient(app)
    assert [client.get("/items/1").status_code for _ in range(4)] == [200, 429, 429, 429]
    assert glob.totals()["pass"] == 1  # the route's refusals spent nothing of it
    r = client.get("/items/1")
    assert r.headers["RateLimit-Policy"] == '"default";q=1;w=60'  # the route's limit refused
    assert r.headers["content-type"] == "application/problem+json"
    r = client.get("/free")
    assert r.status_code == 200 and r.headers["RateLimit"] == '"default";r=8'
    assert glob.totals()["pass"] == 2


def test_fastapi_middleware_refusal_charges_the_route_limit_nothing_and_headers_pick_the_least():
    from slidewin.asgi import LimitMiddleware
    from slidewin.fastapi import limit

    glob = Limiter(rate="1/minute")
    dep = limit("5/minute", key="ip")
    app = _fastapi_app(dep)
    app.add_middleware(LimitMiddleware, limiter=glob, headers=True)
    client = TestClient(app)
    r = client.get("/items/1")
    assert r.status_code == 200
    assert r.headers["RateLimit-Policy"] == '"default";q=1;w=60'  # 0 left of the global's
    assert [client.get("/items/1").status_code for _ in range(3)] == [429] * 3
    assert dep.limiter.totals()["pass"] == 1


def test_starlette_route_and_middleware_decide_together_under_mount():
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    from slidewin.asgi import LimitMiddleware
    from slidewin.starlette import limit

    glob = Limiter(rate="10/minute")

    @limit(rate="1/minute")
    async def hello(request):
        return PlainTextResponse("hi")

    app = Starlette(routes=[Mount("/api", routes=[Route("/hello", hello)])],
                    middleware=[Middleware(LimitMiddleware, limiter=glob)])
    client = TestClient(app)
    assert [client.get("/api/hello").status_code for _ in range(3)] == [200, 429, 429]
    assert glob.totals()["pass"] == 1


def test_flask_view_limit_and_wsgi_middleware_decide_together():
    flask = pytest.importorskip("flask")
    from slidewin.flask import limit
    from slidewin.wsgi import LimitMiddleware

    glob = Limiter(rate="10/minute")
    app = flask.Flask(__name__)

    @app.get("/v")
    @limit(rate="1/minute", key=lambda request: request.headers.get("X-Api-Key"))
    def v():
        return "v"

    @app.get("/free")
    def free():
        return "free"

    app.wsgi_app = LimitMiddleware(app.wsgi_app, glob, headers=True)
    c = app.test_client()
    h = {"X-Api-Key": "a"}
    assert [c.get("/v", headers=h).status_code for _ in range(3)] == [200, 429, 429]
    assert glob.totals()["pass"] == 1
    r = c.get("/v", headers=h)
    assert r.headers["RateLimit-Policy"] == '"default";q=1;w=60'
    assert c.get("/v").status_code == 200  # no key: the view's limit does not apply
    assert c.get("/free").headers["RateLimit"] == '"default";r=7'


def test_fastapi_header_key_route_limit_decided_with_the_middleware():
    from slidewin.asgi import LimitMiddleware
    from slidewin.fastapi import limit

    glob = Limiter(rate="10/minute")
    dep = limit("1/minute", key="header:X-Api-Key")
    app = _fastapi_app(dep)
    app.add_middleware(LimitMiddleware, limiter=glob)
    client = TestClient(app)
    h = {"X-Api-Key": "a"}
    assert [client.get("/items/1", headers=h).status_code for _ in range(3)] == [200, 429, 429]
    assert client.get("/items/1", headers={"X-Api-Key": "b"}).status_code == 200
    assert [client.get("/items/1").status_code for _ in range(2)] == [200, 200]  # no key
    assert glob.totals()["pass"] == 4 and len(dep.limiter) == 2


class _Interrupting:
    """A limiter of its own kind (not groupable) whose admission is interrupted."""

    def __init__(self, exc):
        self.exc = exc

    def entry(self):
        return self

    def __enter__(self):
        raise self.exc

    async def __aenter__(self):
        raise self.exc


def test_an_admission_interrupted_after_its_first_limit_gives_that_limit_back():
    import asyncio

    from slidewin import _routes

    held = Limiter(concurrency=1)
    sync = _routes.Admission([(_routes.Own((held,), False, False), None),
                              (_routes.Own((_Interrupting(KeyboardInterrupt()),), False, False),
                               None)])
    with pytest.raises(KeyboardInterrupt):
        sync.__enter__()
    assert held.in_flight == 0
    cancelled = _routes.Admission([(_routes.Own((held,), False, False), None),
                                   (_routes.Own((_Interrupting(asyncio.CancelledError()),),
                                                False, False), None)])
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled.__aenter__())
    assert held.in_flight == 0


class _Counting:
    """A limiter of its own kind (not groupable, as a Redis one) counting its entries."""

    def __init__(self):
        self.entered = 0

    def entry(self):
        return self

    def __enter__(self):
        self.entered += 1

    def __exit__(self, *exc):
        return None


def test_a_limiter_of_its_own_kind_given_twice_is_entered_once():
    from slidewin import _routes

    own = _Counting()
    both = _routes.Admission([(_routes.Own((own,), False, False), None),
                              (_routes.Own((own,), False, False), None)])
    with both:
        pass
    assert own.entered == 1  # as a slidewin Limiter given twice: decided once


def test_a_routes_limits_die_with_it_not_kept_by_a_module_cache():
    import gc
    import weakref

    from slidewin import _routes

    a, b = Limiter(rate="5/minute"), Limiter(rate="7/minute")
    with _routes.Admission([(_routes.Own((a,), False, False), None),
                            (_routes.Own((b,), False, False), None)]):
        pass  # decided in one all_of group (built once for these limits)
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None


class _FailingExit:
    """A limiter of its own kind whose exit is interrupted (a Redis round trip cancelled,
    KeyboardInterrupt in it)."""

    def __init__(self, exc):
        self.exc = exc

    def entry(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        raise self.exc

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        raise self.exc


def test_an_exit_interrupted_on_one_limit_still_ends_the_others():
    import asyncio

    from slidewin import _routes

    held = Limiter(concurrency=1)
    sync = _routes.Admission([(_routes.Own((held,), False, False), None),
                              (_routes.Own((_FailingExit(KeyboardInterrupt()),), False, False),
                               None)])
    sync.__enter__()
    assert held.in_flight == 1
    with pytest.raises(KeyboardInterrupt):
        sync.__exit__(None, None, None)
    assert held.in_flight == 0

    async def cancelled_in_exit():
        adm = _routes.Admission([(_routes.Own((held,), False, False), None),
                                 (_routes.Own((_FailingExit(asyncio.CancelledError()),), False,
                                              False), None)])
        await adm.__aenter__()
        assert held.in_flight == 1
        await adm.__aexit__(None, None, None)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled_in_exit())
    assert held.in_flight == 0
