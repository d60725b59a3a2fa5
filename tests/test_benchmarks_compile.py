"""The benchmark scripts at least parse (CI's smoke run executes them; this catches a broken
merge in seconds, in every pytest run)."""

import glob
import os
import py_compile

import pytest

from slidewin import Limiter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "benchmarks", "*.py")))


def test_there_are_benchmarks():
    assert any(s.endswith("run.py") for s in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=[os.path.basename(s) for s in SCRIPTS])
def test_benchmark_script_compiles(path, tmp_path):
    py_compile.compile(path, cfile=str(tmp_path / "x.pyc"), doraise=True)


# -- the benchmark-only helpers of the extension ---------------------------------------

def test_limiter_noop_exists():
    # the benchmark-only helpers are private module functions, not Limiter methods
    from slidewin import _core

    assert _core._noop() is None
    assert _core._try_acquire_nogil(Limiter(qps=1), now_ns=0) is True
    assert not hasattr(Limiter(qps=1), "_noop")


def test_the_benchmark_modules_import_no_circle():
    # every import between the scripts of benchmarks/, at any depth of the code (function
    # bodies too): none may lead back to the importer
    import ast

    local = {os.path.basename(s)[:-3] for s in SCRIPTS}
    edges = {}
    for path in SCRIPTS:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                deps.add(node.module.split(".")[0])
        edges[os.path.basename(path)[:-3]] = deps & local

    def reaches(start, goal, seen):
        for d in edges[start]:
            if d == goal or (d not in seen and reaches(d, goal, seen | {d})):
                return True
        return False

    circles = sorted(m for m in edges if reaches(m, m, {m}))
    assert not circles, f"import circles through: {circles}"
