"""A Flask app behind slidewin.wsgi.LimitMiddleware, served by gunicorn (2 sync workers).

The limiters are shared by name (SLIDEWIN_TEST_REGION prefix), so the workers together admit
exactly what one limiter would:
- every path but /stream and /stats: a qps limiter admitting LIMIT per hour;
- /stream: concurrency=1 over a generator response that sends a first chunk, then waits for
  the test's go-ahead file.
"""

import json

from flask import Flask, Response

import slidewin
from slidewin.wsgi import LimitMiddleware

from apps.web_common import LIMIT, REGION, hour_limiter, stats_of, wait_go_ahead_sync

qps = hour_limiter(LIMIT, shared=REGION + "-qps")
one_at_a_time = slidewin.Limiter(concurrency=1, shared=REGION + "-stream")

app = Flask(__name__)


@app.route("/")
def home():
    return "ok"


@app.route("/stats")
def stats():
    return Response(json.dumps({"qps": stats_of(qps), "stream": stats_of(one_at_a_time)}),
                    mimetype="application/json")


@app.route("/stream")
def stream():
    def body():
        yield b"first "
        wait_go_ahead_sync()
        yield b"last"

    return Response(body(), mimetype="text/plain")


# the Flask way (werkzeug's ProxyFix pattern), stacked: one limiter for /stream only, one for
# the rest
app.wsgi_app = LimitMiddleware(  # type: ignore[method-assign]
    LimitMiddleware(app.wsgi_app, one_at_a_time,
                    exempt=lambda environ: environ.get("PATH_INFO") != "/stream"),
    qps, exempt=["/stream", "/stats"])
