"""slidewin.asgi.LimitMiddleware driven by hand: scopes, receive and send are plain Python.

Real servers (uvicorn) are in tests/test_web_servers.py. The keyed cases run on slidewin.KeyedLimiter.
"""

import asyncio
import json
import math
import uuid

import pytest

import slidewin
from slidewin import Limiter
from slidewin import _web
from slidewin.asgi import LimitMiddleware

from slidewin import KeyedLimiter

from limiter_helpers import LoopTicks

LONG = 60_000  # a window longer than any test: every request of a test falls in one window


def long_qps(limit, **kw):
    """A limiter admitting exactly `limit` requests for the whole test."""
    return Limiter(limit * 1000 / LONG, interval_ms=LONG, sample_count=1, **kw)


def http_scope(path="/", client=("203.0.113.9", 5000), headers=()):
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": list(headers), "client": client, "server": ("127.0.0.1", 80)}


async def ok_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


class Conn:
    """One request's receive/send: the request body, then nothing until `disconnect()`."""

    def __init__(self):
        self.sent = []
        self._gone = asyncio.Event()
        self._first = True

    async def receive(self):
        if self._first:
            self._first = False
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message):
        self.sent.append(message)

    def disconnect(self):
        self._gone.set()

    @property
    def status(self):
        return self.sent[0]["status"]

    @property
    def headers(self):
        return {k.decode(): v.decode() for k, v in self.sent[0]["headers"]}

    @property
    def body(self):
        return b"".join(m.get("body", b"") for m in self.sent[1:])


async def request(mw, **kw):
    conn = Conn()
    await mw(http_scope(**kw), conn.receive, conn.send)
    return conn


def run(coro):
    return asyncio.run(coro)


# ---- statuses and headers ---------------------------------------------------------------------


def test_ratelimit_fields_are_on_by_default():
    mw = LimitMiddleware(ok_app, long_qps(1))

    async def main():
        return [await request(mw) for _ in range(2)]

    ok, refused = run(main())
    assert ok.headers["ratelimit-policy"] == '"default";q=1;w=60'
    assert ok.headers["ratelimit"] == '"default";r=0'
    assert refused.status == 429
    assert refused.headers["ratelimit"] == '"default";r=0;t=%s' % refused.headers["retry-after"]


def test_admitted_then_429_with_retry_after():
    lim = long_qps(3)
    mw = LimitMiddleware(ok_app, lim, headers=False)

    async def main():
        return [await request(mw) for _ in range(5)]

    conns = run(main())
    assert [c.status for c in conns] == [200, 200, 200, 429, 429]
    assert all(c.body == b"ok" for c in conns[:3])
    refused = conns[3]
    # Retry-After is the limiter's retry_after rounded up (asked again just after: a bit less)
    with pytest.raises(slidewin.BlockedError) as info:
        lim.acquire(timeout=0)
    ra = int(refused.headers["retry-after"])
    assert 1 <= ra <= LONG // 1000
    assert math.ceil(info.value.retry_after) in (ra, ra - 1)
    assert refused.headers["content-type"] == "application/problem+json"
    doc = json.loads(refused.body)
    assert doc["status"] == 429 and doc["title"] == "Too Many Requests"
    assert int(refused.headers["content-length"]) == len(refused.body)
    assert not any(k.startswith("ratelimit") for k in refused.headers)  # headers=False
    assert "retry-after" not in conns[0].headers                        # never on a 2xx
    assert lim.metric.sum("pass") == 3 and lim.metric.sum("block") == 3  # 2 + acquire's
    assert lim.metric.sum("success") == 3
    assert lim.in_flight == 0


@pytest.mark.parametrize("retry_after,expected", [
    (None, 1), (0.0, 1), (1e-9, 1), (0.5, 1), (1.0, 1), (1.000001, 2), (2.5, 3), (59.2, 60),
])
def test_retry_after_rounds_up_to_whole_seconds(retry_after, expected):
    assert _web.retry_after_s(retry_after) == expected
    err = slidewin.BlockedError("x", retry_after=retry_after)
    code, headers = _web.refusal_fields(Limiter(qps=1), err, 429, 503, False)
    assert code == 429 and ("Retry-After", str(expected)) in headers


def test_concurrency_refusal_is_503_without_retry_after():
    lim = Limiter(concurrency=1)
    mw = LimitMiddleware(ok_app, lim)
    entered = lim.entry()
    entered.__enter__()  # someone else holds the slot

    async def main():
        return await request(mw)

    c = run(main())
    assert c.status == 503 and "retry-after" not in c.headers
    assert json.loads(c.body)["status"] == 503
    entered.__exit__(None, None, None)
    assert run(main()).status == 200


def test_configured_status_body_content_type():
    mw = LimitMiddleware(ok_app, Limiter(qps=0), status=418, body="slow down",
                         content_type="text/x-custom")
    c = run(request(mw))
    assert c.status == 418 and c.body == b"slow down"
    # qps=0 never admits: no Retry-After (not "1")
    assert c.headers["content-type"] == "text/x-custom" and "retry-after" not in c.headers
    mw = LimitMiddleware(ok_app, Limiter(concurrency=0), concurrency_status=429, body=b"busy")
    c = run(request(mw))
    assert c.status == 429 and c.body == b"busy"
    assert c.headers["content-type"] == "text/plain; charset=utf-8"


def test_ratelimit_headers_draft():
    lim = long_qps(2)
    mw = LimitMiddleware(ok_app, lim, headers=True)

    async def main():
        return [await request(mw) for _ in range(3)]

    a, b, refused = run(main())
    assert a.headers["ratelimit-policy"] == '"default";q=2;w=60'
    assert a.headers["ratelimit"] == '"default";r=1'
    assert b.headers["ratelimit"] == '"default";r=0'
    ra = int(refused.headers["retry-after"])
    assert refused.headers["ratelimit"] == '"default";r=0;t=%d' % ra
    assert "retry-after" not in a.headers
    # the app's own headers are kept, once
    assert [k for k, _ in a.sent[0]["headers"]].count(b"content-type") == 1


def test_ratelimit_headers_concurrency_and_subsecond_window():
    mw = LimitMiddleware(ok_app, Limiter(concurrency=4), headers=True)
    c = run(request(mw))
    assert c.headers["ratelimit-policy"] == '"default";q=4;qu="concurrent-requests"'
    assert c.headers["ratelimit"] == '"default";r=3'   # seen while this request held a slot
    mw = LimitMiddleware(ok_app, Limiter(qps=20, interval_ms=500, sample_count=1), headers=True)
    c = run(request(mw))
    assert c.headers["ratelimit-policy"] == '"default";q=10;slidewin-window-ms=500'
    # a throttle tells its policy; its remaining quota is not a window count
    mw = LimitMiddleware(ok_app, Limiter(qps=5, behavior="throttle"), headers=True)
    c = run(request(mw))
    assert c.headers["ratelimit-policy"] == '"default";q=5;w=1' and "ratelimit" not in c.headers


# ---- what is not limited ---------------------------------------------------------------------


def test_lifespan_and_websocket_pass_through_untouched():
    seen = []

    async def app(scope, receive, send):
        seen.append((scope, receive, send))

    lim = Limiter(qps=0)  # blocks every http request
    mw = LimitMiddleware(app, lim)

    async def r():
        return {}

    async def s(m):
        pass

    for kind in ("lifespan", "websocket"):
        scope = {"type": kind}
        run(mw(scope, r, s))
        assert seen[-1][0] is scope and seen[-1][1] is r and seen[-1][2] is s
    assert lim.metric.sum("block") == 0 and lim.metric.sum("pass") == 0


def test_lifespan_messages_reach_the_app():
    log = []

    async def app(scope, receive, send):
        assert scope["type"] == "lifespan"
        while True:
            m = await receive()
            log.append(m["type"])
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return

    msgs = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    out = []

    async def receive():
        return next(msgs)

    async def send(m):
        out.append(m["type"])

    run(LimitMiddleware(app, Limiter(qps=0))({"type": "lifespan"}, receive, send))
    assert log == ["lifespan.startup", "lifespan.shutdown"]
    assert out == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def test_exempt_paths_and_predicate():
    lim = Limiter(qps=0)
    mw = LimitMiddleware(ok_app, lim, exempt=["/health", "/static/*"])

    async def main():
        return [(await request(mw, path=p)).status
                for p in ("/health", "/static/a.css", "/healthz", "/static", "/")]

    assert run(main()) == [200, 200, 429, 429, 429]
    assert lim.metric.sum("block") == 3 and lim.metric.sum("pass") == 0
    mw = LimitMiddleware(ok_app, lim, exempt=lambda scope: scope["method"] == "GET")
    assert run(request(mw)).status == 200
    mw = LimitMiddleware(ok_app, lim, exempt="/only")
    assert run(request(mw, path="/only")).status == 200


# ---- the admission is held until the response is finished ---------------------------------


def streaming_app(gate):
    """Sends a start and a first chunk, then waits for `gate` before the last chunk."""

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await gate.wait()
        await send({"type": "http.response.body", "body": b"b", "more_body": True})
        await send({"type": "http.response.body", "body": b"c", "more_body": False})
        return None

    return app


def test_streaming_holds_the_slot_until_the_last_chunk():
    async def main():
        lim = Limiter(concurrency=1)
        gate = asyncio.Event()
        mw = LimitMiddleware(streaming_app(gate), lim, headers=True)
        first = Conn()
        task = asyncio.ensure_future(mw(http_scope(), first.receive, first.send))
        while len(first.sent) < 2:
            await asyncio.sleep(0)
        assert lim.in_flight == 1
        second = await request(mw)
        assert second.status == 503
        gate.set()
        await task
        assert lim.in_flight == 0
        # one start, every chunk as it came, headers added once
        assert [m["type"] for m in first.sent] == ["http.response.start"] + [
            "http.response.body"] * 3
        assert first.body == b"abc"
        assert [k for k, _ in first.sent[0]["headers"]].count(b"ratelimit-policy") == 1
        third = await request(mw)
        assert third.status == 200
        assert lim.metric.sum("success") == 2 and lim.metric.sum("block") == 1

    run(main())


def test_released_after_the_last_chunk_even_if_the_app_goes_on():
    """Work after the last chunk (Starlette's background tasks) does not hold the slot."""

    async def main():
        lim = Limiter(concurrency=1)
        after = asyncio.Event()
        seen = []

        async def app(scope, receive, send):
            await ok_app(scope, receive, send)
            seen.append(lim.in_flight)
            if len(seen) == 1:
                await after.wait()
                raise RuntimeError("background task failed")

        mw = LimitMiddleware(app, lim)
        conn = Conn()
        task = asyncio.ensure_future(mw(http_scope(), conn.receive, conn.send))
        while not seen:
            await asyncio.sleep(0)
        assert seen == [0]
        assert (await request(mw)).status == 200  # the first one's slot is free
        after.set()
        with pytest.raises(RuntimeError):
            await task
        # the response was finished: counted a success, not the later exception
        assert lim.metric.sum("success") == 2 and lim.metric.sum("exception") == 0

    run(main())


def test_released_on_client_disconnect():
    async def main():
        lim = Limiter(concurrency=1)

        async def app(scope, receive, send):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"a", "more_body": True})
            while (await receive())["type"] != "http.disconnect":
                pass
            # a streaming app notices the disconnect and stops without a last chunk

        mw = LimitMiddleware(app, lim)
        conn = Conn()
        task = asyncio.ensure_future(mw(http_scope(), conn.receive, conn.send))
        while len(conn.sent) < 2:
            await asyncio.sleep(0)
        assert lim.in_flight == 1
        conn.disconnect()
        await task
        assert lim.in_flight == 0
        # client gone: nothing counted (like a CancelledError in entry())
        assert lim.metric.sum("success") == 0 and lim.metric.sum("exception") == 0

    run(main())


def test_released_when_send_fails():
    async def main():
        lim = Limiter(concurrency=1)
        conn = Conn()

        async def broken_send(message):
            if message["type"] == "http.response.body":
                raise OSError("connection reset")
            await conn.send(message)

        mw = LimitMiddleware(ok_app, lim)
        with pytest.raises(OSError):
            await mw(http_scope(), conn.receive, broken_send)
        assert lim.in_flight == 0
        assert lim.metric.sum("exception") == 0 and lim.metric.sum("success") == 0

    run(main())


def test_released_and_counted_on_app_exception():
    async def boom(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise ValueError("boom")

    lim = Limiter(concurrency=1)
    mw = LimitMiddleware(boom, lim)
    with pytest.raises(ValueError):
        run(request(mw))
    assert lim.in_flight == 0
    assert lim.metric.sum("exception") == 1 and lim.metric.sum("success") == 0


def test_cancelled_counts_nothing():
    async def main():
        lim = Limiter(concurrency=1)
        mw = LimitMiddleware(streaming_app(asyncio.Event()), lim)
        conn = Conn()
        task = asyncio.ensure_future(mw(http_scope(), conn.receive, conn.send))
        while len(conn.sent) < 2:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lim.in_flight == 0
        assert lim.metric.sum("exception") == 0 and lim.metric.sum("success") == 0

    run(main())


def test_app_returning_without_a_response_releases():
    async def silent(scope, receive, send):
        return None

    lim = Limiter(concurrency=1)
    run(request(LimitMiddleware(silent, lim)))
    assert lim.in_flight == 0 and lim.metric.sum("success") == 1


def test_qps_limiter_holds_in_flight_while_the_response_runs():
    async def main():
        lim = long_qps(10)
        gate = asyncio.Event()
        mw = LimitMiddleware(streaming_app(gate), lim)
        conn = Conn()
        task = asyncio.ensure_future(mw(http_scope(), conn.receive, conn.send))
        while len(conn.sent) < 2:
            await asyncio.sleep(0)
        assert lim.stats().concurrency == 1  # as entry() shows calls in progress
        gate.set()
        await task
        assert lim.stats().concurrency == 0

    run(main())


# ---- throttle -----------------------------------------------------------------------------------


def test_throttle_waits_its_turn_without_blocking_the_loop():
    async def main():
        # 20 per second: 50 ms apart; 4 requests at once queue up to 150 ms
        lim = Limiter(qps=20, behavior="throttle", max_queueing_ms=2000)
        mw = LimitMiddleware(ok_app, lim)
        async with LoopTicks(0.001) as loop:
            conns = await asyncio.gather(*(request(mw) for _ in range(4)))
        return conns, loop.ticks, lim

    conns, ticks, lim = run(main())
    assert [c.status for c in conns] == [200] * 4     # served late, with their own status
    assert all("retry-after" not in c.headers for c in conns)
    assert ticks >= 2                                 # the loop ran while they waited
    assert lim.metric.sum("pass") == 4 and lim.in_flight == 0


def test_throttle_beyond_max_queueing_is_429():
    async def main():
        lim = Limiter(qps=1, behavior="throttle", max_queueing_ms=100)
        mw = LimitMiddleware(ok_app, lim)
        return await request(mw), await request(mw)

    a, b = run(main())
    assert a.status == 200 and b.status == 429
    assert 1 <= int(b.headers["retry-after"]) <= 1  # the next slot is < 1 s away


# ---- shared= -------------------------------------------------------------------------------------


def test_shared_limiter_counts_across_middlewares():
    name = "swtest-asgi-%s" % uuid.uuid4().hex[:8]
    try:
        a = LimitMiddleware(ok_app, long_qps(3, shared=name))
        b = LimitMiddleware(ok_app, long_qps(3, shared=name))  # another process would do this

        async def main():
            return [(await request(mw)).status for mw in (a, b, a, b, a)]

        assert run(main()) == [200, 200, 200, 429, 429]
    finally:
        slidewin.unlink(name)


# ---- keyed ---------------------------------------------------------------------------------------


def test_keyed_default_key_is_the_peer():
    per_ip = KeyedLimiter(2 * 1000 / LONG, interval_ms=LONG, sample_count=1)
    mw = LimitMiddleware(ok_app, per_ip)
    forged = [(b"x-forwarded-for", b"1.1.1.%d" % i) for i in range(1)]

    async def main():
        out = []
        for i in range(3):
            out.append((await request(mw, client=("198.51.100.1", 1000 + i))).status)
        for i in range(3):
            hdrs = [(b"x-forwarded-for", b"9.9.9.%d" % i)] + forged
            out.append((await request(mw, client=("198.51.100.2", 5), headers=hdrs)).status)
        return out

    assert run(main()) == [200, 200, 429, 200, 200, 429]


def test_keyed_custom_key_and_none_passes():
    per_user = KeyedLimiter(1000 / LONG, interval_ms=LONG, sample_count=1)

    def user(scope):
        for k, v in scope["headers"]:
            if k == b"x-user":
                return v.decode()
        return None  # anonymous requests are not limited

    mw = LimitMiddleware(ok_app, per_user, key=user)

    async def main():
        u = [(b"x-user", b"alice")]
        v = [(b"x-user", b"bob")]
        return [(await request(mw, headers=h)).status for h in (u, u, v, (), (), v)]

    assert run(main()) == [200, 429, 200, 200, 200, 429]


def test_keyed_concurrency_503_and_release():
    async def main():
        per_ip = KeyedLimiter(concurrency=1)
        gate = asyncio.Event()
        mw = LimitMiddleware(streaming_app(gate), per_ip)
        conn = Conn()
        task = asyncio.ensure_future(mw(http_scope(client=("10.0.0.1", 1)), conn.receive,
                                        conn.send))
        while len(conn.sent) < 2:
            await asyncio.sleep(0)
        busy = await request(mw, client=("10.0.0.1", 2))
        other = asyncio.ensure_future(request(mw, client=("10.0.0.2", 3)))
        await asyncio.sleep(0.01)
        gate.set()
        await task
        other_conn = await other
        again = await request(mw, client=("10.0.0.1", 4))
        return busy.status, other_conn.status, again.status

    assert run(main()) == (503, 200, 200)


def test_keyed_throttle_waits():
    async def main():
        per_ip = KeyedLimiter(20, behavior="throttle", max_queueing_ms=2000)
        mw = LimitMiddleware(ok_app, per_ip)
        return await asyncio.gather(*(request(mw) for _ in range(3)))

    assert [c.status for c in run(main())] == [200] * 3


def test_key_with_a_plain_limiter_is_an_error():
    with pytest.raises(ValueError, match="key"):
        LimitMiddleware(ok_app, Limiter(qps=1), key=lambda scope: "x")


def test_ratelimit_headers_with_a_name_outside_latin1():
    """A limiter named in another script still gets its headers (escaped), never a 500."""
    from slidewin._web import ratelimit_fields

    (_, value), = ratelimit_fields(Limiter(qps=2, name="загрузки"))
    value.encode("latin-1")                       # a valid header value
    assert value.startswith('"\\\\u0437')            # escaped, as a structured-field string


def test_client_gone_before_the_headers_is_not_an_app_exception():
    import asyncio

    from slidewin.asgi import LimitMiddleware

    lim = Limiter(concurrency=2)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x"})

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        raise OSError("connection reset by peer")

    mw = LimitMiddleware(app, lim)
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [],
             "client": ("1.2.3.4", 1)}
    with pytest.raises(OSError):
        asyncio.run(mw(scope, receive, send))
    assert lim.in_flight == 0
    assert lim.totals()["exception"] == 0 and lim.totals()["success"] == 0


# ---- Redis limiters: each middleware takes its own kind (slidewin.wsgi's cases too) ---------


class _NoClient:
    """Stands for a redis-py client: constructing a Redis limiter contacts no server."""


@pytest.mark.parametrize("server, name, use", [
    ("asgi", "RedisLimiter", "AsyncRedisLimiter"),
    ("asgi", "RedisKeyedLimiter", "AsyncRedisKeyedLimiter"),
    ("wsgi", "AsyncRedisLimiter", "RedisLimiter"),
    ("wsgi", "AsyncRedisKeyedLimiter", "RedisKeyedLimiter"),
])
def test_a_redis_limiter_of_the_other_kind_is_refused_at_construction(server, name, use):
    """A sync one's entry() has no `async with`, an async one's no `with`: refused when the
    middleware is built, not at the first request, naming the parameter and the type to use."""
    import importlib

    import slidewin.redis

    middleware = importlib.import_module("slidewin." + server).LimitMiddleware
    lim = getattr(slidewin.redis, name)(_NoClient(), "other-kind", qps=10)
    with pytest.raises(TypeError, match=r"limiter is an? %s\b.*use slidewin\.redis\.%s\b"
                       % (name, use)):
        middleware(ok_app, lim)


@pytest.mark.parametrize("server, name", [
    ("asgi", "AsyncRedisLimiter"), ("asgi", "AsyncRedisKeyedLimiter"),
    ("wsgi", "RedisLimiter"), ("wsgi", "RedisKeyedLimiter"),
])
def test_a_redis_limiter_of_the_right_kind_is_accepted(server, name):
    import importlib

    import slidewin.redis

    middleware = importlib.import_module("slidewin." + server).LimitMiddleware
    lim = getattr(slidewin.redis, name)(_NoClient(), "right-kind", qps=10)
    mw = middleware(ok_app, lim)
    assert mw.limiter is lim and mw._keyed == ("Keyed" in name)


def test_the_middleware_needs_neither_redis_nor_slidewin_redis():
    """redis-py is an optional extra: without it both middlewares import and serve, and
    telling a Redis limiter apart imports nothing."""
    import os
    import subprocess
    import sys

    code = r"""
import asyncio, sys
sys.modules["redis"] = None                # as if redis-py were not installed
from slidewin import Limiter
from slidewin import asgi, wsgi

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})

sent = []
async def send(message):
    sent.append(message)
async def receive():
    return {"type": "http.request", "body": b"", "more_body": False}

mw = asgi.LimitMiddleware(app, Limiter(qps=1))
for _ in range(2):
    asyncio.run(mw({"type": "http", "path": "/", "headers": [], "client": ("1.2.3.4", 1)},
                   receive, send))
wmw = wsgi.LimitMiddleware(lambda e, sr: (sr("200 OK", []), [b"ok"])[1], Limiter(qps=1))
statuses = []
for _ in range(2):
    wmw({"PATH_INFO": "/", "REMOTE_ADDR": "1.2.3.4"}, lambda s, h, e=None: statuses.append(s))
print([m["status"] for m in sent if "status" in m], statuses,
      "slidewin.redis" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True, timeout=60,
                         cwd=os.path.dirname(os.path.abspath(__file__)))  # not the source root
    assert out.returncode == 0, out.stdout
    assert out.stdout.split("\n")[-2] == (
        "[200, 429] ['200 OK', '429 Too Many Requests'] False"
    ), out.stdout


# ---- on_block, the key's own threshold, a limit of 0, content_type, no address ------------------


def test_on_block_adds_headers_to_the_default_refusal_and_logs():
    seen = []

    def on_block(error, scope):
        seen.append((type(error).__name__, scope["path"]))
        return None, [("Access-Control-Allow-Origin", "https://app.example")], None

    mw = LimitMiddleware(ok_app, long_qps(1), on_block=on_block)

    async def main():
        return [await request(mw, path="/x") for _ in range(2)]

    ok, refused = run(main())
    assert ok.status == 200 and seen == [("BlockedError", "/x")]
    assert refused.status == 429
    assert refused.headers["access-control-allow-origin"] == "https://app.example"
    assert int(refused.headers["retry-after"]) >= 1                 # the default's, kept
    assert refused.headers["content-type"] == "application/problem+json"
    assert json.loads(refused.body)["status"] == 429


def test_on_block_async_with_its_own_status_body_and_type():
    async def on_block(error, scope):
        await asyncio.sleep(0)
        body = json.dumps({"error": "slow_down", "retry_after": error.retry_after})
        return 420, [("Content-Type", "application/json"), ("X-Trace", "t1")], body

    mw = LimitMiddleware(ok_app, long_qps(0.5 * 60), on_block=on_block)

    async def main():
        for _ in range(30):
            await request(mw)
        return await request(mw)

    c = run(main())
    assert c.status == 420 and c.headers["content-type"] == "application/json"
    assert c.headers["x-trace"] == "t1" and "retry-after" in c.headers
    assert json.loads(c.body)["error"] == "slow_down"
    assert int(c.headers["content-length"]) == len(c.body)
    assert [k for k, _ in c.sent[0]["headers"]].count(b"content-type") == 1


def test_on_block_returning_an_asgi_response():
    """A framework's response (anything called as an ASGI app): sent as it is, with the
    refusal's Retry-After and RateLimit fields added where it has none."""
    from starlette.responses import JSONResponse

    def on_block(error, scope):
        return JSONResponse({"detail": "busy"}, status_code=503,
                            headers={"Access-Control-Allow-Origin": "*"})

    lim = Limiter(concurrency=1)
    mw = LimitMiddleware(ok_app, lim, on_block=on_block, headers=True)
    held = lim.entry()
    held.__enter__()
    try:
        c = run(request(mw))
    finally:
        held.__exit__(None, None, None)
    assert c.status == 503 and json.loads(c.body) == {"detail": "busy"}
    assert c.headers["access-control-allow-origin"] == "*"
    assert c.headers["ratelimit-policy"] == '"default";q=1;qu="concurrent-requests"'
    assert c.headers["ratelimit"] == '"default";r=0'
    assert "retry-after" not in c.headers

    ra = LimitMiddleware(ok_app, Limiter(qps=1), on_block=lambda e, s: JSONResponse(
        {}, status_code=429, headers={"Retry-After": "7"}))
    c = run(request(ra)), run(request(ra))
    assert c[1].status == 429 and c[1].headers["retry-after"] == "7"   # its own, not doubled
    assert [k for k, _ in c[1].sent[0]["headers"]].count(b"retry-after") == 1


@pytest.mark.parametrize("bad,exc", [
    (42, TypeError), ("429", TypeError), ((429, [], b"", 1), TypeError),
    ((200, [], b""), ValueError), ((429, [("X-A", "a\r\nSet-Cookie: x=1")], b""), ValueError),
    ((429, [("X-A", "\u20ac")], b""), ValueError), ((429, [("X A", "1")], b""), ValueError),
    ((429, "X-A: 1", b""), TypeError), ((429, [], 3.5), TypeError),
])
def test_on_block_bad_result_is_an_error_naming_it(bad, exc):
    mw = LimitMiddleware(ok_app, Limiter(qps=0), on_block=lambda e, s: bad)
    with pytest.raises(exc, match="on_block"):
        run(request(mw))


def test_on_block_must_be_callable():
    with pytest.raises(TypeError, match="on_block"):
        LimitMiddleware(ok_app, Limiter(qps=1), on_block="nope")


def test_cors_middleware_outside_the_limiter_covers_its_refusals():
    """The order the README recommends: CORS outside (added after, in Starlette), so a
    browser can read the 429 and its Retry-After; with the limiter outside, the refusal has
    no Access-Control-Allow-Origin (the browser reports a CORS error) unless on_block adds it."""
    from starlette.middleware.cors import CORSMiddleware

    origin = [(b"origin", b"https://app.example")]
    inner = CORSMiddleware(LimitMiddleware(ok_app, Limiter(qps=0)),
                           allow_origins=["https://app.example"],
                           expose_headers=["Retry-After", "RateLimit", "RateLimit-Policy"])
    c = run(request(inner, headers=origin))
    assert c.status == 429 and c.headers["access-control-allow-origin"] == "https://app.example"
    assert "Retry-After" in c.headers["access-control-expose-headers"]
    outer = LimitMiddleware(CORSMiddleware(ok_app, allow_origins=["https://app.example"]),
                            Limiter(qps=0))
    c = run(request(outer, headers=origin))
    assert c.status == 429 and "access-control-allow-origin" not in c.headers


def test_headers_report_the_keys_own_threshold():
    per = KeyedLimiter(1000 / LONG, interval_ms=LONG, sample_count=1,
                       overrides={"vip": 5000 / LONG, "10.0.0.9": 3000 / LONG})
    mw = LimitMiddleware(ok_app, per, headers=True,
                         key=lambda scope: scope["path"].strip("/") or None)

    async def main():
        return [await request(mw, path=p) for p in ("/vip", "/anon", "/anon")]

    vip, anon, refused = run(main())
    assert vip.headers["ratelimit-policy"] == '"default";q=5;w=60'
    assert anon.headers["ratelimit-policy"] == '"default";q=1;w=60'
    assert refused.status == 429 and refused.headers["ratelimit-policy"] == '"default";q=1;w=60'
    # the default key (the peer address) too
    mw = LimitMiddleware(ok_app, per, headers=True)
    c = run(request(mw, client=("10.0.0.9", 1)))
    assert c.headers["ratelimit-policy"] == '"default";q=3;w=60'


def test_a_limit_of_zero_advertises_no_retry():
    """A key (or limiter) whose limit is 0 is never admitted: no Retry-After (nor t=)."""
    per = KeyedLimiter(qps=5, overrides={"banned": 0})
    mw = LimitMiddleware(ok_app, per, headers=True, key=lambda scope: scope["path"][1:])
    c = run(request(mw, path="/banned"))
    assert c.status == 429 and "retry-after" not in c.headers
    assert c.headers["ratelimit"] == '"default";r=0'
    assert c.headers["ratelimit-policy"] == '"default";q=0;w=1'
    c = run(request(LimitMiddleware(ok_app, Limiter(qps=0))))
    assert c.status == 429 and "retry-after" not in c.headers
    # a warm-up refusal (retry_after unknown, the limit not 0) still says 1
    err = slidewin.BlockedError("x", retry_after=None)
    code, headers = _web.refusal_fields(Limiter(qps=1), err, 429, 503, False)
    assert ("Retry-After", "1") in headers


@pytest.mark.parametrize("ctype", [
    "text/plain\r\nSet-Cookie: a=1", "text/plain\n", "text/\x00plain", "text/plain; x=\u20ac",
    "",
])
def test_content_type_is_checked_at_construction(ctype):
    with pytest.raises(ValueError, match="content_type"):
        LimitMiddleware(ok_app, Limiter(qps=0), content_type=ctype)


def test_content_type_latin1_is_accepted():
    c = run(request(LimitMiddleware(ok_app, Limiter(qps=0), body=b"x",
                                    content_type="text/plain; x=\xe9")))
    assert c.status == 429 and c.sent[0]["headers"][0] == (b"content-type", b"text/plain; x=\xe9")


def test_default_key_without_a_client_address_is_a_configuration_error():
    """A Unix socket (scope client None): every client would share the key ""."""
    mw = LimitMiddleware(ok_app, KeyedLimiter(qps=1))
    with pytest.raises(ValueError, match="key="):
        run(request(mw, client=None))
    # a key of the user's own is the user's to choose
    mw = LimitMiddleware(ok_app, KeyedLimiter(qps=1), key=lambda s: slidewin.client_ip(s) or None)
    assert run(request(mw, client=None)).status == 200
