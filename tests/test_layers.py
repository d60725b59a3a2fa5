"""The C sources' layering, checked by .ci/layers.py: the core includes only
downward (base -> mechanisms -> products) and the binding has no include cycle, its headers
declaring only what their own files define. The checker is also shown to catch each kind of
violation on a copy of the tree."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, ".ci", "layers.py")


def run(csrc=None):
    args = [sys.executable, CHECKER, "--graph"] + (["--csrc", str(csrc)] if csrc else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_the_tree_is_layered():
    proc = run()
    assert proc.returncode == 0, proc.stderr
    assert "layers: ok" in proc.stdout


def copy(tmp_path):
    dst = tmp_path / "csrc"
    shutil.copytree(os.path.join(ROOT, "csrc"), dst,
                    ignore=shutil.ignore_patterns("build", "tests", "fuzz", "bench"))
    return dst


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_an_upward_include_in_the_core_fails(tmp_path):
    csrc = copy(tmp_path)
    edit(csrc / "sw_common.c", '#include "sw_common.h"\n', '#include "sw_common.h"\n#include "sw_proc.h"\n')
    proc = run(csrc)
    assert proc.returncode == 1
    assert "sw_common.c (base 0) includes sw_proc.h (base 2)" in proc.stderr, proc.stderr


def test_a_core_file_not_in_the_table_fails(tmp_path):
    csrc = copy(tmp_path)
    (csrc / "sw_extra.c").write_text('#include "sw_limiter.h"\n')
    proc = run(csrc)
    assert proc.returncode == 1 and "sw_extra.c: not in the layer table" in proc.stderr


def test_a_binding_include_cycle_fails(tmp_path):
    csrc = copy(tmp_path)
    edit(csrc / "binding" / "shared.h", '#include "sw_shm.h"\n', '#include "sw_shm.h"\n#include "binding.h"\n')
    proc = run(csrc)
    assert proc.returncode == 1
    assert "include cycle" in proc.stderr and "shared" in proc.stderr, proc.stderr


def test_a_declaration_in_binding_h_of_a_types_function_fails(tmp_path):
    # binding.h -> limiter.c -> entry.c -> binding.h: a cycle hidden from a
    # check of the #include lines alone
    csrc = copy(tmp_path)
    edit(csrc / "binding" / "binding.h", "#endif /* SW_BINDING_H */",
         "void limiter_notify(LimiterObject *self);\n#endif /* SW_BINDING_H */")
    proc = run(csrc)
    assert proc.returncode == 1
    assert "binding.h declares limiter_notify, defined in limiter.c" in proc.stderr, proc.stderr
