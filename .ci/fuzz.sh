#!/usr/bin/env bash
# A thin wrapper: the C core's bounded libFuzzer run, `make -C csrc fuzz` (owned by the C
# tests; FUZZ_SECONDS bounds it, 60 by default here). Skipped with a note when the Makefile
# has no fuzz target or clang is missing (libFuzzer needs clang); the plain fuzz corpus replay
# runs anyway inside `make -C csrc test` (pytest's tests/test_c_core.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_SECONDS=${FUZZ_SECONDS:-60}
if ! make -C csrc -n fuzz >/dev/null 2>&1; then
    echo "fuzz: csrc/Makefile has no 'fuzz' target: skipped"
    exit 0
fi
if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1; then
    echo "fuzz: ${FUZZ_CC:-clang} not found (libFuzzer needs clang): skipped"
    exit 0
fi
echo "fuzz: make -C csrc fuzz (FUZZ_SECONDS=$FUZZ_SECONDS)"
make -C csrc fuzz
