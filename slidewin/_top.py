"""`python -m slidewin top`: every shared region of the host, live.

A curses table of the regions of the folder (SLIDEWIN_SHM_DIR or /dev/shm, or --folder),
refreshed each --interval seconds: per limiter its passes and blocks per second (between two
refreshes and over its window), in flight, waiting, average RT, totals and keys; per breaker
its state and window. Keys p, b, i, n sort; q quits. Regions are read, never attached.
--once prints one table (window rates), --json its rows; an unreadable region is an error row.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _observe
from ._observe import Reading

SORTS = {"p": "pass", "b": "block", "i": "in_flight", "n": "name"}
SORT_TITLES = {"pass": "pass/s", "block": "block/s", "in_flight": "in-flight", "name": "name"}

# path -> (pass/s, block/s (enforced refusals), shadow/s (a shadow limiter's would-be ones))
Rate = Tuple[Optional[float], Optional[float], Optional[float]]
Rates = Dict[str, Rate]


class Sampler:
    """Per-second rates from the lifetime totals of two reads (none at a region's first read
    or once it was recreated)."""

    def __init__(self, folder: Optional[str]) -> None:
        self.folder = folder
        self._last: Dict[str, Tuple[float, Optional[int], Dict[str, int]]] = {}

    def sample(self) -> Tuple[List[Reading], Rates]:
        t = time.monotonic()
        rows = _observe.read_regions(self.folder)
        rates: Rates = {}
        seen = {}
        for r in rows:
            if r.error is not None or r.totals is None or r.path is None or r.kind == "breaker":
                continue
            prev = self._last.get(r.path)
            seen[r.path] = (t, r.created_unix_ns, dict(r.totals))
            if prev is None or prev[1] != r.created_unix_ns or t <= prev[0]:
                continue
            dt = t - prev[0]
            p = r.totals["pass"] - prev[2]["pass"]
            sh = shadow_blocks(r.totals) - shadow_blocks(prev[2])
            b = enforced_blocks(r.totals) - enforced_blocks(prev[2])
            if p >= 0 and b >= 0 and sh >= 0:
                rates[r.path] = (p / dt, b / dt, sh / dt)
        self._last = seen
        return rows, rates


def shadow_blocks(totals: Dict[str, int]) -> int:  # a part of totals["block"]
    return min(max(totals.get("shadow_block", 0), 0), totals["block"])


def enforced_blocks(totals: Dict[str, int]) -> int:
    return totals["block"] - shadow_blocks(totals)


def _num(v: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _int(v: Optional[int]) -> str:
    return "-" if v is None else str(v)


Column = Tuple[str, str, Callable[[Reading, Rate], str]]


def columns(live: bool) -> List[Column]:
    """(title, alignment, cell) for each column; live adds the window's rates next to the
    rates between refreshes (--once shows the window's). BLOCK_TOTAL and the live BLOCK/s
    are enforced refusals; the window's BLOCK/s, as stats(), holds shadow ones too."""
    def rate(r: Reading, i: int, rates: Rate) -> str:
        if live:
            return _num(rates[i])
        return _num(r.window_rate("pass" if i == 0 else "block"))

    cols: List[Column] = [
        ("NAME", "<", lambda r, x: r.name),
        ("KIND", "<", lambda r, x: r.kind),
        ("PASS/s", ">", lambda r, x: rate(r, 0, x)),
        ("BLOCK/s", ">", lambda r, x: rate(r, 1, x)),
    ]
    if live:
        cols += [("SHADOW/s", ">", lambda r, x: _num(x[2]))]
    cols += [
        ("IN_FLIGHT", ">", lambda r, x: "-" if r.kind == "metric" else str(r.in_flight)),
        ("WAITING", ">", lambda r, x: "-" if r.kind == "metric" else str(r.waiting)),
        ("AVG_RT_MS", ">", lambda r, x: _num(r.avg_rt_ms)),
    ]
    if live:
        cols += [
            ("WIN_PASS/s", ">", lambda r, x: _num(r.window_rate("pass"))),
            ("WIN_BLOCK/s", ">", lambda r, x: _num(r.window_rate("block"))),
        ]
    cols += [
        ("PASS_TOTAL", ">", lambda r, x: _int(r.totals["pass"] if r.totals else None)),
        ("BLOCK_TOTAL", ">", lambda r, x: _int(enforced_blocks(r.totals) if r.totals
                                                else None)),
        ("SHADOW_TOTAL", ">", lambda r, x: _int(shadow_blocks(r.totals) if r.totals
                                                 else None)),
        ("KEYS", ">", lambda r, x: _int(r.keys)),
        ("LIMIT", ">", lambda r, x: _int(r.adaptive_limit)),  # an AdaptiveLimiter's
    ]
    return cols


def sort_rows(rows: List[Reading], rates: Rates, key: str, live: bool) -> List[Reading]:
    """Busiest first, or by name; names break ties, unreadable regions last."""
    def measure(r: Reading) -> float:
        if key == "in_flight":
            return float(r.in_flight)
        i = 0 if key == "pass" else 1
        v = rates.get(r.path or "", (None, None, None))[i] if live else None
        if v is None:
            v = r.window_rate(key)
        return v or 0.0

    if key == "name":
        return sorted(rows, key=lambda r: (r.error is not None, r.name, r.path or ""))
    return sorted(rows, key=lambda r: (r.error is not None, -measure(r), r.name, r.path or ""))


def table(rows: Sequence[Reading], rates: Rates, live: bool,
          width: Optional[int] = None) -> List[str]:
    """The header and one line per row, columns padded (one space between them instead of
    two when that fits width); a Metric's, a breaker's or an unreadable row ends in a note."""
    cols = columns(live)
    none: Rate = (None, None, None)
    cells = [[c[0] for c in cols]]
    notes: Dict[int, str] = {}
    for r in rows:
        if r.error is not None:
            notes[len(cells)] = f"unreadable: {r.error}"
            cells.append([r.name, "?"])
            continue
        x = rates.get(r.path or "", none)
        window = " ".join(f"{k}={v}" for k, v in r.window.items())
        if r.kind == "metric" and set(r.window) - set(_observe.LIMITER_COUNTS):
            notes[len(cells)] = "window: " + window  # events of its own, not the columns'
        elif r.kind == "breaker":
            t = r.totals or {}
            notes[len(cells)] = "state=%s window: %s; opened=%s refused=%s" % (
                r.state, window, t.get("opened", 0), t.get("refused", 0))
        if len(cells) in notes:
            cells.append([r.name, r.kind] + ["-"] * (len(cols) - 2))
            continue
        cells.append([c[2](r, x) for c in cols])
    widths = [max(len(line[i]) for line in cells if i < len(line)) for i in range(len(cols))]
    gap = "  "
    if width is not None and sum(widths) + 2 * (len(widths) - 1) > width:
        gap = " "
    lines = []
    for n, line in enumerate(cells):
        parts = [f"{v:{cols[i][1]}{widths[i]}}" for i, v in enumerate(line)]
        if n in notes:
            parts.append(notes[n])
        lines.append(gap.join(parts).rstrip())
    return lines


def as_json(rows: Sequence[Reading]) -> List[Dict[str, Any]]:
    return [{
        "name": r.name, "kind": r.kind, "path": r.path, "error": r.error,
        "pass_per_second": r.window_rate("pass"), "block_per_second": r.window_rate("block"),
        "in_flight": r.in_flight, "waiting": r.waiting, "waiters": r.waiters,
        "avg_rt_ms": r.avg_rt_ms, "totals": r.totals, "window": r.window or None,
        "keys": r.keys, "evicted": r.evicted, "adaptive_limit": r.adaptive_limit,
        "state": r.state,
    } for r in rows]


def once(args: argparse.Namespace) -> int:
    rows = sort_rows(_observe.read_regions(args.folder), {}, args.sort, live=False)
    if args.json:
        json.dump(as_json(rows), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if not rows:
        print(f"no slidewin regions in {args.folder or _observe._shm_dir()}", file=sys.stderr)
        return 0
    for line in table(rows, {}, live=False):
        print(line)
    return 0


def live(args: argparse.Namespace) -> int:
    import curses

    def run(scr: Any) -> None:
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        sampler = Sampler(args.folder)
        sort = args.sort
        rows: List[Reading] = []
        rates: Rates = {}
        next_at = 0.0
        stamp = ""
        while True:
            now = time.monotonic()
            if now >= next_at:
                rows, rates = sampler.sample()
                stamp = time.strftime("%H:%M:%S")
                next_at = now + args.interval
            draw(scr, sort_rows(rows, rates, sort, live=True), rates, sort, stamp, args)
            scr.timeout(max(1, int((next_at - time.monotonic()) * 1000)))
            ch = scr.getch()
            if ch in (ord("q"), ord("Q"), 27):
                return
            if ch == curses.KEY_RESIZE:
                curses.update_lines_cols()
            elif 0 <= ch < 256 and chr(ch).lower() in SORTS:
                sort = SORTS[chr(ch).lower()]

    def put(scr: Any, y: int, text: str, attr: int = 0) -> None:
        h, w = scr.getmaxyx()
        if 0 <= y < h and w > 1:
            try:
                scr.addnstr(y, 0, text, w - 1, attr)
            except curses.error:  # a terminal shrunk under us: drawn at the next refresh
                pass

    def draw(scr: Any, shown: List[Reading], rates: Rates, sort: str, stamp: str,
             a: argparse.Namespace) -> None:
        scr.erase()
        h, _ = scr.getmaxyx()
        folder = a.folder or _observe._shm_dir()
        n = len(shown)
        put(scr, 0, f"slidewin top - {folder} - {n} region{'' if n == 1 else 's'} - "
                    f"{stamp} (every {a.interval:g} s)", curses.A_BOLD)
        if not shown:
            put(scr, 2, f"no slidewin regions in {folder}: a Limiter, KeyedLimiter or Metric "
                        "made with shared=\"name\" shows here")
        else:
            lines = table(shown, rates, live=True, width=scr.getmaxyx()[1] - 1)
            put(scr, 2, lines[0], curses.A_REVERSE)
            room = max(0, h - 5)
            for i, line in enumerate(lines[1:1 + room]):
                put(scr, 3 + i, line)
            if n > room:
                put(scr, 3 + room, f"... {n - room} more (a taller terminal shows them)")
        put(scr, h - 1, f"sort: [p]ass/s [b]lock/s [i]n-flight [n]ame (now {SORT_TITLES[sort]})"
                        "   [q]uit", curses.A_REVERSE)
        scr.refresh()

    # the terminal's size, not LINES / COLUMNS, often stale copies inherited from a parent
    os.environ.pop("LINES", None)
    os.environ.pop("COLUMNS", None)
    curses.wrapper(run)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m slidewin top",
        description="Every shared slidewin region of the host, live (read-only: watching "
                    "changes nothing). Keys: p, b, i, n sort; q quits.")
    p.add_argument("--folder", help="the folder of the regions (default: SLIDEWIN_SHM_DIR "
                                    "or /dev/shm)")
    p.add_argument("--interval", type=float, default=1.0,
                   help="seconds between refreshes (default 1)")
    p.add_argument("--sort", default="pass", choices=list(SORT_TITLES),
                   help="the first sort order (default pass)")
    p.add_argument("--once", action="store_true",
                   help="print one table (rates over the window) and exit")
    p.add_argument("--json", action="store_true", help="with --once: the rows as JSON")
    a = p.parse_args(argv)
    if not a.interval > 0 or a.interval > 3600:
        p.error("--interval must be > 0 and <= 3600 seconds")
    if a.json:
        a.once = True
    if a.once:
        return once(a)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        p.error("the live view needs a terminal: use --once (or --json) for scripts")
    try:
        return live(a)
    except KeyboardInterrupt:
        return 0
