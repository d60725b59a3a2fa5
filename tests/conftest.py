"""Test setup: the installed slidewin is the one under test, and tests/refmodel.py imports.

`python -m pytest` from a checkout puts the checkout's root first on sys.path. After a plain
`pip install .` the checkout's slidewin/ holds only the Python sources (the built extension
went to site-packages), so it would shadow the installed package and fail to import its
`_core`. When the checkout's slidewin/ has no built extension, the root is taken off
sys.path before any test imports slidewin. An in-place build (`pip install -e .`) keeps it.
"""

import importlib.machinery
import os
import sys
import uuid

import pytest

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(_here)


def _has_built_core(package_dir):
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    try:
        names = os.listdir(package_dir)
    except OSError:
        return False
    return any(name.startswith("_core") and name.endswith(tuple(suffixes)) for name in names)


def _is_root(entry):
    return os.path.realpath(entry or os.curdir) == os.path.realpath(_root)


if os.path.isdir(os.path.join(_root, "slidewin")) and not _has_built_core(
    os.path.join(_root, "slidewin")
):
    sys.path[:] = [p for p in sys.path if not _is_root(p)]
    _loaded = sys.modules.get("slidewin")
    if _loaded is not None and _is_root(os.path.dirname(os.path.dirname(_loaded.__file__ or ""))):
        for _name in [m for m in sys.modules if m == "slidewin" or m.startswith("slidewin.")]:
            del sys.modules[_name]

if _here not in sys.path:
    sys.path.insert(0, _here)


@pytest.fixture
def name():
    """A region name of the test's own (the pid and a uuid: safe beside other tests and other
    runs at once), unlinked when the test ends."""
    import slidewin

    n = f"swtest-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield n
    slidewin.unlink(n)


@pytest.fixture
def forked():
    """Start forked workers: forked(target, *args) starts one and returns it. When the test
    ends, however it ends, each worker still running is killed, and every one is joined."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    started = []

    def start(target, *args):
        p = ctx.Process(target=target, args=args)
        p.start()
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            if p.is_alive():
                p.kill()
            p.join(30)


def skip_unless_ci(reason):
    """Skip a test whose requirement is missing on this machine, except in CI (`.ci/run`
    sets SLIDEWIN_CI=1), where every such test must run: there a missing requirement fails."""
    import pytest

    if os.environ.get("SLIDEWIN_CI"):
        pytest.fail("must run in CI: " + reason)
    pytest.skip(reason)


# ---- markers: the groups CI's passes select with -m (registered in pyproject.toml; the rules
# are in CONTRIBUTING.md). `server` follows from what a test uses, so that a new test file
# is grouped without a list to update: a test is a server test when a fixture it uses, directly
# or through other fixtures, is one of tests/redis_servers.py (redis_server, r, own_server,
# cluster).
# A test that starts servers otherwise (a fixture of its own calling Server(), gunicorn,
# uvicorn, tmux) and the `c_core` and `procs` tests say so themselves (`pytestmark`,
# `@pytest.mark.server`, `pytest.param(..., marks=pytest.mark.server)`).
SERVER_HELPERS = "redis_servers"


def _uses_server_fixtures(item):
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for d in defs:
            if getattr(getattr(d, "func", None), "__module__", None) == SERVER_HELPERS:
                return True
    return False


def _core_platform():
    try:
        from slidewin import _core
    except ImportError:
        return "linux"
    return getattr(_core, "_platform", "linux")


def pytest_collection_modifyitems(config, items):
    import pytest

    portable = _core_platform() != "linux"
    for item in items:
        if item.get_closest_marker("server") is None and _uses_server_fixtures(item):
            item.add_marker(pytest.mark.server)
        if portable and item.get_closest_marker("linux_core") is not None:
            item.add_marker(pytest.mark.skip(reason="the portable core (no /proc, PID "
                                             "namespaces or OFD locks) cannot do this"))


# ---- CI's free-threaded job (.ci/free-threaded.sh) -----------------------------------------
# SLIDEWIN_EXPECT_NO_GIL=1: the suite runs on a free-threaded CPython with the GIL off; a test
# after which the GIL is on (an extension that re-enabled it) fails, and so does the session.
# SLIDEWIN_MISSING_DEPS="mypy ...": test dependencies that have no build for that Python (the
# job could not install them): the tests that need one skip, naming it, instead of failing
# to import it. Unset (every other run), a missing dependency fails as usual.
_EXPECT_NO_GIL = os.environ.get("SLIDEWIN_EXPECT_NO_GIL", "") not in ("", "0")
_MISSING_DEPS = frozenset(os.environ.get("SLIDEWIN_MISSING_DEPS", "").split())
# tests that run a dependency as a program rather than importing it
_RUNS_DEP = {"test_typing.py": "mypy"}


def _gil_enabled():
    return getattr(sys, "_is_gil_enabled", lambda: True)()


def pytest_configure(config):
    import pytest

    if _EXPECT_NO_GIL and _gil_enabled():
        raise pytest.UsageError("SLIDEWIN_EXPECT_NO_GIL=1 but the GIL is enabled: not a "
                                "free-threaded Python, or PYTHON_GIL=0 is not set")


if _EXPECT_NO_GIL:
    import pytest as _pytest

    @_pytest.fixture(autouse=True)
    def _gil_stays_off():
        yield
        assert not _gil_enabled(), "the GIL was enabled during this test (an import of a " \
            "module that does not support free-threading?)"

    def pytest_sessionfinish(session, exitstatus):
        if _gil_enabled():
            sys.stderr.write("\nthe GIL is enabled at the end of the session\n")
            session.exitstatus = _pytest.ExitCode.TESTS_FAILED


if _MISSING_DEPS:
    import pytest as _pytest

    @_pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(collector):
        outcome = yield
        rep = outcome.get_result()
        if rep.failed and isinstance(collector, _pytest.Module):
            text = str(rep.longrepr)
            for dep in sorted(_MISSING_DEPS):
                if "No module named '%s'" % dep in text or "No module named '%s." % dep in text:
                    rep.outcome = "skipped"
                    rep.longrepr = (str(collector.path), 0, "Skipped: needs %s, which has no "
                                    "build for this Python (free-threaded)" % dep)
                    rep.result = []
                    break

    def pytest_runtest_setup(item):
        dep = _RUNS_DEP.get(os.path.basename(str(item.fspath)))
        if dep in _MISSING_DEPS:
            _pytest.skip("needs %s, which has no build for this Python (free-threaded)" % dep)
