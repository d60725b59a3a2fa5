"""Prometheus metrics for slidewin: a custom collector for ``prometheus_client``.

    import prometheus_client
    from slidewin.prometheus import Collector

    prometheus_client.REGISTRY.register(Collector())

At each scrape the collector reads every shared region of the host (the files ``slidewin-*``
of ``SLIDEWIN_SHM_DIR`` or /dev/shm) without attaching to it, and the named objects of this
process (``slidewin.limiters()``) that no region covers. A region holds the counts of every
process that maps it, so each shared limiter is one series however many worker processes
(gunicorn, uvicorn ``--workers``) use it and whichever worker answers the scrape: no
``PROMETHEUS_MULTIPROC_DIR``, no per-process files. Private limiters without ``name=`` are
not exported (they have no label to go by).

Series are labelled ``limiter`` (the ``name=``, a shared region's name by default) and ``kind``
(limiter or keyed), or ``metric`` / ``breaker``; one quantity per family, so that a sum over a
label never double-counts (but never sum ``slidewin_requests_total``, ``totals()``, over
``outcome``), times in seconds. Each family's HELP text, and docs/metrics.md, says what it counts.

A region that vanishes or is damaged between the listing and the read is left out of that
scrape. ``prometheus_client`` is an optional dependency: ``pip install "slidewin[prometheus]"``.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
except ModuleNotFoundError as e:  # the optional extra is missing: say how to install it
    if e.name is None or e.name.split(".")[0] != "prometheus_client":
        raise
    raise ModuleNotFoundError(
        'slidewin.prometheus needs prometheus_client: pip install "slidewin[prometheus]"',
        name=e.name) from e

from . import _observe

__all__ = ["Collector"]

DECISIONS = ("pass", "block", "shadow_block")
COMPLETIONS = ("success", "exception")

_C, _G = CounterMetricFamily, GaugeMetricFamily
_LIMITER = ["limiter", "kind"]
_BY_OUTCOME = _LIMITER + ["outcome"]

# (type, name less "slidewin_", help, labels) of each family, in the order a scrape yields them
_FAMILIES = (
    (_C, "decisions", "Decisions since the limiter was created, by outcome: pass (admitted), "
     "block (refused), shadow_block (admitted by shadow mode where an enforcing limiter would "
     "have refused).", _BY_OUTCOME),
    (_C, "completions", "Entries that ended since the limiter was created, by outcome: success or "
     "exception.", _BY_OUTCOME),
    (_C, "requests", "Lifetime totals by outcome, each equal to totals()[outcome] (pass, block, "
     "exception, success): decisions and completions in one family, so never sum it over outcome; "
     "slidewin_decisions_total and slidewin_completions_total split them.", _BY_OUTCOME),
    (_C, "occupied_passes", "Prioritized passes borrowed from the next window since the limiter "
     "was created.", _LIMITER),
    (_C, "rt_seconds", "Sum of the response times of the successes, in seconds, since the limiter "
     "was created.", _LIMITER),
    (_G, "in_flight", "Requests holding the limiter now (entered, not yet exited).", _LIMITER),
    (_G, "waiting", "Prioritized passes granted ahead, waiting for their window.", _LIMITER),
    (_G, "waiting_processes", "Processes blocked waiting for a release (shared regions).",
     _LIMITER),
    (_G, "window_decisions_per_second", "Decisions per second over the sliding window, by "
     "outcome: pass or block (a shadow limiter's would-be refusals included, as in stats()).",
     _BY_OUTCOME),
    (_G, "window_completions_per_second", "Completed entries per second over the sliding window, "
     "by outcome: success or exception.", _BY_OUTCOME),
    (_G, "window_avg_rt_seconds", "Average response time, in seconds, of the successes over the "
     "sliding window.", _LIMITER),
    (_G, "keys", "Keys a keyed limiter holds now.", _LIMITER),
    (_C, "evicted", "Keys a keyed limiter evicted since it was created.", _LIMITER),
    (_G, "metric_window_events", "A Metric's counts over its sliding window, by event.",
     ["metric", "event"]),
    (_G, "adaptive_limit", "The concurrency limit an AdaptiveLimiter has learned and enforces "
     "now.", ["limiter"]),
    (_G, "breaker_state", "A circuit breaker's state: 0 closed, 1 open, 2 half-open (its probe "
     "out).", ["breaker"]),
    (_C, "breaker_transitions", "Changes of a circuit breaker's state since it was created, by "
     "the state entered.", ["breaker", "to"]),
    (_C, "breaker_calls", "A circuit breaker's lifetime counts: total (outcomes recorded), "
     "errors, slow (of those), refused (calls it did not let through), probes (calls let through "
     "half-open), cancelled (probes cancelled), timed_out (calls past call_timeout_s), "
     "probes_timed_out (probes silent past probe_timeout_s).", ["breaker", "outcome"]),
    (_G, "breaker_window_calls", "A circuit breaker's outcomes over its window (total, errors, "
     "slow): what its trip test reads.", ["breaker", "outcome"]),
)


def _families() -> Dict[str, Any]:
    """The families of one scrape, by name (less "slidewin_"), empty until filled."""
    return {name: kind("slidewin_" + name, text, labels=labels)
            for kind, name, text, labels in _FAMILIES}


class Collector:
    """A prometheus_client collector of slidewin's limiters.

    regions: read the shared regions of folder (default SLIDEWIN_SHM_DIR or /dev/shm);
    local: export this process's named objects (``slidewin.limiters()``) that no region read
    covers (private ones, ``shared=True`` ones, regions of another folder).
    """

    def __init__(self, *, regions: bool = True, local: bool = True,
                 folder: Optional[str] = None) -> None:
        self.regions = bool(regions)
        self.local = bool(local)
        self.folder = folder

    def __repr__(self) -> str:
        return (f"Collector(regions={self.regions}, local={self.local}, "
                f"folder={self.folder!r})")

    def describe(self) -> Iterable[Metric]:
        # the names, without reading anything: registering costs no scrape
        return list(_families().values())

    def collect(self) -> Iterator[Metric]:
        fam = _families()
        taken: Set[str] = set()
        for row in _observe.read_all(regions=self.regions, local=self.local, folder=self.folder):
            if row.error is not None:
                continue  # damaged or foreign: left out (`python -m slidewin top` shows it)
            created = (row.created_unix_ns / 1e9) if row.created_unix_ns else None
            for key, labels, value in _samples(row, _unique(row, taken)):
                if isinstance(fam[key], CounterMetricFamily):
                    fam[key].add_metric(labels, value, created=created)
                else:
                    fam[key].add_metric(labels, value)
        for f in fam.values():
            if f.samples:
                yield f


BREAKER_STATES = {"closed": 0, "open": 1, "half_open": 2}


def _samples(row: "_observe.Reading", name: str) -> Iterator[Tuple[str, List[str], float]]:
    """(family name less "slidewin_", labels, value) of each series of one row."""
    totals = row.totals or {}
    if row.kind == "metric":
        for event, n in row.window.items():
            yield "metric_window_events", [name, event], n
    elif row.kind == "breaker":
        yield "breaker_state", [name], BREAKER_STATES.get(row.state or "", 0)
        for to, key in (("open", "opened"), ("half_open", "half_opened"), ("closed", "closed")):
            yield "breaker_transitions", [name, to], totals.get(key, 0)
        for outcome in ("total", "errors", "slow", "refused", "probes", "cancelled",
                        "timed_out", "probes_timed_out"):
            yield "breaker_calls", [name, outcome], totals.get(outcome, 0)
        for outcome in ("total", "errors", "slow"):
            yield "breaker_window_calls", [name, outcome], row.window.get(outcome, 0)
    else:
        labels = [name, row.kind]
        decided = dict(zip(DECISIONS, _observe.decisions(totals)))
        rates = {k: row.window_rate(k) or 0.0 for k in ("pass", "block") + COMPLETIONS}
        for key, outcomes, counts in (
                ("decisions", DECISIONS, decided), ("completions", COMPLETIONS, totals),
                ("requests", ("pass", "block", "exception", "success"), totals),
                ("window_decisions_per_second", ("pass", "block"), rates),
                ("window_completions_per_second", COMPLETIONS, rates)):
            for outcome in outcomes:
                yield key, labels + [outcome], counts.get(outcome, 0)
        for key, value in (  # None: not of this row's kind (waiters: of a region's)
                ("occupied_passes", totals.get("occupied_pass", 0)),
                ("rt_seconds", totals.get("rt", 0) / 1000.0), ("in_flight", row.in_flight),
                ("waiting", row.waiting), ("waiting_processes", row.waiters),
                ("window_avg_rt_seconds", (row.avg_rt_ms or 0.0) / 1000.0), ("keys", row.keys),
                ("evicted", None if row.keys is None else row.evicted or 0)):
            if value is not None:
                yield key, labels, value
        if row.adaptive_limit is not None:
            yield "adaptive_limit", [name], row.adaptive_limit


def _unique(row: "_observe.Reading", taken: Set[str]) -> str:
    """The row's label: its name, or when another row of this scrape already has that name
    (two regions created with the same name=, a private object named as a region), the name
    followed by its region file or "(pid)" for a local object."""
    name = row.name
    if name in taken:
        suffix = _observe.region_name_of(row.path) if row.source == "region" and row.path \
            else f"pid {os.getpid()}"
        base = f"{row.name} ({suffix})"
        name, i = base, 2
        while name in taken:
            name, i = f"{base} #{i}", i + 1
    taken.add(name)
    return name

