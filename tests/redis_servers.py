"""Real redis-server processes for the Redis tests (no fakes): each on a free loopback port
with its own temporary folder, stopped by pid. Debian's `redis-server` package (`.ci/run`
installs it); elsewhere the tests skip, except in CI (conftest.skip_unless_ci)."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import skip_unless_ci

SERVER = shutil.which("redis-server")
CLI = shutil.which("redis-cli")


def need_server():
    if SERVER is None:
        skip_unless_ci("redis-server is not installed (apt-get install redis-server)")
    try:
        import redis  # noqa: F401
    except ImportError:
        skip_unless_ci("redis-py is not installed (pip install 'slidewin[redis]')")


def _free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster=False):
    """A free loopback port; for a cluster node also its bus port (+10000), so <= 55535."""
    if not cluster:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    import random

    for _ in range(200):
        p = random.randint(20000, 55000)
        if _free(p) and _free(p + 10000):
            return p
    raise RuntimeError("no free port pair for a cluster node")


class Server:
    """One redis-server; start() again on the same port after stop() (a restart)."""

    def __init__(self, *extra, port=None):
        self.port = port or free_port(cluster="--cluster-enabled" in extra)
        self.dir = tempfile.mkdtemp(prefix="slidewin-redis-")
        self.extra = list(extra)
        self.proc = None

    def start(self):
        args = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no", "--protected-mode", "no",
                "--logfile", os.path.join(self.dir, "log")] + self.extra
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start on port %d" % self.port)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self, **kw):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def async_client(self, **kw):
        import redis.asyncio

        return redis.asyncio.Redis(host="127.0.0.1", port=self.port, **kw)


@pytest.fixture(scope="session")
def redis_server():
    need_server()
    s = Server().start()
    yield s
    s.stop()


@pytest.fixture
def r(redis_server):
    c = redis_server.client()
    c.flushall()
    yield c
    c.close()
    from slidewin.redis import _close_pools

    _close_pools(c, False)


@pytest.fixture
def own_server():
    """A server of the test's own (faults kill, pause and restart it)."""
    need_server()
    s = Server().start()
    yield s
    s.stop()
