#!/usr/bin/env bash
# Prints the path of a free-threaded CPython 3.13 ("3.13t": built with --disable-gil), building
# it first when missing. Debian ships no free-threaded interpreter for this machine, so it is
# built from Debian's source package of python3.13 (trixie's: the upstream tarball, without
# Debian's patches, whose install schemes assume /usr) and installed outside the clone:
#   SLIDEWIN_PY313T_PREFIX (default /opt/slidewin-ci/python3.13t), bin/python3.13t
# A later run finds it there and builds nothing. The build takes 10-20 min on 2 loaded cores;
# its log goes to $PREFIX.build.log. Everything but the path goes to stderr.
set -euo pipefail
PREFIX=${SLIDEWIN_PY313T_PREFIX:-/opt/slidewin-ci/python3.13t}
PY="$PREFIX/bin/python3.13t"
if [ -x "$PY" ] && "$PY" -c 'import sys, ssl; assert not sys._is_gil_enabled()' 2>/dev/null; then
    echo "$PY"
    exit 0
fi
say() { printf '=== python3.13t: %s (%s)\n' "$*" "$(date -u +%H:%M:%S)" >&2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-py313t.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$PREFIX")"
LOG="$PREFIX.build.log"
: >"$LOG"
export DEBIAN_FRONTEND=noninteractive
# the source package's suite: trixie (Python 3.13 is not in bookworm)
if ! apt-get source --print-uris python3.13 >/dev/null 2>&1; then
    say "adding a deb-src line for trixie"
    cat >/etc/apt/sources.list.d/slidewin-trixie-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -q >>"$LOG" 2>&1
fi
# the headers of the modules the tests import (ssl, sqlite3, ctypes, lzma, bz2, readline)
need=()
for p in build-essential libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev \
         libsqlite3-dev libreadline-dev libncurses-dev uuid-dev dpkg-dev xz-utils; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    say "apt-get install ${need[*]}"
    apt-get install -y -q "${need[@]}" >>"$LOG" 2>&1
fi
say "apt-get source python3.13 (in $WORK)"
(cd "$WORK" && apt-get source --download-only python3.13 >>"$LOG" 2>&1 \
    && dpkg-source -x --skip-patches python3.13_*.dsc src >>"$LOG" 2>&1)
say "configure --disable-gil --prefix=$PREFIX; make -j${SLIDEWIN_BUILD_JOBS:-2}; make altinstall (log: $LOG)"
(cd "$WORK/src" && ./configure -q --disable-gil --prefix="$PREFIX" >>"$LOG" 2>&1 \
    && make -j"${SLIDEWIN_BUILD_JOBS:-2}" >>"$LOG" 2>&1 \
    && make altinstall >>"$LOG" 2>&1) || { tail -40 "$LOG" >&2; exit 1; }
"$PY" -c 'import sys, ssl, sqlite3, ctypes, lzma, bz2; assert not sys._is_gil_enabled(); print(sys.version)' >&2
say "built: $PY"
echo "$PY"
