import asyncio
from typing import List
import slidewin
from slidewin import Limiter, Metric, Event, BlockedError, limit, Bucket

m = Metric(1000, 2)
m.add(Event.PASS, 3, now_ns=100 * 10**6)
total: int = m.sum("pass")
bs: List[Bucket] = m.buckets()
lim = Limiter(qps=100, behavior="throttle", max_queueing_ms=500)
ok: bool = lim.try_acquire()
w = lim.reserve(2, now_ns=5)
with lim.entry():
    pass
gate = Limiter(concurrency=4)
with gate.entry(1, timeout=0.5) as waited:
    t_out: "float | None" = waited.timeout


@gate(timeout=2)
async def waits_for_a_slot(x: int) -> int:
    async with gate.entry(timeout=1.5):
        x += 1
    return x


waited_x: int = asyncio.run(waits_for_a_slot(3))

@lim
def f(x: int) -> int:
    return x

@limit(qps=10, behavior="throttle")
async def g(x: int) -> str:
    return str(x)

y: int = f(1)
s: str = asyncio.run(g(2))
try:
    lim.acquire(timeout=0.1)
except BlockedError as e:
    ra = e.retry_after
print(lim.stats().pass_qps + 1.0, slidewin.__version__)

from slidewin import KeyedLimiter

per_user = KeyedLimiter(qps=10, max_keys=1000, overrides={"vip": 100})
ok2: bool = per_user.try_acquire("user-42", now_ns=5)
w2 = per_user.reserve(b"k", 2)
with per_user.entry(42):
    pass
n_keys: int = len(per_user)
ev: int = per_user.stats().evicted


@per_user(key=lambda user, *a, **kw: user)
def handle(user: str) -> int:
    return len(user)


@per_user(key=lambda user, *a, **kw: user)
async def ahandle(user: str) -> str:
    await per_user.acquire_async(user, timeout=0.5)
    return user

z: int = handle("u")
print(asyncio.run(ahandle("v")), z)

# ---- in front of web apps ----------------------------------------------------------------
from typing import Any, Callable, Dict, Iterable, MutableMapping, Optional, Union
from slidewin import asgi, wsgi, client_ip


async def plain_asgi(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Any],
    send: Callable[[MutableMapping[str, Any]], Any],
) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def user_key(scope: asgi.Scope) -> Union[str, None]:
    return client_ip(scope, trusted_proxies=("10.0.0.0/8", "::1"))


limited: asgi.ASGIApp = asgi.LimitMiddleware(
    plain_asgi, Limiter(qps=100), exempt=["/health"], status=429, headers=True
)
concurrent = asgi.LimitMiddleware(plain_asgi, Limiter(concurrency=8), concurrency_status=503,
                                  body="busy", content_type="text/plain")


def plain_wsgi(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


wsgi_app: wsgi.WSGIApp = wsgi.LimitMiddleware(
    plain_wsgi, Limiter(qps=100), exempt=lambda environ: environ["PATH_INFO"] == "/health"
)
ip: str = client_ip({"REMOTE_ADDR": "10.0.0.1"}, trusted_proxies="10.0.0.0/8")
maybe: Optional[str] = user_key({"type": "http", "client": ("1.2.3.4", 1), "headers": []})

# seeing and steering
named = Limiter(qps=100, name="checkout", shadow=True)
totals: int = named.totals()["pass"] + named.totals()["rt"]
named.update(qps=200, behavior="throttle", max_queueing_ms=100, shadow=False)
label: Optional[str] = named.name
enforcing: bool = not named.shadow
registry: Dict[str, object] = dict(slidewin.limiters())
per_named = KeyedLimiter(qps=5, name="per-user")
per_named.update(overrides={"vip": 50})
blocks: int = per_named.totals()["block"]
stats_m = Metric(1000, 2, name="stats")
region: Dict[str, Any] = slidewin._core.read_region("checkout")
paths: List[str] = slidewin._core.list_regions()


def _rates() -> None:
    from slidewin import KeyedLimiter, Limiter, limit

    per_minute = Limiter(rate="100/minute")
    r: Optional[str] = per_minute.rate
    per_user = KeyedLimiter(rate="10/second", sample_count=10)
    per_user.update(rate="20/second")

    @limit(rate="1000/day")
    def job() -> int:
        return 1

    n: int = job()
    del r, n

# AdaptiveLimiter: a Limiter whose limit is learned
guard = slidewin.AdaptiveLimiter(algorithm="gradient", max_limit=200)
current: int = guard.limit
if guard.try_acquire():
    guard.release(rt_ms=12.5)

# all_of: a group of limiters, all or nothing
rpm_g, tpm_g = Limiter(rate="500/minute"), Limiter(rate="30000/minute")
both = slidewin.all_of(rpm_g, tpm_g, (slidewin.KeyedLimiter(qps=5), "user-1"))
admitted: bool = both.try_acquire(1, 1200, 1)
waited_g: "int | None" = both.reserve(1)
with both.entry(1, 1200, 1):
    tpm_g.charge(300)
both.charge(0, 10, 0)


@both
def in_group(x: int) -> int:
    return x

def _breaker() -> None:
    from slidewin import Breaker, BreakerOpenError

    br = Breaker(error_ratio=0.5, errors=(ConnectionError,), name="backend")

    @br
    def fetch(url: str) -> bytes:
        return url.encode()

    @br.on_change
    def changed(old: str, new: str, value: Optional[float]) -> None:
        pass

    try:
        with br.entry():
            data: bytes = fetch("x")
    except BreakerOpenError as e:
        wait: Optional[float] = e.retry_after
        del wait
    ok: bool = br.try_pass(now_ns=0)
    br.record(12.5, error=False)
    state: str = br.state
    del data, ok, state
    by_status = Breaker(error_count=3, probe_timeout_s=None, call_timeout_s=2.5,
                        errors=lambda exc: getattr(exc, "status", 500) >= 500)
    by_status.update(probe_timeout_s=30, call_timeout_s=None, recovery_s=5)
    probe_limit: Optional[float] = by_status.probe_timeout_s
    call_limit: Optional[float] = by_status.call_timeout_s
    del probe_limit, call_limit


def _rate_forms() -> None:
    from slidewin._rate import Rate, parse_rates

    one: Limiter = Limiter("100/minute")
    per_ip = slidewin.KeyedLimiter("5/m")
    several: "Limiter | slidewin.Group" = slidewin.rate_limiter("10/second;100/minute")
    rates: "list[Rate]" = parse_rates("10 per second, 100/minute")
    period: int = rates[0].period_ms
    with one:
        pass
    with several:
        pass
    del per_ip, period


async def _async_with() -> None:
    lim = Limiter(concurrency=4)
    async with lim:
        pass
    async with slidewin.all_of(lim, Limiter(qps=5)):
        pass
    async with lim.entry(timeout=1.5):
        pass


def _upstream() -> None:
    import httpx

    from slidewin import Upstream
    from slidewin.httpx import AsyncLimitedTransport, LimitedTransport

    api = Upstream(requests="500/minute", tokens="30000/minute", concurrency=8, name="llm")
    with api.call(tokens=1200, timeout=30) as call:
        call.observe(200, {"x-ratelimit-remaining-requests": "10"}, tokens=900)
    paused: Optional[float] = api.paused_until()
    sent: float = api.stats()["sent"]

    def estimate(request: httpx.Request) -> int:
        return 1200

    client = httpx.Client(transport=LimitedTransport(api, tokens=estimate, retries=2))
    aclient = httpx.AsyncClient(transport=AsyncLimitedTransport(api, deadline_s=30))
    del paused, sent, client, aclient

    async def ask() -> None:
        async with api.call(tokens=10) as c:
            c.observe(429, None)


def _redis_leased(r: Any) -> bool:
    from slidewin.redis import RedisKeyedLimiter, RedisLimiter

    lim = RedisLimiter(r, "api", qps=100, lease=True)
    per = RedisKeyedLimiter(r, "per-user", rate="10/s", lease=True)
    ok: bool = lim.try_acquire() and per.try_acquire("user-42")
    lim.close()
    per.close()
    return ok
