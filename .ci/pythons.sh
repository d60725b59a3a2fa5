# Sourced by .ci/run and .ci/versions.sh: where each CPython 3.X of this machine is.
# find_python 3.X -> the path of an interpreter (pyenv's highest patch release of that minor,
# else python3.X on PATH), or nothing.
PYENV_DIR=${PYENV_ROOT:-$HOME/.pyenv}/versions

find_python() {
    local v=$1 best="" d
    if [ -d "$PYENV_DIR" ]; then
        # highest patch release: sort -V on the directory names (3.9.18, 3.9.2, ...)
        for d in $(ls -1 "$PYENV_DIR" 2>/dev/null | grep -E "^${v//./\\.}\.[0-9]+$" | sort -V); do
            [ -x "$PYENV_DIR/$d/bin/python$v" ] && best="$PYENV_DIR/$d/bin/python$v"
        done
    fi
    if [ -z "$best" ] && command -v "python$v" >/dev/null 2>&1; then
        best=$(command -v "python$v")
    fi
    echo "$best"
}

# the supported minors, oldest first (requires-python >= 3.9; classifiers up to 3.13)
SUPPORTED_VERSIONS="3.9 3.10 3.11 3.12 3.13"
