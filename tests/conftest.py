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
# or through other fixtures, is one of tests/redis_servers.py (redis_server, r, own_server).
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


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        if item.get_closest_marker("server") is None and _uses_server_fixtures(item):
            item.add_marker(pytest.mark.server)
