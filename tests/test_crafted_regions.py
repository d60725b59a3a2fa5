"""Crafted regions: a region file is input, and a folder such as
/dev/shm is shared with other users.

- The observers (``list_regions``, ``read_region``, the Prometheus ``Collector``,
  ``python -m slidewin top``) read only the regions owned by the process's own effective
  uid, each file once however many names (hard links) it has.
- A ring head within a window of INT64_MAX is refused with a ValueError by a reader and by
  an attach, instead of looping for ever (run in a subprocess with a deadline: a hang fails
  the test instead of wedging pytest).
- ``slidewin.unlink()`` removes only slidewin regions of this user.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys

import pytest

import slidewin
from slidewin import Limiter, Metric, _core, _observe

S = 10**9
OTHER_UID = 65534  # nobody
INT64_MAX = 2**63 - 1
HANG_DEADLINE_S = 20  # generous: a read of a 2 KB region takes microseconds

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown a file to "
                                "another user")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A private SLIDEWIN_SHM_DIR: list_regions() sees only this test's regions."""
    monkeypatch.setenv("SLIDEWIN_SHM_DIR", str(tmp_path))
    return tmp_path


def give_away(path, uid=OTHER_UID):
    os.chown(path, uid, uid)
    os.chmod(path, 0o644)  # world-readable, as a crafted file may be


def foreign_copy(folder, src_name, dst_name):
    """A copy of a good region of this user, owned by another user: its header and state
    are a real region's (it would be read if ownership were not checked)."""
    dst = folder / f"slidewin-{dst_name}"
    shutil.copyfile(folder / f"slidewin-{src_name}", dst)
    give_away(dst)
    return dst


# ---- regions of other users ------------------------------------------------------------

def test_list_regions_skips_other_users_regions(folder):
    lim = Limiter(qps=5, shared="mine", name="api")
    lim.try_acquire(now_ns=S)
    foreign_copy(folder, "mine", "evil")
    assert _core.list_regions() == [str(folder / "slidewin-mine")]
    assert [r.path for r in _observe.read_regions()] == [str(folder / "slidewin-mine")]


def test_read_region_refuses_another_users_region(folder):
    lim = Limiter(qps=5, shared="mine")
    lim.try_acquire(now_ns=S)
    evil = foreign_copy(folder, "mine", "evil")
    with pytest.raises(PermissionError, match=r"uid 65534.*uid 0|belongs to uid 65534"):
        _core.read_region(str(evil))
    # our own region still reads
    assert _core.read_region("mine", now_ns=S)["window"]["pass"] == 1


def test_collector_and_top_do_not_show_another_users_label(folder):
    from prometheus_client import CollectorRegistry, generate_latest

    from slidewin import _top
    from slidewin.prometheus import Collector

    lim = Limiter(qps=5, shared="mine", name="api")
    for _ in range(3):
        lim.try_acquire(now_ns=S)
    foreign_copy(folder, "mine", "evil")  # its header says name "api" too
    reg = CollectorRegistry()
    reg.register(Collector(local=False))
    text = generate_latest(reg).decode()
    assert "evil" not in text
    assert text.count('limiter="api"') >= 1
    assert 'limiter="api_' not in text  # no second "api" series took a suffixed label
    rows = _observe.read_regions()
    assert [r.name for r in rows] == ["api"]
    out = subprocess.run([sys.executable, "-m", "slidewin", "top", "--once"],
                         capture_output=True, text=True, timeout=HANG_DEADLINE_S,
                         env=dict(os.environ), cwd=str(folder))  # outside the checkout
    assert out.returncode == 0, out.stderr
    assert "api" in out.stdout and "evil" not in out.stdout
    del _top


def test_attach_refuses_another_users_region(folder):
    lim = Limiter(qps=5, shared="mine")
    lim.try_acquire(now_ns=S)
    foreign_copy(folder, "mine", "evil")
    with pytest.raises(PermissionError):
        Limiter(qps=5, shared="evil")


# ---- hard links ------------------------------------------------------------------------

def test_hard_links_are_listed_and_scraped_once(folder, monkeypatch):
    from prometheus_client import CollectorRegistry, generate_latest

    from slidewin.prometheus import Collector

    lim = Limiter(qps=5, shared="a", name="api")
    lim.try_acquire(now_ns=S)
    for i in range(300):
        os.link(folder / "slidewin-a", folder / f"slidewin-link{i:03d}")
    assert _core.list_regions() == [str(folder / "slidewin-a")]
    reads = []
    real = _core.read_region

    def counting(path, **kw):
        reads.append(path)
        return real(path, **kw)

    monkeypatch.setattr(_core, "read_region", counting)
    reg = CollectorRegistry()
    reg.register(Collector(local=False))
    text = generate_latest(reg).decode()
    assert len(reads) == 1
    assert 'slidewin_requests_total{kind="limiter",limiter="api",outcome="pass"} 1.0' in text


# ---- a ring head near INT64_MAX ---------------------------------------------------------

HEAD_MS = 987_654_321_500  # a bucket start (window 500 ms) no other word of the region holds


def craft_head(path, old, new):
    """Replace every int64 word equal to `old` (the ring's head, newest and its slot's start)
    with `new`."""
    with open(path, "rb") as f:
        data = f.read()
    pat = struct.pack("<q", old)
    assert data.count(pat) >= 2, "the head's value is not in the region"
    with open(path, "wb") as f:
        f.write(data.replace(pat, struct.pack("<q", new)))


def near_max(window_ms):
    return INT64_MAX - INT64_MAX % window_ms  # a bucket start within a window of INT64_MAX


def run_py(code, folder):
    """Run code in a fresh interpreter with a deadline: a hang is a failure, not a wedge."""
    env = dict(os.environ, SLIDEWIN_SHM_DIR=str(folder))
    try:
        # run outside the checkout (see conftest.py: the installed slidewin is the one tested)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=HANG_DEADLINE_S, env=env, cwd=str(folder))
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {HANG_DEADLINE_S} s (killed): {code}")


READ = """
import slidewin
try:
    slidewin._core.read_region({name!r})
except ValueError as e:
    print("ValueError:", e)
else:
    print("read")
"""

ATTACH = """
import slidewin
try:
    {ctor}
except ValueError as e:
    print("ValueError:", e)
else:
    print("attached")
"""


@pytest.mark.procs
@pytest.mark.parametrize("kind", ["metric", "limiter"])
def test_head_near_int64_max_is_refused_not_a_hang(folder, kind):
    if kind == "metric":
        m = Metric(1000, 2, shared="crafted")
        m.add("pass", 1, now_ns=HEAD_MS * 10**6)
        ctor = "slidewin.Metric(1000, 2, shared='crafted')"
        del m
    else:
        lim = Limiter(qps=5, shared="crafted")
        lim.try_acquire(now_ns=HEAD_MS * 10**6)
        ctor = "slidewin.Limiter(qps=5, shared='crafted')"
        del lim
    craft_head(folder / "slidewin-crafted", HEAD_MS, near_max(500))
    out = run_py(READ.format(name="crafted"), folder)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ValueError:") and "damaged" in out.stdout, out.stdout
    out = run_py(ATTACH.format(ctor=ctor), folder)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ValueError:") and "damaged" in out.stdout, out.stdout
    # a scrape lists it and reports it as an error row, in time
    out = run_py("from slidewin import _observe\n"
                 "print([(r.name, bool(r.error)) for r in _observe.read_regions()])", folder)
    assert out.returncode == 0, out.stderr
    assert "('crafted', True)" in out.stdout


# ---- unlink -----------------------------------------------------------------------------

def test_unlink_removes_only_slidewin_regions(folder, tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_bytes(b"not a region" * 200)
    with pytest.raises(ValueError, match="not a slidewin"):
        slidewin.unlink(str(victim))
    assert victim.exists()
    short = folder / "slidewin-short"
    short.write_bytes(b"SLIDEWIN")  # the magic alone is not a region
    with pytest.raises(ValueError, match="not a slidewin"):
        slidewin.unlink("short")
    assert short.exists()
    os.mkdir(folder / "slidewin-dir")
    with pytest.raises(ValueError, match="not a slidewin"):
        slidewin.unlink("dir")
    assert (folder / "slidewin-dir").is_dir()
    target = tmp_path / "target"
    target.write_bytes(b"x")
    os.symlink(target, folder / "slidewin-link")
    with pytest.raises(ValueError, match="symbolic link"):
        slidewin.unlink("link")
    assert os.path.lexists(folder / "slidewin-link") and target.exists()
    # a region of another user is not ours to remove
    Limiter(qps=5, shared="mine")
    foreign_copy(folder, "mine", "theirs")
    with pytest.raises(PermissionError):
        slidewin.unlink("theirs")
    assert (folder / "slidewin-theirs").exists()
    # ours go; an absent one is False
    assert slidewin.unlink("mine") is True
    assert not (folder / "slidewin-mine").exists()
    assert slidewin.unlink("mine") is False


def test_unlink_removes_a_region_of_an_older_layout(folder):
    """An upgrade removes its old regions with unlink() (README): the magic and this user's
    ownership are enough, whatever the layout version."""
    Limiter(qps=5, shared="old")
    path = folder / "slidewin-old"
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", 3))  # layout version 3
    with pytest.raises(ValueError, match="incompatible"):
        Limiter(qps=5, shared="old")
    assert slidewin.unlink("old") is True
    assert not path.exists()
