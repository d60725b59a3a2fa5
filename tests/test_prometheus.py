"""slidewin.prometheus.Collector: the exposition, parsed back with prometheus_client's own
parser, against lim.totals() — private named objects, shared regions other processes are
busy with (one series per region whatever the number of processes), keyed limiters, and
regions that vanish or are damaged while a scrape reads them."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

# prometheus_client is in the test extra: a missing one is an error here, not a skip
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import slidewin
from slidewin import KeyedLimiter, Limiter, Metric, _core
from slidewin.prometheus import Collector

S = 10**9
OUTCOMES = ("pass", "block", "exception", "success")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A private SLIDEWIN_SHM_DIR: the collector sees only this test's regions."""
    monkeypatch.setenv("SLIDEWIN_SHM_DIR", str(tmp_path))
    return tmp_path


def scrape(collector=None, **kwargs):
    """{sample name: {frozenset(labels.items()): value}} of one scrape, through the text
    exposition and prometheus_client's parser."""
    reg = CollectorRegistry()
    reg.register(collector if collector is not None else Collector(**kwargs))
    text = generate_latest(reg).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def series(samples, name, **labels):
    """The samples of `name` whose labels include `labels`, as {limiter: value}."""
    got = {}
    for key, value in samples.get(name, {}).items():
        d = dict(key)
        if all(d.get(k) == v for k, v in labels.items()):
            got[d.get("limiter", d.get("metric"))] = value
    return got


def by_outcome(samples, outcome, **labels):
    """series() of the family that holds outcome: decisions (pass, block, shadow_block) or
    completions (success, exception)."""
    family = ("slidewin_completions_total" if outcome in ("success", "exception")
              else "slidewin_decisions_total")
    return series(samples, family, outcome=outcome, **labels)


def requests(samples, limiter):
    return {o: by_outcome(samples, o, limiter=limiter).get(limiter) for o in OUTCOMES}


def run_entries(lim, ok, failing, now_ns):
    for _ in range(ok):
        with lim.entry():
            pass
    for _ in range(failing):
        try:
            with lim.entry():
                raise KeyError("boom")
        except KeyError:
            pass


def test_private_named_limiters_equal_their_totals(folder):
    lim = Limiter(qps=5, name="checkout")
    for _ in range(8):
        lim.try_acquire(now_ns=S)
    conc = Limiter(concurrency=3, name="db")
    run_entries(conc, ok=4, failing=2, now_ns=None)
    held = conc.entry()
    held.__enter__()
    try:
        s = scrape()
        for lim_, name in ((lim, "checkout"), (conc, "db")):
            t = lim_.totals()
            assert requests(s, name) == {o: float(t[o]) for o in OUTCOMES}
            assert series(s, "slidewin_occupied_passes_total")[name] == t["occupied_pass"]
            assert series(s, "slidewin_rt_seconds_total")[name] == t["rt"] / 1000
        assert requests(s, "checkout") == {"pass": 5, "block": 3, "exception": 0, "success": 0}
        assert requests(s, "db") == {"pass": 7, "block": 0, "exception": 2, "success": 4}
        assert series(s, "slidewin_in_flight") == {"checkout": 0, "db": 1}
        assert series(s, "slidewin_waiting") == {"checkout": 0, "db": 0}
        assert by_outcome(s, "pass", kind="limiter") == {
            "checkout": 5, "db": 7}
        # private objects have no region: no process waiters, no keys
        assert "slidewin_waiting_processes" not in s and "slidewin_keys" not in s
    finally:
        held.__exit__(None, None, None)
    assert series(scrape(), "slidewin_in_flight")["db"] == 0


def test_window_gauges(folder):
    lim = Limiter(qps=10, name="win", interval_ms=1000, sample_count=2)
    now = time.monotonic_ns()
    for _ in range(4):
        lim.try_acquire(now_ns=now)
    lim.metric.add("success", 2, now_ns=now)
    lim.metric.add_rt(30, now_ns=now)
    s = scrape()
    st = lim.stats()
    dec, comp = "slidewin_window_decisions_per_second", "slidewin_window_completions_per_second"
    assert series(s, dec, outcome="pass")["win"] == st.pass_qps == 4
    assert series(s, dec, outcome="block")["win"] == st.block_qps == 0
    assert series(s, comp, outcome="success")["win"] == st.success_qps == 2
    assert series(s, comp, outcome="exception")["win"] == st.exception_qps == 0
    assert series(s, "slidewin_window_avg_rt_seconds")["win"] == st.avg_rt_ms / 1000 == 0.015


def test_unnamed_private_objects_are_not_exported(folder):
    anon = Limiter(qps=5)
    anon.try_acquire()
    named = Limiter(qps=5, name="named")  # limiters() holds weak references: keep it alive
    named.try_acquire()
    s = scrape()
    assert set(by_outcome(s, "pass")) == {"named"}


def test_the_contract_example(folder):
    """The README's contract: REGISTRY.register(Collector()); decisions_total{limiter,outcome} equals
    totals()[outcome]. A fresh registry stands in for the process-wide REGISTRY."""
    reg = CollectorRegistry(auto_describe=True)
    c = Collector()
    reg.register(c)
    with pytest.raises(ValueError):  # describe() gives the names: a second one is refused
        reg.register(Collector())
    lim = Limiter(qps=100, name="checkout")
    lim.try_acquire()
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    assert fams["slidewin_decisions"].type == "counter"
    assert fams["slidewin_completions"].type == "counter"
    assert fams["slidewin_in_flight"].type == "gauge"
    (sample,) = [x for x in fams["slidewin_decisions"].samples
                 if x.name == "slidewin_decisions_total" and x.labels["outcome"] == "pass"]
    assert sample.labels["limiter"] == "checkout" and sample.value == lim.totals()["pass"]
    assert "folder=None" in repr(c)


def test_keyed_private_and_shared(folder):
    per = KeyedLimiter(qps=2, max_keys=4, name="per-user")
    for key in ["a", "a", "a", "b", "c", "d", "e", "f"]:  # 6 keys in a table of 4: evictions
        per.try_acquire(key, now_ns=S)
    sh = KeyedLimiter(concurrency=1, shared="tenants", max_keys=8)
    sh.try_acquire("t1")
    sh.try_acquire("t1")
    sh.try_acquire("t2")
    s = scrape()
    for lim, name in ((per, "per-user"), (sh, "tenants")):
        assert requests(s, name) == {o: float(lim.totals()[o]) for o in OUTCOMES}
        assert series(s, "slidewin_keys")[name] == len(lim)
        assert series(s, "slidewin_evicted_total")[name] == lim.stats().evicted
    assert by_outcome(s, "block", kind="keyed") == {
        "per-user": 1, "tenants": 1}
    assert series(s, "slidewin_evicted_total")["per-user"] >= 2
    assert series(s, "slidewin_in_flight")["tenants"] == 2
    assert series(s, "slidewin_waiting_processes")["tenants"] == 0


def test_metrics_export_their_window(folder):
    m = Metric(1000, 2, events=("hit", "miss"), shared="cache")
    m.add("hit", 3)
    m.add("miss")
    local = Metric(name="local-metric")
    local.add("pass", 2)
    Metric().add("pass")  # unnamed private: not exported
    s = scrape()
    events = s["slidewin_metric_window_events"]
    assert events[frozenset({"metric": "cache", "event": "hit"}.items())] == 3
    assert events[frozenset({"metric": "cache", "event": "miss"}.items())] == 1
    assert events[frozenset({"metric": "local-metric", "event": "pass"}.items())] == 2
    assert {dict(k)["metric"] for k in events} == {"cache", "local-metric"}
    assert "cache" not in series(s, "slidewin_decisions_total")


def _hammer(name, seconds, out):
    """A worker: try_acquire and entries (some failing) on the shared region; puts its own
    count of each outcome in out."""
    lim = Limiter(qps=400, shared=name)
    counts = dict.fromkeys(OUTCOMES, 0)
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        i += 1
        try:
            with lim.entry():
                if i % 5 == 0:
                    raise RuntimeError
            counts["success"] += 1
            counts["pass"] += 1
        except RuntimeError:
            counts["exception"] += 1
            counts["pass"] += 1
        except slidewin.BlockedError:
            counts["block"] += 1
            time.sleep(0.0005)
    out.put(counts)


@pytest.mark.procs
def test_shared_region_busy_in_other_processes_is_one_series(folder, forked):
    """Three processes on one region, a fourth (this one) scraping: one series for the region
    (no per-process series to sum), monotonic between scrapes, and at the end equal to the
    region's totals and to the sum of what the workers counted themselves."""
    mine = Limiter(qps=400, shared="busy", name="busy")  # this process maps it too
    out = mp.get_context("fork").Queue()
    procs = [forked(_hammer, "busy", 1.5, out) for _ in range(3)]
    try:
        last = None
        scrapes = 0
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            s = scrape()
            got = by_outcome(s, "pass")
            assert list(got) == ["busy"]  # one series, whatever the processes
            now = requests(s, "busy")
            if last is not None:
                assert all(now[o] >= last[o] for o in OUTCOMES)
            assert 0 <= series(s, "slidewin_in_flight")["busy"] <= 3
            last = now
            scrapes += 1
        results = [out.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert scrapes > 0
    want = {o: sum(r[o] for r in results) for o in OUTCOMES}
    assert want["pass"] > 0 and want["block"] > 0 and want["exception"] > 0
    final = requests(scrape(), "busy")
    assert final == {o: float(mine.totals()[o]) for o in OUTCOMES}
    assert final == {o: float(want[o]) for o in OUTCOMES}
    # a collector in any worker reads the same: here, one that only reads the regions
    assert requests(scrape(local=False), "busy") == final


def test_sources_and_folder(folder, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    alive = [Limiter(qps=5, shared="in-dir"), Limiter(qps=5, name="private"),
             Limiter(qps=5, shared=True, name="anonymous"),  # no file: exported as local
             Limiter(qps=5, shared=str(other / "slidewin-elsewhere"), name="elsewhere")]
    for lim in alive:
        lim.try_acquire()

    names = lambda s: set(by_outcome(s, "pass"))  # noqa: E731
    assert names(scrape()) == {"in-dir", "private", "anonymous", "elsewhere"}
    assert names(scrape(local=False)) == {"in-dir"}
    assert names(scrape(regions=False)) == {"in-dir", "private", "anonymous", "elsewhere"}
    assert names(scrape(local=False, folder=str(other))) == {"elsewhere"}
    assert names(scrape(regions=False, local=False)) == set()
    assert names(scrape(local=False, folder=str(folder / "missing"))) == set()


def test_same_names_get_distinct_labels(folder):
    Limiter(qps=5, shared="one", name="api").try_acquire()
    Limiter(qps=5, shared="two", name="api").try_acquire()
    got = by_outcome(scrape(local=False), "pass")
    assert len(got) == 2 and "api" in got and all(v == 1 for v in got.values())


def _make_regions(names):
    for name in names:
        Limiter(qps=5, shared=name).try_acquire()


@pytest.mark.procs
def test_a_region_removed_or_damaged_mid_collect_is_skipped(folder, monkeypatch):
    # made by another process, which has left: no process maps them (this one mapping a
    # region cut short under it would take a SIGBUS on its next decision, as any mmap user)
    p = mp.get_context("fork").Process(target=_make_regions, args=(("a", "b", "c", "d"),))
    p.start()
    p.join(30)
    assert p.exitcode == 0 and len(_core.list_regions()) == 4
    real = _core.read_region

    def between_list_and_read(path, **kw):
        if path.endswith("slidewin-b"):  # removed
            os.unlink(path)
        if path.endswith("slidewin-c"):  # cut short: a ValueError from the real read
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
        if path.endswith("slidewin-d"):  # any other failure of one read
            raise OSError(5, "Input/output error")
        return real(path, **kw)

    monkeypatch.setattr(_core, "read_region", between_list_and_read)
    s = scrape(local=False)
    assert set(by_outcome(s, "pass")) == {"a"}
    assert requests(s, "a")["pass"] == 1


@pytest.mark.procs
def test_regions_deleted_while_scraping(folder):
    """A process creating and unlinking regions in a loop while this one scrapes: every
    scrape succeeds."""
    ctx = mp.get_context("fork")

    def churn():
        end = time.monotonic() + 1.0
        i = 0
        while time.monotonic() < end:
            lim = Limiter(qps=5, shared=f"churn-{i % 4}")
            lim.try_acquire()
            slidewin.unlink(f"churn-{(i + 2) % 4}")
            i += 1

    p = ctx.Process(target=churn)
    p.start()
    try:
        scrapes = 0
        deadline = time.monotonic() + 0.8
        while time.monotonic() < deadline:
            got = by_outcome(scrape(local=False), "pass")
            assert set(got) <= {f"churn-{i}" for i in range(4)}
            scrapes += 1
    finally:
        p.join(30)
    assert p.exitcode == 0 and scrapes > 0


def test_missing_extra_names_the_install_that_fixes_it():
    """Without prometheus_client, importing slidewin.prometheus says which pip install fixes it."""
    import subprocess
    import sys

    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'prometheus_client':\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "try:\n"
            "    import slidewin.prometheus\n"
            "except ModuleNotFoundError as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd="/")
    assert r.returncode == 0, r.stderr
    assert 'pip install "slidewin[prometheus]"' in r.stdout, r.stdout


# -- by the conventions: one quantity per family, seconds, shadow refusals apart ------------

def exposition(collector):
    reg = CollectorRegistry()
    reg.register(collector)
    return reg


def test_decisions_and_completions_are_separate_families_that_sum_without_double_counting(
        folder):
    lim = Limiter(qps=5, name="sum")
    calls = 0
    for _ in range(3):  # 3 successes
        with lim.entry():
            calls += 1
    try:
        with lim.entry():  # 1 exception
            calls += 1
            raise KeyError
    except KeyError:
        pass
    for _ in range(4):  # 1 pass, 3 blocks
        lim.try_acquire()
        calls += 1
    s = scrape()
    decisions = series_by_label(s, "slidewin_decisions_total", "outcome", limiter="sum")
    completions = series_by_label(s, "slidewin_completions_total", "outcome", limiter="sum")
    assert decisions == {"pass": 5, "block": 3, "shadow_block": 0}
    assert sum(decisions.values()) == calls  # every call decided once
    assert completions == {"success": 3, "exception": 1}
    # the contract's combined family stays, each series equal to totals()[outcome]
    requests = {dict(k)["outcome"]: v for k, v in s["slidewin_requests_total"].items()}
    totals = lim.totals()
    assert requests == {o: totals[o] for o in ("pass", "block", "exception", "success")}


def series_by_label(samples, name, label, **labels):
    got = {}
    for key, value in samples.get(name, {}).items():
        d = dict(key)
        if all(d.get(k) == v for k, v in labels.items()):
            got[d[label]] = value
    return got


def test_times_are_in_seconds(folder):
    lim = Limiter(concurrency=2, name="rt")
    for _ in range(2):
        with lim.entry():
            time.sleep(0.02)  # at least 20 ms each (the RT of an entry is its elapsed ms)
    s = scrape()
    rt_ms = lim.totals()["rt"]
    assert rt_ms >= 40
    assert series(s, "slidewin_rt_seconds_total")["rt"] == rt_ms / 1000
    now = time.monotonic_ns()
    win = Limiter(concurrency=2, name="win-rt")
    win.metric.add("success", 4, now_ns=now)
    win.metric.add_rt(250, now_ns=now)  # 250 ms over 4 successes
    s = scrape()
    assert series(s, "slidewin_window_avg_rt_seconds")["win-rt"] == 0.0625
    assert not [n for n in s if "milli" in n]


@pytest.mark.parametrize("shared", [None, "shadow-region"])
def test_shadow_refusals_are_their_own_outcome(folder, shared):
    """A shadow limiter's would-be refusals are outcome="shadow_block": an alert on
    outcome="block" does not fire during a shadow rollout, and an enforcing twin's blocks
    equal the shadow's shadow_blocks."""
    kw = {"shared": shared} if shared else {"name": "shadowed"}
    name = shared or "shadowed"
    # 3 a minute on the real clock: a scrape reads the private limiters' windows at the
    # clock's time, and the refusal after update() below is still inside the minute
    minute = {"qps": 3 / 60, "interval_ms": 60_000}
    shadow = Limiter(shadow=True, **minute, **kw)
    twin = Limiter(name="enforcing", **minute)
    for i in range(10):
        assert shadow.try_acquire() is True
        twin.try_acquire()
    s = scrape()
    got = series_by_label(s, "slidewin_decisions_total", "outcome", limiter=name)
    assert got == {"pass": 3, "block": 0, "shadow_block": 7}
    assert series_by_label(s, "slidewin_decisions_total", "outcome", limiter="enforcing") == {
        "pass": 3, "block": 7, "shadow_block": 0}
    assert shadow.totals()["shadow_block"] == 7 and twin.totals()["shadow_block"] == 0
    # the same limiter enforcing again: its new refusals are plain blocks
    shadow.update(shadow=False)
    assert shadow.try_acquire() is False
    got = series_by_label(scrape(), "slidewin_decisions_total", "outcome", limiter=name)
    assert got == {"pass": 3, "block": 1, "shadow_block": 7}


def test_shadow_refusals_of_a_keyed_limiter(folder):
    per = KeyedLimiter(qps=2, shadow=True, name="per-key")
    for _ in range(5):
        assert per.try_acquire("k", now_ns=S) is True
    s = scrape()
    assert series_by_label(s, "slidewin_decisions_total", "outcome", limiter="per-key") == {
        "pass": 2, "block": 0, "shadow_block": 3}
    assert per.totals()["shadow_block"] == 3


def test_exposition_passes_prometheus_client_checks(folder):
    """The text format and OpenMetrics, parsed back by prometheus_client's own parsers;
    counters end in _total, every family has a HELP, units are in the names."""
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as om_parse)

    lim = Limiter(qps=2, name="api", shadow=True)
    with lim.entry():
        pass
    lim.try_acquire()
    lim.try_acquire()
    KeyedLimiter(qps=1, name="keys").try_acquire("a")
    Metric(name="m").add("pass")
    keep = [lim]  # noqa: F841
    reg = exposition(Collector())
    text = generate_latest(reg).decode()
    fams = list(text_string_to_metric_families(text))
    assert fams
    for line in text.splitlines():
        if line.startswith("# TYPE slidewin_"):
            _, _, name, typ = line.split()
            assert ("# HELP " + name + " ") in text
            if typ == "counter":
                assert name.endswith("_total"), name
    om_text = om_latest(reg).decode()
    assert om_text.endswith("# EOF\n")
    om_fams = {f.name: f for f in om_parse(om_text)}
    for f in fams:
        assert f.documentation, f.name
    names = {f.name for f in om_fams.values()}
    assert {"slidewin_decisions", "slidewin_completions", "slidewin_rt_seconds",
            "slidewin_window_avg_rt_seconds"} <= names
    for f in om_fams.values():
        if f.name.endswith("_seconds") or f.name.endswith("seconds"):
            assert f.unit in ("", "seconds")
        assert f.documentation
    # a gauge never carries _total, a counter's samples always do (OpenMetrics rule)
    for f in om_fams.values():
        for smp in f.samples:
            if f.type == "counter":
                assert smp.name.endswith(("_total", "_created")), smp.name
