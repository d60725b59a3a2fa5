"""slidewin.wsgi.LimitMiddleware driven by hand: an environ, a start_response, and the
server's part (iterate the response, then close it) done by `serve()`.

Real servers (gunicorn + Flask) are in tests/test_web_servers.py. The keyed cases run on slidewin.KeyedLimiter.
"""

import json
import os
import math
import threading
import uuid

import pytest

import slidewin
from slidewin import Limiter
from slidewin.wsgi import LimitMiddleware

from slidewin import KeyedLimiter

LONG = 60_000


def long_qps(limit, **kw):
    return Limiter(limit * 1000 / LONG, interval_ms=LONG, sample_count=1, **kw)


def environ(path="/", peer="203.0.113.9", **extra):
    env = {"wsgi.version": (1, 0), "REQUEST_METHOD": "GET", "PATH_INFO": path,
           "SCRIPT_NAME": "", "QUERY_STRING": "", "REMOTE_ADDR": peer,
           "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http"}
    env.update(extra)
    return env


def ok_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


class Response:
    def __init__(self):
        self.status = None
        self.headers = None

    def start_response(self, status, headers, exc_info=None):
        self.status = int(status.split()[0])
        self.reason = status.split(" ", 1)[1]
        self.headers = {k.lower(): v for k, v in headers}
        self.header_list = headers


def serve(mw, **kw):
    """What a server does: call, iterate to the end, close."""
    r = Response()
    result = mw(environ(**kw), r.start_response)
    try:
        r.body = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    return r


def test_admitted_then_429_with_retry_after():
    lim = long_qps(2)
    mw = LimitMiddleware(ok_app, lim)
    rs = [serve(mw) for _ in range(4)]
    assert [r.status for r in rs] == [200, 200, 429, 429]
    assert rs[2].reason == "Too Many Requests"
    with pytest.raises(slidewin.BlockedError) as info:
        lim.acquire(timeout=0)
    ra = int(rs[2].headers["retry-after"])
    assert 1 <= ra <= LONG // 1000 and math.ceil(info.value.retry_after) in (ra, ra - 1)
    assert json.loads(rs[2].body)["status"] == 429
    assert rs[2].headers["content-length"] == str(len(rs[2].body))
    assert "retry-after" not in rs[0].headers
    assert lim.metric.sum("success") == 2 and lim.in_flight == 0


def test_concurrency_503_and_configured_refusal():
    lim = Limiter(concurrency=0)
    r = serve(LimitMiddleware(ok_app, lim))
    assert r.status == 503 and r.reason == "Service Unavailable"
    assert "retry-after" not in r.headers
    r = serve(LimitMiddleware(ok_app, Limiter(qps=0), status=420, body=b"calm",
                              content_type="text/x"))
    assert (r.status, r.body, r.headers["content-type"]) == (420, b"calm", "text/x")


def test_ratelimit_headers():
    lim = long_qps(2)
    mw = LimitMiddleware(ok_app, lim, headers=True)
    a, b, c = serve(mw), serve(mw), serve(mw)
    assert a.headers["ratelimit-policy"] == '"default";q=2;w=60'
    assert (a.headers["ratelimit"], b.headers["ratelimit"]) == ('"default";r=1', '"default";r=0')
    assert c.headers["ratelimit"] == '"default";r=0;t=%s' % c.headers["retry-after"]
    assert [k for k, _ in a.header_list].count("Content-Type") == 1


def test_exempt():
    lim = Limiter(qps=0)
    mw = LimitMiddleware(ok_app, lim, exempt=("/health", "/static/*"))
    assert [serve(mw, path=p).status for p in ("/health", "/static/x", "/x")] == [200, 200, 429]
    mw = LimitMiddleware(ok_app, lim, exempt=lambda env: env["REMOTE_ADDR"] == "127.0.0.1")
    assert serve(mw, peer="127.0.0.1").status == 200
    assert lim.metric.sum("block") == 1 and lim.metric.sum("pass") == 0


def test_generator_response_holds_its_slot_until_closed():
    lim = Limiter(concurrency=1)
    steps = []

    def streaming(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body():
            for part in (b"a", b"b", b"c"):
                steps.append(lim.in_flight)
                yield part

        return body()

    mw = LimitMiddleware(streaming, lim)
    r = Response()
    result = mw(environ(), r.start_response)
    it = iter(result)
    assert next(it) == b"a"
    assert serve(mw).status == 503        # streaming: the slot is held
    assert b"".join(it) == b"bc"
    assert lim.in_flight == 1             # exhausted but not closed yet
    result.close()
    assert lim.in_flight == 0 and steps == [1, 1, 1]
    assert serve(mw).status == 200
    assert lim.metric.sum("success") == 2 and lim.metric.sum("block") == 1
    result.close()                        # a second close changes nothing
    assert lim.in_flight == 0


def test_closed_early_counts_nothing_and_closes_the_app_iterable():
    lim = Limiter(concurrency=1)
    closed = []

    class Body:
        def __iter__(self):
            yield b"a"
            yield b"b"

        def close(self):
            closed.append(True)

    def app(environ, start_response):
        start_response("200 OK", [])
        return Body()

    result = LimitMiddleware(app, lim)(environ(), Response().start_response)
    assert next(iter(result)) == b"a"
    result.close()                        # the client went away
    assert closed == [True] and lim.in_flight == 0
    assert lim.metric.sum("success") == 0 and lim.metric.sum("exception") == 0


def test_app_exception_releases_and_counts():
    lim = Limiter(concurrency=1)

    def boom(environ, start_response):
        raise KeyError("boom")

    with pytest.raises(KeyError):
        LimitMiddleware(boom, lim)(environ(), Response().start_response)
    assert lim.in_flight == 0 and lim.metric.sum("exception") == 1


def test_iteration_exception_counts_at_close():
    lim = Limiter(concurrency=1)

    def app(environ, start_response):
        start_response("200 OK", [])

        def body():
            yield b"a"
            raise RuntimeError("mid-stream")

        return body()

    result = LimitMiddleware(app, lim)(environ(), Response().start_response)
    with pytest.raises(RuntimeError):
        b"".join(result)
    assert lim.in_flight == 1
    result.close()
    assert lim.in_flight == 0 and lim.metric.sum("exception") == 1


def test_close_raising_counts_exception():
    lim = Limiter(concurrency=1)

    class Body(list):
        def close(self):
            raise OSError("close failed")

    def app(environ, start_response):
        start_response("200 OK", [])
        return Body([b"x"])

    result = LimitMiddleware(app, lim)(environ(), Response().start_response)
    assert b"".join(result) == b"x"
    with pytest.raises(OSError):
        result.close()
    assert lim.in_flight == 0 and lim.metric.sum("exception") == 1


def test_never_closed_response_gives_its_slot_back_when_collected():
    lim = Limiter(concurrency=1)
    result = LimitMiddleware(ok_app, lim)(environ(), Response().start_response)
    assert lim.in_flight == 1
    del result  # a server that forgets close(): the entry gives its count back
    assert lim.in_flight == 0


def test_throttle_waits_in_the_worker_thread():
    lim = Limiter(qps=20, behavior="throttle", max_queueing_ms=2000)
    mw = LimitMiddleware(ok_app, lim)
    statuses = []

    def worker():
        statuses.append(serve(mw).status)

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert statuses == [200] * 4 and lim.metric.sum("pass") == 4
    over = Limiter(qps=1, behavior="throttle", max_queueing_ms=100)
    mw = LimitMiddleware(ok_app, over)
    assert [serve(mw).status for _ in range(2)] == [200, 429]


def test_shared_limiter():
    name = "swtest-wsgi-%s" % uuid.uuid4().hex[:8]
    try:
        a = LimitMiddleware(ok_app, long_qps(2, shared=name))
        b = LimitMiddleware(ok_app, long_qps(2, shared=name))
        assert [serve(m).status for m in (a, b, a, b)] == [200, 200, 429, 429]
    finally:
        slidewin.unlink(name)


def test_keyed_default_key_ignores_forged_forwarded_for():
    per_ip = KeyedLimiter(1000 / LONG, interval_ms=LONG, sample_count=1)
    mw = LimitMiddleware(ok_app, per_ip)
    got = [serve(mw, peer="198.51.100.1", HTTP_X_FORWARDED_FOR="9.9.9.%d" % i).status
           for i in range(3)]
    assert got == [200, 429, 429]
    assert serve(mw, peer="198.51.100.2").status == 200


def test_keyed_behind_a_trusted_proxy():
    per_ip = KeyedLimiter(1000 / LONG, interval_ms=LONG, sample_count=1)
    mw = LimitMiddleware(ok_app, per_ip, key=lambda env: slidewin.client_ip(
        env, trusted_proxies=("10.0.0.0/8",)))
    got = [serve(mw, peer="10.0.0.1", HTTP_X_FORWARDED_FOR=xff).status for xff in (
        "1.1.1.1, 198.51.100.7",   # client 198.51.100.7
        "2.2.2.2, 198.51.100.7",   # the same client with another forged leftmost value
        "198.51.100.8",            # another client
    )]
    assert got == [200, 429, 200]


def test_keyed_concurrency():
    per_ip = KeyedLimiter(concurrency=1)

    def streaming(environ, start_response):
        start_response("200 OK", [])
        return iter([b"a", b"b"])

    mw = LimitMiddleware(streaming, per_ip)
    result = mw(environ(peer="10.0.0.1"), Response().start_response)
    assert serve(mw, peer="10.0.0.1").status == 503
    assert serve(mw, peer="10.0.0.2").status == 200
    b"".join(result)
    result.close()
    assert serve(mw, peer="10.0.0.1").status == 200


def test_keyed_throttle_serves_late():
    per_ip = KeyedLimiter(50, behavior="throttle", max_queueing_ms=2000)
    mw = LimitMiddleware(ok_app, per_ip)
    assert [serve(mw).status for _ in range(3)] == [200] * 3


# ---- the server's file wrapper (sendfile) -------------------------------------------------------


class FileWrapper:
    """A server's wsgi.file_wrapper as gunicorn's: close() is the file's, set on the instance."""

    def __init__(self, filelike, blksize=8192):
        self.filelike = filelike
        self.blksize = blksize
        if hasattr(filelike, "close"):
            self.close = filelike.close

    def __iter__(self):
        return self

    def __next__(self):
        data = self.filelike.read(self.blksize)
        if data:
            return data
        raise StopIteration


class SlottedWrapper:
    """A file wrapper whose close() cannot be replaced (a C type, __slots__)."""

    __slots__ = ("filelike",)

    def __init__(self, filelike, blksize=8192):
        self.filelike = filelike

    def __iter__(self):
        return iter([self.filelike.read()])

    def close(self):
        self.filelike.close()


def file_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return environ["wsgi.file_wrapper"](open(environ["test.path"], "rb"), 4096)


def test_the_servers_file_wrapper_is_returned_as_it_is(tmp_path):
    """gunicorn sends a response with sendfile only when it `isinstance(respiter,
    environ["wsgi.file_wrapper"])`: the middleware must hand the app's wrapper back itself."""
    path = tmp_path / "big"
    path.write_bytes(b"x" * 100_000)
    lim = Limiter(concurrency=2)
    made = []

    def app(environ, start_response):
        made.append(file_app(environ, start_response))
        return made[-1]

    # stacked, with the inner one's headers: every layer keeps the wrapper
    mw = LimitMiddleware(LimitMiddleware(app, lim), long_qps(10), headers=False)
    r = Response()
    result = mw(environ(**{"wsgi.file_wrapper": FileWrapper, "test.path": str(path)}),
                r.start_response)
    assert result is made[0] and isinstance(result, FileWrapper)
    assert r.headers["ratelimit-policy"] == '"default";q=2;qu="concurrent-requests"'
    assert lim.in_flight == 1                       # held while the server sends the file
    assert os.path.getsize(path) == os.fstat(result.filelike.fileno()).st_size
    result.close()                                  # the server is done: released, counted
    assert lim.in_flight == 0 and mw.limiter.in_flight == 0
    assert result.filelike.closed
    assert lim.metric.sum("success") == 1 and mw.limiter.metric.sum("success") == 1
    result.close()                                  # a second close changes nothing
    assert lim.in_flight == 0 and lim.metric.sum("success") == 1


def file_response(tmp_path):
    """A concurrency limiter of 1 and the FileWrapper response of a 10-byte file through it."""
    path = tmp_path / "f"
    path.write_bytes(b"y" * 10)
    lim = Limiter(concurrency=1)
    result = LimitMiddleware(file_app, lim)(
        environ(**{"wsgi.file_wrapper": FileWrapper, "test.path": str(path)}),
        Response().start_response)
    assert isinstance(result, FileWrapper)
    return lim, result


def test_file_wrapper_closed_while_an_error_propagates_counts_nothing(tmp_path):
    """The server closes the wrapper in a finally: when its sendfile failed (the client gone),
    the slot comes back and nothing is counted, as for any response closed early."""
    lim, result = file_response(tmp_path)
    with pytest.raises(BrokenPipeError):
        try:
            raise BrokenPipeError("client gone")
        finally:
            result.close()
    assert lim.in_flight == 0
    assert lim.metric.sum("success") == 0 and lim.metric.sum("exception") == 0


def test_file_wrapper_closed_while_handling_another_error_counts_success(tmp_path):
    """Only a failed send (an OSError in flight: the client gone) makes the close an early
    one; a close from inside an unrelated exception handler (a server's own bookkeeping, an
    app's except block) is a response sent: counted SUCCESS."""
    lim, result = file_response(tmp_path)
    try:
        raise KeyError("a server's own lookup, handled")
    except KeyError:
        result.close()
    assert lim.in_flight == 0 and lim.metric.sum("success") == 1


def test_a_file_wrapper_that_cannot_take_a_close_is_still_counted(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"z" * 10)
    lim = Limiter(concurrency=1)
    r = serve(LimitMiddleware(file_app, lim),
              **{"wsgi.file_wrapper": SlottedWrapper, "test.path": str(path)})
    assert r.body == b"z" * 10 and lim.in_flight == 0 and lim.metric.sum("success") == 1


def test_a_file_wrapper_that_is_a_function_is_no_type(tmp_path):
    """PEP 3333: wsgi.file_wrapper is any callable; not a type, nothing to recognise."""

    def read_all(f, size=8192):
        with f:
            return [f.read()]

    path = tmp_path / "f"
    path.write_bytes(b"w" * 10)
    lim = Limiter(concurrency=1)
    r = serve(LimitMiddleware(file_app, lim),
              **{"wsgi.file_wrapper": read_all, "test.path": str(path)})
    assert r.body == b"w" * 10 and lim.in_flight == 0 and lim.metric.sum("success") == 1


# ---- on_block, thresholds, non-ASCII exempt paths, content_type, no address --------------------


def test_on_block_tuple_adds_cors_headers_and_keeps_retry_after():
    seen = []

    def on_block(error, env):
        seen.append(env["PATH_INFO"])
        return None, [("Access-Control-Allow-Origin", "*")], None

    mw = LimitMiddleware(ok_app, long_qps(1), on_block=on_block)
    assert serve(mw, path="/a").status == 200
    r = serve(mw, path="/b")
    assert seen == ["/b"] and r.status == 429 and r.headers["access-control-allow-origin"] == "*"
    assert int(r.headers["retry-after"]) >= 1 and json.loads(r.body)["status"] == 429


def test_ratelimit_fields_are_on_by_default():
    mw = LimitMiddleware(ok_app, long_qps(1))
    ok, refused = serve(mw), serve(mw)
    assert ok.headers["ratelimit-policy"] == '"default";q=1;w=60'
    assert ok.headers["ratelimit"] == '"default";r=0'
    assert refused.status == 429
    assert refused.headers["ratelimit"] == '"default";r=0;t=%s' % refused.headers["retry-after"]


def test_on_block_returning_a_wsgi_response():
    from werkzeug.wrappers import Response as WerkzeugResponse

    def on_block(error, env):
        return WerkzeugResponse('{"error":"slow down"}', status=429,
                                mimetype="application/json",
                                headers={"Access-Control-Allow-Origin": "*"})

    mw = LimitMiddleware(ok_app, long_qps(1), on_block=on_block, headers=True)
    serve(mw)
    r = serve(mw)
    assert r.status == 429 and r.body == b'{"error":"slow down"}'
    assert r.headers["content-type"] == "application/json"
    assert r.headers["access-control-allow-origin"] == "*"
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["ratelimit"] == '"default";r=0;t=%s' % r.headers["retry-after"]


def test_on_block_is_sync_for_wsgi():
    async def on_block(error, env):
        return None

    with pytest.raises(TypeError, match="on_block"):
        LimitMiddleware(ok_app, Limiter(qps=0), on_block=on_block)


def test_headers_report_the_keys_own_threshold():
    per = KeyedLimiter(1000 / LONG, interval_ms=LONG, sample_count=1,
                       overrides={"198.51.100.1": 4000 / LONG, "0": 0})
    mw = LimitMiddleware(ok_app, per, headers=True)
    r = serve(mw, peer="198.51.100.1")
    assert r.headers["ratelimit-policy"] == '"default";q=4;w=60'
    assert serve(mw, peer="198.51.100.2").headers["ratelimit-policy"] == '"default";q=1;w=60'
    r = serve(LimitMiddleware(ok_app, per, headers=True, key=lambda env: "0"))
    assert r.status == 429 and "retry-after" not in r.headers          # a limit of 0
    assert r.headers["ratelimit"] == '"default";r=0'


def test_exempt_paths_outside_ascii_match_the_pep3333_path_info():
    """PEP 3333: PATH_INFO holds the path's bytes decoded as latin-1 (gunicorn, waitress)."""
    lim = Limiter(qps=0)
    mw = LimitMiddleware(ok_app, lim, exempt=["/café", "/静的/*"])
    wsgi = lambda p: p.encode("utf-8").decode("latin-1")  # noqa: E731
    assert serve(mw, path=wsgi("/café")).status == 200
    assert serve(mw, path=wsgi("/静的/x.css")).status == 200
    assert serve(mw, path=wsgi("/cafe")).status == 429
    assert serve(mw, path="/caf\xe9").status == 429    # the byte 0xE9 alone is another path
    with pytest.raises(ValueError, match="exempt"):
        LimitMiddleware(ok_app, lim, exempt=["/\ud800"])


@pytest.mark.parametrize("ctype", ["a/b\r\nX: y", "a/b; c=\u20ac"])
def test_content_type_is_checked_at_construction(ctype):
    with pytest.raises(ValueError, match="content_type"):
        LimitMiddleware(ok_app, Limiter(qps=0), body="no", content_type=ctype)


def test_default_key_without_a_client_address_is_a_configuration_error():
    """gunicorn on a Unix socket: REMOTE_ADDR is empty for every client."""
    mw = LimitMiddleware(ok_app, KeyedLimiter(qps=1))
    with pytest.raises(ValueError, match="key="):
        serve(mw, peer="")
