"""FakeKeyed: a test double of slidewin.KeyedLimiter as API.md describes it ("Per key").

The real KeyedLimiter is being built in parallel; until it is merged the middleware's keyed
paths are tested against this double: one real private Limiter per key, which is what API.md
promises ("each key is exact, as a private Limiter is"). The lead re-runs the tests that use
it (tests/test_asgi.py, tests/test_wsgi.py: the `keyed` ones) on the real KeyedLimiter after
merging: `make_keyed` below builds the real one as soon as `slidewin.KeyedLimiter` exists
(the tests use only API.md's methods and check HTTP outcomes, so they run on either).
"""

from typing import Any, Dict, Optional, Union

import slidewin

Key = Union[str, bytes, int]


class FakeKeyed:
    """KeyedLimiter(qps=None, *, concurrency=None, behavior="reject", ..., max_keys=65536)"""

    def __init__(self, qps: Optional[float] = None, *, max_keys: int = 65536, **kw: Any):
        self._kw = dict(kw)
        self._qps = qps
        self.max_keys = max_keys
        self._keys: Dict[Key, slidewin.Limiter] = {}
        proto = slidewin.Limiter(qps, **kw)  # validates the arguments as KeyedLimiter would
        self.qps = proto.qps
        self.concurrency = proto.concurrency
        self.behavior = proto.behavior
        self.interval_ms = proto.interval_ms
        self.max_queueing_ms = proto.max_queueing_ms
        self.overrides: Dict[Key, float] = {}

    def _of(self, key: Key) -> slidewin.Limiter:
        if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
            raise TypeError("key must be str, bytes or int, not %s" % type(key).__name__)
        lim = self._keys.get(key)
        if lim is None:
            lim = self._keys[key] = slidewin.Limiter(self._qps, **self._kw)
        return lim

    def try_acquire(self, key: Key, n: int = 1, *, now_ns: Optional[int] = None) -> bool:
        return self._of(key).try_acquire(n, now_ns=now_ns)

    def reserve(self, key: Key, n: int = 1, *, now_ns: Optional[int] = None) -> Optional[int]:
        return self._of(key).reserve(n, now_ns=now_ns)

    def acquire(self, key: Key, n: int = 1, *, timeout: Optional[float] = None) -> None:
        self._of(key).acquire(n, timeout=timeout)

    async def acquire_async(self, key: Key, n: int = 1, *, timeout: Optional[float] = None):
        await self._of(key).acquire_async(n, timeout=timeout)

    def entry(self, key: Key, n: int = 1) -> Any:
        return self._of(key).entry(n)

    def release(self, key: Key, n: int = 1) -> None:
        self._of(key).release(n)

    def __len__(self) -> int:
        return len(self._keys)


def make_keyed(*args: Any, **kw: Any) -> Any:
    """The keyed limiter under test: the real one once it exists, else the double."""
    real = getattr(slidewin, "KeyedLimiter", None)
    return (real or FakeKeyed)(*args, **kw)
