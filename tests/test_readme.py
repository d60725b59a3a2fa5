"""Every ```python block of README.md, CONTRIBUTING.md and docs/*.md runs exactly as printed.

Each block is compiled as it stands (a block that does not parse fails) and executed in a
fresh namespace, with nothing prepended or replaced: a block brings its own imports and
defines any stand-in it uses. The blocks assert their own results; where a block prints, a
comment that shows a value (`print(x)  # 1.0: ...`) must start with what the line printed.
Signature listings that are not runnable code belong in another fence (```text).

A block that cannot run on its own (it needs a server, say) says so on the line just above
its fence, visibly in the Markdown source: `<!-- not run: needs a Redis server -->`. Such a
block is still compiled, and shows as a skipped test with that reason.
"""
import gc
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
# the README, the contributors' page and every page of docs/ (pages added later included)
PAGES = [README, os.path.join(ROOT, "CONTRIBUTING.md")] + sorted(
    glob.glob(os.path.join(ROOT, "docs", "*.md")))

_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->[ \t]*\n", re.M)


def python_blocks(text):
    """(line number of the first code line, code) for every ```python fence of `text`."""
    return [(line, code) for line, code, _ in marked_python_blocks(text)]


def marked_python_blocks(text):
    """(line, code, reason) for every ```python fence; `reason` is the text of a
    `<!-- not run: reason -->` line just above the fence, else None."""
    blocks = []
    for match in re.finditer(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start(1)) + 1
        before = text.rfind("\n", 0, match.start() - 1) + 1  # start of the line above
        marker = _NOT_RUN.match(text, before) if match.start() > 0 else None
        reason = (marker.group(1) or None) if marker and marker.end() == match.start() else None
        blocks.append((line, match.group(1), reason))
    return blocks


def stray_markers(text):
    """Line numbers of `not run` markers that are not just above a ```python fence, or give
    no reason: a marker must say why, and must mark a block."""
    bad = []
    for marker in _NOT_RUN.finditer(text):
        if not marker.group(1) or not text.startswith("```python", marker.end()):
            bad.append(text.count("\n", 0, marker.start()) + 1)
    return bad


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _rel(path):
    return os.path.relpath(path, ROOT)


BLOCKS = python_blocks(_read(README))
ALL_BLOCKS = [(_rel(path), line, code, reason)
              for path in PAGES for line, code, reason in marked_python_blocks(_read(path))]


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
    # the quick start (a function, workers, per user, Redis) at least; a regex that stopped
    # matching would otherwise pass by running nothing
    assert len(BLOCKS) >= 4


def test_docs_have_their_examples():
    pages = {page for page, _, _, _ in ALL_BLOCKS}
    assert "docs/behaviours.md" in pages and "docs/keys.md" in pages
    assert len(ALL_BLOCKS) >= 30
    # only a few blocks may go unrun, each saying why
    assert sum(reason is not None for *_, reason in ALL_BLOCKS) <= 5


def test_printed_claims_are_found():
    code = "print(x)  # 1.0: one\nprint(s)  # pass_qps, ...\ny = 2\n"
    assert printed_claims(code) == [("1.0: one", True), ("pass_qps, ...", False)]


def test_block_finder_sees_every_python_fence():
    text = "a\n```python\nx = 1\n```\n```text\nnot python\n```\n```python\ny = (\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (9, "y = (\n")]


def test_not_run_marker_applies_to_the_next_fence_only():
    text = ("<!-- not run: needs a Redis server -->\n```python\nx = 1\n```\n"
            "<!-- not run: needs a Redis server -->\n\n```python\ny = 1\n```\n"
            "<!-- not run: -->\n```python\nz = 1\n```\n"
            "```python\nw = 1\n```\n")
    assert marked_python_blocks(text) == [
        (3, "x = 1\n", "needs a Redis server"), (8, "y = 1\n", None), (12, "z = 1\n", None),
        (15, "w = 1\n", None)]
    # a marker with a blank line before its fence, or with no reason, is an error
    assert stray_markers(text) == [5, 10]


@pytest.mark.parametrize("path", PAGES, ids=[_rel(p) for p in PAGES])
def test_not_run_markers_are_well_placed(path):
    assert stray_markers(_read(path)) == [], _rel(path)


def run_block(where, code, capsys, tmp_path, monkeypatch):
    """Run one block as printed; raise whatever it raises; check its printed values."""
    compiled = compile(code, where, "exec")  # SyntaxError: the block is broken
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
                    "%s prints %r where its comment says %r" % (where, printed, comment)
                )


def test_a_block_that_raises_fails(capsys, tmp_path, monkeypatch):
    with pytest.raises(ZeroDivisionError):
        run_block("x.md:1", "1 / 0\n", capsys, tmp_path, monkeypatch)
    with pytest.raises(AssertionError):
        run_block("x.md:1", "print(1)  # 2\n", capsys, tmp_path, monkeypatch)


@pytest.mark.parametrize(
    "page,line,code,reason", ALL_BLOCKS,
    ids=["%s:%d" % (page, line) for page, line, _, _ in ALL_BLOCKS])
def test_block_runs_as_printed(page, line, code, reason, capsys, tmp_path, monkeypatch):
    where = "%s:%d" % (page, line)
    if reason is not None:
        compile(code, where, "exec")  # an unrun block must still parse
        pytest.skip("not run (%s): %s" % (where, reason))
    run_block(where, code, capsys, tmp_path, monkeypatch)
