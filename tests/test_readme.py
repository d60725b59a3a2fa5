"""Every ```python block of README.md runs exactly as printed.

Each block is compiled as it stands (a block that does not parse fails) and executed in a
fresh namespace, with nothing prepended or replaced: a block brings its own imports and
defines any stand-in it uses. The blocks assert their own results; where a block prints, a
comment that shows a value (`print(x)  # 1.0: ...`) must start with what the line printed.
Signature listings that are not runnable code belong in another fence (```text).
"""
import gc
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")


def python_blocks(text):
    """(line number of the first code line, code) for every ```python fence of `text`."""
    blocks = []
    for match in re.finditer(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start(1)) + 1
        blocks.append((line, match.group(1)))
    return blocks


with open(README, encoding="utf-8") as _f:
    BLOCKS = python_blocks(_f.read())


# a comment that states a printed value: a number, a quoted string, a list or tuple, a constant
_VALUE_COMMENT = re.compile(r"""^\s*print\(.*\)\s*#\s*([-0-9'"\[(]|True|False|None)""")


def printed_claims(code):
    """The comments of the block's print lines, in order, and whether each states a value."""
    claims = []
    for src in code.splitlines():
        if re.match(r"^\s*print\(", src):
            comment = src.split("#", 1)[1].strip() if "#" in src else ""
            claims.append((comment, bool(_VALUE_COMMENT.match(src))))
    return claims


def test_readme_has_its_examples():
    # the quick start and the six behaviours at least; a regex that stopped matching would
    # otherwise pass by running nothing
    assert len(BLOCKS) >= 7


def test_printed_claims_are_found():
    code = "print(x)  # 1.0: one\nprint(s)  # pass_qps, ...\ny = 2\n"
    assert printed_claims(code) == [("1.0: one", True), ("pass_qps, ...", False)]


def test_block_finder_sees_every_python_fence():
    text = "a\n```python\nx = 1\n```\n```text\nnot python\n```\n```python\ny = (\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (9, "y = (\n")]


@pytest.mark.parametrize("line,code", BLOCKS, ids=["README.md:%d" % line for line, _ in BLOCKS])
def test_readme_block_runs_as_printed(line, code, capsys, tmp_path, monkeypatch):
    compiled = compile(code, "README.md:%d" % line, "exec")  # SyntaxError: the block is broken
    # the shared= examples make their regions in a folder of this test, not in /dev/shm
    monkeypatch.setenv("SLIDEWIN_SHM_DIR", str(tmp_path))
    namespace = {"__name__": "__readme__"}
    try:
        exec(compiled, namespace)
    finally:
        # the block's objects go now (named limiters leave slidewin.limiters(), regions are
        # unmapped), not whenever the garbage collector gets to their cycles
        namespace.clear()
        gc.collect()
    claims = printed_claims(code)
    if any(states for _, states in claims):
        out = capsys.readouterr().out.splitlines()
        assert len(out) == len(claims), (out, claims)  # one line per print, in order
        for printed, (comment, states) in zip(out, claims):
            if states:
                assert comment.startswith(printed), (
                    "README.md:%d prints %r where its comment says %r" % (line, printed, comment)
                )
