"""The settings of a Redis limiter (slidewin.redis): validated by the C core's own check,
then turned into the script's arguments, packed once."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, cast

from .._limiter import Limiter
from ._scripts import SCRIPTS as _SCRIPTS
from ._wire import _bulk, _fmt

MIN_LEASE_MS = 100  # the shortest lease: renewed every lease_ms / 3
_ON_ERROR = ("allow", "deny", "raise")
# Limiter's keywords, passed on as given (rate= first: an override's are the others)
_LIMITER_KW = ("rate", "concurrency", "behavior", "warm_up_s", "cold_factor", "max_queueing_ms",
               "occupy_timeout_ms", "interval_ms", "sample_count")


class _Config:
    """One client's settings, checked by a private Limiter with the same arguments."""

    def __init__(self, qps: Any, kw: Dict[str, Any], lease_ms: int) -> None:
        tmpl = Limiter(qps, **kw)  # raises the core's TypeError / ValueError
        self.rate = tmpl.rate  # rate= (already turned into qps, interval_ms, sample_count)
        self.qps = tmpl.qps
        self.concurrency = tmpl.concurrency
        self.behavior = tmpl.behavior
        self.interval_ms = iv = tmpl.interval_ms
        self.sample_count = sc = tmpl.sample_count
        self.max_queueing_ms = tmpl.max_queueing_ms
        self.occupy_timeout_ms = tmpl.occupy_timeout_ms
        self.warm_up_s = tmpl.warm_up_s
        self.cold_factor = tmpl.cold_factor
        self.layout = "%d/%d" % (iv, sc)
        self.lease_ms = lease_ms
        self.minute = self.behavior in ("warm_up", "warm_up_throttle")
        ttl = iv + 1000
        if self.concurrency is not None:
            c = self.concurrency
            self.limit = float(c)
            self.script = _SCRIPTS["concurrency"]
            self.params = [_fmt(c)]
            self.never_n: Optional[float] = c  # n above it can never pass
        else:
            q = float(cast(float, self.qps))  # not None without concurrency
            L = q if iv == 1000 else q * (iv / 1000.0)  # the core's window_limit
            self.limit = L
            b = self.behavior
            warm: List[str] = ["0"] * 6 if self.minute else []
            if self.minute and q > 0:
                W, cf = float(self.warm_up_s), float(self.cold_factor)
                warning = math.floor(math.floor(W * q) / (cf - 1.0))
                max_token = warning + math.floor(2.0 * W * q / (1.0 + cf))
                ramp = 1 if max_token > warning else 0
                slope = (cf - 1.0) / q / float(max_token - warning) if ramp else 0.0
                cold_pass = math.floor(math.floor(q) / cf)
                per_window = 1000.0 / iv
                min_rate = q if q < per_window else per_window
                warm = [str(warning), str(max_token), str(ramp), _fmt(slope),
                        str(cold_pass), _fmt(min_rate)]
                # idle long enough, the tokens are full again (cold): as a fresh key
                refill_ms = math.ceil((max_token + 1) * 1000.0 / q) + 2000
                payback_ms = math.ceil(L * 1000.0 / min_rate)
                ttl += min(refill_ms + payback_ms, 2**40)
            self.script = _SCRIPTS[b if b in ("reject", "warm_up") else "throttle"]
            if b == "reject":
                self.params = [_fmt(L), str(self.occupy_timeout_ms)]
            elif b == "warm_up":
                self.params = [_fmt(q), _fmt(L)] + warm
            else:
                maxq = self.max_queueing_ms * 1_000_000
                self.params = [_fmt(q), str(maxq), "1" if b == "warm_up_throttle" else "0"]
                self.params += warm
                ttl += self.max_queueing_ms
                if q > 0:
                    # the key outlives the next request's slot (one request's cost at the
                    # slowest rate after the latest pass): expired sooner, it would admit
                    # early when a request is more than a window and a second apart
                    slowest = q / float(self.cold_factor) if b == "warm_up_throttle" else q
                    ttl += min(math.ceil(1000.0 / slowest), 2**40)
            self.never_n = L if b in ("reject", "warm_up") else None
        self.ttl_ms = ttl
        # the decision's EVALSHA, its static arguments packed once as RESP bytes
        nargs = 10 + len(self.params)
        self.head = b"*%d\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n" % (
            4 + nargs, self.script.sha.encode())
        self.mid = b"".join(_bulk(x) for x in (self.layout, str(ttl), str(iv), str(sc)))
        self.tail = b"".join(_bulk(x) for x in [str(lease_ms)] + self.params)

    def can_never_pass(self, n: int) -> bool:
        return self.qps == 0 or (self.never_n is not None and n > self.never_n)

    def describe(self) -> str:
        if self.concurrency is not None:
            return "concurrency=%d" % self.concurrency
        if self.rate is not None:
            return "rate=%r, behavior=%r" % (self.rate, self.behavior)
        return "qps=%r, behavior=%r" % (self.qps, self.behavior)
