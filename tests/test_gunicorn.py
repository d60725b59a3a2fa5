"""A real pre-fork server: gunicorn with 4 sync workers behind one shared limiter.

Four private limiters would admit 4 x qps; the shared one admits qps per window across all
workers. The load is a bounded loop of Python threads on loopback; gunicorn is stopped by its
pid.
"""

from __future__ import annotations

import http.client
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

# gunicorn servers (CONTRIBUTING.md: markers)
pytestmark = pytest.mark.server

try:
    import gunicorn  # noqa: F401  (a test dependency: pip install ".[test]")
except ImportError:
    gunicorn = None

HERE = os.path.dirname(os.path.abspath(__file__))
QPS = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port: int, env: dict, preload: bool, app: str = "apps.gunicorn_app:app",
          workers: int = 4) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "gunicorn", "-w", str(workers), "-k", "sync", "--bind",
           f"127.0.0.1:{port}", "--chdir", HERE, "--log-level", "warning"]
    if preload:
        cmd.append("--preload")
    cmd.append(app)
    log = tempfile.TemporaryFile()
    # cwd: not the checkout's root, whose slidewin/ (no built extension after a plain
    # `pip install .`) `python -m` would import first
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=HERE)
    proc.log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            out = log.read().decode(errors="replace")
            log.close()
            raise AssertionError("gunicorn exited: " + out)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        proc.wait(5)
        log.close()
        raise AssertionError("gunicorn did not start")
    time.sleep(0.5)  # let every worker boot (and attach) before the load starts
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    proc.log.close()  # type: ignore[attr-defined]


def load(port: int, seconds: float, threads: int = 6, cap: int = 4000):
    """Bounded load: `threads` clients, at most `cap` requests, for `seconds`."""
    results: list[tuple[int, bytes]] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client():
        while time.monotonic() < end:
            with lock:
                if len(results) >= cap:
                    return
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", "/")
                r = conn.getresponse()
                body = r.read()
                with lock:
                    results.append((r.status, body))
            finally:
                conn.close()

    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 30)
    return results


@pytest.mark.procs
@pytest.mark.parametrize("mode", ["named", "anonymous"])
def test_gunicorn_workers_share_one_limit(mode):
    if gunicorn is None:
        skip_unless_ci("gunicorn is not installed (it is in the test extra)")
    name = f"swtest-gunicorn-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, SLIDEWIN_TEST_REGION=name, SLIDEWIN_TEST_QPS=str(QPS),
               SLIDEWIN_TEST_MODE=mode, PYTHONPATH=os.pathsep.join(sys.path))
    port = free_port()
    proc = start(port, env, preload=(mode == "anonymous"))
    samples: list[float] = []
    try:
        watcher = slidewin.Limiter(qps=QPS, shared=name) if mode == "named" else None
        t0 = time.monotonic()
        done = threading.Event()

        def watch():
            while not done.is_set():
                samples.append(watcher.stats().pass_qps)
                time.sleep(0.02)

        w = threading.Thread(target=watch) if watcher is not None else None
        if w is not None:
            w.start()
        results = load(port, 3.0)
        done.set()
        if w is not None:
            w.join()
        elapsed = time.monotonic() - t0
    finally:
        stop(proc)
        slidewin.unlink(name)
    ok = [b for s, b in results if s == 200]
    limited = [b for s, b in results if s == 429]
    assert len(ok) + len(limited) == len(results)
    assert len(limited) > 0                                   # the load was above the limit
    # at most the limit per 1 s window: over `elapsed` seconds (plus the window in progress)
    windows = int(elapsed) + 2
    assert QPS <= len(ok) <= QPS * windows, (len(ok), elapsed)
    # more than one worker admitted requests: the limit really spans the processes
    assert len({b.split()[1] for b in ok}) >= 2
    if samples:
        assert max(samples) <= QPS                            # a sampled window, never above


@pytest.mark.procs
def test_django_project_limit_is_shared_by_two_gunicorn_workers():
    """settings.SLIDEWIN = {"rate": "10/minute", "shared": name} under gunicorn -w 2: the
    two workers admit 10 together (two private limits would admit 20), the refusals are
    429s from inside Django (the project's own middleware stamps them too)."""
    if gunicorn is None:
        skip_unless_ci("gunicorn is not installed (it is in the test extra)")
    pytest.importorskip("django")
    name = f"swtest-django-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, SLIDEWIN_TEST_REGION=name, SLIDEWIN_TEST_RATE="10/minute",
               DJANGO_SETTINGS_MODULE="apps.django_site",
               PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    port = free_port()
    proc = start(port, env, preload=False, app="apps.django_wsgi:application", workers=2)
    seen: list = []
    lock = threading.Lock()

    def client():
        for _ in range(10):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("GET", "/")
                r = conn.getresponse()
                r.read()
                with lock:
                    seen.append((r.status, r.getheader("X-Stamp"), r.getheader("Retry-After"),
                                 r.getheader("Content-Type")))
            finally:
                conn.close()

    extra: list = []
    try:
        ts = [threading.Thread(target=client) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        # The kernel may hand every connection to one worker, and on a loaded machine the
        # other may still be importing Django: ask on (each answer past the limit is a 429)
        # until the other worker has answered too, or for 30 s.
        stamps = {stamp for _, stamp, _, _ in seen if stamp}
        deadline = time.monotonic() + 30
        while len(stamps) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("GET", "/")
                r = conn.getresponse()
                r.read()
                extra.append((r.status, r.getheader("X-Stamp")))
                if r.getheader("X-Stamp"):
                    stamps.add(r.getheader("X-Stamp"))
            finally:
                conn.close()
    finally:
        stop(proc)
        slidewin.unlink(name)
    assert len(seen) == 40
    assert [s for s, *_ in seen].count(200) == 10  # one limit for both workers
    assert all(s == 429 for s, _ in extra)         # the limit stays spent for both
    refused = [x for x in seen if x[0] == 429]
    assert len(refused) == 30
    assert all(ra is not None and int(ra) >= 1 for _, _, ra, _ in refused)
    assert all(ct == "application/problem+json" for *_, ct in refused)
    assert len(stamps) == 2  # both workers answered
