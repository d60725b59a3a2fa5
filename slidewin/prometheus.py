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

Series (label ``limiter``: the ``name=``, a shared region's name by default; ``kind``:
limiter or keyed):

- ``slidewin_requests_total{outcome=pass|block|exception|success}``: the lifetime totals, equal
  to ``lim.totals()[outcome]``; ``slidewin_occupied_total`` (prioritized passes borrowed from
  the next window); ``slidewin_rt_milliseconds_total`` (the RT sum);
- gauges ``slidewin_in_flight``, ``slidewin_waiting`` (prioritized passes waiting for their
  window, ``stats().waiting``), ``slidewin_waiting_processes`` (regions: processes blocked
  waiting for a release), and over the sliding window ``slidewin_window_pass_per_second``,
  ``..._block_per_second``, ``..._success_per_second``, ``..._exception_per_second``,
  ``slidewin_window_avg_rt_milliseconds``;
- keyed: ``slidewin_keys`` (keys held) and ``slidewin_evicted_total``;
- a Metric: ``slidewin_metric_window_events{metric,event}`` (its counts over the window).

A region that vanishes or is damaged between the listing and the read is left out of that
scrape. ``prometheus_client`` is an optional dependency: ``pip install "slidewin[prometheus]"``.
"""
from __future__ import annotations

import os
from typing import Iterable, Iterator, List, Optional, Set

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

OUTCOMES = ("pass", "block", "exception", "success")

_LABELS = ["limiter", "kind"]


class _Families:
    """The families of one scrape, empty until filled."""

    def __init__(self) -> None:
        c = CounterMetricFamily
        g = GaugeMetricFamily
        lab = _LABELS
        self.requests = c("slidewin_requests", "Requests decided since the limiter was "
                          "created, by outcome (pass, block) and completion (success, "
                          "exception).", labels=lab + ["outcome"])
        self.occupied = c("slidewin_occupied", "Prioritized passes borrowed from the next "
                          "window since the limiter was created.", labels=lab)
        self.rt = c("slidewin_rt_milliseconds", "Sum of the recorded response times (ms) "
                    "since the limiter was created.", labels=lab)
        self.evicted = c("slidewin_evicted", "Keys a keyed limiter evicted since it was "
                         "created.", labels=lab)
        self.in_flight = g("slidewin_in_flight", "Requests holding the limiter now "
                           "(entered, not yet exited).", labels=lab)
        self.waiting = g("slidewin_waiting", "Prioritized passes granted ahead, waiting for "
                         "their window.", labels=lab)
        self.waiters = g("slidewin_waiting_processes", "Processes blocked waiting for a "
                         "release (shared regions).", labels=lab)
        self.rates = {
            count: g(f"slidewin_window_{count}_per_second", f"{title} per second over the "
                     "sliding window.", labels=lab)
            for count, title in (("pass", "Passes"), ("block", "Blocks"),
                                 ("success", "Successes"), ("exception", "Exceptions"))}
        self.avg_rt = g("slidewin_window_avg_rt_milliseconds", "Average response time (ms) "
                        "of the successes over the sliding window.", labels=lab)
        self.keys = g("slidewin_keys", "Keys a keyed limiter holds now.", labels=lab)
        self.events = g("slidewin_metric_window_events", "A Metric's counts over its "
                        "sliding window, by event.", labels=["metric", "event"])

    def all(self) -> List[Metric]:
        return [self.requests, self.occupied, self.rt, self.in_flight, self.waiting,
                self.waiters, *self.rates.values(), self.avg_rt, self.keys, self.evicted,
                self.events]


class Collector:
    """A prometheus_client collector of slidewin's limiters.

    regions: read the shared regions of folder (default SLIDEWIN_SHM_DIR or /dev/shm);
    local: export this process's named objects (``slidewin.limiters()``) that no region read
    covers (private ones, ``shared=True`` ones, regions of another folder).

    For one series per shared limiter across worker processes, register it in one place:
    every worker's collector reads the same regions, so any worker answers the same.
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
        return _Families().all()

    def collect(self) -> Iterator[Metric]:
        fam = _Families()
        rows = _observe.read_all(regions=self.regions, local=self.local, folder=self.folder)
        taken: Set[str] = set()
        for row in rows:
            if row.error is not None:
                continue  # damaged or foreign: left out (`python -m slidewin top` shows it)
            name = _unique(row, taken)
            if row.kind == "metric":
                for event, n in row.window.items():
                    fam.events.add_metric([name, event], n)
                continue
            labels = [name, row.kind]
            created = (row.created_unix_ns / 1e9) if row.created_unix_ns else None
            totals = row.totals or {}
            for outcome in OUTCOMES:
                fam.requests.add_metric(labels + [outcome], totals.get(outcome, 0),
                                        created=created)
            fam.occupied.add_metric(labels, totals.get("occupied_pass", 0), created=created)
            fam.rt.add_metric(labels, totals.get("rt", 0), created=created)
            fam.in_flight.add_metric(labels, row.in_flight)
            fam.waiting.add_metric(labels, row.waiting)
            if row.waiters is not None:
                fam.waiters.add_metric(labels, row.waiters)
            for count, family in fam.rates.items():
                family.add_metric(labels, row.window_rate(count) or 0.0)
            fam.avg_rt.add_metric(labels, row.avg_rt_ms or 0.0)
            if row.keys is not None:
                fam.keys.add_metric(labels, row.keys)
            if row.evicted is not None:
                fam.evicted.add_metric(labels, row.evicted, created=created)
        for f in fam.all():
            if f.samples:
                yield f


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

