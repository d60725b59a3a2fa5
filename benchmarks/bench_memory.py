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


KEYED_TABLE_KEYS = 65_536
KEYED_TABLES = [  # (label, KeyedLimiter keywords)
    ("qps=5", {"qps": 5}),
    ("rate='5/second'", {"rate": "5/second"}),
    ("rate='5/minute'", {"rate": "5/minute"}),
    ("rate='5/hour'", {"rate": "5/hour"}),
    ("rate='5/second', sample_count=50", {"rate": "5/second", "sample_count": 50}),
    ("rate='5/minute', sample_count=60", {"rate": "5/minute", "sample_count": 60}),
]


def keyed_tables() -> List[Dict[str, Any]]:
    """The bytes of a shared KeyedLimiter table of KEYED_TABLE_KEYS keys (its region's file
    size: the whole table, every key's entry included) by rate= and qps=."""
    import os
    import tempfile

    from slidewin import KeyedLimiter

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i, (label, kw) in enumerate(KEYED_TABLES):
            path = os.path.join(d, "t%d" % i)
            lim = KeyedLimiter(max_keys=KEYED_TABLE_KEYS, shared=path, **kw)
            rows.append({"label": label, "sample_count": lim.sample_count,
                         "bytes": os.path.getsize(path)})
    base = rows[0]["bytes"]
    for r in rows:
        r["ratio_to_qps"] = r["bytes"] / base
    return rows


def run(cfg: Dict[str, Any], log) -> Dict[str, Any]:
    rows = []
    for label, make in subjects():
        traced, size = per_object(make, cfg["memory_n"])
        rows.append({"label": label, "tracemalloc_bytes": traced, "getsizeof_bytes": size})
        log(f"  {label}: {traced:.0f} B traced, getsizeof {size} B")
    tables = keyed_tables()
    for r in tables:
        log(f"  KeyedLimiter({r['label']}) x {KEYED_TABLE_KEYS:,} keys: {r['bytes']:,} B")
    return {"rows": rows, "objects": cfg["memory_n"], "keyed_tables": tables}


def _table(res):
    h = ["object", f"tracemalloc bytes/object (N={res['objects']:,})", "sys.getsizeof"]
    return h, [[r["label"], f"{r['tracemalloc_bytes']:,.0f}", f"{r['getsizeof_bytes']:,}"]
               for r in res["rows"]]


def _keyed_table(res):
    h = [f"KeyedLimiter, {KEYED_TABLE_KEYS:,} keys, shared", "sample_count", "bytes",
         "x qps="]
    return h, [[r["label"], str(r["sample_count"]), f"{r['bytes']:,}",
                f"{r['ratio_to_qps']:.2f}"] for r in res["keyed_tables"]]


def render_text(res) -> str:
    out = text_table(*_table(res))
    if res.get("keyed_tables"):  # runs recorded before it have none
        out += "\n\n" + text_table(*_keyed_table(res))
    return out


def render_md(res) -> str:
    out = md_table(*_table(res))
    if res.get("keyed_tables"):
        out += "\n\n" + md_table(*_keyed_table(res))
    return out


if __name__ == "__main__":  # the keyed tables alone: python benchmarks/bench_memory.py
    print(text_table(*_keyed_table({"keyed_tables": keyed_tables()})))
