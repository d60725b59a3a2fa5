"""slidewin.Metric against the reference model (tests/refmodel.py), read for read."""

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from slidewin import Event, Metric

from refmodel import DEFAULT_EVENTS, MetricModel

MS = 1_000_000

CONFIGS = [
    (1000, 2), (1000, 1), (1000, 4), (1000, 10), (500, 5), (60, 3), (7, 7),
    (100, 1), (3000, 3), (60_000, 60), (20, 2), (1000, 1), (500, 1), (1000, 2),
]
CUSTOM = ("sent", "dropped", "retried", "x")

# a time step: (kind, per-mille, sub-millisecond ns)
steps = st.tuples(
    st.sampled_from(["stay", "fwd", "fwd", "fwd", "next", "next", "back", "far"]),
    st.integers(0, 1000),
    st.integers(0, MS - 1),
)


class MetricMachine(RuleBasedStateMachine):
    @initialize(
        cfg=st.sampled_from(CONFIGS),
        custom=st.one_of(st.none(), st.integers(1, len(CUSTOM))),
        start_ms=st.one_of(st.just(0), st.integers(0, 10**7)),
    )
    def setup(self, cfg, custom, start_ms):
        interval_ms, sample_count = cfg
        events = None if custom is None else CUSTOM[:custom]
        if events is None:
            self.real = Metric(interval_ms, sample_count)
        else:
            self.real = Metric(interval_ms, sample_count, events=events)
        self.model = MetricModel(interval_ms, sample_count, events)
        self.names = DEFAULT_EVENTS if events is None else events
        self.has_rt = events is None
        self.now = start_ms * MS
        self.log = [f"Metric({interval_ms}, {sample_count}, events={events!r})"]

    # -- helpers -------------------------------------------------------------------------
    def step(self, s):
        kind, permille, sub = s
        m = self.model
        if kind == "fwd":
            delta = permille * 2 * m.window_ms * MS // 1000 + sub
        elif kind == "next":  # into the next bucket (or the one after), anywhere in it
            wl = m.window_ms * MS
            nxt = self.now - self.now % wl + wl * (1 + permille % 2)
            delta = nxt - self.now + permille * wl // 1000 // 2 * 2 + sub % wl
            delta = min(delta, nxt + wl - 1 - self.now)
        elif kind == "back":
            delta = -(permille * 3 * m.interval_ms * MS // 2000) - sub
        elif kind == "far":
            delta = (m.interval_ms + permille * m.interval_ms // 20) * MS + sub
        else:
            delta = 0
        self.now = max(0, self.now + delta)
        return self.now

    def key(self, idx, form):
        """The same event as an index, a name or (default events) an Event."""
        idx %= len(self.names)
        if form == 0:
            return idx
        if form == 1:
            return self.names[idx]
        return Event(idx) if self.has_rt else idx

    def check(self, what, got, expected):
        assert got == expected, (what, got, expected, "\n".join(self.log))

    # -- writes --------------------------------------------------------------------------
    @rule(s=steps, idx=st.integers(0, 5), form=st.integers(0, 2),
          n=st.one_of(st.integers(0, 5), st.integers(0, 2**40)))
    def add(self, s, idx, form, n):
        now = self.step(s)
        k = self.key(idx, form)
        self.log.append(f"add({k!r}, {n}, now_ns={now})")
        self.real.add(k, n, now_ns=now)
        self.model.add(k, n, now_ns=now)

    @precondition(lambda self: self.has_rt)
    @rule(s=steps, rt=st.one_of(st.integers(0, 100), st.integers(0, 10_000)))
    def add_rt(self, s, rt):
        now = self.step(s)
        self.log.append(f"add_rt({rt}, now_ns={now})")
        self.real.add_rt(rt, now_ns=now)
        self.model.add_rt(rt, now_ns=now)

    @rule()
    def reset(self):
        self.log.append("reset()")
        self.real.reset()
        self.model.reset()

    # -- reads ---------------------------------------------------------------------------
    @rule(s=steps, form=st.integers(0, 2),
          what=st.sampled_from(["sum", "current", "previous", "rate"]))
    def read_event(self, s, form, what):
        """Read every event at one time (reads at one time are idempotent)."""
        now = self.step(s)
        for idx in range(len(self.names)):
            k = self.key(idx, (form + idx) % 3)
            self.log.append(f"{what}({k!r}, now_ns={now})")
            got = getattr(self.real, what)(k, now_ns=now)
            exp = getattr(self.model, what)(k, now_ns=now)
            if what == "rate":
                assert isinstance(got, float)
                self.check(what, got, pytest.approx(exp, rel=1e-12))
            else:
                assert type(got) is int
                self.check(what, got, exp)

    @precondition(lambda self: self.has_rt)
    @rule(s=steps, what=st.sampled_from(["min_rt", "avg_rt"]))
    def read_rt(self, s, what):
        now = self.step(s)
        self.log.append(f"{what}(now_ns={now})")
        got = getattr(self.real, what)(now_ns=now)
        exp = getattr(self.model, what)(now_ns=now)
        if what == "avg_rt":
            assert isinstance(got, float)
            self.check(what, got, pytest.approx(exp, rel=1e-12))
        else:
            self.check(what, got, exp)

    @rule(s=steps)
    def read_buckets(self, s):
        now = self.step(s)
        self.log.append(f"buckets(now_ns={now})")
        got = self.real.buckets(now_ns=now)
        exp = self.model.buckets(now_ns=now)
        if self.has_rt:
            got_t = [(b.start_ms, tuple(b.counts), b.min_rt) for b in got]
        else:
            got_t = [(b.start_ms, tuple(b.counts)) for b in got]
            exp = [(s_, c) for s_, c, _ in exp]
        self.check("buckets", got_t, exp)

    @invariant()
    def config_unchanged(self):
        if hasattr(self, "real"):
            assert self.real.interval_ms == self.model.interval_ms
            assert self.real.sample_count == self.model.sample_count
            assert self.real.window_ms == self.model.window_ms


MetricMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMetricModel = MetricMachine.TestCase


def test_model_self_check_design_example():
    """The model itself reproduces docs/design.md §2's example (guards the oracle)."""
    m = MetricModel(1000, 2)
    m.add(0, 3, now_ns=100 * MS)
    m.add(0, 4, now_ns=600 * MS)
    assert [m.sum(0, now_ns=t * MS) for t in (600, 999)] == [7, 7]
    m2 = MetricModel(1000, 2)
    m2.add(0, 3, now_ns=100 * MS)
    m2.add(0, 4, now_ns=600 * MS)
    assert [m2.sum(0, now_ns=t * MS) for t in (1000, 1499, 1500)] == [4, 4, 0]
