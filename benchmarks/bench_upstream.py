"""Calling a rate-limited API from 4 processes x 8 asyncio tasks: slidewin.Upstream under the
openai client, next to the peer stack and to the openai client's own retries.

The provider is tests/fake_provider.py on loopback: two buckets that refill continuously
(requests and tokens, OpenAI's model), each holding a tenth of its period's quota, with the
period scaled down from a minute to 10 s so that a run takes seconds (the same ratios as a
per-minute budget six times larger). It answers 429 with Retry-After when a bucket cannot
pay, after a 50 ms reply time. Every call sends a prompt of 10 tokens with max_tokens=50 and
uses 30 (10 + a 20-token reply): its estimate is 60, twice its use, so a stack that never
gives back unused estimates spends its token budget twice as fast as the provider does.

The calls: ``CALLS`` in all, 4 processes (fork) each running 8 tasks that call as fast as
they can (offered load far above the budget: 32 callers with 50 ms replies offer 640 calls/s,
the budget is 20). Stacks:

- slidewin: ``Upstream(requests=, tokens=, concurrency=8, shared=...)`` shared by the 4
  processes, under ``openai.AsyncOpenAI(http_client=httpx.AsyncClient(transport=
  AsyncLimitedTransport(api, tokens=estimate)), max_retries=2)`` (the transport retries
  429s; the client's own retries are left on for the 500s);
- peer stack, as their docs show: aiolimiter ``AsyncLimiter`` for requests and for tokens
  (per process, so a quarter of the budget each: aiolimiter cannot share across processes),
  tenacity ``@retry(wait=wait_random_exponential(min=1, max=60),
  stop=stop_after_attempt(6))`` on RateLimitError and 5xx, pybreaker ``CircuitBreaker(
  fail_max=5, reset_timeout=10)`` excluding RateLimitError; openai's retries off;
- openai alone: ``AsyncOpenAI(max_retries=2)`` (its default), no limiter.

Cases: the budget equal to the provider's; the budget configured 2x too high; 10% of the
provider's answers a transient 500 (budget equal). Measured: calls completed, 429s drawn
(and those after the first response), wall time against the theoretical minimum (the
tokens used beyond the bucket's first fill, at the provider's rate; the wall time is the
provider's, from the first call it admitted to the last), tokens charged by the
client's limiter against tokens used at the provider.

Run: ``python benchmarks/bench_upstream.py [--calls N] [--json PATH]``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
import uuid
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

PROCS, TASKS = 4, 8
PERIOD_S = 10
REQUESTS = 300       # per PERIOD_S: 30 requests/s
TOKENS = 6000        # per PERIOD_S: 600 tokens/s, 20 calls/s of 30 tokens
USED, ESTIMATE = 30, 60
MESSAGES = [{"role": "user", "content": "x" * 40}]


def estimate(request: Any) -> int:
    return ESTIMATE


# -- the stacks, one process each ---------------------------------------------------------


async def _slidewin(url: str, n: int, budget: float, shm: str) -> Dict[str, Any]:
    import httpx
    import openai

    from slidewin import Upstream
    from slidewin.httpx import AsyncLimitedTransport

    api = Upstream(requests="%d/%ds" % (REQUESTS * budget, PERIOD_S),
                   tokens="%d/%ds" % (TOKENS * budget, PERIOD_S), concurrency=8, shared=shm)
    client = openai.AsyncOpenAI(
        base_url=url + "/v1", api_key="bench", max_retries=2,
        http_client=httpx.AsyncClient(transport=AsyncLimitedTransport(
            api, tokens=estimate, deadline_s=120), timeout=120))
    ok = await _drive(n, lambda: client.chat.completions.create(
        model="fake", max_tokens=50, messages=MESSAGES))
    s = api.stats()
    await client.close()
    return {"ok": ok, "charged": s["estimated_tokens"] - s["refunded_tokens"]
            + s["charged_tokens"]}


async def _peers(url: str, n: int, budget: float, shm: str) -> Dict[str, Any]:
    import openai
    import pybreaker
    from aiolimiter import AsyncLimiter
    from tenacity import (retry, retry_if_exception_type, stop_after_attempt,
                          wait_random_exponential)

    rpm = AsyncLimiter(REQUESTS * budget / PROCS, PERIOD_S)
    tpm = AsyncLimiter(TOKENS * budget / PROCS, PERIOD_S)
    breaker = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=10,
                                       exclude=[openai.RateLimitError])
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="bench", max_retries=0)
    charged = [0]

    @retry(retry=retry_if_exception_type((openai.RateLimitError, openai.InternalServerError,
                                          pybreaker.CircuitBreakerError)),
           wait=wait_random_exponential(min=1, max=60), stop=stop_after_attempt(6))
    async def ask() -> Any:
        await tpm.acquire(ESTIMATE)
        async with rpm:
            charged[0] += ESTIMATE
            with breaker.calling():
                return await client.chat.completions.create(
                    model="fake", max_tokens=50, messages=MESSAGES)

    ok = await _drive(n, ask)
    await client.close()
    return {"ok": ok, "charged": charged[0]}


async def _openai(url: str, n: int, budget: float, shm: str) -> Dict[str, Any]:
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="bench", max_retries=2)
    ok = await _drive(n, lambda: client.chat.completions.create(
        model="fake", max_tokens=50, messages=MESSAGES))
    await client.close()
    return {"ok": ok, "charged": 0}


async def _drive(n: int, call: Any) -> int:
    """TASKS tasks sharing n calls; the calls that completed."""
    left = [n]
    done = [0]

    async def task() -> None:
        while left[0] > 0:
            left[0] -= 1
            try:
                await call()
                done[0] += 1
            except Exception:
                pass

    await asyncio.gather(*(task() for _ in range(TASKS)))
    return done[0]


STACKS = {"slidewin": _slidewin, "aiolimiter + tenacity + pybreaker": _peers,
          "openai client's retries": _openai}


def _worker(stack: str, url: str, n: int, budget: float, shm: str, q: Any) -> None:
    q.put(asyncio.run(STACKS[stack](url, n, budget, shm)))


def run_case(stack: str, calls: int, budget: float, fail_every: int) -> Dict[str, Any]:
    from fake_provider import FakeProvider

    shm = "bench-up-%s" % uuid.uuid4().hex[:8]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    with FakeProvider(requests=REQUESTS, tokens=TOKENS, period_s=PERIOD_S,
                      fail_every=fail_every, delay_s=0.05) as p:
        t0 = time.monotonic()
        procs = [ctx.Process(target=_worker, args=(stack, p.url, calls // PROCS, budget,
                                                   shm, q)) for _ in range(PROCS)]
        for pr in procs:
            pr.start()
        results = [q.get(timeout=600) for _ in procs]
        wall = time.monotonic() - t0
        for pr in procs:
            pr.join()
        log = list(p.log)
    _cleanup(shm)
    first = min((t for t, st, _ in log if st != 429), default=None)
    ok_times = [t for t, st, _ in log if st == 200]
    # the provider's span: from the first request it admitted to the last
    span = max(ok_times) - min(ok_times) if ok_times else 0.0
    used = sum(u for _, st, u in log if st == 200)
    ok = sum(r["ok"] for r in results)
    # the fastest possible: the tokens of every call beyond the bucket's first fill, at
    # the provider's token rate (tokens bind here: 20 calls/s against 30 requests/s)
    rate = TOKENS / PERIOD_S
    minimum = max(0.0, (calls * USED - TOKENS * 0.1) / rate)
    return {
        "stack": stack, "calls": calls, "completed": ok,
        "429": sum(1 for _, st, _u in log if st == 429),
        "429_after_first": sum(1 for t, st, _u in log if st == 429 and first is not None
                               and t > first),
        "500": sum(1 for _, st, _u in log if st == 500),
        "wall_s": span, "run_s": wall, "min_s": minimum,
        "x_min": span / minimum if minimum else None,
        "charged": sum(r["charged"] for r in results), "used": used,
    }


def _cleanup(shm: str) -> None:
    import slidewin
    for what in ("requests", "tokens", "concurrency"):
        try:
            slidewin.unlink("upstream-%s.%s" % (shm, what))
        except OSError:
            pass
    try:
        os.unlink("/dev/shm/slidewin-upstream-%s" % shm)
    except OSError:
        pass


CASES = [("budget = provider's", 1.0, 0), ("budget 2x too high", 2.0, 0),
         ("10% transient 500s", 1.0, 10)]


def table(rows: List[Dict[str, Any]]) -> str:
    out = ["| case | stack | completed | 429s (after 1st response) | 500s | wall s | "
           "x minimum | tokens charged / used |",
           "| :--- | :--- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append("| %s | %s | %d / %d | %d (%d) | %d | %.1f | %s | %s |" % (
            r["case"], r["stack"], r["completed"], r["calls"], r["429"], r["429_after_first"],
            r["500"], r["wall_s"], "%.2fx" % r["x_min"] if r["x_min"] else "-",
            "%d / %d" % (r["charged"], r["used"]) if r["charged"] else "- / %d" % r["used"]))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=240)
    ap.add_argument("--json")
    ap.add_argument("--stacks", default=",".join(STACKS))
    ap.add_argument("--cases", default="0,1,2")
    args = ap.parse_args()
    import openai  # noqa: F401  (imported once, before the processes fork)

    import slidewin  # noqa: F401

    rows = []
    for ci in [int(c) for c in args.cases.split(",")]:
        name, budget, fail = CASES[ci]
        for stack in args.stacks.split(","):
            r = run_case(stack, args.calls, budget, fail)
            r["case"] = name
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
