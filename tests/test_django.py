"""slidewin.django with Django's test client: the middleware configured from settings, the
@ratelimit decorator on sync and async views, refusals as Django responses (through the
project's own middleware), a BlockedError raised in a view answered 429/503, the view's and
the project's limits deciding together, SLIDEWIN_ENABLED."""
import asyncio
import types

import pytest

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(ALLOWED_HOSTS=["testserver"], SECRET_KEY="slidewin-tests",
                       ROOT_URLCONF=None, MIDDLEWARE=[], USE_TZ=True)
    django.setup()

from django.http import HttpResponse, StreamingHttpResponse  # noqa: E402
from django.test import AsyncClient, Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

import slidewin  # noqa: E402
from slidewin import Breaker, BreakerOpenError, KeyedLimiter, Limiter  # noqa: E402
from slidewin.django import UNSAFE, ratelimit  # noqa: E402

MW = ["apps.django_site.Stamp", "slidewin.django.LimitMiddleware"]


def site(views, conf=None, middleware=MW, **more):
    """Settings serving `views` ({path: view}) with the middleware and SLIDEWIN `conf`."""
    urls = types.ModuleType("slidewin_test_urls")
    urls.urlpatterns = [path(p, v) for p, v in views.items()]
    return override_settings(ROOT_URLCONF=urls, MIDDLEWARE=middleware, SLIDEWIN=conf or {},
                             **more)


def ok(request):
    return HttpResponse("ok")


async def aok(request):
    return HttpResponse("aok")


def statuses(client, url, n, **kw):
    return [client.get(url, **kw).status_code for _ in range(n)]


def arun(coro):
    return asyncio.run(coro)


def test_middleware_from_settings_answers_429_through_djangos_middleware():
    with site({"": ok}, {"rate": "2/minute"}):
        c = Client()
        assert statuses(c, "/", 3) == [200, 200, 429]
        r = c.get("/")
        assert r.status_code == 429
        assert r["Content-Type"] == "application/problem+json"
        assert r.json()["status"] == 429
        assert 1 <= int(r["Retry-After"]) <= 60
        assert r["RateLimit-Policy"] == '"default";q=2;w=60'
        assert r["RateLimit"].startswith('"default";r=0;t=')
        assert "X-Stamp" in r  # the project's middleware saw the refusal


def test_admitted_responses_carry_ratelimit_fields_and_headers_false_opts_out():
    with site({"": ok}, {"rate": "3/minute"}):
        r = Client().get("/")
        assert r.status_code == 200
        assert r["RateLimit-Policy"] == '"default";q=3;w=60'
        assert r["RateLimit"] == '"default";r=2'
    with site({"": ok}, {"rate": "3/minute", "headers": False}):
        r = Client().get("/")
        assert r.status_code == 200 and "RateLimit" not in r and "RateLimit-Policy" not in r


def test_async_middleware_and_async_view():
    lim = Limiter(rate="2/minute")
    with site({"a/": aok}, {"limiter": lim}):
        async def go():
            c = AsyncClient()
            return [(await c.get("/a/")).status_code for _ in range(3)]

        assert arun(go()) == [200, 200, 429]
        assert lim.totals()["pass"] == 2


def test_keyed_by_ip_with_trusted_proxies_from_settings():
    with site({"": ok}, {"rate": "1/minute", "key": "ip"},
              SLIDEWIN_TRUSTED_PROXIES=["10.0.0.0/8"]):
        c = Client(REMOTE_ADDR="10.0.0.2")
        a = {"HTTP_X_FORWARDED_FOR": "198.51.100.7"}
        b = {"HTTP_X_FORWARDED_FOR": "198.51.100.8"}
        assert statuses(c, "/", 2, **a) == [200, 429]
        assert statuses(c, "/", 1, **b) == [200]


def test_ratelimit_key_ip_and_method():
    login = ratelimit("2/minute", key="ip", method="POST")(ok)
    with site({"login/": login}, middleware=[]):
        a, b = Client(REMOTE_ADDR="192.0.2.1"), Client(REMOTE_ADDR="192.0.2.2")
        assert statuses(a, "/login/", 5) == [200] * 5  # GET is not limited
        assert [a.post("/login/").status_code for _ in range(3)] == [200, 200, 429]
        r = a.post("/login/")
        assert r["Content-Type"] == "application/problem+json" and int(r["Retry-After"]) >= 1
        assert b.post("/login/").status_code == 200  # another address
        unsafe = ratelimit("1/minute", method=UNSAFE)(ok)
    with site({"u/": unsafe}, middleware=[]):
        c = Client()
        assert c.put("/u/").status_code == 200 and c.delete("/u/").status_code == 429
        assert c.get("/u/").status_code == 200


def test_ratelimit_block_false_sets_request_limited():
    @ratelimit("1/minute", block=False)
    def soft(request):
        return HttpResponse("limited=%s" % request.limited)

    with site({"s/": soft}):
        c = Client()
        assert [c.get("/s/").content for _ in range(3)] == [b"limited=False",
                                                             b"limited=True", b"limited=True"]


def test_a_refused_blocking_view_leaves_request_limited_unset():
    from django.test import RequestFactory

    @ratelimit(Limiter(qps=1))
    def view(request):
        return HttpResponse("ok")

    @ratelimit(Limiter(qps=1))
    async def aview(request):
        return HttpResponse("ok")

    for call in (view, lambda r: arun(aview(r))):
        seen = []
        for _ in range(2):
            request = RequestFactory().get("/")
            seen.append((call(request).status_code, getattr(request, "limited", "unset")))
        assert seen == [(200, False), (429, "unset")]


def test_ratelimit_key_user_header_and_function():
    class User:
        def __init__(self, pk):
            self.pk, self.is_authenticated = pk, pk is not None

    def as_user(view):  # stands for AuthenticationMiddleware
        def inner(request):
            uid = request.headers.get("X-User")
            request.user = User(int(uid) if uid else None)
            return view(request)
        return inner

    by_user = as_user(ratelimit("1/minute", key="user")(ok))
    by_header = ratelimit("1/minute", key="header:X-Api-Key")(ok)
    by_func = ratelimit("1/minute", key=lambda request: request.GET.get("t"))(ok)
    with site({"u/": by_user, "h/": by_header, "f/": by_func}, middleware=[]):
        c = Client()
        assert statuses(c, "/u/", 2, HTTP_X_USER="1") == [200, 429]
        assert statuses(c, "/u/", 1, HTTP_X_USER="2") == [200]
        assert statuses(c, "/u/", 2) == [200, 429]  # anonymous: by address
        assert statuses(c, "/h/", 2, HTTP_X_API_KEY="k1") == [200, 429]
        assert statuses(c, "/h/", 3) == [200] * 3  # no key: not limited
        assert [c.get("/f/?t=a").status_code for _ in range(2)] == [200, 429]
        assert c.get("/f/?t=b").status_code == 200


def test_ratelimit_on_async_views():
    @ratelimit("2/minute", key="ip")
    async def alogin(request):
        return HttpResponse("aok")

    with site({"a/": alogin}):
        assert statuses(Client(), "/a/", 3) == [200, 200, 429]  # sync handler, async view

    @ratelimit("2/minute", key="user")
    async def auser(request):
        return HttpResponse("aok")

    with site({"a/": auser}):
        async def go():
            c = AsyncClient()
            return [(await c.get("/a/")).status_code for _ in range(3)]

        assert arun(go()) == [200, 200, 429]


def test_view_refusal_charges_the_project_limit_nothing():
    glob = Limiter(rate="10/minute")
    view = ratelimit("1/minute")(ok)
    with site({"v/": view, "": ok}, {"limiter": glob}):
        c = Client()
        assert statuses(c, "/v/", 4) == [200, 429, 429, 429]
        assert glob.totals()["pass"] == 1  # the view's refusals spent nothing of it
        assert view.limiter.totals()["pass"] == 1
        r = c.get("/v/")
        assert r["RateLimit-Policy"] == '"default";q=1;w=60'  # the view's limit refused


def test_project_refusal_charges_the_view_limit_nothing():
    glob = Limiter(rate="1/minute")
    view = ratelimit("5/minute")(ok)
    with site({"v/": view, "": ok}, {"limiter": glob}):
        c = Client()
        assert statuses(c, "/", 1) == [200]
        assert statuses(c, "/v/", 3) == [429] * 3
        assert view.limiter.totals()["pass"] == 0


def test_admitted_headers_tell_the_most_restrictive_limit():
    glob = Limiter(rate="100/minute")
    view = ratelimit("3/minute")(ok)
    with site({"v/": view}, {"limiter": glob}):
        r = Client().get("/v/")
        assert r["RateLimit-Policy"] == '"default";q=3;w=60' and r["RateLimit"] == '"default";r=2'


def test_several_rates_at_once_decide_together():
    view = ratelimit("2/minute;3/hour")(ok)
    minute, hour = view.limiter
    with site({"v/": view}, middleware=[]):
        c = Client()
        assert statuses(c, "/v/", 3) == [200, 200, 429]
        assert hour.totals()["pass"] == 2  # the minute's refusal spent nothing of the hour


def test_blocked_error_raised_in_a_view_is_429_not_500():
    api = Limiter(rate="1/minute")

    @api
    def call_upstream():
        return "done"

    def view(request):
        return HttpResponse(call_upstream())

    conc = Limiter(concurrency=1)

    def busy(request):
        with conc.entry():
            raise slidewin.BlockedError("full", limiter=conc)

    breaker = Breaker(error_count=1, min_requests=1, recovery_s=30)

    def broken(request):
        raise BreakerOpenError("open", retry_after=2.5, limiter=breaker)

    with site({"v/": view, "b/": busy, "o/": broken}):
        c = Client(raise_request_exception=False)
        assert statuses(c, "/v/", 2) == [200, 429]
        r = c.get("/v/")
        assert int(r["Retry-After"]) >= 1 and r.json()["status"] == 429 and "X-Stamp" in r
        assert c.get("/b/").status_code == 503
        r = c.get("/o/")
        assert (r.status_code, r["Retry-After"]) == (503, "3")


def test_slidewin_enabled_false_switches_everything_off():
    view = ratelimit("1/minute")(ok)
    aview = ratelimit("1/minute")(aok)
    with site({"v/": view, "a/": aview, "": ok}, {"rate": "1/minute"}, SLIDEWIN_ENABLED=False):
        c = Client()
        assert statuses(c, "/", 3) == statuses(c, "/v/", 3) == [200] * 3
        assert statuses(c, "/a/", 3) == [200] * 3
        assert view.limiter.totals()["pass"] == 0


def test_unrouted_requests_count_against_the_project_limit():
    with site({"": ok}, {"rate": "1/minute"}):
        c = Client()
        first = c.get("/missing/")  # admitted: its 404 carries the fields as any admitted one
        assert first.status_code == 404
        assert first["RateLimit-Policy"].startswith('"default";q=1;w=60')
        assert "RateLimit" in first
        assert statuses(c, "/missing/", 1) == [429]
        assert c.get("/").status_code == 429


def test_exempt_paths_are_neither_limited_nor_counted():
    lim = Limiter(rate="1/minute")
    with site({"": ok, "health/": ok}, {"limiter": lim, "exempt": ["/health/"]}):
        c = Client()
        assert statuses(c, "/health/", 3) == [200] * 3
        assert statuses(c, "/", 2) == [200, 429]


def test_concurrency_limit_holds_a_streaming_response_until_it_is_consumed():
    lim = Limiter(concurrency=1)

    def stream(request):
        return StreamingHttpResponse(iter([b"a", b"b"]))

    with site({"s/": stream}, {"limiter": lim}):
        c = Client()
        r = c.get("/s/")
        assert r.status_code == 200 and lim.in_flight == 1
        assert c.get("/s/").status_code == 503
        assert b"".join(r.streaming_content) == b"ab"
        r.close()
        assert lim.in_flight == 0
        assert c.get("/s/").status_code == 200


def test_keyed_limiter_object_and_header_key_from_settings():
    keyed = KeyedLimiter(rate="1/minute")
    with site({"": ok}, {"limiter": keyed, "key": "header:X-Api-Key"}):
        c = Client()
        assert statuses(c, "/", 2, HTTP_X_API_KEY="a") == [200, 429]
        assert statuses(c, "/", 2) == [200, 200]  # no key: not limited
        assert len(keyed) == 1


def test_bad_settings_are_clear_errors():
    with site({"": ok}, {"rate": "1/fortnight"}):
        with pytest.raises(ValueError, match="rate"):
            Client().get("/")
    with site({"": ok}, {"rate": "1/minute", "key": 5}):
        with pytest.raises(TypeError, match="key"):
            Client().get("/")
    with site({"": ok}, {"rate": "1/minute"}, SLIDEWIN_TRUSTED_PROXIES=["10.0.0.0/33"]):
        with pytest.raises(ValueError, match="trusted_proxies"):
            Client().get("/")
    with site({"": ok}, {"key": "ip"}):
        with pytest.raises(ValueError, match="no limit"):
            Client().get("/")
    with site({"": ok}, {"limiter": "apps.django_site.no_such_limiter"}):
        with pytest.raises(ValueError, match="limiter"):
            Client().get("/")
    with override_settings(SLIDEWIN=["rate"], MIDDLEWARE=MW):
        with pytest.raises(TypeError, match="SLIDEWIN must be a dict"):
            Client().get("/")
    with pytest.raises(TypeError, match="method"):
        ratelimit("1/minute", method=5)
    with pytest.raises(TypeError, match="block"):
        ratelimit("1/minute", block="no")
    with pytest.raises(TypeError, match="headers must be a bool"):
        ratelimit("1/minute", headers="no")(ok)
    with site({"": ok}, {"rate": "1/minute", "headers": "off"}):
        with pytest.raises(TypeError, match="headers must be a bool"):
            Client().get("/")
    with pytest.raises(ValueError, match="key="):
        ratelimit(Limiter(qps=1), key="ip")(ok)


def test_several_rates_in_settings_share_rate_limiters_regions():
    name = "swtest-django-%d" % id(object())
    minute_region, hour_region = name + ".2-per-60000ms", name + ".3-per-3600000ms"
    try:
        with site({"": ok}, {"rate": "2/minute;3/hour", "shared": name}):
            c = Client()
            assert statuses(c, "/", 3) == [200, 200, 429]
            hour = Limiter(rate="3/hour", shared=hour_region)  # the second rate's region
            assert hour.totals()["pass"] == 2
            # a worker's rate_limiter with the same shared name (rates in any order) is the
            # same limit
            worker = slidewin.rate_limiter("3/hour;2/minute", shared=name)
            assert not worker.try_acquire()
            assert hour.totals()["pass"] == 2
    finally:
        slidewin.unlink(minute_region)
        slidewin.unlink(hour_region)


def test_ratelimit_reads_trusted_proxies_inside_slidewin_settings():
    view = ratelimit("1/minute", key="ip")(ok)
    with site({"v/": view}, {"trusted_proxies": ["10.0.0.0/8"]}, middleware=[]):
        c = Client(REMOTE_ADDR="10.0.0.2")
        assert statuses(c, "/v/", 2, HTTP_X_FORWARDED_FOR="198.51.100.7") == [200, 429]
        assert statuses(c, "/v/", 1, HTTP_X_FORWARDED_FOR="198.51.100.8") == [200]


def test_unknown_method_name_is_refused_naming_method():
    with pytest.raises(ValueError, match=r"method.*'PSOT'.*GET.*POST"):
        ratelimit("5/minute", method="PSOT")
    with pytest.raises(ValueError, match="method"):
        ratelimit("5/minute", method=("GET", "FETCH"))
    ratelimit("5/minute", method=UNSAFE)(ok)
    ratelimit("5/minute", method=("get", "head", "OPTIONS"))(ok)
    ratelimit("5/minute", method=slidewin.django.ALL)(ok)


def test_headers_not_a_bool_is_a_type_error_in_settings_and_decorator():
    with pytest.raises(TypeError, match="headers must be a bool, not str"):
        ratelimit("5/minute", headers="no")(ok)
    with site({"": ok}, {"rate": "5/minute", "headers": "no"}):
        with pytest.raises(TypeError, match=r"settings\.SLIDEWIN: headers must be a bool"):
            Client().get("/")


def test_bad_limiter_keywords_in_settings_name_settings_slidewin():
    with site({"": ok}, {"rat": "5/m"}):
        with pytest.raises(TypeError, match=r"settings\.SLIDEWIN.*'rat'"):
            Client().get("/")
    with site({"": ok}, {"rate": "5/x"}):
        with pytest.raises(ValueError, match=r"settings\.SLIDEWIN.*'5/x'"):
            Client().get("/")


def test_every_rate_form_and_separator_in_settings_and_ratelimit():
    view = ratelimit("2/m|3 per hour", key="ip")(ok)
    minute, hour = view.limiter
    assert (minute.interval_ms, hour.interval_ms) == (60_000, 3_600_000)
    with site({"v/": view}, {"rate": "10/s,100/m"}):
        c = Client()
        assert statuses(c, "/v/", 3) == [200, 200, 429]
        assert hour.totals()["pass"] == 2
    with pytest.raises(ValueError, match="empty rate"):
        ratelimit("2/minute,")(ok)


def test_ratelimit_with_a_keyed_limiter_and_no_key_keys_by_client_address():
    per_ip = KeyedLimiter(rate="1/minute")
    view = ratelimit(per_ip)(ok)
    with site({"v/": view}):
        a, b = Client(REMOTE_ADDR="192.0.2.1"), Client(REMOTE_ADDR="192.0.2.2")
        assert statuses(a, "/v/", 2) == [200, 429]
        assert statuses(b, "/v/", 1) == [200]
    with site({"v/": view}, middleware=[]):
        assert statuses(Client(REMOTE_ADDR="192.0.2.3"), "/v/", 2) == [200, 429]
    assert len(per_ip) == 3


def test_a_request_cancelled_in_the_async_middleware_gives_its_slot_back():
    from django.test import RequestFactory

    from slidewin.django import LimitMiddleware

    async def hung_view(request):  # the client disconnects: Django cancels the request
        raise asyncio.CancelledError

    async def get_response(request):
        await mw.process_view(request, hung_view, (), {})
        return await hung_view(request)

    with override_settings(SLIDEWIN={"concurrency": 1}):
        mw = LimitMiddleware(get_response)
    lim = mw.route.limiter
    request = RequestFactory().get("/")  # held on, as Django's handler holds it
    with pytest.raises(asyncio.CancelledError):
        arun(mw(request))
    assert lim.in_flight == 0


def test_a_request_interrupted_in_the_sync_middleware_gives_its_slot_back():
    from django.test import RequestFactory

    from slidewin.django import LimitMiddleware

    def get_response(request):
        mw.process_view(request, ok, (), {})
        raise KeyboardInterrupt  # not an Exception: Django's handler does not answer it

    with override_settings(SLIDEWIN={"concurrency": 1}):
        mw = LimitMiddleware(get_response)
    lim = mw.route.limiter
    request = RequestFactory().get("/")
    with pytest.raises(KeyboardInterrupt):
        mw(request)
    assert lim.in_flight == 0
