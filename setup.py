"""Build the slidewin C extension (metadata lives in pyproject.toml).

Environment switches (as msgspec does):
  SLIDEWIN_DEBUG=1     -O0 -g, assertions on
  SLIDEWIN_SANITIZE=1  -fsanitize=address,undefined,float-cast-overflow (run with the ASan
                       runtime preloaded; gcc's "undefined" leaves float-cast-overflow out)
  SLIDEWIN_TSAN=1      -fsanitize=thread (run with libtsan preloaded: .ci/free-threaded.sh)
  SLIDEWIN_PORTABLE=1  the core's portable fallbacks (no futex, /proc, OFD locks, O_TMPFILE,
                       getrandom: what macOS builds use) on Linux too, to test them there
"""
import glob
import os
import sys

from setuptools import Extension, setup

# the C core's sources: the one list csrc/Makefile reads as well
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "sources.txt")) as f:
    CORE = [line.strip() for line in f if line.strip() and not line.startswith("#")]

debug = os.environ.get("SLIDEWIN_DEBUG", "") not in ("", "0")
sanitize = os.environ.get("SLIDEWIN_SANITIZE", "") not in ("", "0")
tsan = os.environ.get("SLIDEWIN_TSAN", "") not in ("", "0")
portable = os.environ.get("SLIDEWIN_PORTABLE", "") not in ("", "0")

compile_args = ["-std=gnu11", "-Wall", "-Wextra", "-Wshadow", "-Wno-unused-parameter",
                "-Wno-missing-field-initializers", "-Wno-cast-function-type",
                # a call to an undeclared function links to a missing symbol: fail the build
                "-Werror=implicit-function-declaration"]
link_args = []
undef = []
if debug or sanitize or tsan:
    compile_args += ["-O0" if debug else "-O1", "-g", "-fno-omit-frame-pointer"]
    undef = ["NDEBUG"]
else:
    # a release build carries no debug info (-g0 after Python's own -g; -s strips the symbols
    # the linker would keep): the wheel is about a fifth of its size with them. (macOS's
    # linker has no -s: its wheels are stripped by the packaging tools)
    compile_args += ["-O2", "-flto", "-g0"]
    link_args += ["-O2", "-flto", "-g0"] + (["-s"] if sys.platform.startswith("linux") else [])
if sanitize:
    compile_args += ["-fsanitize=address,undefined,float-cast-overflow",
                     "-fno-sanitize-recover=undefined,float-cast-overflow"]
    link_args += ["-fsanitize=address,undefined,float-cast-overflow"]
if tsan:
    compile_args += ["-fsanitize=thread"]
    link_args += ["-fsanitize=thread"]
define = [("SW_PORTABLE", "1")] if portable else []

# the binding: one glue file per Python type (csrc/binding/)
BINDING = sorted(glob.glob("csrc/binding/*.c"))

setup(
    ext_modules=[
        Extension(
            "slidewin._core",
            sources=BINDING + ["csrc/" + f for f in CORE],
            include_dirs=["csrc", "csrc/binding"],
            depends=sorted(glob.glob("csrc/sw_*.h")) + sorted(glob.glob("csrc/binding/*.h"))
            + ["csrc/vendor/xxhash.h"],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            undef_macros=undef,
            define_macros=define,
            libraries=["m", "pthread"],
        )
    ]
)
