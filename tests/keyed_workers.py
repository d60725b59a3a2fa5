"""Worker functions for the shared KeyedLimiter tests (importable by spawned processes)."""

from __future__ import annotations

import os
import time

import slidewin

T0 = 10**12  # a fixed decision time (ns): the windows are deterministic
KEEP: list = []  # limiters kept alive: a dropped one gives back what it holds in flight


def hammer_keys(name: str, kwargs: dict, keys: list, tries: int, now_ns: int) -> dict:
    """try_acquire every key `tries` times at one instant; the admitted count per key. The
    limiter is kept (with its in-flight counts) for as long as the worker lives."""
    kl = slidewin.KeyedLimiter(**kwargs, shared=name)
    KEEP.append(kl)
    got = {repr(k): 0 for k in keys}
    for _ in range(tries):
        for k in keys:
            got[repr(k)] += kl.try_acquire(k, now_ns=now_ns)
    return got


def hold_and_hang(name: str, keys: list, ready) -> None:
    """Take one in-flight count of every key, say so, then wait to be killed."""
    kl = slidewin.KeyedLimiter(concurrency=1, shared=name)
    for k in keys:
        assert kl.try_acquire(k)
    ready.set()
    time.sleep(600)


def pid() -> int:
    return os.getpid()
