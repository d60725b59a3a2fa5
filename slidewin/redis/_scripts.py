"""The Lua scripts of slidewin.redis, one per behavior, put together from the package's
``lua/*.lua`` files (package resources).

Each decision script is head.lua, a straight-line path for the common decision (reject,
throttle, warm_up), then the table model (generic.lua), the helpers (common.lua) and the
behavior's body; see docs/design.md, "Across hosts: Redis".
"""
from __future__ import annotations

import hashlib
from typing import Dict

from importlib.resources import files


def _read(name: str) -> str:
    return "\n" + (files("slidewin.redis") / "lua" / (name + ".lua")).read_text(encoding="utf-8")


class _Script:
    __slots__ = ("source", "sha")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


HEAD = _read("head")
# the state's decoding and window, for a script that decides and one that only views (stats)
GENERIC = "local VIEW_ONLY = false\n" + _read("generic")
VIEW_GENERIC = "local VIEW_ONLY = true\n" + _read("generic")
COMMON = _read("common")
_FAST_OPEN = _read("fast_open")
_FAST_CLOSE = _read("fast_close")


def _fast(cond: str, body: str) -> str:
    """A behavior's straight-line path: its condition (a Lua expression of ARGV) and body
    between the shared opening and closing."""
    return "local FAST_PATH = %s\n" % cond + _FAST_OPEN + _read(body) + _FAST_CLOSE


# ARGV[1..10] of every script: now_ms now_sub n flags layout ttl_ms interval_ms sample_count
# lease_id lease_ms; then the behavior's parameters:
SOURCES: Dict[str, str] = {
    # ARGV[11..]: L occupy_timeout_ms
    "reject": HEAD + _fast("tonumber(ARGV[11]) > 0", "reject_fast") + GENERIC + COMMON
    + _read("reject"),
    # ARGV[11]: concurrency
    "concurrency": HEAD + GENERIC + COMMON + _read("concurrency"),
    # ARGV[11..]: q L warning max_token ramp slope cold_pass min_rate
    "warm_up": HEAD + _fast("tonumber(ARGV[11]) > 0", "warm_up_fast") + GENERIC + COMMON
    + _read("warm_up"),
    # ARGV[11..]: q max_queue_ns warm(0/1) [warning max_token ramp slope cold_pass min_rate]
    "throttle": HEAD + _fast("ARGV[13] ~= '1' and tonumber(ARGV[11]) > 0", "throttle_fast")
    + GENERIC + COMMON + _read("throttle"),
    # ARGV[11..]: outcome (0 none, 1 success, 2 exception, 3 block, 4 renew) rt_ms, then
    # pairs lease_id k. Renew: each lease named that still exists expires lease_ms from now
    # (never made: a lease that is gone stays gone); the reply's second number is how many.
    "exit": HEAD + GENERIC + _read("exit"),
    # the window's sums at now: pass block exception success rt occupied min_rt in_flight waiting
    "stats": HEAD + VIEW_GENERIC + _read("stats"),
    # charge(n): n more PASS now, never refused (lua/charge.lua). ARGV[11]: the behavior's
    # index in GROUP_ORDER (below), then its parameters (ARGV[12..]: a decision's ARGV[11..])
    "charge": HEAD + GENERIC + COMMON + _read("charge"),
}

# all_of: the four decision scripts as functions of (KEYS, ARGV, redis), then the group's
# code (lua/all_of.lua): every member decided by its own script, the writes held back
# (and the group's charge: a fifth body, every member charged in one round trip)
GROUP_ORDER = ("reject", "concurrency", "warm_up", "throttle", "charge")  # a member's index
SOURCES["all_of"] = (
    "\n-- slidewin.redis: all_of, one decision over several limiters (the group at the end)"
    "\nlocal BODIES = {}\n"
    + "".join("BODIES[%d] = function(KEYS, ARGV, redis)\n%s\nend\n" % (i + 1, SOURCES[name])
              for i, name in enumerate(GROUP_ORDER))
    + _read("all_of"))

SCRIPTS: Dict[str, _Script] = {k: _Script(v) for k, v in SOURCES.items()}
# a decision script's index in all_of (by its SHA1)
GROUP_INDEX: Dict[str, int] = {SCRIPTS[name].sha: i + 1 for i, name in enumerate(GROUP_ORDER)}
