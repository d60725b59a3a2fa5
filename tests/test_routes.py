"""Per-route limits: FastAPI's dependency, Starlette's and Flask's decorators (429 / 503,
Retry-After, the route kept in OpenAPI, per client IP)."""
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
        assert r.headers.get(name) == want.headers.get(name), name
    assert "/items/{item_id}" in client.app.openapi()["paths"]


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
        assert r.headers.get(name) == want.headers.get(name), name


@pytest.mark.parametrize("extra,dist", [("fastapi", "fastapi"), ("starlette", "starlette"),
                                        ("flask", "flask")])
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
    mod = {"fastapi": "fastapi", "starlette": "starlette", "flask": "flask"}[extra]
    src = (root / "slidewin" / ("%s.py" % mod)).read_text()
    assert 'pip install \\"slidewin[%s]\\"' % extra in src or \
        "slidewin[%s]" % extra in src
