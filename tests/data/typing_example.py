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
