"""A Starlette app behind slidewin.asgi.LimitMiddleware, served by uvicorn in the tests.

- app-wide: a qps limiter admitting LIMIT per hour (`app.add_middleware`-style), with
  /stats and the /stream mount exempt;
- /stream/: a route-level middleware (Mount(..., middleware=...)) with concurrency=1 over a
  StreamingResponse that sends a first chunk, then waits for the test's go-ahead file;
- lifespan: startup and shutdown are written to lifespan.log.
"""

import contextlib
import json

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from slidewin.asgi import LimitMiddleware

import slidewin
from apps.web_common import LIMIT, hour_limiter, log, stats_of, wait_go_ahead

qps = hour_limiter(LIMIT)
one_at_a_time = slidewin.Limiter(concurrency=1)


@contextlib.asynccontextmanager
async def lifespan(app):
    log("startup")
    yield
    log("shutdown")


async def home(request):
    return PlainTextResponse("ok")


async def stats(request):
    return Response(json.dumps({"qps": stats_of(qps), "stream": stats_of(one_at_a_time)}),
                    media_type="application/json")


async def stream(request):
    async def body():
        yield b"first "
        await wait_go_ahead()
        yield b"last"

    return StreamingResponse(body(), media_type="text/plain")


app = Starlette(
    routes=[
        Route("/", home),
        Route("/stats", stats),
        Mount("/stream", routes=[Route("/", stream)],
              middleware=[Middleware(LimitMiddleware, limiter=one_at_a_time)]),
    ],
    middleware=[Middleware(LimitMiddleware, limiter=qps, exempt=["/stats", "/stream/*"])],
    lifespan=lifespan,
)
