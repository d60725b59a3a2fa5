#!/usr/bin/env bash
# Build slidewin and run the whole pytest suite on every CPython 3.9-3.13 this machine has:
# pyenv's versions (highest patch release of each minor), else python3.X on PATH. Each version
# gets its own venv (/tmp/slidewin-py3.X-venv) and a build from a copy of the tree without
# build products (setuptools would otherwise reuse a stale build/ directory).
# Versions below 3.9 are out of scope (requires-python >= 3.9); a missing one is noted and
# skipped; no interpreter at all is a failure.
# Env: SLIDEWIN_VERSIONS="3.9 3.10 ..." to choose; SLIDEWIN_PORTABLE=1 builds the core's
# portable fallbacks (setup.py) and checks that the build has them; extra arguments go to pytest (.ci/run
# passes -n 2 and a -m selection: CONTRIBUTING.md, "What CI runs").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STAGE=$(mktemp -d /tmp/slidewin-versions-src.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
log() { printf '\n=== versions: %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
# shellcheck source=pythons.sh
. "$ROOT/.ci/pythons.sh"
WANT=${SLIDEWIN_VERSIONS:-$SUPPORTED_VERSIONS}

tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude=./csrc/build --exclude='*.so' \
    --exclude=./.venv --exclude=./venv --exclude='*.egg-info' --exclude=./.hypothesis \
    --exclude=./.pytest_cache --exclude=./.mypy_cache \
    --exclude='__pycache__' -cf - . | tar -C "$STAGE" -xf -

ran=() skipped=() failed=() timings=()
for v in $WANT; do
    minor=${v#3.}
    if [ "${v%%.*}" != 3 ] || [ "$minor" -lt 9 ]; then
        skipped+=("$v (below 3.9, unsupported)")
        continue
    fi
    py=$(find_python "$v")
    if [ -z "$py" ]; then
        echo "versions: no CPython $v here (pyenv: $PYENV_DIR, PATH: python$v): skipped"
        skipped+=("$v (not installed)")
        continue
    fi
    log "CPython $v: $py"
    start=$(date +%s)
    venv=/tmp/slidewin-py$v-venv
    src=$STAGE/src-$v
    rm -rf "$venv" "$src"
    mkdir -p "$src"
    (cd "$STAGE" && tar --exclude='./src-*' --exclude='./run-*' -cf - .) | tar -C "$src" -xf -
    ok=1
    "$py" -m venv "$venv" || ok=0
    if [ $ok = 1 ]; then
        "$venv/bin/python" -m pip install -q --upgrade pip >"$src/pip.log" 2>&1 || true
        if ! (cd "$src" && "$venv/bin/python" -m pip install -q ".[test]" >>"$src/pip.log" 2>&1); then
            tail -40 "$src/pip.log"
            echo "versions: build/install failed on $v"
            ok=0
        fi
    fi
    if [ $ok = 1 ]; then
        # SLIDEWIN_PORTABLE=1 (the portable pass of .ci/run): the build must be the portable one
        (cd / && "$venv/bin/python" -c '
import os, sys, slidewin, slidewin._core as c
print(sys.version.split()[0], slidewin.__file__, "core:", c._platform)
assert (c._platform == "portable") == (os.environ.get("SLIDEWIN_PORTABLE") == "1"), c._platform
') || ok=0
        # from a directory outside the copy (its slidewin/ has no .so and would shadow the
        # installed build, also in the tests' `python -c` subprocesses); the tests by path
        mkdir -p "$STAGE/run-$v"
        (cd "$STAGE/run-$v" && PATH="$venv/bin:$PATH" \
            "$venv/bin/pytest" -q -p no:cacheprovider "$src/tests" "$@") || ok=0
    fi
    secs=$(( $(date +%s) - start ))
    timings+=("$v ${secs}s")
    if [ $ok = 1 ]; then ran+=("$v"); else failed+=("$v"); fi
done

log "summary"
echo "passed:  ${ran[*]:-none}"
echo "failed:  ${failed[*]:-none}"
echo "skipped: ${skipped[*]:-none}"
echo "time:    ${timings[*]:-}"
if [ ${#failed[@]} -gt 0 ]; then
    exit 1
fi
if [ ${#ran[@]} -eq 0 ]; then
    echo "versions: no CPython 3.9-3.13 found: nothing was tested" >&2
    exit 1
fi
