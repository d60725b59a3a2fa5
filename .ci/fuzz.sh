#!/usr/bin/env bash
# A thin wrapper: the C core's bounded libFuzzer run, `make -C csrc fuzz` (owned by the C
# tests; FUZZ_SECONDS bounds it, 30 by default here; long runs are a developer's). Skipped with a note when the Makefile
# has no fuzz target or clang is missing (libFuzzer needs clang); the plain fuzz corpus replay
# runs anyway inside `make -C csrc test` (pytest's tests/test_c_core.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_SECONDS=${FUZZ_SECONDS:-30}
# a fixed seed: the same mutations on every run, so a failure here replays exactly; long
# exploratory runs (any seed) are a developer's job, their finds join csrc/fuzz/corpus
export FUZZ_SEED=${FUZZ_SEED:-20261125}
if ! make -C csrc -n fuzz >/dev/null 2>&1; then
    echo "fuzz: csrc/Makefile has no 'fuzz' target: skipped"
    exit 0
fi
if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1; then
    # a bare machine has gcc only: libFuzzer ships with Debian's clang
    echo "fuzz: installing clang (libFuzzer)"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq clang >/dev/null || true
    elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        sudo apt-get update -qq >/dev/null && sudo DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq clang >/dev/null || true
    fi
fi
if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1; then
    # no libFuzzer here: the same harness as a plain gcc binary over the seed corpus and
    # many pseudo-random programs (checked against the same reference model), loudly noted
    echo "fuzz: WARNING: ${FUZZ_CC:-clang} not found and not installable; running the" \
         "gcc replay build of the harness with 200000 pseudo-random programs instead" >&2
    FUZZ_RANDOM=200000 make -C csrc fuzz-replay
    exit 0
fi
echo "fuzz: make -C csrc fuzz (FUZZ_SECONDS=$FUZZ_SECONDS FUZZ_SEED=$FUZZ_SEED)"
make -C csrc fuzz
