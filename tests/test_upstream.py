"""slidewin.Upstream: pacing, the pause of a 429/503 shared by threads, tasks and processes,
the server's view from the response headers (a table, garbage included), token settlement,
the breaker's outcomes, refusals with retry_after, and bad input.

Waits are not timed: the sleeps of slidewin._upstream are recorded instead of slept where a
test checks a schedule (the time each call would be sent)."""

import asyncio
import multiprocessing as mp
import os
import signal
import threading
import time
import uuid

import pytest

import slidewin
from slidewin import BlockedError, Breaker, BreakerOpenError, Upstream
from slidewin import _headers, _upstream


class Schedule:
    """time.sleep of slidewin._upstream (and of the all_of group it uses) recorded, not
    slept: `at()` is the time the current call would be sent."""

    def __init__(self, monkeypatch):
        self.until = 0.0
        self.slept = []
        monkeypatch.setattr(_upstream.time, "sleep", self._sleep)

    def _sleep(self, s):
        self.slept.append(s)
        self.until = max(self.until, time.monotonic() + s)

    def at(self):
        return max(self.until, time.monotonic())


def call_times(api, sched, n, timeout):
    """The times n calls of api, one after the other, were let through."""
    sent = []
    for _ in range(n):
        with api.call(timeout=timeout):
            sent.append(sched.at())
    return sent


def most_in_window(times, d):
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[i] - times[j] > d:
            j += 1
        best = max(best, i - j + 1)
    return best


# -- pacing -----------------------------------------------------------------------------


def test_requests_are_paced_never_the_periods_quota_at_once(monkeypatch):
    sched = Schedule(monkeypatch)
    api = Upstream(requests="600/minute")  # one every 100 ms
    sent = call_times(api, sched, 30, timeout=60)
    for d in (0.0, 0.05, 0.35, 1.0, 2.0):
        assert most_in_window(sent, d) <= 600 * d / 60 + 1 + 1e-9, d
    assert api.stats()["sent"] == 30


def test_tokens_are_paced_with_a_burst_of_the_largest_estimate(monkeypatch):
    sched = Schedule(monkeypatch)
    api = Upstream(tokens="1000/second")
    sent = []
    sizes = [300, 50, 500, 10, 200] * 4
    for n in sizes:
        with api.call(tokens=n, timeout=60):
            sent.append((sched.at(), n))
    for d in (0.0, 0.1, 0.4, 1.0):
        for t0, _ in sent:
            inside = sum(n for t, n in sent if t0 <= t <= t0 + d)
            assert inside <= 1000 * d + max(sizes) + 1e-6


def test_a_call_of_zero_tokens_takes_no_tokens(monkeypatch):
    Schedule(monkeypatch)
    api = Upstream(tokens="1/second", requests="100/second")
    with api.call(tokens=10):
        pass
    with api.call(timeout=0.5):  # no tokens: only the requests' pace (10 ms)
        pass
    with pytest.raises(BlockedError):  # one token: 1 s
        with api.call(tokens=1, timeout=0.5):
            pass


# -- refusals ---------------------------------------------------------------------------


def test_a_wait_known_to_exceed_the_timeout_is_refused_at_once_with_retry_after(monkeypatch):
    sched = Schedule(monkeypatch)
    api = Upstream(requests="1/second")
    t0 = time.monotonic()
    with api.call(timeout=0):
        pass
    with pytest.raises(BlockedError) as e:
        with api.call(timeout=0.1):
            pass
    # the rest of the pace (on the real clock: a loaded machine may take its time here)
    assert 1.0 - (time.monotonic() - t0) - 0.01 <= e.value.retry_after <= 1.0
    assert sched.slept == []  # decided without waiting
    assert api.stats()["refused"] == 1
    with api.call(timeout=5):  # the refused call took no slot: the next waits one pace
        sent = sched.at()
    assert t0 + 1.0 - 0.01 <= sent and sum(sched.slept) <= 1.0


def test_a_full_concurrency_bound_refuses_at_the_timeout():
    api = Upstream(concurrency=1)
    with api.call():
        with pytest.raises(BlockedError):
            with api.call(timeout=0):
                pass
    with api.call(timeout=0):
        pass


# -- the pause --------------------------------------------------------------------------


def test_a_429_pauses_every_thread_for_its_retry_after(monkeypatch):
    api = Upstream(requests="1000/second")
    with api.call() as c:
        c.observe(429, {"Retry-After": "30"})
    assert 29 < api.paused_until() <= 30
    errors = []

    def other():
        try:
            with api.call(timeout=1):
                errors.append(None)
        except BlockedError as e:
            errors.append(e.retry_after)

    threads = [threading.Thread(target=other) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4 and all(e is not None and 29 < e <= 30 for e in errors)
    assert api.stats()["upstream_429"] == 1
    assert 29 < api.stats()["paused_s"] <= 30


def test_a_429_pauses_every_task():
    api = Upstream(requests="1000/second", concurrency=4)

    async def main():
        async with api.call() as c:
            c.observe(503, [("retry-after-ms", "20000")])
        got = []
        for coro in [api.call(timeout=0.5).__aenter__() for _ in range(3)]:
            with pytest.raises(BlockedError) as e:
                await coro
            got.append(e.value.retry_after)
        return got

    got = asyncio.run(main())
    assert all(19 < g <= 20 for g in got)
    assert api.stats()["upstream_503"] == 1


def test_nothing_is_sent_while_paused_and_the_wait_ends_with_the_pause(monkeypatch):
    sched = Schedule(monkeypatch)
    api = Upstream(requests="1000/second")
    with api.call() as c:
        c.observe(429, {"retry-after-ms": "5000"})
    with api.call(timeout=10):
        pass
    assert sched.slept and 4 < sched.slept[0] <= 5


def test_a_pause_without_retry_after_backs_off_exponentially_from_one_second():
    api = Upstream(requests="1000/second")
    board = api._board
    now = time.monotonic_ns()
    assert board.pause(None, now) == 1_000_000_000
    assert board.pause(None, now) == 1_000_000_000  # 2 s from now: 1 s more
    assert board.pause(None, now) == 2_000_000_000  # 4 s
    board.settle()  # a good response: the next starts from 1 s again
    assert board.pause(None, now + 10**10) == 1_000_000_000


def test_a_pause_is_never_shortened():
    api = Upstream(requests="1000/second")
    with api.call() as c:
        c.observe(429, {"retry-after": "20"})
    api._board.pause(1.0, time.monotonic_ns())
    assert api.paused_until() > 19


def test_an_http_date_retry_after_pauses_until_that_date():
    import email.utils
    api = Upstream(requests="1000/second")
    with api.call() as c:
        c.observe(429, {"Retry-After": email.utils.formatdate(time.time() + 40, usegmt=True)})
    assert 38 < api.paused_until() <= 40


# -- processes ------------------------------------------------------------------------------


def _child_pauses(name, q):
    api = Upstream(requests="1000/second", shared=name)
    with api.call() as c:
        c.observe(429, {"retry-after": "45"})
    q.put(api.paused_until())


def _child_reads(name, q):
    q.put(Upstream(requests="1000/second", shared=name).paused_until())


def _child_dies_holding_the_lock(name):
    api = Upstream(requests="1000/second", shared=name)
    api._board._locked().__enter__()
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture
def name():
    n = "swup-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    yield n
    for what in ("requests", "tokens", "concurrency"):
        try:
            slidewin.unlink("upstream-%s.%s" % (n, what))
        except OSError:
            pass
    try:
        os.unlink("/dev/shm/slidewin-upstream-%s" % n)
    except OSError:
        pass


@pytest.mark.procs
def test_a_429_in_one_process_pauses_another(name):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    api = Upstream(requests="1000/second", shared=name)
    assert api.paused_until() is None
    mine = api.call()
    mine.__enter__()  # admitted before the pause
    p = ctx.Process(target=_child_pauses, args=(name, q))
    p.start()
    p.join(30)
    assert 44 < q.get(timeout=5) <= 45
    assert 30 < api.paused_until() <= 45  # seen here without any call of this process
    with pytest.raises(BlockedError):
        with api.call(timeout=1):
            pass
    mine.observe(429, {"retry-after": "90"})  # and this one's is seen there: the longer wins
    mine.__exit__(None, None, None)
    p = ctx.Process(target=_child_reads, args=(name, q))
    p.start()
    p.join(30)
    assert 60 < q.get(timeout=5) <= 90


@pytest.mark.procs
def test_a_process_killed_holding_the_boards_lock_blocks_no_one(name):
    ctx = mp.get_context("fork")
    api = Upstream(requests="1000/second", shared=name)
    p = ctx.Process(target=_child_dies_holding_the_lock, args=(name,))
    p.start()
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    with api.call() as c:
        c.observe(429, {"retry-after": "5"})
    assert 3 < api.paused_until() <= 5


def test_shared_true_is_a_board_of_the_forked_processes():
    api = Upstream(requests="1000/second", shared=True)
    with api.call() as c:
        c.observe(429, {"retry-after": "7"})
    assert 6 < api.paused_until() <= 7


# -- the server's view ----------------------------------------------------------------------


WALL = 1_800_000_000.0  # a fixed wall clock for the table


@pytest.mark.parametrize("headers, want", [
    ({"x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s"},
     [("requests", 59, 1.0)]),
    ({"x-ratelimit-remaining-tokens": "1000", "x-ratelimit-reset-tokens": "6m0s"},
     [("tokens", 1000, 360.0)]),
    ({"x-ratelimit-remaining-tokens": "7", "x-ratelimit-reset-tokens": "20ms"},
     [("tokens", 7, 0.02)]),
    ({"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "1m30.5s"},
     [("requests", 3, 90.5)]),
    ({"anthropic-ratelimit-requests-remaining": "10",
      "anthropic-ratelimit-requests-reset": "2027-01-15T08:00:30Z"},
     [("requests", 10, 30.0)]),
    ({"anthropic-ratelimit-tokens-remaining": "500",
      "anthropic-ratelimit-tokens-reset": "2027-01-15T09:00:10.5+01:00"},
     [("tokens", 500, 10.5)]),
    ({"ratelimit": '"default";r=5;t=30'}, [("requests", 5, 30.0)]),
    ({"ratelimit": '"a";r=50;t=10, "b";r=2;t=60'}, [("requests", 2, 60.0)]),
    ({"ratelimit-remaining": "4", "ratelimit-reset": "12"}, [("requests", 4, 12.0)]),
    # garbage: each ignored, never an exception
    ({"x-ratelimit-remaining-requests": "-1", "x-ratelimit-reset-requests": "1s"}, []),
    ({"x-ratelimit-remaining-requests": "ten", "x-ratelimit-reset-requests": "1s"}, []),
    ({"x-ratelimit-remaining-requests": "1e9", "x-ratelimit-reset-requests": "1s"}, []),
    ({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "soon"}, []),
    ({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "1x"}, []),
    ({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "s1"}, []),
    ({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "nan"}, []),
    ({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "-3s"}, []),
    ({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "9" * 400}, []),
    ({"x-ratelimit-remaining-requests": "5"}, []),
    ({"anthropic-ratelimit-requests-remaining": "10",
      "anthropic-ratelimit-requests-reset": "2027-01-15T08:00:30"}, []),  # no zone
    ({"anthropic-ratelimit-requests-remaining": "10",
      "anthropic-ratelimit-requests-reset": "tomorrow"}, []),
    ({"ratelimit": "garbage;;;==,,"}, []),
    ({"ratelimit": '"x";r=-1;t=5'}, []),
    ({"ratelimit": '"x";r=1;t=inf'}, []),
])
def test_server_view_headers(headers, want):
    from datetime import datetime, timezone
    wall = datetime(2027, 1, 15, 8, 0, 0, tzinfo=timezone.utc).timestamp()
    h = _headers.lower_headers(headers)
    got = _headers.server_view(h, wall)
    assert [(b, r, round(t, 6)) for b, r, t in got] == want


@pytest.mark.parametrize("headers, want", [
    ({"retry-after": "3"}, 3.0),
    ({"retry-after": "0"}, 0.0),
    ({"retry-after": "1.5"}, 1.5),
    ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
    ({"retry-after-ms": "junk", "retry-after": "2"}, 2.0),
    ({"retry-after": "Thu, 01 Jan 2027 00:00:10 GMT"}, 10.0),
    ({"retry-after": "Wed, 31 Dec 2026 23:59:00 GMT"}, 0.0),  # in the past: no pause
    ({"retry-after": "999999999"}, _headers.MAX_S),  # clamped: never a pause of years
    ({"retry-after": "-5"}, None),
    ({"retry-after": "soon"}, None),
    ({"retry-after": "nan"}, None),
    ({"retry-after": "\x00\xff" * 200}, None),
    ({}, None),
])
def test_retry_after_headers(headers, want):
    from datetime import datetime, timezone
    wall = datetime(2027, 1, 1, 0, 0, 0, tzinfo=timezone.utc).timestamp()
    assert _headers.retry_after_s(_headers.lower_headers(headers), wall) == want


def test_garbage_headers_never_raise_from_observe():
    api = Upstream(requests="1000/second", tokens="100000/second")
    junk = [("x-ratelimit-remaining-requests", "\udcff"), ("retry-after", "\x00"),
            ("x-ratelimit-remaining-tokens", "\x1f5"), ("ratelimit-remaining", "\x1c7\x1d"),
            (b"ratelimit", b"\xff\xfe;r=;t="), ("anthropic-ratelimit-tokens-reset", "9999-99"),
            ("x-ratelimit-reset-tokens", "1" * 10000)]
    with api.call() as c:
        c.observe(429, junk)
    assert 0.9 < api.paused_until() <= 1.0  # no usable Retry-After: the backoff's 1 s


def test_the_server_view_lowers_the_pace_until_its_reset(monkeypatch):
    sched = Schedule(monkeypatch)
    api = Upstream(requests="1000/second")
    with api.call() as c:  # the server: 4 more in the next 2 s (one every 500 ms)
        c.observe(200, {"x-ratelimit-remaining-requests": "4",
                        "x-ratelimit-reset-requests": "2s"})
    sent = call_times(api, sched, 4, timeout=10)
    gaps = [b - a for a, b in zip(sent, sent[1:])]
    assert all(g > 0.45 for g in gaps)


def test_the_server_view_never_raises_the_configured_pace(monkeypatch):
    sched = Schedule(monkeypatch)
    api = Upstream(requests="10/second")
    with api.call() as c:
        c.observe(200, {"x-ratelimit-remaining-requests": "100000",
                        "x-ratelimit-reset-requests": "1s"})
    sent = call_times(api, sched, 5, timeout=10)
    assert most_in_window(sent, 0.25) <= 10 * 0.25 + 1


def test_none_remaining_holds_that_budget_until_the_reset():
    api = Upstream(tokens="100000/second")
    with api.call(tokens=10) as c:
        c.observe(200, {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "20s"})
    with pytest.raises(BlockedError) as e:
        with api.call(tokens=10, timeout=1):
            pass
    assert 19 < e.value.retry_after <= 20
    with api.call(tokens=0, timeout=0):  # a call of no tokens is not held
        pass


# -- tokens settled -------------------------------------------------------------------------


def test_tokens_not_used_are_given_back_to_the_pace(monkeypatch):
    Schedule(monkeypatch)
    api = Upstream(tokens="100/second")
    a = api.call(tokens=500)
    a.__enter__()
    with api.call(tokens=500):  # queued 5 s behind a
        pass
    a.observe(200, {}, tokens=100)  # a used 100: 4 s given back
    a.__exit__(None, None, None)
    with pytest.raises(BlockedError) as e:
        with api.call(tokens=100, timeout=0):
            pass
    assert 1 < e.value.retry_after <= 2.0  # 6 s without the refund
    s = api.stats()
    assert (s["estimated_tokens"], s["used_tokens"], s["refunded_tokens"],
            s["charged_tokens"]) == (1000, 100, 400, 0)


def test_tokens_used_beyond_the_estimate_are_charged_never_refused(monkeypatch):
    Schedule(monkeypatch)
    api = Upstream(tokens="1000/second")
    with api.call(tokens=100) as c:
        c.observe(200, {}, tokens=5100)  # never refused
    with pytest.raises(BlockedError) as e:
        with api.call(tokens=10, timeout=0):
            pass
    assert e.value.retry_after > 4.5  # the 4900 charged move the pace
    assert api.stats()["charged_tokens"] == 5000


# -- the breaker ----------------------------------------------------------------------------


def test_a_429_is_a_cancel_on_the_breaker_and_a_5xx_a_failure():
    br = Breaker(error_count=1, min_requests=1, recovery_s=30)
    api = Upstream(requests="100000/second", breaker=br)
    for _ in range(5):
        with api.call(timeout=5) as c:
            c.observe(429, {"retry-after-ms": "1"})
    assert br.state == "closed"
    assert (br.totals()["total"], br.totals()["errors"]) == (0, 0)  # cancels count nothing
    for _ in range(2):
        with api.call(timeout=5) as c:
            c.observe(500, {})
    assert br.state == "open"
    with pytest.raises(BreakerOpenError):
        with api.call(timeout=0):
            pass


def test_a_transport_error_is_a_failure_on_the_breaker():
    br = Breaker(error_count=1, min_requests=1, recovery_s=30)
    api = Upstream(concurrency=2, breaker=br)
    for _ in range(2):
        with pytest.raises(ConnectionError):
            with api.call():
                raise ConnectionError("reset by peer")
    assert br.state == "open"
    assert api.stats()["errors"] == 2


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, exc, word", [
    (dict(requests=5), TypeError, "requests"),
    (dict(requests="many"), ValueError, "requests"),
    (dict(tokens="0/minute"), ValueError, "tokens"),
    (dict(requests="5/s", concurrency=0), ValueError, "concurrency"),
    (dict(requests="5/s", concurrency=1.5), TypeError, "concurrency"),
    (dict(requests="5/s", burst=0), ValueError, "burst"),
    (dict(requests="5/s", burst=3), ValueError, "burst"),
    (dict(requests="5/s", breaker=object()), TypeError, "breaker"),
    (dict(requests="5/s", shared=3), TypeError, "shared"),
    (dict(requests="5/s", shared="a/b"), ValueError, "shared"),
    (dict(requests="5/s", redis="localhost"), TypeError, "redis"),
    (dict(requests="5/s", name=1), TypeError, "name"),
    (dict(), ValueError, "requests="),
])
def test_bad_arguments_name_the_parameter(kw, exc, word):
    with pytest.raises(exc, match=word):
        Upstream(**kw)


def test_bad_call_and_observe_arguments_name_the_parameter():
    api = Upstream(requests="1000/second")
    with pytest.raises(TypeError, match="tokens"):
        api.call(tokens="12")
    with pytest.raises(ValueError, match="tokens"):
        api.call(tokens=-1)
    with pytest.raises(ValueError, match="timeout"):
        api.call(timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        api.call(timeout="1")
    with api.call() as c:
        with pytest.raises(TypeError, match="status"):
            c.observe("200", {})
        with pytest.raises(ValueError, match="status"):
            c.observe(99, {})
        with pytest.raises(TypeError, match="headers"):
            c.observe(200, 5)
        with pytest.raises(ValueError, match="tokens"):
            c.observe(200, {}, tokens=-3)
        c.observe(200, {})
        with pytest.raises(RuntimeError, match="already"):
            c.observe(200, {})
    with pytest.raises(RuntimeError):
        c.observe(200, {})
    call = api.call()
    with call:
        pass
    with pytest.raises(RuntimeError, match="already"):
        with call:
            pass


def test_repr_and_limiters_show_the_configuration():
    api = Upstream(requests="500/minute", tokens="30000/minute", concurrency=8, name="llm")
    assert repr(api) == ("Upstream(requests='500/minute', tokens='30000/minute', "
                         "concurrency=8, name='llm')")
    assert [lim.name for lim in api.limiters] == ["llm.requests", "llm.tokens",
                                                  "llm.concurrency"]
    assert api.limiters[0].behavior == "throttle"


def _child_pauses_forked(api, q):
    with api.call() as c:
        c.observe(429, {"retry-after": "3"})
    q.put(api.paused_until())


@pytest.mark.procs
def test_a_fork_while_another_thread_holds_the_board_leaves_the_child_free(name):
    api = Upstream(requests="1000/second", shared=name)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    api._board._mu.acquire()  # as a thread of this process deciding at the fork
    try:
        p = ctx.Process(target=_child_pauses_forked, args=(api, q))
        p.start()
        p.join(20)
        alive = p.is_alive()
        if alive:
            p.kill()
    finally:
        api._board._mu.release()
    assert not alive
    assert 2 < q.get(timeout=5) <= 3


def test_a_task_cancelled_while_it_waits_its_slot_gives_the_slot_back():
    api = Upstream(requests="1/second", concurrency=2)

    async def main():
        async with api.call():
            pass
        waiting = asyncio.ensure_future(api.call(timeout=5).__aenter__())
        await asyncio.sleep(0.05)  # admitted, sleeping until its slot
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(BlockedError) as e:
            async with api.call(timeout=0):
                pass
        return e.value.retry_after

    assert 0 < asyncio.run(main()) <= 1.0  # 2 s had the cancelled call kept its slot
    assert api.limiters[1].in_flight == 0


def test_a_view_slot_past_the_boards_range_is_refused_and_holds_nothing():
    # 1 token left for 3,000 s: 3e12 ns a token; 10**7 tokens would end past 2**63 ns
    up = Upstream(tokens="1000000000/minute", concurrency=1)
    with up.call(tokens=1) as c:
        c.observe(200, [("x-ratelimit-remaining-tokens", "1"),
                        ("x-ratelimit-reset-tokens", "3000s")])
    for _ in range(2):
        with pytest.raises(BlockedError, match="next free slot is too far"):
            with up.call(tokens=10**7, timeout=0.2):
                pass
    assert up.limiters[-1].in_flight == 0


def test_a_failure_after_the_admission_gives_everything_back(monkeypatch):
    up = Upstream(requests="10/s", concurrency=1)

    def broken(*args):
        raise OSError("the board's lock")

    monkeypatch.setattr(up._board, "reserve_view", broken)
    for _ in range(2):  # the second finds the in-flight slot free again
        with pytest.raises(OSError):
            with up.call(timeout=0.1):
                pass
    assert up.limiters[-1].in_flight == 0
