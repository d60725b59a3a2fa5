"""The .pyi stubs and inline annotations type-check a user's program under mypy --strict."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def mypy_strict(*args: str) -> "subprocess.CompletedProcess[str]":
    """mypy --strict on a file or `-c` code: its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        timeout=300,
    )


def test_mypy_strict_accepts_typical_usage() -> None:
    example = os.path.join(HERE, "data", "typing_example.py")
    proc = mypy_strict(example)
    assert proc.returncode == 0, proc.stdout


def test_mypy_rejects_a_wrong_type() -> None:
    code = "from slidewin import Metric\nx: str = Metric().sum('pass')\n"
    proc = mypy_strict("-c", code)
    assert proc.returncode != 0
    assert "Incompatible types" in proc.stdout


def test_limiters_is_typed_with_the_public_classes() -> None:
    # slidewin.limiters() holds the objects users made: slidewin.Limiter / KeyedLimiter
    # (with acquire_async, entry's timeout...), Metric and Breaker, not the private _core bases
    code = (
        "import slidewin\n"
        "async def f() -> None:\n"
        "    for obj in slidewin.limiters().values():\n"
        "        if isinstance(obj, (slidewin.Metric, slidewin.Breaker)):\n"
        "            continue\n"
        "        reveal_type(obj)\n"
        "        if isinstance(obj, slidewin.KeyedLimiter):\n"
        "            await obj.acquire_async('user-1', timeout=1.0)\n"
        "        else:\n"
        "            await obj.acquire_async(1, timeout=1.0)\n"
    )
    proc = mypy_strict("-c", code)
    assert proc.returncode == 0, proc.stdout
    assert "slidewin._limiter.Limiter" in proc.stdout, proc.stdout
    assert "slidewin._keyed.KeyedLimiter" in proc.stdout, proc.stdout


def test_limiters_is_typed_with_every_type_that_takes_a_name() -> None:
    # every public type whose objects slidewin.limiters() can hold is in its declared type
    import slidewin

    made = [slidewin.Metric(name="t-metric"), slidewin.Limiter(qps=1, name="t-limiter"),
            slidewin.AdaptiveLimiter(name="t-adaptive"),
            slidewin.KeyedLimiter(qps=1, name="t-keyed"),
            slidewin.Breaker(error_ratio=0.5, name="t-breaker")]
    live = slidewin.limiters()
    assert all(live[obj.name] is obj for obj in made)
    code = "import slidewin\nreveal_type(slidewin.limiters())\n"
    proc = mypy_strict("-c", code)
    assert proc.returncode == 0, proc.stdout
    for obj in made:
        cls = type(obj)
        # "A | B" (newer mypy) or "Union[A, B]" (older)
        spaced = proc.stdout.replace("]", " ").replace(",", " ")
        assert f".{cls.__qualname__} " in spaced, (cls, proc.stdout)


def test_pyflakes_finds_nothing_in_the_package() -> None:
    # no unused import, no redefined name, no undefined name in slidewin/ (its .py files)
    pytest.importorskip("pyflakes")
    proc = subprocess.run(
        [sys.executable, "-m", "pyflakes", os.path.join(os.path.dirname(HERE), "slidewin")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
