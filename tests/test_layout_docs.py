"""CONTRIBUTING.md's layout lists every file of the C core (csrc/sw_*), the binding
(csrc/binding/), the fuzz harness (csrc/fuzz/) and the package (slidewin/, slidewin/redis/),
one line each, and names no file that is not there."""
from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRIBUTING = os.path.join(ROOT, "CONTRIBUTING.md")

# the folders whose every file the layout lists (csrc/: the core's sw_* files only)
LISTED = {
    "csrc/": lambda f: f.startswith("sw_"),
    "csrc/binding/": lambda f: True,
    "csrc/fuzz/": lambda f: True,
    "slidewin/": lambda f: True,
    "slidewin/redis/": lambda f: True,
}
# what a build or a run leaves beside the sources
BUILT = re.compile(r"(\.so|\.pyd|\.pyc|\.o)$|^__pycache__$|^\.")

FOLDER = re.compile(r"^(\S+/)(\s|$)")           # a folder, at the start of a line
ENTRY = re.compile(r"^  (\S+)(\s{2,}\S|$)")      # one of its files, indented by two


def layout() -> dict:
    """{folder: [(name as written, whether a description follows)]} from the code block
    under '## Layout'."""
    if not os.path.exists(CONTRIBUTING):
        pytest.skip("CONTRIBUTING.md is not in this tree")
    with open(CONTRIBUTING, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Layout\n", 1)[1]
    block = section.split("```\n", 1)[1].split("\n```", 1)[0]
    listed: dict = {}
    folder = None
    for line in block.splitlines():
        m = FOLDER.match(line)
        if m:
            folder = m.group(1)
            listed.setdefault(folder, [])
            continue
        m = ENTRY.match(line)
        if m and folder is not None:
            listed[folder].append((m.group(1), bool(m.group(2))))
    return listed


def expand(name: str) -> list:
    """`sw_lock.{h,c}` -> ['sw_lock.h', 'sw_lock.c']; a plain name as it is."""
    m = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", name)
    if not m:
        return [name]
    return [m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")]


def on_disk(folder: str) -> set:
    keep = LISTED[folder]
    path = os.path.join(ROOT, folder)
    return {f + "/" if os.path.isdir(os.path.join(path, f)) else f
            for f in os.listdir(path) if keep(f) and not BUILT.search(f)
            and not os.path.join(folder, f).rstrip("/") + "/" in LISTED}


def test_the_layout_lists_every_file_of_the_core_the_binding_and_the_package():
    listed = layout()
    problems = []
    for folder in LISTED:
        entries = listed.get(folder, [])
        names = [n for entry, _ in entries for n in expand(entry)]
        bare = [entry for entry, said in entries if not said]
        there = on_disk(folder)
        missing = sorted(there - set(names))
        gone = sorted(set(names) - there)
        twice = sorted({n for n in names if names.count(n) > 1})
        if missing:
            problems.append(f"{folder}: not in CONTRIBUTING.md's layout (add a line each): "
                            + ", ".join(missing))
        if gone:
            problems.append(f"{folder}: in the layout but not in the tree: " + ", ".join(gone))
        if bare:
            problems.append(f"{folder}: listed without a line saying what it is: "
                            + ", ".join(bare))
        if twice:
            problems.append(f"{folder}: listed more than once: " + ", ".join(twice))
    assert not problems, "\n".join(problems)

