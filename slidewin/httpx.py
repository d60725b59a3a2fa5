"""slidewin.httpx: an ``Upstream`` under an httpx client.

``LimitedTransport`` / ``AsyncLimitedTransport`` wrap httpx's own transports: each request
waits its turn on the upstream (paced, a free slot, no pause), is sent, and its response
observed (status, rate-limit headers, and the tokens of a JSON body's ``usage``); a 429 or
503 is retried after the pause it started, at most ``retries`` times and never past
``deadline_s`` from the first attempt, then the last response is returned. Other responses
are returned as they came. Works under the ``openai`` and ``anthropic`` clients
(``http_client=httpx.Client(transport=...)``, with their own retries off: ``max_retries=0``).
"""
from __future__ import annotations

import functools
import itertools
import json
import sys
import time
from types import ModuleType
from typing import Any, Callable, Optional

import httpx

from . import _core, _io
from ._upstream import Upstream, _check_int

__all__ = ["LimitedTransport", "AsyncLimitedTransport"]

_RETRY = (429, 503)
_MAX_JSON = 8 << 20  # a body longer than this is not parsed for its usage


def _used_tokens(body: Optional[bytes]) -> Optional[int]:
    """The tokens a JSON reply says it used: OpenAI's ``usage.total_tokens``, Anthropic's
    ``usage.input_tokens + usage.output_tokens``; None when absent or malformed."""
    if not body or len(body) > _MAX_JSON:
        return None
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    usage = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(usage, dict):
        return None
    for parts in ((usage.get("total_tokens"),),
                  (usage.get("input_tokens"), usage.get("output_tokens"))):
        if all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            return sum(parts)  # type: ignore[arg-type]
    return None


class _Limited:
    """What the sync and async transports share: the arguments, the estimate, what a
    response means (observe, retry or not)."""

    _flavour: Any = _io.SYNC  # the flavour of the transport's I/O
    # the class of httpx the wrapped transport is, and the one it wraps by default
    _BASE, _DEFAULT = "BaseTransport", "HTTPTransport"

    def __init__(self, upstream: Upstream, *,
                 tokens: Optional[Callable[[httpx.Request], int]] = None, retries: int = 3,
                 deadline_s: float = 60, transport: Optional[Any] = None) -> None:
        if not isinstance(upstream, Upstream):
            raise TypeError("upstream must be a slidewin.Upstream, not %s"
                            % type(upstream).__name__)
        if tokens is not None and not callable(tokens):
            raise TypeError("tokens must be None or a function of the httpx.Request returning "
                            "the estimate, not %s" % type(tokens).__name__)
        _check_int("retries", retries, 0, optional=False)
        if isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float)):
            raise TypeError("deadline_s must be a number of seconds, not %s"
                            % type(deadline_s).__name__)
        if not deadline_s > 0:
            raise ValueError("deadline_s must be > 0 seconds, got %r" % (deadline_s,))
        if transport is None:
            transport = getattr(httpx, self._DEFAULT)()
        # the package of the transport's class, httpx or its fork httpx2 that anthropic 2.x
        # uses: its Responses are built
        mods = [m for m in map(sys.modules.get, ("httpx", "httpx2"))
                if m is not None and isinstance(transport, getattr(m, self._BASE))]
        if not mods:
            raise TypeError("transport must be None or an httpx.%s (httpx2's too), not %s"
                            % (self._BASE, type(transport).__name__))
        self._h: ModuleType = mods[0]
        self.transport = transport
        self.upstream = upstream
        self._estimate = tokens
        self.retries = retries
        self.deadline_s = float(deadline_s)

    # each flavour's own: a read of the raw body
    _read_raw: Callable[[httpx.Response], Any]

    def _attempts(self, request: httpx.Request, send: Callable[[httpx.Request], Any]
                  ) -> _io.Steps:
        """The request sent (by `send`, the wrapped transport's) through the upstream,
        retried after a 429/503; its I/O yielded."""
        io = self._flavour
        start = time.monotonic()
        n = 0 if self._estimate is None else self._estimate(request)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError("the tokens function returned %r: it must return an int >= 0"
                             % (n,))
        last: Optional[httpx.Response] = None
        for attempt in itertools.count():
            try:
                call = self.upstream.call(tokens=n, timeout=self._left(start))
                yield io.enter(call)
            except _core.BlockedError:
                if last is not None:
                    return last
                raise
            try:
                response = yield functools.partial(send, request)
                body = None
                kind = str(response.headers.get("content-type", "")).split(";")[0]
                if response.status_code in _RETRY or kind.strip().lower().endswith("json"):
                    try:
                        body = response.content  # one built in memory is read already
                    except self._h.ResponseNotRead:
                        pass
                    if body is None:
                        # read here for its usage: the client gets a fresh response of the
                        # same bytes as they came (still encoded)
                        raw = yield functools.partial(self._read_raw, response)
                        h = self._h
                        response = h.Response(response.status_code, headers=response.headers,
                                              stream=h.ByteStream(raw), request=request,
                                              extensions=response.extensions)
                        try:
                            body = h.Response(response.status_code, headers=response.headers,
                                              content=raw).read()
                        except h.DecodingError:
                            body = b""
                call.observe(response.status_code, response.headers.multi_items(),
                             tokens=_used_tokens(body))
            except BaseException as e:
                call.__exit__(type(e), e, e.__traceback__)
                raise
            call.__exit__(None, None, None)
            # sent again after a 429/503 (the next call() waits the pause it started) while
            # retries and time are left
            if (response.status_code not in _RETRY or attempt >= self.retries
                    or (self.upstream.paused_until() or 0.0) >= self._left(start)):
                return response
            self.upstream._count("retried")
            last = response

    def _left(self, start: float) -> float:
        return max(0.0, self.deadline_s - (time.monotonic() - start))


class LimitedTransport(httpx.BaseTransport, _Limited):  # _Limited's flavour: sync
    """An httpx transport sending through an ``Upstream``:
    ``httpx.Client(transport=LimitedTransport(api, tokens=estimate))``.

    ``tokens``: a function of the ``httpx.Request`` returning the estimate (default 0);
    ``retries``: 429/503 responses sent again (after the pause); ``deadline_s``: no attempt
    starts later than this after the first; ``transport``: the wrapped transport (default
    ``httpx.HTTPTransport()``; an ``httpx2`` one, as anthropic 2.x uses, works alike). A
    request that cannot start in time raises ``BlockedError``
    (or, after a retried response, that response is returned)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._flavour.run(  # type: ignore[no-any-return]
            self._attempts(request, self.transport.handle_request))

    def _read_raw(self, response: httpx.Response) -> bytes:
        try:
            return b"".join(response.iter_raw())
        finally:
            response.close()

    def close(self) -> None:
        self.transport.close()


class AsyncLimitedTransport(httpx.AsyncBaseTransport, _Limited):
    """``LimitedTransport`` for ``httpx.AsyncClient`` (wrapping
    ``httpx.AsyncHTTPTransport()`` by default); waits with asyncio."""

    _flavour = _io.ASYNC
    _BASE, _DEFAULT = "AsyncBaseTransport", "AsyncHTTPTransport"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._flavour.run(  # type: ignore[no-any-return]
            self._attempts(request, self.transport.handle_async_request))

    async def _read_raw(self, response: httpx.Response) -> bytes:
        try:
            return b"".join([part async for part in response.aiter_raw()])
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()
