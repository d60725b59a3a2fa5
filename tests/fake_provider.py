"""A fake LLM provider on loopback that enforces its own limits, for the Upstream tests and
benchmarks/bench_upstream.py: a real HTTP server (stdlib ThreadingHTTPServer, HTTP/1.1
keep-alive) on a free port.

Its limits are two buckets (requests and tokens) that refill continuously, as OpenAI
documents its own: ``limit`` per ``period_s``, holding at most ``limit * quantum`` (a burst
of a tenth of the period's quota by default: providers enforce per-minute limits over
shorter spans). A request takes 1 request and the tokens it uses (the prompt's characters /
4 plus the reply's length, at most its ``max_tokens``) when it arrives; when a bucket cannot
pay, the answer is 429 with ``retry-after`` (whole seconds, rounded up), ``retry-after-ms``
and the rate-limit headers. Every answer carries the headers of its style: OpenAI's
``x-ratelimit-*`` (resets as durations, the time until the bucket is full) or Anthropic's
``anthropic-ratelimit-*`` (RFC 3339 resets), or none (``"bare"``). ``fail_every``: every n-th request that is
admitted answers 500 (a transient error). Endpoints: POST /v1/chat/completions (OpenAI's
shape) and POST /v1/messages (Anthropic's).
"""
from __future__ import annotations

import json
import math
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

REPLY_TOKENS = 20  # a reply's length in tokens (at most the request's max_tokens)


def prompt_tokens(body: Dict[str, Any]) -> int:
    msgs = body.get("messages") or []
    chars = sum(len(m.get("content") or "") for m in msgs if isinstance(m, dict))
    return chars // 4


def _duration(s: float) -> str:
    """OpenAI's style: "20ms", "1.5s", "6m0s"."""
    if s < 1:
        return "%dms" % max(0, math.ceil(s * 1000))
    if s < 60:
        return "%.3gs" % s
    return "%dm%ds" % (s // 60, s % 60)


class _Bucket:
    def __init__(self, limit: int, period_s: float, quantum: float) -> None:
        self.limit = limit
        self.rate = limit / period_s
        self.cap = max(1.0, limit * quantum)
        self.level = self.cap
        self.t = time.monotonic()

    def _fill(self, now: float) -> None:
        self.level = min(self.cap, self.level + (now - self.t) * self.rate)
        self.t = now

    def wait_for(self, n: float, now: float) -> float:
        self._fill(now)
        return 0.0 if self.level >= n else (n - self.level) / self.rate

    def take(self, n: float) -> None:
        self.level -= n

    def reset_s(self) -> float:
        return (self.cap - self.level) / self.rate


class FakeProvider:
    """``with FakeProvider(requests=600, tokens=60000, period_s=10) as p: p.url``."""

    def __init__(self, *, requests: int, tokens: int, period_s: float = 60.0,
                 quantum: float = 0.1, style: str = "openai", fail_every: int = 0,
                 delay_s: float = 0.0) -> None:
        self.req = _Bucket(requests, period_s, quantum)
        self.tok = _Bucket(tokens, period_s, quantum)
        self.style = style
        self.fail_every = fail_every
        self.delay_s = delay_s
        self.mu = threading.Lock()
        self.log: List[Tuple[float, int, int]] = []  # (time, status, tokens charged)
        self.admitted = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                status, headers, doc = provider.answer(self.path, body)
                data = json.dumps(doc).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "FakeProvider":
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _headers(self) -> Dict[str, str]:
        h: Dict[str, str] = {}
        if self.style == "bare":  # no rate-limit headers (Retry-After on a 429 only)
            return h
        wall = time.time()
        for name, b in (("requests", self.req), ("tokens", self.tok)):
            remaining = str(max(0, int(b.level)))
            if self.style == "anthropic":
                reset = datetime.fromtimestamp(wall + b.reset_s(), timezone.utc)
                h["anthropic-ratelimit-%s-limit" % name] = str(b.limit)
                h["anthropic-ratelimit-%s-remaining" % name] = remaining
                h["anthropic-ratelimit-%s-reset" % name] = reset.isoformat().replace(
                    "+00:00", "Z")
            else:
                h["x-ratelimit-limit-%s" % name] = str(b.limit)
                h["x-ratelimit-remaining-%s" % name] = remaining
                h["x-ratelimit-reset-%s" % name] = _duration(b.reset_s())
        return h

    def answer(self, path: str, body: Dict[str, Any]) -> Tuple[int, Dict[str, str], Any]:
        max_tokens = body.get("max_tokens") or REPLY_TOKENS
        reply = min(REPLY_TOKENS, int(max_tokens))
        prompt = prompt_tokens(body)
        used = prompt + reply
        with self.mu:
            now = time.monotonic()
            wait = max(self.req.wait_for(1, now), self.tok.wait_for(used, now))
            if wait > 0:
                headers = self._headers()
                headers["retry-after"] = str(max(1, math.ceil(wait)))
                headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
                self.log.append((now, 429, 0))
                return 429, headers, {"error": {"type": "rate_limit_error",
                                                "message": "rate limit reached"}}
            self.req.take(1)
            self.tok.take(used)
            self.admitted += 1
            failed = self.fail_every and self.admitted % self.fail_every == 0
            headers = self._headers()
            self.log.append((now, 500 if failed else 200, used))
        if self.delay_s:
            time.sleep(self.delay_s)
        if failed:
            return 500, headers, {"error": {"type": "server_error", "message": "try again"}}
        if path.endswith("/messages"):
            return 200, headers, {
                "id": "msg_1", "type": "message", "role": "assistant", "model": "fake",
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": reply}}
        return 200, headers, {
            "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
            "model": "fake", "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": reply,
                      "total_tokens": used}}

    def counts(self) -> Dict[str, int]:
        with self.mu:
            log = list(self.log)
        return {"ok": sum(1 for e in log if e[1] == 200),
                "429": sum(1 for e in log if e[1] == 429),
                "500": sum(1 for e in log if e[1] == 500),
                "tokens": sum(e[2] for e in log)}
