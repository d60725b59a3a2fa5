"""A limiter in front of any ASGI 3 app (Starlette, FastAPI, Django's ASGI handler, plain ASGI).

    from slidewin.asgi import LimitMiddleware
    app = LimitMiddleware(app, Limiter(qps=100))
    app.add_middleware(LimitMiddleware, limiter=KeyedLimiter(qps=10))   # Starlette, FastAPI

Only ``http`` scopes are limited. A refused request gets 429 (503 from a concurrency limit)
with ``Retry-After``, and the app is not called; a throttled one waits with
``asyncio.sleep``. An admission is held until the response is finished. See docs/web.md.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import (
    Any,
    Awaitable,
    Callable,
    Generator,
    List,
    MutableMapping,
    Tuple,
)

from . import _core, _io, _routes, _web

__all__ = ["LimitMiddleware", "Scope", "Message", "Receive", "Send", "ASGIApp"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class LimitMiddleware(_web.Middleware):
    """A limiter in front of an ASGI app.

    - ``limiter``: a Limiter, a KeyedLimiter, or anything with the same ``entry()``; across
      hosts an asyncio one (``AsyncRedisLimiter``, ``AsyncRedisKeyedLimiter``).
    - ``key(scope)``: a KeyedLimiter's key (str, bytes or int; None: unlimited); the
      default is the peer address, ``slidewin.client_ip(scope)``. A Limiter takes no key.
    - ``exempt``: a predicate ``exempt(scope)``, or paths (``"/health"``, ``"/static/*"``).
    - ``status`` / ``concurrency_status``: the refusals' statuses (400..599).
    - ``body`` / ``content_type``: the refusals' body; the default is an RFC 9457 problem
      document (``application/problem+json``).
    - ``on_block(error, scope)``, sync or async, called on each refusal: returns None (the
      refusal as configured), ``(status, headers, body)`` (None keeps the refusal's status /
      body), or an ASGI app to answer. Retry-After and RateLimit fields are added unless set.
    - ``headers``: the RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-10)
      on limited responses; ``headers=False`` leaves them out.
    """

    app: ASGIApp
    _APP = "an ASGI app"
    _ASYNC = True
    _ARG = "scope"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limited, k = self._limited_key(scope, scope.get("path", ""))
        if not limited:
            return await self.app(scope, receive, send)
        entry, admission = self._entry(scope, k)
        try:
            w = _io.ASYNC.enter(entry)()  # a C decision that never sleeps: no coroutine
            if inspect.isawaitable(w):
                await w
        except (_core.BlockedError, _routes.Refused) as exc:  # the limiter's, an Admission's
            app, code, hdrs, raw = await _io.arun(self._refusing(scope, exc, k))
            if app is not None:
                await app(scope, receive, _adding(send, hdrs))  # on_block's response
            else:
                await send({"type": "http.response.start", "status": code,
                            "headers": _encode(hdrs)})
                await send({"type": "http.response.body", "body": raw, "more_body": False})
            return
        fields = self._admitted_fields(admission, k)

        # held until the response is finished; `done` makes the exit happen once. finish()
        # exits a slidewin Limiter at once (a C call) and returns what is left to await:
        # the __aexit__ of any other limiter, else _DONE (no coroutine made)
        done = False

        def finish(exc_type: Any) -> Awaitable[Any]:
            nonlocal done
            if done:
                return _DONE
            done = True
            w = _io.ASYNC.exit(entry, exc_type)()
            return w if inspect.isawaitable(w) else _DONE

        extra = _encode(fields) if fields else None

        async def send_wrapper(message: Message) -> None:
            kind = message["type"]
            if extra is not None and kind == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers") or ()) + extra
            try:
                await send(message)
            except BaseException:
                if kind in ("http.response.start", "http.response.body"):
                    # the client is gone: the app did not fail
                    await finish(asyncio.CancelledError)
                raise
            if kind == "http.response.body" and not message.get("more_body", False):
                await finish(None)

        async def receive_wrapper() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                await finish(asyncio.CancelledError)
            return message

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        except BaseException as exc:
            await finish(type(exc))
            raise
        await finish(None)

    def _route_limits(self, scope: Scope) -> Tuple[Tuple[Any, ...], Any]:
        if not _routes.ASGI_ROUTES[0]:
            return (), None
        found = _routes.starlette_limits(scope, self.app)
        for r in found:
            if r.key is not None:  # a key function: it is given a Starlette request
                from starlette.requests import Request

                return found, Request(scope)
        return found, None


class _Done:
    """An awaitable already done."""

    def __await__(self) -> Generator[Any, None, None]:
        yield from ()


_DONE = _Done()


def _adding(send: Send, fields: List[Tuple[str, str]]) -> Send:
    """send, adding to the response's start the refusal's fields it does not set."""

    async def adding(message: Message) -> None:
        if message["type"] == "http.response.start" and fields:
            present = [k.decode("latin-1") for k, _ in message.get("headers") or ()]
            extra = _web.missing_fields(present, fields)
            if extra:
                message = dict(message)
                message["headers"] = list(message.get("headers") or ()) + _encode(extra)
        await send(message)

    return adding


def _encode(headers: List[Tuple[str, str]]) -> List[Tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
