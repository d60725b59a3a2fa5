"""A Flask app behind slidewin.wsgi.LimitMiddleware, served by gunicorn (2 sync workers).

The limiters are shared by name (SLIDEWIN_TEST_REGION prefix), so the workers together admit
exactly what one limiter would:
- every path but /stream and /stats: a qps limiter admitting LIMIT per hour;
- /stream: concurrency=1 over a generator response that sends a first chunk, then waits for
  the test's go-ahead file;
- /file: concurrency=2 over Flask's send_file of the test's big.bin (the server's
  wsgi.file_wrapper, which gunicorn sends with sendfile: each call of socket.sendfile is
  logged to sendfile.log).
"""

import json
import os
import socket

from flask import Flask, Response, send_file

import slidewin
from slidewin.wsgi import LimitMiddleware

from apps.web_common import DIR, LIMIT, REGION, hour_limiter, stats_of, wait_go_ahead_sync

qps = hour_limiter(LIMIT, shared=REGION + "-qps")
one_at_a_time = slidewin.Limiter(concurrency=1, shared=REGION + "-stream")
downloads = slidewin.Limiter(concurrency=2, shared=REGION + "-file")

_sendfile = socket.socket.sendfile


def _logged_sendfile(self, file, offset=0, count=None):
    sent = _sendfile(self, file, offset, count)
    with open(os.path.join(DIR, "sendfile.log"), "a") as f:
        f.write("%d %d\n" % (os.getpid(), sent))
    return sent


socket.socket.sendfile = _logged_sendfile  # type: ignore[method-assign]

app = Flask(__name__)


@app.route("/")
def home():
    return "ok"


@app.route("/stats")
def stats():
    return Response(json.dumps({"qps": stats_of(qps), "stream": stats_of(one_at_a_time),
                                "file": stats_of(downloads)}),
                    mimetype="application/json")


@app.route("/file")
def file():
    return send_file(os.path.join(DIR, "big.bin"), mimetype="application/octet-stream")


@app.route("/stream")
def stream():
    def body():
        yield b"first "
        wait_go_ahead_sync()
        yield b"last"

    return Response(body(), mimetype="text/plain")


# the Flask way (werkzeug's ProxyFix pattern), stacked: one limiter for /file only, one for
# /stream only, one for the rest
app.wsgi_app = LimitMiddleware(  # type: ignore[method-assign]
    LimitMiddleware(
        LimitMiddleware(app.wsgi_app, downloads, headers=True,
                        exempt=lambda environ: environ.get("PATH_INFO") != "/file"),
        one_at_a_time, exempt=lambda environ: environ.get("PATH_INFO") != "/stream"),
    qps, exempt=["/stream", "/stats", "/file"])
