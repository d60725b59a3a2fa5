"""The default event set of a Metric (Sentinel's MetricEvent)."""
from enum import IntEnum

__all__ = ["Event"]


class Event(IntEnum):
    """Counters of a default Metric, by index; each is also accepted by its lower-case name."""

    PASS = 0
    BLOCK = 1
    EXCEPTION = 2
    SUCCESS = 3
    RT = 4
    OCCUPIED_PASS = 5
