"""What the observers (slidewin.prometheus, `python -m slidewin top`) read: one `Reading` per
shared region of the host or named object of this process. A region is read as a copy (no
lock, no process slot, no write): a reader never slows the processes deciding on it.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Tuple

from . import _core

# the window counts a limiter's region (and a Metric with the default events) holds
LIMITER_COUNTS = ("pass", "block", "exception", "success", "occupied_pass", "rt")


@dataclasses.dataclass(eq=False)
class Reading:
    """One region or one named object of this process, at one moment.

    kind: "limiter", "keyed", "metric" or "breaker"; source: "region" or "local" (an object
    that no region read covers). totals: lifetime (None for a Metric); window: over the
    window (a Metric's: per event; a breaker's: total, errors, slow). keys, evicted,
    adaptive_limit, waiters (processes blocked, regions only), state (a breaker's): None
    when not of that kind. error: why a region could not be read (the rest then empty)."""

    name: str
    kind: str
    source: str
    path: Optional[str] = None
    totals: Optional[Dict[str, int]] = None
    window: Dict[str, int] = dataclasses.field(default_factory=dict)
    window_s: float = 1.0
    in_flight: int = 0
    waiting: int = 0
    waiters: Optional[int] = None
    keys: Optional[int] = None
    evicted: Optional[int] = None
    created_unix_ns: Optional[int] = None
    error: Optional[str] = None
    adaptive_limit: Optional[int] = None
    state: Optional[str] = None

    def window_rate(self, count: str) -> Optional[float]:
        """A window count per second (None when the window does not hold that count)."""
        v = self.window.get(count)
        return None if v is None else v / self.window_s

    @property
    def avg_rt_ms(self) -> Optional[float]:
        """The window's RT sum over its successes (Sentinel's avgRt); 0 without successes."""
        if "rt" not in self.window or "success" not in self.window:
            return None
        ok = self.window["success"]
        return self.window["rt"] / ok if ok > 0 else 0.0


def decisions(totals: Dict[str, int]) -> Tuple[int, int, int]:
    """A limiter's passes, enforced blocks and shadow blocks (the part of totals["block"] a
    shadow limiter admitted: its would-be refusals)."""
    shadow = min(max(totals.get("shadow_block", 0), 0), totals.get("block", 0))
    return totals.get("pass", 0), totals.get("block", 0) - shadow, shadow


def region_name_of(path: str) -> str:
    """A region's name from its file name (`slidewin-<name>`)."""
    return os.path.basename(path).removeprefix("slidewin-")


def read_region(path: str) -> Optional[Reading]:
    """None when its file is gone, a Reading with `error` when it cannot be read."""
    try:
        r = _core.read_region(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return Reading(region_name_of(path), "?", "region", path,
                       error=str(e) or type(e).__name__)
    window = {k: int(v) for k, v in r["window"].items() if k != "min_rt"}
    waiting = window.pop("waiting", 0)
    return Reading(r["name"], r["kind"], "region", r["path"],
                   totals=None if r["totals"] is None else dict(r["totals"]), window=window,
                   window_s=max(r["interval_ms"], 1) / 1000.0, in_flight=r["in_flight"],
                   waiting=waiting, waiters=r["waiters"], keys=r.get("keys"),
                   evicted=r.get("evicted"), created_unix_ns=r["created_unix_ns"],
                   adaptive_limit=r.get("adaptive_limit"), state=r.get("state"))


def read_regions(folder: Optional[str] = None) -> List[Reading]:
    """Every region of folder owned by this process's effective uid, in file order and each
    once (hard links); vanished files left out, none for a folder that cannot be listed."""
    try:
        paths = _core.list_regions(folder)
    except OSError:
        return []
    return [row for path in paths if (row := read_region(path)) is not None]


def file_id(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _shm_dir() -> str:
    # as the C core's default (sw_platform_shm_dir): /dev/shm, or /tmp where there is none (macOS)
    return os.environ.get("SLIDEWIN_SHM_DIR") or (
        "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")


def _from_object(name: str, obj: Any, path: Optional[str]) -> Reading:
    kind = ("breaker" if isinstance(obj, _core.Breaker) else "metric"
            if isinstance(obj, _core.Metric) else "limiter"
            if isinstance(obj, _core.Limiter) else "keyed")
    row = Reading(name, kind, "local", path, window_s=max(obj.interval_ms, 1) / 1000.0)
    if kind == "metric":
        row.window = {ev: int(obj.sum(ev)) for ev in obj.events}
        return row
    row.totals = dict(obj.totals())
    st = obj.stats()
    if kind == "breaker":
        row.window = {k: int(st[k]) for k in ("total", "errors", "slow")}
        row.state = str(st["state"])
        return row
    if kind == "limiter":
        row.window = {ev: int(obj.metric.sum(ev)) for ev in LIMITER_COUNTS}
        row.adaptive_limit = obj._adaptive_limit(None)  # an AdaptiveLimiter's, else None
    else:  # Stats holds rates over the window: back to counts, as a region read gives them
        row.window = {ev: round(getattr(st, ev + "_qps") * row.window_s)
                      for ev in ("pass", "block", "success", "exception")}
        row.window["occupied_pass"] = round(st.occupied_qps * row.window_s)
        row.window["rt"] = round(st.avg_rt_ms * row.window["success"])
        row.keys = len(obj)
        row.evicted = int(st.evicted)
    row.in_flight = int(st.concurrency)
    row.waiting = int(st.waiting)
    return row


def read_all(*, regions: bool = True, local: bool = True,
             folder: Optional[str] = None) -> List[Reading]:
    """The regions of folder, then this process's named objects (`slidewin.limiters()`) but
    those read as a region or that fail to read."""
    rows: List[Reading] = read_regions(folder) if regions else []
    if not local:
        return rows
    seen = {file_id(r.path) for r in rows if r.path is not None} - {None}
    for name, obj in sorted(_core.limiters().items()):
        shared = getattr(obj, "shared", None)  # the region file of a named shared object
        path = ((shared if "/" in shared else os.path.join(_shm_dir(), "slidewin-" + shared))
                if isinstance(shared, str) else None)
        if path is not None and file_id(path) in seen:
            continue
        try:
            rows.append(_from_object(name, obj, path))
        except Exception:  # an observer never breaks the observed program's scrape
            pass
    return rows
