"""Section "memory": bytes per object.

``tracemalloc`` over N live objects (everything each one allocates through Python's
allocators, divided by N), next to ``sys.getsizeof`` of one object. A C extension that
allocates its core state with ``PyMem_*`` is seen by tracemalloc; one that uses plain
``malloc`` is not, so a tracemalloc figure far below getsizeof would mean the latter.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from typing import Any, Callable, Dict, List, Tuple

from common import PyTwoBucketWindow, md_table, text_table

TITLE = "Memory: bytes per object"
ABOUT = __doc__.split("\n", 2)[2]


def per_object(make: Callable[[], Any], n: int) -> Tuple[float, int]:
    make()  # first-use allocations (interned strings, caches) out of the way
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    objs = [make() for _ in range(n)]
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    size = sys.getsizeof(objs[0])
    # the list holding them is not the objects' cost
    used -= sys.getsizeof(objs)
    del objs
    return used / n, size


def subjects() -> List[Tuple[str, Callable[[], Any]]]:
    from slidewin import Limiter, Metric

    out = [
        ("slidewin Metric(1000, 2)", lambda: Metric(1000, 2)),
        ("slidewin Metric(60000, 60)", lambda: Metric(60000, 60)),
        ("slidewin Limiter(qps=100)", lambda: Limiter(qps=100)),
        ("slidewin Limiter(qps=100, behavior='warm_up')",
         lambda: Limiter(qps=100, behavior="warm_up")),
        ("slidewin Limiter(qps=100, behavior='throttle')",
         lambda: Limiter(qps=100, behavior="throttle")),
        ("slidewin Limiter(concurrency=8)", lambda: Limiter(concurrency=8)),
        ("pure-Python 2-bucket window (floor)", lambda: PyTwoBucketWindow(100)),
    ]
    try:
        import token_bucket

        out.append(("token-bucket Limiter + MemoryStorage",
                    lambda: token_bucket.Limiter(100.0, 100, token_bucket.MemoryStorage())))
    except ImportError:
        pass
    return out


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    rows = []
    for label, make in subjects():
        traced, size = per_object(make, cfg["memory_n"])
        rows.append({"label": label, "tracemalloc_bytes": traced, "getsizeof_bytes": size})
        log(f"  {label}: {traced:.0f} B traced, getsizeof {size} B")
    return {"rows": rows, "objects": cfg["memory_n"]}


def _table(res):
    h = ["object", f"tracemalloc bytes/object (N={res['objects']:,})", "sys.getsizeof"]
    return h, [[r["label"], f"{r['tracemalloc_bytes']:,.0f}", f"{r['getsizeof_bytes']:,}"]
               for r in res["rows"]]


def render_text(res) -> str:
    return text_table(*_table(res))


def render_md(res) -> str:
    return md_table(*_table(res))
