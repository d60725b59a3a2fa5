"""Every benchmark figure in the README and docs/ comes from one recorded run.

``benchmarks/results/latest.json`` must be one full run of one clean commit, and every
generated block (``<!-- bench:NAME -->``) must be exactly what ``benchmarks/render.py``
writes from it: a figure typed by hand, or a run of some sections only, fails here.
"""
import copy
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
LATEST = os.path.join(BENCH, "results", "latest.json")


@pytest.fixture(scope="module")
def render():
    sys.path.insert(0, BENCH)
    try:
        import render as mod
        yield mod
    finally:
        sys.path.remove(BENCH)


@pytest.fixture(scope="module")
def latest():
    with open(LATEST) as f:
        return json.load(f)


def test_the_recorded_run_is_one_run_of_one_clean_commit(render, latest):
    commit, date = render.one_run(latest)
    assert commit and date
    assert set(latest["sections"]) >= {"decision", "threads", "shared", "keyed", "redis"}


def test_every_generated_block_is_what_the_run_says(render, latest):
    stale = []
    blocks = 0
    for path in render.targets():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        blocks += len(render.BLOCK.findall(text))
        if render.fill(text, latest, path) != text:
            stale.append(os.path.relpath(path, ROOT))
    assert not stale, f"run `python benchmarks/render.py`: out of date: {stale}"
    assert blocks >= 6  # README, benchmarks, threads-and-gil, shared-memory, keys, redis, ...


def test_a_mixed_or_dirty_or_quick_run_is_refused(render, latest):
    mixed = copy.deepcopy(latest)
    next(iter(mixed["sections"].values()))["environment"]["git"] = "0000000"
    with pytest.raises(render.NotOneRun, match="several runs"):
        render.one_run(mixed)
    dirty = copy.deepcopy(latest)
    dirty["environment"]["git_dirty"] = True
    with pytest.raises(render.NotOneRun, match="uncommitted"):
        render.one_run(dirty)
    quick = copy.deepcopy(latest)
    quick["quick"] = True
    with pytest.raises(render.NotOneRun, match="quick"):
        render.one_run(quick)


def test_a_hand_edited_figure_is_caught(render, latest):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("<!-- bench:readme -->")
    edited = text[:start] + text[start:].replace(" ns", " ms", 1)
    assert render.fill(edited, latest, "README.md") == text
    assert edited != text


def test_an_unknown_block_is_an_error(render, latest):
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        render.fill("<!-- bench:nope -->\nx\n<!-- /bench:nope -->\n", latest, "x.md")
