"""`python -m slidewin top`: --once / --json against regions other processes are busy with
(subprocesses, the table parsed back), and the live view in a real terminal: tmux runs it in
a detached session of a fixed size, the test reads the screen with capture-pane and types
sort keys and q with send-keys."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from slidewin import KeyedLimiter, Limiter, Metric, _core, _observe, _top

S = 10**9


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A private SLIDEWIN_SHM_DIR (inherited by the workers and the subprocesses)."""
    d = tmp_path / "shm"
    d.mkdir()
    monkeypatch.setenv("SLIDEWIN_SHM_DIR", str(d))
    return d


def top(*args, cwd, check=True):
    # run outside the checkout: see conftest.py (the installed slidewin is the one tested)
    r = subprocess.run([sys.executable, "-m", "slidewin", "top", *args], cwd=cwd,
                       capture_output=True, text=True, timeout=60)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def parse(lines):
    """The table's rows as dicts keyed by the header's titles (names without spaces)."""
    lines = [x for x in lines if x.strip()]
    head = lines[0].split()
    rows = []
    for line in lines[1:]:
        cells = line.split()
        rows.append(dict(zip(head, cells)))
    return head, rows


# --- workers: busy with their regions until told to stop (or a minute has passed) --------

def _busy(stop):
    fast = Limiter(qps=500, shared="zulu-fast")
    slow = Limiter(qps=20, shared="alpha-slow")
    users = KeyedLimiter(qps=5, shared="users", max_keys=64)
    hits = Metric(1000, 2, events=("hit", "miss"), shared="hits")
    end = time.monotonic() + 60
    i = 0
    while not stop.is_set() and time.monotonic() < end:
        i += 1
        fast.try_acquire()
        slow.try_acquire()
        users.try_acquire(f"user-{i % 6}")
        hits.add("hit" if i % 3 else "miss")
        if i % 8 == 0:
            time.sleep(0.001)


def _holding(stop):
    pool = Limiter(concurrency=5, shared="pool")
    held = [pool.entry() for _ in range(3)]
    for e in held:
        e.__enter__()
    stop.wait(60)
    for e in held:
        e.__exit__(None, None, None)


@pytest.fixture
def workers(folder):
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    procs = [ctx.Process(target=_busy, args=(stop,)), ctx.Process(target=_holding, args=(stop,))]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 30
        want = {"zulu-fast", "alpha-slow", "users", "hits", "pool"}
        while time.monotonic() < deadline:
            rows = _observe.read_regions()
            names = {r.name for r in rows}
            pool = [r for r in rows if r.name == "pool"]
            if names >= want and pool and pool[0].in_flight == 3:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the workers did not start in 30 s")
        yield procs
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)


# --- --once and --json ---------------------------------------------------------------------

@pytest.mark.procs
def test_once_against_busy_regions(folder, workers, tmp_path):
    before = {r.name: r for r in _observe.read_regions()}
    r = top("--once", cwd=tmp_path)
    after = {r.name: r for r in _observe.read_regions()}
    head, rows = parse(r.stdout.splitlines())
    assert head == ["NAME", "KIND", "PASS/s", "BLOCK/s", "IN_FLIGHT", "WAITING", "AVG_RT_MS",
                    "PASS_TOTAL", "BLOCK_TOTAL", "SHADOW_TOTAL", "KEYS", "LIMIT"]
    by = {row["NAME"]: row for row in rows}
    assert set(by) == {"zulu-fast", "alpha-slow", "users", "hits", "pool"}
    assert {n: row["KIND"] for n, row in by.items()} == {
        "zulu-fast": "limiter", "alpha-slow": "limiter", "users": "keyed", "hits": "metric",
        "pool": "limiter"}
    for name in ("zulu-fast", "alpha-slow", "users", "pool"):
        got = int(by[name]["PASS_TOTAL"]), int(by[name]["BLOCK_TOTAL"])
        assert before[name].totals["pass"] <= got[0] <= after[name].totals["pass"]
        assert before[name].totals["block"] <= got[1] <= after[name].totals["block"]
    assert by["pool"]["IN_FLIGHT"] == "3"
    assert 1 <= int(by["users"]["KEYS"]) <= 6
    assert by["hits"]["PASS_TOTAL"] == "-" and by["hits"]["IN_FLIGHT"] == "-"
    assert by["zulu-fast"]["KEYS"] == "-"
    # the window's rates, busiest first
    rates = [float(row["PASS/s"]) for row in rows if row["PASS/s"] != "-"]
    assert rates == sorted(rates, reverse=True)
    assert 0 <= float(by["alpha-slow"]["PASS/s"]) <= 20 * 2  # a 1 s window of a 20 qps limit

    _, rows = parse(top("--once", "--sort", "name", cwd=tmp_path).stdout.splitlines())
    assert [row["NAME"] for row in rows] == sorted(by)
    _, rows = parse(top("--once", "--sort", "in_flight", cwd=tmp_path).stdout.splitlines())
    assert rows[0]["NAME"] == "pool"


@pytest.mark.procs
def test_json(folder, workers, tmp_path):
    got = json.loads(top("--json", cwd=tmp_path).stdout)
    by = {r["name"]: r for r in got}
    assert set(by) == {"zulu-fast", "alpha-slow", "users", "hits", "pool"}
    assert by["pool"]["in_flight"] == 3 and by["pool"]["error"] is None
    assert by["users"]["kind"] == "keyed" and by["users"]["keys"] >= 1
    assert by["hits"]["totals"] is None and set(by["hits"]["window"]) == {"hit", "miss"}
    assert set(by["zulu-fast"]["totals"]) == {"pass", "block", "exception", "success",
                                              "occupied_pass", "rt", "shadow_block"}
    assert by["zulu-fast"]["path"] == str(folder / "slidewin-zulu-fast")


def test_no_regions_and_other_folders(folder, tmp_path):
    r = top("--once", cwd=tmp_path)
    assert r.stdout == "" and f"no slidewin regions in {folder}" in r.stderr
    assert json.loads(top("--json", cwd=tmp_path).stdout) == []
    missing = tmp_path / "missing"
    r = top("--once", "--folder", str(missing), cwd=tmp_path)
    assert f"no slidewin regions in {missing}" in r.stderr
    # files that are not regions are not listed; a region elsewhere, with --folder
    (folder / "slidewin-junk").write_bytes(os.urandom(5000))
    (folder / "slidewin-empty").write_bytes(b"")
    other = tmp_path / "other"
    other.mkdir()
    lim = Limiter(qps=5, shared=str(other / "slidewin-elsewhere"), name="Elsewhere")
    lim.try_acquire()
    assert "no slidewin regions" in top("--once", cwd=tmp_path).stderr
    _, rows = parse(top("--once", "--folder", str(other), cwd=tmp_path).stdout.splitlines())
    assert [(r["NAME"], r["PASS_TOTAL"]) for r in rows] == [("Elsewhere", "1")]


def test_bad_arguments_and_no_terminal(tmp_path):
    assert top("--interval", "0", cwd=tmp_path, check=False).returncode == 2
    r = subprocess.run([sys.executable, "-m", "slidewin", "top"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "--once" in r.stderr  # the live view needs a terminal
    # the demo stays the default command
    r = subprocess.run([sys.executable, "-m", "slidewin", "--seconds", "2", "--fast"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "slidewin demo" in r.stdout


def test_unreadable_regions_are_error_rows(folder, monkeypatch):
    """A region damaged between the listing and the read is a row saying so, and the rows of
    the others are unaffected; one removed in between is left out."""
    alive = [Limiter(qps=5, shared=n) for n in ("ok", "gone", "bad")]
    for lim in alive:
        lim.try_acquire(now_ns=S)
    real = _core.read_region

    def read(path, **kw):
        if path.endswith("slidewin-gone"):
            raise FileNotFoundError(2, "No such file or directory")
        if path.endswith("slidewin-bad"):
            raise ValueError("not a slidewin region (layout version 99)")
        return real(path, **kw)

    monkeypatch.setattr(_core, "read_region", read)
    rows = _top.sort_rows(_observe.read_regions(), {}, "pass", live=False)
    assert [(r.name, r.error is None) for r in rows] == [("ok", True), ("bad", False)]
    lines = _top.table(rows, {}, live=False)
    assert lines[2].split()[:2] == ["bad", "?"]
    assert lines[2].endswith("unreadable: not a slidewin region (layout version 99)")
    assert lines[1].split()[0] == "ok"


def test_rates_between_refreshes(folder):
    lim = Limiter(qps=1000, shared="r")
    sampler = _top.Sampler(None)
    _, rates = sampler.sample()
    assert rates == {}  # a first read has nothing to compare with
    for _ in range(50):
        lim.try_acquire()
    time.sleep(0.05)
    rows, rates = sampler.sample()
    (p, b, sh), = rates.values()
    assert p > 0 and b == 0 and sh == 0
    # a region made anew under the same name: no rate from the old one's totals
    del lim, rows
    _core.unlink("r")
    again = Limiter(qps=1000, shared="r")
    again.try_acquire()
    _, rates = sampler.sample()
    assert rates == {}


def test_shadow_refusals_apart_from_blocks(folder, tmp_path):
    """A shadow limiter's would-be refusals show as SHADOW_TOTAL (and shadow/s between
    refreshes), not as blocks: BLOCK_TOTAL and block/s count enforced refusals only."""
    shadow = Limiter(qps=3, shadow=True, shared="dry-run")
    enforcing = Limiter(qps=3, shared="enforced")
    sampler = _top.Sampler(None)
    sampler.sample()
    for i in range(10):
        assert shadow.try_acquire(now_ns=S + i)
        enforcing.try_acquire(now_ns=S + i)
    time.sleep(0.05)
    rows, rates = sampler.sample()
    by_path = {r.name: rates[r.path] for r in rows}
    assert by_path["dry-run"][1:] == (0.0, by_path["dry-run"][2]) and by_path["dry-run"][2] > 0
    assert by_path["enforced"][1] > 0 and by_path["enforced"][2] == 0
    _, got = parse(top("--once", cwd=tmp_path).stdout.splitlines())
    by = {row["NAME"]: row for row in got}
    assert (by["dry-run"]["PASS_TOTAL"], by["dry-run"]["BLOCK_TOTAL"],
            by["dry-run"]["SHADOW_TOTAL"]) == ("3", "0", "7")
    assert (by["enforced"]["PASS_TOTAL"], by["enforced"]["BLOCK_TOTAL"],
            by["enforced"]["SHADOW_TOTAL"]) == ("3", "7", "0")
    js = {r["name"]: r for r in json.loads(top("--json", cwd=tmp_path).stdout)}
    assert js["dry-run"]["totals"]["shadow_block"] == 7


# --- the live view in a real terminal (tmux) -----------------------------------------------

class Tmux:
    """A private tmux server (its own socket) with one detached session of a fixed size."""

    def __init__(self, tmp_path):
        self.sock = str(tmp_path / f"tmux-{uuid.uuid4().hex[:8]}")
        self.target = "top"

    def run(self, *args, check=True):
        return subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True,
                              timeout=30, check=check)

    def screen(self):
        return self.run("capture-pane", "-p", "-t", self.target).stdout.splitlines()

    def wait_for(self, what, predicate, timeout=20.0):
        """Poll the screen until predicate(lines) holds; the last screen on failure."""
        deadline = time.monotonic() + timeout
        lines = []
        while time.monotonic() < deadline:
            lines = self.screen()
            if predicate(lines):
                return lines
            time.sleep(0.1)
        pytest.fail(f"timed out waiting for {what}; the screen:\n" + "\n".join(lines))

    def kill(self):
        self.run("kill-server", check=False)


def table_rows(lines):
    """The live table's rows ({title: cell}) from a screen, [] before it shows."""
    for i, line in enumerate(lines):
        if line.split()[:2] == ["NAME", "KIND"]:
            body = []
            for row in lines[i + 1:]:
                if not row.strip() or row.startswith(("sort:", "...")):
                    break
                body.append(row)
            return parse([line] + body)[1]
    return []


def names(lines):
    return [r["NAME"] for r in table_rows(lines)]


@pytest.mark.procs
@pytest.mark.server  # tmux
def test_live_view_in_tmux(folder, workers, tmp_path):
    if shutil.which("tmux") is None:
        from conftest import skip_unless_ci

        skip_unless_ci("tmux is not installed (apt-get install tmux)")
    status = tmp_path / "status"
    err = tmp_path / "stderr"
    cmd = (f"cd {tmp_path} && SLIDEWIN_SHM_DIR={folder} {sys.executable} -m slidewin top "
           f"--interval 0.5 2>{err}; echo $? > {status}")
    t = Tmux(tmp_path)
    try:
        t.run("new-session", "-d", "-s", t.target, "-x", "150", "-y", "24", cmd)
        every = {"zulu-fast", "alpha-slow", "users", "hits", "pool"}
        head = f"slidewin top - {folder} - 5 regions"
        lines = t.wait_for("the table of the regions", lambda s: set(names(s)) == every
                           and s[0].startswith(head))
        assert any(x.startswith("sort: [p]ass/s [b]lock/s [i]n-flight [n]ame") for x in lines)

        def total(s, name="zulu-fast"):
            rows = {r["NAME"]: r for r in table_rows(s)}
            return int(rows[name]["PASS_TOTAL"]) if name in rows else None

        first = total(lines)
        t.wait_for("the numbers to change", lambda s: (total(s) or 0) > first)
        # rates from the totals between refreshes: a number once two reads were taken
        lines = t.wait_for("a rate", lambda s: any(
            r["NAME"] == "zulu-fast" and r["PASS/s"] != "-" and float(r["PASS/s"]) > 0
            for r in table_rows(s)))
        rows = {r["NAME"]: r for r in table_rows(lines)}
        assert rows["pool"]["IN_FLIGHT"] == "3" and rows["hits"]["KIND"] == "metric"
        assert rows["users"]["KIND"] == "keyed" and int(rows["users"]["KEYS"]) >= 1

        t.run("send-keys", "-t", t.target, "n")
        lines = t.wait_for("the name order", lambda s: names(s) == sorted(every)
                           and "(now name)" in s[-1])
        t.run("send-keys", "-t", t.target, "i")
        t.wait_for("the in-flight order", lambda s: names(s)[:1] == ["pool"]
                   and "(now in-flight)" in s[-1])
        t.run("send-keys", "-t", t.target, "p")
        t.wait_for("the pass/s order", lambda s: "(now pass/s)" in s[-1] and (
            names(s).index("zulu-fast") < names(s).index("alpha-slow")))

        # a smaller terminal: the view redraws to fit, footer on the last line
        t.run("resize-window", "-t", t.target, "-x", "70", "-y", "8")
        lines = t.wait_for("the redraw at 70x8", lambda s: len(s) == 8
                           and s[-1].startswith("sort:") and "more" in "".join(s))
        assert all(len(x) <= 70 for x in lines)
        t.run("resize-window", "-t", t.target, "-x", "150", "-y", "24")
        t.wait_for("the redraw at 150x24", lambda s: set(names(s)) == every)

        t.run("send-keys", "-t", t.target, "q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not status.exists():
            time.sleep(0.1)
        assert status.exists(), "top did not exit on q"
        time.sleep(0.1)
        assert status.read_text().strip() == "0", err.read_text()
        assert err.read_text() == ""
    finally:
        t.kill()


def test_once_into_a_closed_pipe_ends_quietly(folder, tmp_path):
    """`python -m slidewin top --once | head -1` (and the demo into `head`): the reader closes
    the pipe early; the command ends without a BrokenPipeError traceback on stderr."""
    keep = [Limiter(qps=5, shared=f"pipe{i}") for i in range(200)]  # a table past 4 KiB
    for args in (["top", "--once"], ["--seconds", "30", "--fast"]):
        proc = subprocess.Popen([sys.executable, "-m", "slidewin", *args], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout.readline()
        proc.stdout.close()
        _, err = proc.communicate(timeout=60)
        assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
        assert proc.returncode in (0, 141), (args, proc.returncode, err.decode())
    del keep


def test_observability_page_shows_tops_columns_as_top_prints_them():
    import os
    import re

    from slidewin import _top

    page = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "observability.md")
    with open(page, encoding="utf-8") as f:
        heads = re.findall(r"^(NAME +KIND .*)$", f.read(), re.M)
    assert [h.split() for h in heads] == [[c[0] for c in _top.columns(live)]
                                          for live in (True, False)]
