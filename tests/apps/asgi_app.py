"""A plain ASGI app (no framework) behind slidewin.asgi.LimitMiddleware, served by uvicorn
(with --no-proxy-headers: the middleware reads X-Forwarded-For itself).

- /qps: a qps limiter admitting LIMIT per hour;
- /peer: a per-client limit (1 per hour per key) keyed by the default key, the peer address;
- /proxied: the same keyed by client_ip(scope, trusted_proxies=("127.0.0.1",)): the test
  connects from 127.0.0.1, acting as the proxy;
- /forwarded: the same keyed by client_ip(scope, trusted_proxies="unix", header="forwarded"):
  served on a Unix socket (uvicorn --uds), the test acts as the proxy writing Forwarded;
- /stats: the limiters' counts, unlimited; lifespan writes lifespan.log.
"""

import json

import slidewin
from slidewin.asgi import LimitMiddleware

from slidewin import KeyedLimiter
from apps.web_common import HOUR_MS, LIMIT, hour_limiter, log, stats_of

qps = hour_limiter(LIMIT)
per_peer = KeyedLimiter(1000 / HOUR_MS, interval_ms=HOUR_MS, sample_count=1)
per_client = KeyedLimiter(1000 / HOUR_MS, interval_ms=HOUR_MS, sample_count=1)
per_forwarded = KeyedLimiter(1000 / HOUR_MS, interval_ms=HOUR_MS, sample_count=1)


async def text(send, body, status=200):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


async def hello(scope, receive, send):
    await text(send, b"ok")


async def whoami(scope, receive, send):
    ip = slidewin.client_ip(scope, trusted_proxies=("127.0.0.1",))
    await text(send, ip.encode())


async def forwarded_for(scope, receive, send):
    ip = slidewin.client_ip(scope, trusted_proxies="unix", header="forwarded")
    await text(send, ip.encode())


routes = {
    "/qps": LimitMiddleware(hello, qps),
    "/peer": LimitMiddleware(whoami, per_peer),
    "/proxied": LimitMiddleware(
        whoami, per_client,
        key=lambda scope: slidewin.client_ip(scope, trusted_proxies=("127.0.0.1",))),
    "/forwarded": LimitMiddleware(
        forwarded_for, per_forwarded,
        key=lambda scope: slidewin.client_ip(scope, trusted_proxies="unix", header="forwarded")),
}


async def lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            log("startup")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            log("shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    path = scope["path"]
    if path == "/stats":
        return await text(send, json.dumps({"qps": stats_of(qps)}).encode())
    route = routes.get(path)
    if route is None:
        return await text(send, b"not found", 404)
    await route(scope, receive, send)
