"""Build and run the Python-free C test binary (`make -C csrc test`) from pytest, so that one
command runs every test, C and Python."""
import os
import re
import shutil
import subprocess

import pytest

# CI runs the C suite once (the README's pytest); the other passes deselect it
pytestmark = pytest.mark.c_core

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")


def test_c_core_suite_passes() -> None:
    if shutil.which("make") is None or shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.fail("the C tests need make and a C compiler (cc) on PATH")
    proc = subprocess.run(
        # the test binary and the fuzz replayer are built side by side (two compilers of
        # the whole core: most of this test's time)
        ["make", "-s", "-j%d" % max(1, min(4, os.cpu_count() or 1)), "-C", CSRC, "test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        timeout=600,
    )
    out = proc.stdout
    m = re.findall(r"(\d+) passed, (\d+) failed", out)
    assert proc.returncode == 0, out[-4000:]
    assert m, "no closing 'N passed, M failed' line:\n" + out[-4000:]
    passed, failed = (int(x) for x in m[-1])
    assert failed == 0, out[-4000:]
    assert passed > 0
