#!/usr/bin/env python3
"""Check the layering of the C sources: exits 1 naming every violation.

The core (csrc/sw_*.{c,h}) is base -> mechanisms -> products: a file may include the header
of its own module or of a module placed lower in CORE below, never one above or beside it
(nor a binding header). Every core module must be in the table.

The binding (csrc/binding/*.{c,h}) is checked for cycles. Its modules are file stems
(limiter.c + limiter.h), grouped into units by UNITS (a type and its entry share one). An
include of X.h by a file of unit A is an edge A -> unit(X). So that the include graph is the
call graph, a function or variable declared in a binding header must be defined in a file of
the header's own unit: a declaration in binding.h of something limiter.c defines would hide
the dependency binding.h -> limiter.c (every file includes binding.h) and is reported. Then
the graph of units must have no cycle.

Usage: python3 .ci/layers.py [--graph] [--csrc DIR]
  --graph prints the include graph; --csrc checks another tree (the checker's own tests)
"""
from __future__ import annotations

import os
import re
import sys

CSRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")

# core module -> (layer, rank): an include must go to a strictly lower (layer, rank), or to the
# module's own header. Within a layer the rank orders what builds on what.
LAYERS = ("base", "mechanism", "product")
CORE = {
    "sw_common": ("base", 0),      # error codes, limits, saturating arithmetic
    "sw_time": ("base", 1),        # the clocks
    "sw_platform": ("base", 1),    # the system's parts: futex, /proc, OFD locks (or fallbacks)
    "sw_proc": ("base", 2),        # process tokens, liveness
    "sw_lock": ("base", 3),        # the lock (its slow path asks sw_proc who is alive)
    "sw_leap": ("mechanism", 0),   # the sliding window ring
    "sw_borrow": ("mechanism", 1),
    "sw_evleap": ("mechanism", 1),  # the eventually consistent ring: adds with no lock
    "sw_adapt": ("mechanism", 1),  # adaptive limits (bbr, gradient) over the leap array
    "sw_node": ("mechanism", 2),   # windows + totals (their check and repair included)
    "sw_reject": ("mechanism", 3),  # controllers
    "sw_warmup": ("mechanism", 3),
    "sw_throttle": ("mechanism", 3),
    "sw_shm": ("mechanism", 3),    # shared regions, process slots
    "sw_limiter": ("product", 0),
    "sw_keyed": ("product", 1),
    "sw_group": ("product", 2),   # all_of: one decision over limiters and keys
    "sw_breaker": ("product", 0),  # circuit breaking over the leap array
    "sw_observe": ("product", 3),  # observers' reads of regions (limiter, keyed, Breaker, Metric)
}

# the other files of a core module split over several: file stem -> module (its files include
# each other's headers; the module's place in the table is theirs)
PARTS = {
    "sw_decide": "sw_limiter",       # a limiter's decisions and events
    "sw_limiter_lock": "sw_limiter",  # its locking helpers, shared by its two sources
    "sw_keyed_table": "sw_keyed",    # the keyed table's layout (stripes), lookup, eviction
    "sw_keyed_shared": "sw_keyed",   # a shared keyed table: validation, repair, reaping
    "sw_keyed_impl": "sw_keyed",     # what the keyed table's files share
}

# binding file stem -> unit (stems not listed are their own unit)
UNITS = {
    "adaptive": "limiter",   # ... and the adaptive rule of a Limiter
    "binding": "binding",    # binding.h: what every type uses; defined in binding.c ...
    "limiting": "binding",   # ... and in limiting.c (what the limiter types share)
    "keyed_args": "keyed",   # KeyedLimiter's arguments: keys hashed, overrides checked
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def strip_comments(text: str, strings: bool = True) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text) if strings else text


def includes(path: str) -> list[str]:
    with open(path) as f:
        return INCLUDE.findall(strip_comments(f.read(), strings=False))


def top_level(text: str) -> str:
    """The text outside braces and parentheses' bodies is kept; every {...} is emptied."""
    out, depth = [], 0
    for ch in text:
        if ch == "{":
            if depth == 0:
                out.append("{")
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                out.append("}")
        elif depth == 0:
            out.append(ch)
    return "".join(out)


# declarations (headers) and definitions (.c) at file scope, not static
DECL_FN = re.compile(r"(?:^|;|\}|\n)\s*(?!static\b|typedef\b|return\b)((?:[A-Za-z_][\w]*[\s\*]+)+)"
                     r"\(?\*?\s*([A-Za-z_]\w*)\s*\)?\s*\([^;{}]*\)\s*;")
DECL_VAR = re.compile(r"(?:^|;|\}|\n)\s*extern\s+[^;(]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*;")
DEF_FN = re.compile(r"(?:^|;|\}|\n)\s*(?!static\b|typedef\b|extern\b)((?:[A-Za-z_][\w]*[\s\*]+)+)"
                    r"([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{")
DEF_VAR = re.compile(r"(?:^|;|\}|\n)\s*(?!static\b|typedef\b|extern\b|return\b)"
                     r"(?:[A-Za-z_][\w]*[\s\*]+)+([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*=")


def declared(path: str) -> set[str]:
    text = top_level(strip_comments(open(path).read()))
    text = re.sub(r"^\s*#[^\n]*(?:\\\n[^\n]*)*", "", text, flags=re.M)
    names = {m.group(2) for m in DECL_FN.finditer(text)}
    names |= {m.group(1) for m in DECL_VAR.finditer(text)}
    return {n for n in names if n not in ("if", "while", "for", "switch", "sizeof")}


def defined(path: str) -> set[str]:
    text = top_level(strip_comments(open(path).read()))
    text = re.sub(r"^\s*#[^\n]*(?:\\\n[^\n]*)*", "", text, flags=re.M)
    names = {m.group(2) for m in DEF_FN.finditer(text)}
    names |= {m.group(1) for m in DEF_VAR.finditer(text)}
    return names


def stem(name: str) -> str:
    return os.path.splitext(os.path.basename(name))[0]


def check_core(errors: list[str], graph: list[str]) -> None:
    files = sorted(f for f in os.listdir(CSRC) if re.fullmatch(r"sw_\w+\.[ch]", f))
    binding_headers = {f for f in os.listdir(os.path.join(CSRC, "binding")) if f.endswith(".h")}
    for f in files:
        me = PARTS.get(stem(f), stem(f))
        if me not in CORE:
            errors.append(f"csrc/{f}: not in the layer table of .ci/layers.py (place it)")
            continue
        layer, rank = CORE[me]
        mine = (LAYERS.index(layer), rank)
        incs = includes(os.path.join(CSRC, f))
        graph.append(f"{f} -> {' '.join(incs) or '-'}")
        for inc in incs:
            other = PARTS.get(stem(inc), stem(inc))
            if inc in binding_headers:
                errors.append(f"csrc/{f}: includes the binding's {inc}")
            elif other == me or not other.startswith("sw_"):
                continue  # its own header; vendored code
            elif other not in CORE:
                errors.append(f"csrc/{f}: includes {inc}, not in the layer table")
            else:
                olayer, orank = CORE[other]
                if (LAYERS.index(olayer), orank) >= mine:
                    errors.append(f"csrc/{f} ({layer} {rank}) includes {inc} ({olayer} {orank}): "
                                  "upward or sideways")


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def check_binding(errors: list[str], graph: list[str]) -> None:
    bdir = os.path.join(CSRC, "binding")
    files = sorted(f for f in os.listdir(bdir) if re.fullmatch(r"\w+\.[ch]", f))
    unit = {stem(f): UNITS.get(stem(f), stem(f)) for f in files}
    # who defines what
    definer: dict[str, str] = {}
    for f in files:
        if f.endswith(".c"):
            for name in defined(os.path.join(bdir, f)):
                definer.setdefault(name, f)
    edges: dict[str, set[str]] = {}
    for f in files:
        me = unit[stem(f)]
        edges.setdefault(me, set())
        incs = [i for i in includes(os.path.join(bdir, f)) if stem(i) in unit]
        graph.append(f"binding/{f} -> {' '.join(incs) or '-'}")
        for inc in incs:
            if unit[stem(inc)] != me:
                edges[me].add(unit[stem(inc)])
        if f.endswith(".h"):
            for name in sorted(declared(os.path.join(bdir, f))):
                where = definer.get(name)
                if where is not None and unit[stem(where)] != me:
                    errors.append(f"csrc/binding/{f} declares {name}, defined in {where} "
                                  f"(unit {unit[stem(where)]}): declare it in "
                                  f"{stem(where)}.h")
    cycle = find_cycle(edges)
    if cycle:
        errors.append("csrc/binding: include cycle " + " -> ".join(cycle))
    graph.append("binding units: " + "; ".join(
        f"{u} -> {' '.join(sorted(v)) or '-'}" for u, v in sorted(edges.items())))


def main() -> int:
    global CSRC
    if "--csrc" in sys.argv:
        CSRC = sys.argv[sys.argv.index("--csrc") + 1]
    errors: list[str] = []
    graph: list[str] = []
    check_core(errors, graph)
    check_binding(errors, graph)
    if "--graph" in sys.argv:
        print("\n".join(graph))
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print("layers: ok (core: no upward include; binding: no cycle)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
