"""The observers' side: ``slidewin._core.read_region`` and ``list_regions`` read regions
without attaching (read-only mapping, no lock, no process slot, no write), also while other
processes are busy with them; a file that is not a good region is a ValueError."""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import pytest

import slidewin
from slidewin import BlockedError, KeyedLimiter, Limiter, Metric, _core

S = 10**9
TOTALS = {"pass", "block", "exception", "success", "occupied_pass", "rt", "shadow_block"}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A private SLIDEWIN_SHM_DIR: list_regions() sees only this test's regions."""
    monkeypatch.setenv("SLIDEWIN_SHM_DIR", str(tmp_path))
    return tmp_path


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_each_kind_reads_back(folder):
    lim = Limiter(qps=3, shared="lim", name="Checkout")
    for _ in range(5):
        lim.try_acquire(now_ns=S)
    per = KeyedLimiter(concurrency=2, shared="per", max_keys=8)
    per.try_acquire("a")
    m = Metric(1000, 2, events=("sent", "dropped"), shared="met")
    m.add("sent", 4, now_ns=S)

    r = _core.read_region("lim", now_ns=S)
    assert r["kind"] == "limiter" and r["name"] == "Checkout"
    assert r["path"] == str(folder / "slidewin-lim")
    assert (r["interval_ms"], r["sample_count"], r["version"]) == (1000, 2, _core.LAYOUT_VERSION)
    assert r["totals"] == lim.totals()
    assert r["window"]["pass"] == 3 and r["window"]["block"] == 2
    assert set(r["window"]) >= {"pass", "block", "success", "exception", "rt", "min_rt"}
    assert r["in_flight"] == 0 and r["waiters"] == 0

    k = _core.read_region(str(folder / "slidewin-per"))
    assert k["kind"] == "keyed" and k["name"] == "per" and k["max_keys"] == 8
    assert k["in_flight"] == 1 and k["keys"] == 1 and k["evicted"] == 0
    assert k["totals"]["pass"] == 1

    g = _core.read_region("met", now_ns=S)
    assert g["kind"] == "metric" and g["totals"] is None
    assert g["window"] == {"sent": 4, "dropped": 0}

    assert _core.list_regions() == sorted(str(folder / f"slidewin-{n}")
                                          for n in ("lim", "per", "met"))


def test_reading_writes_nothing(folder):
    lim = Limiter(concurrency=3, shared="quiet")
    lim.try_acquire()
    path = folder / "slidewin-quiet"
    before = digest(path)
    for _ in range(20):
        _core.read_region("quiet")
    assert digest(path) == before
    os.chmod(path, 0o400)  # a read-only file is enough for an observer
    try:
        assert _core.read_region(str(path))["in_flight"] == 1
    finally:
        os.chmod(path, 0o600)


def _busy(name, seconds):
    # plain decisions on the clock, each process on a lease of the head bucket (its permits
    # counted as passes at once, those left taken back when a bucket starts: the passes an
    # observer reads are the used ones, never going back), and entries (in flight)
    lim = Limiter(qps=10_000_000, shared=name)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lim.try_acquire()
        try:
            with lim.entry():
                pass
        except BlockedError:
            pass


@pytest.mark.procs
def test_regions_other_processes_are_busy_with(folder, forked):
    Limiter(qps=10_000_000, shared="busy")
    procs = [forked(_busy, "busy", 1.5) for _ in range(2)]
    try:
        last = None
        reads = 0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            r = _core.read_region("busy")
            t = r["totals"]
            assert set(t) == TOTALS and all(v >= 0 for v in t.values())
            if last is not None:
                assert all(t[k] >= last[k] for k in TOTALS)  # monotonic between reads
            assert 0 <= r["in_flight"] <= 2
            assert all(v >= 0 for v in r["window"].values())
            last = t
            reads += 1
    finally:
        for p in procs:
            p.join(30)
    assert reads > 0
    final = _core.read_region("busy")["totals"]
    assert final == Limiter(qps=10_000_000, shared="busy").totals()
    assert final["pass"] > 0


# (ids: the random content differs in each process; pytest-xdist's workers must collect the
# same test names)
@pytest.mark.parametrize("content", [b"", b"hello", b"SLIDEWIN" + b"\0" * 4000,
                                     os.urandom(8192)],
                         ids=["empty", "text", "header-only", "random"])
def test_bad_files_are_value_errors(folder, content):
    path = folder / "slidewin-bad"
    path.write_bytes(content)
    with pytest.raises(ValueError):
        _core.read_region(str(path))
    assert str(path) not in _core.list_regions()


def test_damaged_regions_are_value_errors(folder):
    Limiter(qps=5, shared="good")
    good = (folder / "slidewin-good").read_bytes()
    cases = {
        "truncated": good[: len(good) // 2],
        "version": good[:8] + (99).to_bytes(4, "little") + good[12:],
        "state": good[: len(good) - 4096] + os.urandom(4096),
    }
    for label, data in cases.items():
        p = folder / f"slidewin-{label}"
        p.write_bytes(data)
        if label == "state":
            try:
                _core.read_region(str(p))  # damage may miss every checked field: then a read
            except ValueError:
                pass
        else:
            with pytest.raises(ValueError):
                _core.read_region(str(p))
    with pytest.raises(FileNotFoundError):
        _core.read_region("absent")
    with pytest.raises(ValueError):
        _core.read_region(str(folder))  # a folder, not a region
    with pytest.raises(TypeError):
        _core.read_region(True)


def test_list_regions_of_an_explicit_folder(tmp_path):
    Limiter(qps=5, shared=str(tmp_path / "slidewin-one"))
    (tmp_path / "slidewin-junk").write_bytes(b"x" * 10)
    (tmp_path / "other").write_bytes(b"x")
    assert _core.list_regions(str(tmp_path)) == [str(tmp_path / "slidewin-one")]
    with pytest.raises(OSError):
        _core.list_regions(str(tmp_path / "missing"))


@pytest.mark.procs
def test_a_region_shrinking_while_read_is_an_error_never_a_crash(tmp_path, monkeypatch):
    """read_region reads with pread, not a mapping: a file truncated under it (by anyone who
    can write the folder) gives a short read, never a SIGBUS in the reading process."""
    import shutil
    import time

    from slidewin import Limiter, _core

    monkeypatch.setenv("SLIDEWIN_SHM_DIR", str(tmp_path))
    Limiter(qps=5, shared="orig").try_acquire()
    src, dst = tmp_path / "slidewin-orig", tmp_path / "slidewin-evil"
    shutil.copy(src, dst)
    data = src.read_bytes()
    pid = os.fork()
    if pid == 0:
        try:
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                with open(dst, "r+b") as f:
                    f.truncate(0)
                    f.write(data)
        finally:
            os._exit(0)
    good = bad = 0
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        try:
            _core.read_region(str(dst))
            good += 1
        except (ValueError, OSError):
            bad += 1
    os.waitpid(pid, 0)
    assert good + bad > 0          # and this process is alive to count them


def test_a_striped_keyed_region_reads_back_every_stripe(folder):
    """A shared table large enough for several stripes: read_region sums them all (keys,
    window, totals, in flight), reading each stripe where it lies."""
    per = KeyedLimiter(concurrency=100, shared="big", max_keys=4096)
    keys = ["k%d" % i for i in range(200)]
    for key in keys:
        assert per.try_acquire(key)
    k = _core.read_region("big", now_ns=S)
    assert k["kind"] == "keyed" and k["max_keys"] == 4096
    assert k["keys"] == 200 and k["in_flight"] == 200
    assert k["totals"]["pass"] == 200 == per.totals()["pass"]
    assert k["evicted"] == 0
