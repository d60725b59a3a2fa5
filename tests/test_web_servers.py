"""The middleware in real servers on loopback: uvicorn serving a Starlette app and a plain ASGI
app, gunicorn (2 sync workers) serving a Flask app. The apps are in tests/apps/.

- counts: a limiter admitting LIMIT in a one-hour window (the load keeps clear of the
  window's edge), under a bounded load of 3 x LIMIT requests from 6 threads: exactly LIMIT
  200s, the rest 429s, and the limiter's own counts agree;
- streaming (concurrency=1): while a response streams, a second request gets 503; after its
  last chunk, 200; a client that disconnects mid-stream gives its slot back;
- lifespan startup and shutdown still run through the middleware;
- forged X-Forwarded-For values do not change the key; behind a trusted proxy the key is the
  right-most untrusted address.

Servers are stopped by their pid. No timing is asserted: waits are bounded polls.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

import slidewin

from conftest import skip_unless_ci

# gunicorn and uvicorn servers (CONTRIBUTING.md: markers)
pytestmark = pytest.mark.server

HERE = os.path.dirname(os.path.abspath(__file__))
LIMIT = 20
HOUR_MS = 3_600_000


def need(module, what):
    try:
        __import__(module)
    except ImportError:
        skip_unless_ci("%s is not installed (it is in the test extra)" % what)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(conn, path, headers=None):
    """GET path on a connection: (status, headers with lower-case names, body); closes it."""
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
    finally:
        conn.close()


class Server:
    """A server process on a free loopback port, with its own folder (lifespan log, the
    stream's go-ahead file); stopped by pid."""

    def __init__(self, argv_of_port, **env):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="swtest-web-")
        self.env = dict(os.environ, SLIDEWIN_TEST_DIR=self.dir,
                        SLIDEWIN_TEST_QPS_LIMIT=str(LIMIT),
                        PYTHONPATH=os.pathsep.join([HERE] + sys.path), **env)
        self.argv = argv_of_port(self.port)
        self.proc = None

    def __enter__(self):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=HERE, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("server exited: " + self.output())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError("server did not start: " + self.output())
                time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.stop()
        self.log.close()

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def get(self, path, headers=None):
        return get(http.client.HTTPConnection("127.0.0.1", self.port, timeout=30), path,
                   headers)

    def stats(self):
        return json.loads(self.get("/stats")[2])

    def wait_for(self, what, cond, limit_s=20.0):
        end = time.monotonic() + limit_s
        while True:
            s = self.stats()
            if cond(s):
                return s
            if time.monotonic() > end:
                raise AssertionError("%s: never happened; stats %r\n%s"
                                     % (what, s, self.output()))
            time.sleep(0.01)

    def go_ahead(self, on=True):
        path = os.path.join(self.dir, "go")
        if on:
            open(path, "w").close()
        elif os.path.exists(path):
            os.unlink(path)

    def lifespan(self):
        try:
            with open(os.path.join(self.dir, "lifespan.log")) as f:
                return [line.split()[0] for line in f]
        except FileNotFoundError:
            return []


class UnixServer(Server):
    """The same, on a Unix socket in its folder (uvicorn --uds)."""

    def __init__(self, target, **env):
        super().__init__(lambda port: [], **env)
        self.sock = os.path.join(self.dir, "s")
        self.argv = [sys.executable, "-m", "uvicorn", "--uds", self.sock, "--app-dir", HERE,
                     "--no-proxy-headers", "--lifespan", "on", "--log-level", "warning",
                     "--no-access-log", target]

    def __enter__(self):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=HERE, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("server did not start: " + self.output())
            time.sleep(0.05)
        return self

    def get(self, path, headers=None):
        conn = http.client.HTTPConnection("localhost", timeout=30)
        conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.sock.settimeout(30)
        conn.sock.connect(self.sock)
        return get(conn, path, headers)


def uvicorn(target):
    return lambda port: [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port",
                         str(port), "--app-dir", HERE, "--no-proxy-headers", "--lifespan", "on",
                         "--log-level", "warning", "--no-access-log", target]


def gunicorn(target):
    return lambda port: [sys.executable, "-m", "gunicorn", "-w", "2", "-k", "sync", "--bind",
                         "127.0.0.1:%d" % port, "--chdir", HERE, "--log-level", "warning",
                         target]


def keep_clear_of_the_window_edge(margin_s=20.0):
    """The limiters' one-hour windows start at multiples of an hour of CLOCK_MONOTONIC; a
    load that straddled an edge would see two windows. Wait past a near edge (rarely)."""
    left_ms = HOUR_MS - (time.monotonic_ns() // 10**6) % HOUR_MS
    if left_ms < margin_s * 1000:
        time.sleep(left_ms / 1000 + 0.5)


def load(server, path, total, threads=6):
    """`total` requests on `path` from `threads` threads; the statuses."""
    statuses = []
    lock = threading.Lock()
    left = [total]

    def client():
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            status = server.get(path)[0]
            with lock:
                statuses.append(status)

    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert len(statuses) == total
    return statuses


def check_counts(server, path):
    keep_clear_of_the_window_edge()
    statuses = load(server, path, 3 * LIMIT)
    ok, limited = statuses.count(200), statuses.count(429)
    assert ok + limited == len(statuses), sorted(set(statuses))
    assert ok == LIMIT and limited == 2 * LIMIT
    s = server.wait_for("all closed", lambda s: s["qps"]["in_flight"] == 0)["qps"]
    assert (s["pass"], s["block"]) == (ok, limited)
    status, headers, body = server.get(path)
    assert status == 429 and 1 <= int(headers["retry-after"]) <= HOUR_MS // 1000
    assert headers["content-type"] == "application/problem+json"
    assert json.loads(body)["status"] == 429


def check_stream(server, path, asgi):
    """concurrency=1: 503 while a response streams, 200 after its last chunk; a client
    that disconnects mid-stream gives the slot back."""
    server.go_ahead(False)
    got = {}

    def streaming_client():
        got["first"] = server.get(path)

    t = threading.Thread(target=streaming_client)
    t.start()
    try:
        server.wait_for("the stream holds its slot", lambda s: s["stream"]["in_flight"] == 1)
        status, headers, _ = server.get(path)
        assert status == 503 and "retry-after" not in headers
    finally:
        server.go_ahead()
        t.join(30)
    assert got["first"][0] == 200 and got["first"][2] == b"first last"
    server.wait_for("released after the last chunk", lambda s: s["stream"]["in_flight"] == 0)
    assert server.get(path)[:1] == (200,)
    # (a WSGI server closes the response, which counts it, just after the client has it)
    before = server.wait_for("counted", lambda s: s["stream"]["success"] == 2)["stream"]
    assert before["block"] == 1 and before["in_flight"] == 0

    # a client gone mid-stream
    server.go_ahead(False)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        seen = b""
        while b"first" not in seen:
            chunk = s.recv(4096)
            assert chunk, seen
            seen += chunk
    if asgi:
        # the server tells the app (http.disconnect): released at once, nothing counted
        server.wait_for("released on disconnect", lambda s: s["stream"]["in_flight"] == 0)
        server.go_ahead()
        assert server.stats()["stream"]["success"] == before["success"]
    else:
        # a sync worker notices the disconnect only when it writes next
        server.go_ahead()
        server.wait_for("released after a disconnect",
                        lambda s: s["stream"]["in_flight"] == 0)
    assert server.get(path)[0] == 200


def check_sendfile(server, size=50 * 2**20):
    """A 50 MB send_file through the middleware: gunicorn still sends it with sendfile (it
    recognises its own wsgi.file_wrapper, which the middleware hands back as it is), and the
    download's slot comes back after it."""
    with open(os.path.join(server.dir, "big.bin"), "wb") as f:
        f.truncate(size)
    try:
        status, headers, body = server.get("/file")
    finally:
        os.unlink(os.path.join(server.dir, "big.bin"))
    assert status == 200 and len(body) == size
    assert headers["ratelimit-policy"].endswith(';q=2;qu="concurrent-requests"')
    s = server.wait_for("the download counted", lambda s: s["file"]["success"] == 1)["file"]
    assert s["in_flight"] == 0 and s["pass"] == 1
    try:
        with open(os.path.join(server.dir, "sendfile.log")) as f:
            sent = [int(line.split()[1]) for line in f]
    except FileNotFoundError:
        sent = []
    assert sum(sent) == size, "gunicorn did not use sendfile: %r" % (sent,)


def test_uvicorn_starlette():
    need("uvicorn", "uvicorn")
    need("starlette", "starlette")
    with Server(uvicorn("apps.starlette_app:app")) as server:
        assert server.lifespan() == ["startup"]
        check_counts(server, "/")
        check_stream(server, "/stream/", asgi=True)
        server.stop()
        assert server.lifespan() == ["startup", "shutdown"], server.output()


def test_uvicorn_plain_asgi():
    need("uvicorn", "uvicorn")
    with Server(uvicorn("apps.asgi_app:app")) as server:
        assert server.lifespan() == ["startup"]
        check_counts(server, "/qps")

        # no trusted proxies (the default key): the peer, whatever the header says
        keep_clear_of_the_window_edge()
        got = [server.get("/peer", {"X-Forwarded-For": "6.6.6.%d" % i})[0] for i in range(4)]
        assert got == [200, 429, 429, 429]

        # behind a trusted proxy (the test's 127.0.0.1): the right-most untrusted address
        def proxied(xff):
            status, _, body = server.get("/proxied", {"X-Forwarded-For": xff})
            return status, body.decode() if status == 200 else None

        assert proxied("1.1.1.1, 198.51.100.7") == (200, "198.51.100.7")
        assert proxied("2.2.2.2, 198.51.100.7")[0] == 429       # a forged leftmost value
        assert proxied("198.51.100.7, 127.0.0.1")[0] == 429     # a trusted hop skipped
        assert proxied("198.51.100.8") == (200, "198.51.100.8")  # another client
        server.stop()
        assert server.lifespan() == ["startup", "shutdown"], server.output()


def test_gunicorn_flask():
    need("flask", "flask")
    need("gunicorn", "gunicorn")
    region = "swtest-web-%s" % uuid.uuid4().hex[:8]
    try:
        with Server(gunicorn("apps.flask_app:app"), SLIDEWIN_TEST_REGION=region) as server:
            check_counts(server, "/")
            check_stream(server, "/stream", asgi=False)
            check_sendfile(server)
    finally:
        slidewin.unlink(region + "-qps")
        slidewin.unlink(region + "-stream")
        slidewin.unlink(region + "-file")


def test_uvicorn_on_a_unix_socket():
    """No client address (scope["client"] is None): the default key is a configuration error
    (every client would share one key); behind a proxy on the socket that writes RFC 7239
    Forwarded, client_ip(trusted_proxies="unix", header="forwarded") keys each client."""
    need("uvicorn", "uvicorn")
    with UnixServer("apps.asgi_app:app") as server:
        status, _, _ = server.get("/peer")
        assert status == 500
        assert "ValueError" in server.output() and "key=" in server.output()

        def forwarded(value):
            status, _, body = server.get("/forwarded", {"Forwarded": value})
            return status, body.decode() if status == 200 else None

        keep_clear_of_the_window_edge()
        assert forwarded('for=1.1.1.1, for="198.51.100.7:4711";proto=https') == (
            200, "198.51.100.7")
        assert forwarded("for=2.2.2.2, for=198.51.100.7")[0] == 429  # forged leftmost
        assert forwarded('for="[2001:db8::7]"') == (200, "2001:db8::7")
