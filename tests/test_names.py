"""Names: ``name=`` on Metric, Limiter and KeyedLimiter, and ``slidewin.limiters()``."""

from __future__ import annotations

import gc
import os
import uuid

import pytest

import slidewin
from slidewin import Breaker, KeyedLimiter, Limiter, Metric, limit


@pytest.fixture
def region():
    n = f"swtest-names-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield n
    slidewin.unlink(n)


def test_name_on_every_type_and_in_repr():
    lim = Limiter(qps=5, name="checkout")
    assert lim.name == "checkout" and repr(lim) == "Limiter(qps=5.0, name='checkout')"
    assert lim.metric.name == "checkout"
    per = KeyedLimiter(qps=5, name="per-user")
    assert per.name == "per-user" and "name='per-user'" in repr(per)
    m = Metric(1000, 2, name="stats")
    assert m.name == "stats" and repr(m) == "Metric(interval_ms=1000, sample_count=2, name='stats')"
    assert limit(qps=1, name="deco").name == "deco"
    for obj in (Limiter(qps=1), KeyedLimiter(qps=1), Metric()):
        assert obj.name is None and "name=" not in repr(obj)


def test_a_shared_object_is_named_by_its_region(region, tmp_path):
    assert Limiter(qps=5, shared=region).name == region
    assert "name=" not in repr(Limiter(qps=5, shared=region))
    assert Limiter(qps=5, shared=region, name="other").name == "other"
    path = str(tmp_path / "region-file")
    assert KeyedLimiter(qps=5, shared=path).name == "region-file"
    assert Metric(shared=str(tmp_path / "m")).name == "m"
    assert Limiter(qps=5, shared=True).name is None


def test_limiters_lists_the_live_named_objects():
    tag = uuid.uuid4().hex
    a = Limiter(qps=1, name=f"a-{tag}")
    b = KeyedLimiter(qps=1, name=f"b-{tag}")
    c = Metric(name=f"c-{tag}")
    Limiter(qps=1)  # unnamed: not listed
    live = {k: v for k, v in slidewin.limiters().items() if k.endswith(tag)}
    assert live == {f"a-{tag}": a, f"b-{tag}": b, f"c-{tag}": c}
    assert all(live[k] is v for k, v in ((f"a-{tag}", a), (f"b-{tag}", b), (f"c-{tag}", c)))
    del b, live
    gc.collect()
    assert set(k for k in slidewin.limiters() if k.endswith(tag)) == {f"a-{tag}", f"c-{tag}"}


def test_the_registry_holds_weak_references_and_the_newest_live_one_of_a_name_is_listed():
    tag = uuid.uuid4().hex
    first = Limiter(qps=1, name=tag)
    second = Limiter(qps=2, name=tag)
    assert slidewin.limiters()[tag] is second
    del second
    gc.collect()
    assert slidewin.limiters()[tag] is first  # a dropped newer one never hides the live one
    third = Breaker(error_count=1, name=tag)
    assert slidewin.limiters()[tag] is third
    del first, third
    gc.collect()
    assert tag not in slidewin.limiters()     # none alive: the name is forgotten


def test_the_region_keeps_its_creators_name(region):
    Limiter(qps=5, shared=region, name="Checkout API")
    assert slidewin._core.read_region(region)["name"] == "Checkout API"
    # a later process's own name is its own; the region keeps the creator's
    assert Limiter(qps=5, shared=region, name="x").name == "x"
    assert slidewin._core.read_region(region)["name"] == "Checkout API"


def test_unnamed_region_reads_as_its_file_name(region):
    Metric(shared=region)
    assert slidewin._core.read_region(region)["name"] == region


def test_a_metric_refused_for_its_window_keeps_no_reference_to_its_name():
    import sys

    name = "metric-" + uuid.uuid4().hex  # a str only this test holds
    before = sys.getrefcount(name)
    for _ in range(50):
        with pytest.raises(ValueError, match="interval_ms"):
            Metric(interval_ms=0, name=name)
        with pytest.raises(ValueError, match="divisible"):
            Metric(interval_ms=1000, sample_count=3, name=name)
    assert sys.getrefcount(name) == before
