"""What the web test apps share (tests/test_web_servers.py starts them in real servers).

Configuration comes from the environment, set by the test:
- SLIDEWIN_TEST_QPS_LIMIT: how many requests the qps limiter admits in its (one hour) window
- SLIDEWIN_TEST_REGION: a prefix for the shared regions (gunicorn: every worker attaches)
- SLIDEWIN_TEST_DIR: a folder for the lifespan log and the stream's go-ahead file
"""

import asyncio
import os
import time

import slidewin

HOUR_MS = 3_600_000
LIMIT = int(os.environ.get("SLIDEWIN_TEST_QPS_LIMIT", "20"))
DIR = os.environ.get("SLIDEWIN_TEST_DIR", ".")
REGION = os.environ.get("SLIDEWIN_TEST_REGION")


def hour_limiter(limit, **kw):
    """Admits exactly `limit` in a one-hour window (the test keeps clear of its edges)."""
    return slidewin.Limiter(limit * 1000 / HOUR_MS, interval_ms=HOUR_MS, sample_count=1, **kw)


def log(event):
    with open(os.path.join(DIR, "lifespan.log"), "a") as f:
        f.write("%s %d\n" % (event, os.getpid()))


def go_ahead_path():
    return os.path.join(DIR, "go")


def wait_go_ahead_sync(limit_s=20.0):
    """Block (a sync worker) until the test creates the go-ahead file."""
    end = time.monotonic() + limit_s
    while not os.path.exists(go_ahead_path()) and time.monotonic() < end:
        time.sleep(0.01)


async def wait_go_ahead(limit_s=20.0):
    end = time.monotonic() + limit_s
    while not os.path.exists(go_ahead_path()) and time.monotonic() < end:
        await asyncio.sleep(0.01)


def stats_of(lim):
    """The limiter's lifetime counts (a window's slide: a download slower than the window
    would have its pass gone from it by the time its success is counted)."""
    t = lim.totals()
    return {"pass": t["pass"], "block": t["block"], "success": t["success"],
            "in_flight": lim.in_flight}
