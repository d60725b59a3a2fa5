#!/usr/bin/env bash
# The C sources compile for macOS (aarch64 and x86_64), checked without a Mac: zig's C
# compiler (`ziglang` from PyPI) carries macOS's libc headers. The core (csrc/sw_*.c) under its
# own warnings as errors (csrc/Makefile's WARN), the binding (csrc/binding/*.c) against this
# machine's CPython headers with calls to undeclared functions as errors (a Linux-only API
# would be one). Their portable paths (csrc/sw_platform.c) run on Linux in the portable pass
# (SLIDEWIN_PORTABLE=1, .ci/run). Windows is not supported (README.md, "Platforms").
# Env: PYTHON (default python3), ZIG_VENV (default /tmp/slidewin-zig-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${ZIG_VENV:-/tmp/slidewin-zig-venv}
OUT=$(mktemp -d /tmp/slidewin-cross.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m ziglang version >/dev/null 2>&1; then
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q ziglang
fi
ZIG=("$VENV/bin/python" -m ziglang cc)
echo "zig $("$VENV/bin/python" -m ziglang version)"
INC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
WARN="-Wall -Wextra -Wshadow -Wconversion -Wstrict-prototypes -Wmissing-prototypes -Werror"
CORE=$(grep -v '^#' csrc/sources.txt)
fail=0
for target in aarch64-macos x86_64-macos; do
    for f in $CORE; do
        # shellcheck disable=SC2086
        "${ZIG[@]}" -target "$target" -std=c11 $WARN -O2 -Icsrc -c "csrc/$f" -o "$OUT/${f%.c}.o" \
            || { echo "cross: csrc/$f does not compile for $target" >&2; fail=1; }
    done
    for f in csrc/binding/*.c; do
        "${ZIG[@]}" -target "$target" -std=gnu11 -O2 -w -Werror=implicit-function-declaration \
            -Werror=implicit-int -I"$INC" -Icsrc -Icsrc/binding -c "$f" -o "$OUT/b.o" \
            || { echo "cross: $f does not compile for $target" >&2; fail=1; }
    done
    [ $fail = 0 ] && echo "cross: core and binding compile for $target"
done
exit $fail
