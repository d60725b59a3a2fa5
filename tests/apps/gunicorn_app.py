"""A WSGI app limited by one limiter shared by every gunicorn worker (tests/test_gunicorn.py).

SLIDEWIN_TEST_REGION names the region (named mode: every worker attaches to it); with
SLIDEWIN_TEST_MODE=anonymous the limiter is made with shared=True when gunicorn imports the
app in its master (--preload), so the workers forked after it share it.
"""

import os

import slidewin

QPS = float(os.environ.get("SLIDEWIN_TEST_QPS", "20"))
if os.environ.get("SLIDEWIN_TEST_MODE") == "anonymous":
    limiter = slidewin.Limiter(qps=QPS, shared=True)
else:
    limiter = slidewin.Limiter(qps=QPS, shared=os.environ["SLIDEWIN_TEST_REGION"])


def app(environ, start_response):
    if limiter.try_acquire():
        body = b"ok %d" % os.getpid()
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    body = b"too many requests"
    start_response("429 Too Many Requests", [("Content-Type", "text/plain"),
                                             ("Retry-After", "1"),
                                             ("Content-Length", str(len(body)))])
    return [body]
