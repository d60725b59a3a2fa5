"""`pip install .` then a command from the checkout's root: the checkout's slidewin/ (no built
extension) comes first on sys.path, and takes the installed extension of its own version."""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys

from conftest import skip_unless_ci

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "slidewin")


def _installed_core():
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").lower() == "slidewin":
            for f in dist.files or []:
                if str(f).startswith("slidewin/_core") and str(f).endswith(".so"):
                    return str(dist.locate_file(f))
    return None


def _source_copy(tmp_path, version=None):
    """The package's Python files without an extension, as a plain `pip install .` leaves
    a checkout."""
    dst = tmp_path / "slidewin"
    shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    if version is not None:
        init = dst / "__init__.py"
        text = init.read_text()
        init.write_text(text.replace('__version__ = "', f'__version__ = "{version}', 1))
    return tmp_path


def _run(cwd, *args):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_commands_from_a_checkout_without_a_built_extension(tmp_path):
    core = _installed_core()
    if core is None:
        skip_unless_ci("slidewin is not installed with its extension (pip install -e?)")
    root = _source_copy(tmp_path)
    r = _run(root, "-c", "import slidewin, slidewin._core as c; print(c.__file__);"
                         "print(slidewin.Limiter(qps=1).try_acquire())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [core, "True"]
    r = _run(root, "-m", "slidewin", "--seconds", "1", "--fast")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("slidewin demo: Limiter(qps=100.0)")


def test_a_checkout_of_another_version_says_how_to_fix_it(tmp_path):
    if _installed_core() is None:
        skip_unless_ci("slidewin is not installed with its extension (pip install -e?)")
    root = _source_copy(tmp_path, version="9.")
    r = _run(root, "-c", "import slidewin")
    assert r.returncode == 1
    assert "pip install -e ." in r.stderr and "this checkout: 9.0.1.0" in r.stderr, r.stderr
