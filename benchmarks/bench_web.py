"""The web middleware's cost per request, against the same app without it.

    python benchmarks/bench_web.py            # ~20 s
    python benchmarks/bench_web.py --quick    # smoke run, ~5 s

1. In process: a minimal ASGI app driven directly (one event loop, no server, no sockets),
   with and without slidewin.asgi.LimitMiddleware; the same for WSGI (call, iterate,
   close). The difference is the middleware's cost in µs per request. Every case is timed
   once per round, rounds round-robin with the order rotated; the median of the rounds.
2. A real server: uvicorn (one process, httptools if installed) serving that minimal app on
   loopback, with and without the middleware; one keep-alive client sends a bounded number
   of requests one after the other; the median latency per request.

The target: the middleware's cost under 2% of a minimal uvicorn request. The
comparison printed at the end is (1)'s cost over (2)'s bare latency. (2)'s own difference is
shown too, but is mostly noise: the cost is far below the run-to-run spread of a request.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

import slidewin
from slidewin import Limiter
from slidewin.asgi import LimitMiddleware as AsgiLimit
from slidewin.wsgi import LimitMiddleware as WsgiLimit

HERE = os.path.dirname(os.path.abspath(__file__))
BIG = 10**9  # limits far above the load: every request is admitted

# ---- the minimal apps -----------------------------------------------------------------------

START = {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]}
BODY = {"type": "http.response.body", "body": b"ok"}


async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
    await send(START)
    await send(BODY)


def wsgi_app(environ: Any, start_response: Any) -> Any:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def asgi_cases() -> Dict[str, Any]:
    return {
        "bare app": asgi_app,
        "Limiter(qps)": AsgiLimit(asgi_app, Limiter(BIG)),  # with the RateLimit fields
        "Limiter(qps), headers=False": AsgiLimit(asgi_app, Limiter(BIG), headers=False),
        "Limiter(concurrency), no fields": AsgiLimit(
            asgi_app, Limiter(concurrency=BIG), headers=False),
        "Limiter(qps, throttle), no fields": AsgiLimit(
            asgi_app, Limiter(BIG, behavior="throttle", max_queueing_ms=10_000),
            headers=False),
        "Limiter(qps, shared=), no fields": AsgiLimit(
            asgi_app, Limiter(BIG, shared="bench-web-%d" % os.getpid()), headers=False),
    }


def wsgi_cases() -> Dict[str, Any]:
    return {
        "bare app": wsgi_app,
        "Limiter(qps)": WsgiLimit(wsgi_app, Limiter(BIG)),  # with the RateLimit fields
        "Limiter(qps), headers=False": WsgiLimit(wsgi_app, Limiter(BIG), headers=False),
        "Limiter(concurrency), no fields": WsgiLimit(
            wsgi_app, Limiter(concurrency=BIG), headers=False),
    }


# ---- 1. in process ---------------------------------------------------------------------------

SCOPE = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
         "http_version": "1.1", "method": "GET", "path": "/", "raw_path": b"/",
         "query_string": b"", "headers": [(b"host", b"localhost")],
         "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000), "scheme": "http"}
REQUEST = {"type": "http.request", "body": b"", "more_body": False}


async def _receive() -> Any:
    return REQUEST


async def _send(message: Any) -> None:
    return None


def time_asgi(app: Any, n: int) -> float:
    """ns per request: n requests through `app` on one loop."""

    async def loop() -> int:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            await app(SCOPE, _receive, _send)
        return time.perf_counter_ns() - t0

    gc.disable()
    try:
        return asyncio.run(loop()) / n
    finally:
        gc.enable()


def time_wsgi(app: Any, n: int) -> float:
    environ = {"wsgi.version": (1, 0), "REQUEST_METHOD": "GET", "PATH_INFO": "/",
               "REMOTE_ADDR": "127.0.0.1"}

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        return None

    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            result = app(environ, start_response)
            for _chunk in result:
                pass
            close = getattr(result, "close", None)
            if close is not None:
                close()
        return (time.perf_counter_ns() - t0) / n
    finally:
        gc.enable()


def rounds(cases: Dict[str, Any], timer: Callable[[Any, int], float], n: int,
           repeats: int) -> Dict[str, float]:
    names = list(cases)
    samples: Dict[str, List[float]] = {k: [] for k in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            samples[k].append(timer(cases[k], n))
    return {k: statistics.median(v) for k, v in samples.items()}


# ---- 2. uvicorn ------------------------------------------------------------------------------

SERVER_APP = '''
import os
from slidewin import Limiter
from slidewin.asgi import LimitMiddleware

START = {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]}
BODY = {"type": "http.response.body", "body": b"ok"}

async def bare(scope, receive, send):
    if scope["type"] != "http":
        return
    await send(START)
    await send(BODY)

limited = LimitMiddleware(bare, Limiter(10**9))
app = limited if os.environ.get("BENCH_LIMITED") == "1" else bare
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def uvicorn_latency(limited: bool, requests: int, folder: str) -> Tuple[float, float]:
    """(median, mean) µs per request of one keep-alive client, sequential requests."""
    port = free_port()
    env = dict(os.environ, BENCH_LIMITED="1" if limited else "0",
               PYTHONPATH=os.pathsep.join([folder] + sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--no-access-log", "--lifespan", "off", "bench_web_app:app"],
        env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("uvicorn did not start")
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        lat: List[float] = []
        for i in range(requests + requests // 10):  # the first tenth warms up
            t0 = time.perf_counter_ns()
            conn.request("GET", "/")
            r = conn.getresponse()
            r.read()
            if i >= requests // 10:
                lat.append((time.perf_counter_ns() - t0) / 1000)
        conn.close()
        return statistics.median(lat), statistics.fmean(lat)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- main -------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run")
    args = ap.parse_args()
    n, repeats, reqs, server_rounds = (
        (2_000, 3, 300, 1) if args.quick else (50_000, 7, 3_000, 3))

    print("slidewin %s, Python %s" % (slidewin.__version__, sys.version.split()[0]))
    print("\n1. In process: µs per request (median of %d rounds of %d requests)" % (repeats, n))
    results = {}
    for label, cases, timer in (("ASGI", asgi_cases(), time_asgi),
                                ("WSGI", wsgi_cases(), time_wsgi)):
        got = rounds(cases, timer, n, repeats)
        bare = got["bare app"]
        print("\n  %-28s %10s %12s" % (label, "µs/request", "middleware"))
        for k, v in got.items():
            extra = "" if k == "bare app" else "%+9.2f µs" % ((v - bare) / 1000)
            print("  %-28s %10.2f %12s" % (k, v / 1000, extra))
        results[label] = got
    slidewin.unlink("bench-web-%d" % os.getpid())  # the shared= case's region

    try:
        import uvicorn  # noqa: F401
    except ImportError:
        print("\n2. uvicorn is not installed: skipped (pip install uvicorn)")
        return
    print("\n2. uvicorn, one keep-alive client, %d sequential requests, %d rounds"
          % (reqs, server_rounds))
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "bench_web_app.py"), "w") as f:
            f.write(SERVER_APP)
        med: Dict[bool, List[float]] = {False: [], True: []}
        for _ in range(server_rounds):
            for limited in (False, True):
                med[limited].append(uvicorn_latency(limited, reqs, folder)[0])
    bare_us = statistics.median(med[False])
    lim_us = statistics.median(med[True])
    print("  bare app                     %8.1f µs/request (median; rounds: %s)"
          % (bare_us, ", ".join("%.1f" % x for x in med[False])))
    print("  with LimitMiddleware         %8.1f µs/request (median; rounds: %s)"
          % (lim_us, ", ".join("%.1f" % x for x in med[True])))

    asgi = results["ASGI"]
    cost = (asgi["Limiter(qps)"] - asgi["bare app"]) / 1000
    cost_c = (asgi["Limiter(concurrency), no fields"] - asgi["bare app"]) / 1000
    print("\nMiddleware cost / a minimal uvicorn request: Limiter(qps) %.2f µs = %.2f%%, "
          "Limiter(concurrency) %.2f µs = %.2f%% of %.1f µs (target: < 2%%)"
          % (cost, 100 * cost / bare_us, cost_c, 100 * cost_c / bare_us, bare_us))


if __name__ == "__main__":
    main()
