"""KeyedLimiter against a dict of private Limiters (one per key), driven by hypothesis.

While the table has room every decision (verdict, wait, retry time) equals the private
Limiter's for that key, for explicit times that may go backwards (the clamp). A table that is
full follows the eviction rules exactly: a small table (max_keys <= 16) samples every entry,
so the victim is the least recently used key whose window is empty, else the least recently
used key, never one in flight; when all are in flight a new key is refused (BLOCK); an
evicted key restarts.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from slidewin import KeyedLimiter, Limiter, _core

KEYS = ["a", b"a", 1, -1, 2**70, "b"]
FLAGS = [_core.F_RETRY, _core.F_RETRY | _core.F_TRY, 0]
MS = 10**6


class Equivalence(RuleBasedStateMachine):
    """Room for every key: decisions identical to private limiters."""

    kwargs: dict = {"qps": 3}

    def __init__(self) -> None:
        super().__init__()
        self.kl = KeyedLimiter(**self.kwargs, max_keys=len(KEYS) + 2)
        self.model: dict = {}
        self.held: set = set()
        self.now = 5_000 * MS

    def lim(self, key):
        if key not in self.model:
            self.model[key] = Limiter(**self.kwargs)
        return self.model[key]

    @rule(key=st.sampled_from(KEYS), n=st.integers(1, 4), dt=st.integers(-700, 900),
          flags=st.sampled_from(FLAGS))
    def decide(self, key, n, dt, flags):
        self.now = max(0, self.now + dt * MS)
        got = self.kl._decide(key, n, flags, self.now)
        want = self.lim(key)._decide(n, flags, self.now)
        assert got == want, (key, n, self.now, flags)
        # a request that can never pass takes no entry for concurrency (nothing to keep)
        if not (got[0] == _core.NEVER and "concurrency" in self.kwargs):
            self.held.add(key)

    @rule(key=st.sampled_from(KEYS), n=st.integers(1, 3))
    def release(self, key, n):
        lim = self.model.get(key)
        try:
            if lim is None:
                raise ValueError
            lim.release(n)
            ok = True
        except ValueError:
            ok = False
        if ok:
            self.kl.release(key, n)
        else:
            try:
                self.kl.release(key, n)
            except ValueError:
                pass
            else:
                raise AssertionError("release beyond in flight was accepted")

    @invariant()
    def same_in_flight(self):
        for key, lim in self.model.items():
            assert self.kl.in_flight(key) == lim.in_flight
        assert self.kl.stats(now_ns=self.now).concurrency == sum(
            lim.in_flight for lim in self.model.values())
        assert len(self.kl) == len(self.held)


class EquivalenceWindows(Equivalence):
    kwargs = {"qps": 5, "interval_ms": 600, "sample_count": 3}


class EquivalenceThrottle(Equivalence):
    kwargs = {"qps": 10, "behavior": "throttle", "max_queueing_ms": 300}


class EquivalenceConcurrency(Equivalence):
    kwargs = {"concurrency": 2}


class EquivalenceOverrides(Equivalence):
    kwargs = {"qps": 3}

    def __init__(self) -> None:
        super().__init__()
        self.kl.overrides = {"a": 6, 2**70: 1}

    def lim(self, key):
        if key not in self.model:
            q = {"a": 6, 2**70: 1}.get(key, 3) if isinstance(key, (str, int)) else 3
            if key == 1 or key == -1:
                q = 3
            self.model[key] = Limiter(qps=q)
        return self.model[key]


class Eviction(RuleBasedStateMachine):
    """A full table: who is evicted, who is refused (times only move forward here)."""

    kwargs: dict = {"qps": 2}
    MAX = 3

    def __init__(self) -> None:
        super().__init__()
        self.kl = KeyedLimiter(**self.kwargs, max_keys=self.MAX)
        self.model: dict = {}   # key -> private Limiter, for the keys the table holds
        self.used: dict = {}    # key -> tick of its last use
        self.tick = 0
        self.now = 1_000 * MS
        self.evicted = 0

    def idle(self, key):
        lim = self.model[key]
        if lim.concurrency is not None:
            return True
        return lim.metric.sum("pass", now_ns=self.now) == 0

    def touch(self, key):
        self.tick += 1
        self.used[key] = self.tick

    @rule(key=st.sampled_from(KEYS[:5]), n=st.integers(1, 2), dt=st.integers(0, 700))
    def decide(self, key, n, dt):
        self.now += dt * MS
        if "concurrency" in self.kwargs and n > self.kwargs["concurrency"]:
            # can never pass: decided without taking (or evicting for) an entry
            assert self.kl._decide(key, n, 0, self.now)[0] == _core.NEVER
            if key in self.model:
                self.touch(key)
            return
        if key not in self.model and len(self.model) == self.MAX:
            free = [k for k in self.model if self.model[k].in_flight == 0]
            if not free:
                assert self.kl._decide(key, n, 0, self.now)[0] == _core.BLOCK
                return
            idle = [k for k in free if self.idle(k)]
            victim = min(idle or free, key=lambda k: self.used[k])
            del self.model[victim]
            del self.used[victim]
            self.evicted += 1
        if key not in self.model:
            self.model[key] = Limiter(**self.kwargs)
        got = self.kl._decide(key, n, 0, self.now)
        want = self.model[key]._decide(n, 0, self.now)
        assert got == want
        self.touch(key)

    @precondition(lambda self: any(m.in_flight for m in self.model.values()))
    @rule(data=st.data())
    def release(self, data):
        key = data.draw(st.sampled_from([k for k, m in self.model.items() if m.in_flight]))
        self.model[key].release(1)
        self.kl.release(key, 1)
        self.touch(key)

    @invariant()
    def same_table(self):
        assert len(self.kl) == len(self.model)
        for key, lim in self.model.items():
            assert self.kl.in_flight(key) == lim.in_flight
        assert self.kl.stats(now_ns=self.now).evicted == self.evicted


class EvictionConcurrency(Eviction):
    kwargs = {"concurrency": 1}
    MAX = 2


SETTINGS = settings(max_examples=60, stateful_step_count=40, deadline=None)
for machine in (Equivalence, EquivalenceWindows, EquivalenceThrottle, EquivalenceConcurrency,
                EquivalenceOverrides, Eviction, EvictionConcurrency):
    machine.TestCase.settings = SETTINGS
    globals()["Test" + machine.__name__] = machine.TestCase
