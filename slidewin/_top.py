"""`python -m slidewin top`: every shared region of the host (SLIDEWIN_SHM_DIR or /dev/shm, or
--folder), live: a curses table refreshed each --interval seconds, regions read, never attached.
--once prints one table (window rates), --json its rows; an unreadable region is an error row.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _observe
from ._observe import Reading

SORT_TITLES = {"pass": "pass/s", "block": "block/s", "in_flight": "in-flight", "name": "name"}
SORTS = {sort[0]: sort for sort in SORT_TITLES}  # the key of each: its first letter

# path -> (pass/s, block/s (enforced refusals), shadow/s (a shadow limiter's would-be ones))
Rate = Tuple[Optional[float], Optional[float], Optional[float]]
Rates = Dict[str, Rate]


class Sampler:
    """Per-second rates from the lifetime totals of two reads (none at a region's first read
    or once it was recreated)."""

    def __init__(self, folder: Optional[str]) -> None:
        self.folder = folder
        self._last: Dict[str, Tuple[float, Optional[int], Tuple[int, int, int]]] = {}

    def sample(self) -> Tuple[List[Reading], Rates]:
        t = time.monotonic()
        rows = _observe.read_regions(self.folder)
        rates: Rates = {}
        seen = {}
        for r in rows:
            if r.error is not None or r.totals is None or r.path is None or r.kind == "breaker":
                continue
            now = seen[r.path] = (t, r.created_unix_ns, _observe.decisions(r.totals))
            prev = self._last.get(r.path, now)  # a first read: dt 0, no rate
            dt = t - prev[0]
            p, b, sh = (x - y for x, y in zip(now[2], prev[2]))
            if prev[1] == now[1] and dt > 0 and min(p, b, sh) >= 0:
                rates[r.path] = (p / dt, b / dt, sh / dt)
        self._last = seen
        return rows, rates


def _num(v: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


Cell = Callable[[Reading, Rate], str]


def columns(live: bool) -> List[Tuple[str, Cell]]:
    """(title, cell) for each column (the first two left-aligned); live adds the window's
    rates next to the rates between refreshes (--once shows the window's). BLOCK_TOTAL and
    the live BLOCK/s are enforced refusals; the window's BLOCK/s, as stats(), holds shadow
    ones too."""
    def window(count: str) -> Cell:
        return lambda r, x: _num(r.window_rate(count))

    def sampled(i: int) -> Cell:
        return lambda r, x: _num(x[i])

    def now(attr: str) -> Cell:  # a Metric has none
        return lambda r, x: "-" if r.kind == "metric" else str(getattr(r, attr))

    def total(i: int) -> Cell:
        return lambda r, x: _num(_observe.decisions(r.totals)[i] if r.totals else None, "{}")

    cols: List[Tuple[str, Cell]] = [
        ("NAME", lambda r, x: r.name), ("KIND", lambda r, x: r.kind),
        ("PASS/s", sampled(0) if live else window("pass")),
        ("BLOCK/s", sampled(1) if live else window("block"))]
    cols += [("SHADOW/s", sampled(2))] if live else []
    cols += [("IN_FLIGHT", now("in_flight")), ("WAITING", now("waiting")),
             ("AVG_RT_MS", lambda r, x: _num(r.avg_rt_ms))]
    cols += [("WIN_PASS/s", window("pass")), ("WIN_BLOCK/s", window("block"))] if live else []
    return cols + [("PASS_TOTAL", total(0)), ("BLOCK_TOTAL", total(1)),
                   ("SHADOW_TOTAL", total(2)), ("KEYS", lambda r, x: _num(r.keys, "{}")),
                   ("LIMIT", lambda r, x: _num(r.adaptive_limit, "{}"))]  # an AdaptiveLimiter's


def sort_rows(rows: List[Reading], rates: Rates, key: str, live: bool) -> List[Reading]:
    """Busiest first, or by name; names break ties, unreadable regions last."""
    def measure(r: Reading) -> float:  # 0 for all when by name
        if key in ("in_flight", "name"):
            return float(r.in_flight) if key == "in_flight" else 0.0
        v = rates.get(r.path or "", (None, None, None))[key == "block"] if live else None
        return (r.window_rate(key) if v is None else v) or 0.0

    return sorted(rows, key=lambda r: (r.error is not None, -measure(r), r.name, r.path or ""))


def table(rows: Sequence[Reading], rates: Rates, live: bool,
          width: Optional[int] = None) -> List[str]:
    """The header and one line per row, columns padded (one space between them instead of
    two when that fits width); a Metric's, a breaker's or an unreadable row ends in a note."""
    cols = columns(live)
    out: List[Tuple[List[str], str]] = [([c[0] for c in cols], "")]  # (cells, note)
    for r in rows:
        window = " ".join(f"{k}={v}" for k, v in r.window.items())
        blank = [r.name, r.kind] + ["-"] * (len(cols) - 2)
        if r.error is not None:  # KIND "?"
            out.append(([r.name, r.kind], f"unreadable: {r.error}"))
        elif r.kind == "metric" and set(r.window) - set(_observe.LIMITER_COUNTS):
            out.append((blank, "window: " + window))  # events of its own, not the columns'
        elif r.kind == "breaker":
            t = r.totals or {}
            out.append((blank, "state=%s window: %s; opened=%s refused=%s" % (
                r.state, window, t.get("opened", 0), t.get("refused", 0))))
        else:
            out.append(([c[1](r, rates.get(r.path or "", (None, None, None))) for c in cols], ""))
    widths = [max(len(cells[i]) for cells, _ in out if i < len(cells)) for i in range(len(cols))]
    gap = " " if width is not None and sum(widths) + 2 * (len(widths) - 1) > width else "  "
    return [gap.join([f"{v:{'<' if i < 2 else '>'}{widths[i]}}" for i, v in enumerate(cells)]
                     + [note]).rstrip() for cells, note in out]


def as_json(rows: Sequence[Reading]) -> List[Dict[str, Any]]:
    return [{
        "name": r.name, "kind": r.kind, "path": r.path, "error": r.error,
        "pass_per_second": r.window_rate("pass"), "block_per_second": r.window_rate("block"),
        "in_flight": r.in_flight, "waiting": r.waiting, "waiters": r.waiters,
        "avg_rt_ms": r.avg_rt_ms, "totals": r.totals, "window": r.window or None,
        "keys": r.keys, "evicted": r.evicted, "adaptive_limit": r.adaptive_limit,
        "state": r.state,
    } for r in rows]


def live(args: argparse.Namespace) -> int:
    import curses

    folder = args.folder or _observe._shm_dir()

    def run(scr: Any) -> None:
        def put(y: int, text: str, attr: int = 0) -> None:
            with contextlib.suppress(curses.error):  # off a screen shrunk under us: next time
                scr.addnstr(y, 0, text, max(0, scr.getmaxyx()[1] - 1), attr)

        with contextlib.suppress(curses.error):  # a terminal without a cursor to hide
            curses.curs_set(0)
        sampler = Sampler(args.folder)
        sort = args.sort
        next_at = 0.0  # the first pass samples
        while True:
            now = time.monotonic()
            if now >= next_at:
                rows, rates = sampler.sample()
                stamp = time.strftime("%H:%M:%S")
                next_at = now + args.interval
            shown = sort_rows(rows, rates, sort, live=True)
            n = len(shown)
            scr.erase()
            h, w = scr.getmaxyx()
            put(0, f"slidewin top - {folder} - {n} region{'' if n == 1 else 's'} - {stamp} "
                   f"(every {args.interval:g} s)", curses.A_BOLD)
            if not shown:
                put(2, f"no slidewin regions in {folder}: a Limiter, KeyedLimiter or Metric "
                       "made with shared=\"name\" shows here")
            else:
                lines = table(shown, rates, live=True, width=w - 1)
                put(2, lines[0], curses.A_REVERSE)
                room = max(0, h - 5)
                for i, line in enumerate(lines[1:1 + room]):
                    put(3 + i, line)
                if n > room:
                    put(3 + room, f"... {n - room} more (a taller terminal shows them)")
            put(h - 1, f"sort: [p]ass/s [b]lock/s [i]n-flight [n]ame (now {SORT_TITLES[sort]})"
                       "   [q]uit", curses.A_REVERSE)
            scr.refresh()
            scr.timeout(max(1, int((next_at - time.monotonic()) * 1000)))
            ch = scr.getch()
            if ch in (ord("q"), ord("Q"), 27):
                return
            if ch == curses.KEY_RESIZE:
                curses.update_lines_cols()
            elif 0 <= ch < 256 and chr(ch).lower() in SORTS:
                sort = SORTS[chr(ch).lower()]

    # the terminal's size, not LINES / COLUMNS, often stale copies inherited from a parent
    os.environ.pop("LINES", None)
    os.environ.pop("COLUMNS", None)
    with contextlib.suppress(KeyboardInterrupt):  # ^C quits as q does
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
    if a.once or a.json:
        rows = sort_rows(_observe.read_regions(a.folder), {}, a.sort, live=False)
        if a.json:
            print(json.dumps(as_json(rows), indent=1))
        elif not rows:
            print(f"no slidewin regions in {a.folder or _observe._shm_dir()}", file=sys.stderr)
        else:
            print("\n".join(table(rows, {}, live=False)))
        return 0
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        p.error("the live view needs a terminal: use --once (or --json) for scripts")
    return live(a)
