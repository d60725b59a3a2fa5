"""The behaviours' worked examples (docs/design.md §5): warm_up, throttle, warm_up_throttle,
reject and the kill switch, on a clock the test sets (now_ns)."""

import time

import pytest

from slidewin import BlockedError, Event, Limiter

from limiter_helpers import MS, S, counts, ms
from refmodel import LimiterModel


# -- warm_up (docs/design.md §5) -------------------------------------------------------

WARM_UP_SEQUENCE = [3, 3, 3, 3, 3, 4, 4, 4, 5, 5, 6, 7, 10, 10, 10, 10]


def steady_demand(lim, seconds, t0_ms=0, step_ms=10):
    """try_acquire every step_ms from an aligned second; admitted per whole second."""
    per_second = []
    for sec in range(seconds):
        admitted = 0
        for k in range(1000 // step_ms):
            admitted += lim.try_acquire(now_ns=ms(t0_ms + sec * 1000 + k * step_ms))
        per_second.append(admitted)
    return per_second


def test_warm_up_model_reproduces_design_sequence():
    model = LimiterModel(10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    assert (model.warning, model.max_token) == (50, 100)
    assert model.slope == pytest.approx(0.004)
    assert model.warm_rate() == pytest.approx(10 / 3)
    assert steady_demand(model, 16) == WARM_UP_SEQUENCE


@pytest.mark.parametrize("t0_ms", [0, 1000, 7_000_000])
@pytest.mark.parametrize("step_ms", [10, 1, 50])
def test_warm_up_from_cold_under_steady_demand(t0_ms, step_ms):
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    assert steady_demand(lim, 16, t0_ms, step_ms) == WARM_UP_SEQUENCE


def test_warm_up_counts_pass_and_block():
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    results = [lim.try_acquire(now_ns=ms(100)) for _ in range(10)]
    assert results == [True] * 3 + [False] * 7
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=ms(100)) == (3, 7)


def test_warm_up_fresh_is_cold_whatever_the_clock():
    # (a): Sentinel would start warm with its clock near 0
    for t in (0, 1, 999):
        lim = Limiter(qps=10, behavior="warm_up")
        assert sum(lim.try_acquire(now_ns=ms(t)) for _ in range(10)) == 3


def test_warm_up_reserve_returns_zero_or_none():
    lim = Limiter(qps=10, behavior="warm_up")
    got = [lim.reserve(now_ns=ms(5)) for _ in range(4)]
    assert got == [0, 0, 0, None]
    # prioritized is ignored by warm_up
    assert lim.reserve(now_ns=ms(400), prioritized=True) is None
    assert lim.metric.sum(Event.OCCUPIED_PASS, now_ns=ms(400)) == 0


def test_warm_up_without_ramp_when_max_le_warning():
    # (b): q=1, W=1, cf=3: warning 0, max 0. Sentinel computes NaN and blocks all.
    lim = Limiter(qps=1, behavior="warm_up", warm_up_s=1, cold_factor=3)
    assert steady_demand(lim, 4) == [1, 1, 1, 1]


def test_warm_up_q_below_cold_factor_still_warms_up():
    # (c): q=2 < cf=3: cold rate 0.67/s < one per window; slidewin admits one per window
    lim = Limiter(qps=2, behavior="warm_up", warm_up_s=10, cold_factor=3)
    per = steady_demand(lim, 16)
    model = LimiterModel(2, behavior="warm_up", warm_up_s=10, cold_factor=3)
    assert per == steady_demand(model, 16)
    assert per[0] == 1 and per[-1] == 2


def test_warm_up_idle_cools_down_again():
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    model = LimiterModel(10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    assert steady_demand(lim, 20) == steady_demand(model, 20)
    # 200 idle seconds refill to max: cold again
    later = 220_000
    assert steady_demand(lim, 3, later) == steady_demand(model, 3, later) == [3, 3, 3]


def test_warm_up_cold_limiter_fed_only_large_requests_still_warms():
    # docs/design.md §8, "a cold warm-up limiter never dies". Its cold allowance here is
    # 3.33 per window;
    # requests of n=4 alone would never fit, so the first request of an empty window passes
    # whatever its size (n <= L), and the admitted passes warm it up to q.
    lim = Limiter(qps=10, behavior="warm_up", warm_up_s=10, cold_factor=3)
    per_second = []
    for sec in range(30):
        admitted = 0
        for k in range(10):  # one try every 100 ms
            if lim.try_acquire(4, now_ns=(100 + sec) * 10**9 + k * 100 * 10**6):
                admitted += 4
        per_second.append(admitted)
    assert per_second[0] == 4  # one request per window while cold
    assert all(a >= 4 for a in per_second)
    assert per_second[-1] == 8  # warm: two n=4 fit under q=10
    # and n above the window's limit still never passes
    assert not lim.try_acquire(11, now_ns=200 * 10**9)


# -- throttle (docs/design.md §5) ------------------------------------------------------

def test_throttle_seven_at_one_instant():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=500)
    now = ms(123_456)
    waits = [lim.reserve(now_ns=now) for _ in range(7)]
    assert waits == [0, 100 * MS, 200 * MS, 300 * MS, 400 * MS, 500 * MS, None]
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=now) == (6, 1)


def test_throttle_try_acquire_only_admits_without_wait():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=500)
    now = ms(10_000)
    assert lim.try_acquire(now_ns=now) is True
    assert lim.try_acquire(now_ns=now) is False  # would wait 100 ms
    assert lim.try_acquire(now_ns=now + 100 * MS - 1) is False
    # a refusal moves nothing: the next slot is still exactly 100 ms after the first
    assert lim.try_acquire(now_ns=now + 100 * MS) is True
    assert lim.reserve(now_ns=now + 100 * MS) == 100 * MS
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=now + 100 * MS) == (3, 2)


def test_throttle_fresh_admits_at_once_at_time_zero():
    assert Limiter(qps=10, behavior="throttle").reserve(now_ns=0) == 0
    assert Limiter(qps=10, behavior="throttle").try_acquire(now_ns=0) is True
    assert Limiter(qps=0.01, behavior="throttle").try_acquire(now_ns=0) is True
    assert Limiter(qps=10, behavior="warm_up_throttle").reserve(now_ns=0) == 0


def test_throttle_paced_requests_pass_without_wait():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=0)
    for k in range(20):
        assert lim.reserve(now_ns=ms(1000 + 100 * k)) == 0
    assert lim.reserve(now_ns=ms(1000 + 100 * 19) + 1) is None  # queue 0: no wait allowed


def test_throttle_wait_exactly_max_queueing_passes():
    lim = Limiter(qps=2, behavior="throttle", max_queueing_ms=500)
    assert lim.reserve(now_ns=ms(0)) == 0
    assert lim.reserve(now_ns=ms(0)) == 500 * MS
    assert lim.reserve(now_ns=ms(0)) is None
    assert lim.reserve(now_ns=ms(500) - 1) is None  # wait 500 ms + 1 ns
    assert lim.reserve(now_ns=ms(500)) == 500 * MS


@pytest.mark.parametrize(
    ("qps", "cost_ns"),
    [(3000, 333_333), (1500, 666_667), (7000, 142_857), (2_000_000, 500), (10**9, 1),
     (4e8, 3),  # 2.5 ns rounds half up
     (3.0, 333_333_333), (0.3, 3_333_333_333)],
)
def test_throttle_cost_is_exact_in_ns(qps, cost_ns):
    lim = Limiter(qps=qps, behavior="throttle", max_queueing_ms=100_000)
    now = 5 * S
    assert lim.reserve(now_ns=now) == 0
    assert lim.reserve(now_ns=now) == cost_ns
    assert lim.reserve(now_ns=now) == 2 * cost_ns
    assert lim.reserve(now_ns=now + 3 * cost_ns) == 0
    assert lim.reserve(now_ns=now + 3 * cost_ns) == cost_ns


def test_throttle_above_1000_qps_sequence():
    lim = Limiter(qps=3000, behavior="throttle", max_queueing_ms=500)
    t = 7 * S
    waits = [lim.reserve(now_ns=t) for _ in range(10)]
    assert waits == [k * 333_333 for k in range(10)]
    lim2 = Limiter(qps=3000, behavior="throttle")
    assert lim2.reserve(now_ns=t) == 0
    assert lim2.reserve(now_ns=t + 333_333) == 0
    assert lim2.reserve(now_ns=t + 333_334) == 333_332


def test_throttle_cost_uses_n():
    lim = Limiter(qps=3, behavior="throttle", max_queueing_ms=2000)
    assert lim.reserve(2, now_ns=S) == 0
    assert lim.reserve(2, now_ns=S) == 666_666_667  # round(2e9 / 3), not 2 * 333333333


def test_throttle_qps_below_half_works():
    lim = Limiter(qps=0.25, behavior="throttle", max_queueing_ms=0)
    assert lim.try_acquire(now_ns=S) is True
    assert lim.try_acquire(now_ns=5 * S - 1) is False
    assert lim.try_acquire(now_ns=5 * S) is True


def test_throttle_n_scales_cost():
    lim = Limiter(qps=10, behavior="throttle", max_queueing_ms=500)
    assert lim.reserve(10, now_ns=S) == 0  # first: admitted at once whatever n
    assert lim.reserve(10, now_ns=S) is None  # cost of 10 is 1 s > 500 ms
    assert lim.reserve(5, now_ns=S) == 500 * MS
    assert lim.reserve(1, now_ns=S) is None
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=S) == (15, 11)


# -- warm_up_throttle ------------------------------------------------------------------

def test_warm_up_throttle_cold_cost_300ms():
    lim = Limiter(qps=10, behavior="warm_up_throttle", warm_up_s=10, cold_factor=3,
                  max_queueing_ms=1000)
    now = ms(50_000)
    assert [lim.reserve(now_ns=now) for _ in range(5)] == [0, 300 * MS, 600 * MS, 900 * MS,
                                                            None]


def test_warm_up_throttle_warms_up():
    kw = dict(qps=10, behavior="warm_up_throttle", warm_up_s=1, cold_factor=3,
              max_queueing_ms=0)
    lim = Limiter(**kw)
    model = LimiterModel(**kw)
    got = steady_demand(lim, 12, 0, 5)
    assert got == steady_demand(model, 12, 0, 5)
    assert got[0] < got[-1] == 10


# -- reject, kill switch ---------------------------------------------------------------

def test_reject_window_limit():
    lim = Limiter(qps=5)
    assert [lim.try_acquire(now_ns=ms(100)) for _ in range(6)] == [True] * 5 + [False]
    assert lim.try_acquire(now_ns=ms(999)) is False
    # at 1000 the window is buckets 500 and 1000: bucket 0 (5 passes) slid out
    assert lim.try_acquire(now_ns=ms(1000)) is True


def test_reject_window_limit_slides():
    lim = Limiter(qps=5)
    assert sum(lim.try_acquire(now_ns=ms(100)) for _ in range(3)) == 3
    assert sum(lim.try_acquire(now_ns=ms(600)) for _ in range(5)) == 2
    assert sum(lim.try_acquire(now_ns=ms(1000)) for _ in range(5)) == 3
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=ms(1000)) == (5, 5)
    # at 1500 only bucket 1000 (3 passes) remains: room for 2
    assert lim.try_acquire(3, now_ns=ms(1500)) is False
    assert lim.try_acquire(2, now_ns=ms(1500)) is True
    assert lim.try_acquire(now_ns=ms(1500)) is False


def test_reject_n_above_limit_and_counts_n():
    lim = Limiter(qps=5)
    assert lim.try_acquire(6, now_ns=ms(1)) is False
    assert lim.try_acquire(5, now_ns=ms(1)) is True
    assert counts(lim, Event.PASS, Event.BLOCK, now_ns=ms(1)) == (5, 6)


def test_reject_interval_scales_limit():
    lim = Limiter(qps=10, interval_ms=500, sample_count=1)  # 5 per 500 ms
    assert sum(lim.try_acquire(now_ns=ms(10)) for _ in range(9)) == 5
    lim = Limiter(qps=2.5, interval_ms=2000, sample_count=4)  # 5 per 2 s
    assert sum(lim.try_acquire(now_ns=ms(10)) for _ in range(9)) == 5
    lim = Limiter(qps=2.5)  # 2.5 per second: 2
    assert sum(lim.try_acquire(now_ns=ms(10)) for _ in range(9)) == 2


def test_reject_reserve_zero_or_none():
    lim = Limiter(qps=2)
    assert [lim.reserve(now_ns=ms(10)) for _ in range(3)] == [0, 0, None]


@pytest.mark.parametrize(
    "kw",
    [dict(qps=0), dict(qps=0, behavior="warm_up"), dict(qps=0, behavior="throttle"),
     dict(qps=0, behavior="warm_up_throttle"), dict(concurrency=0)],
)
def test_kill_switch(kw):
    lim = Limiter(**kw)
    assert lim.try_acquire(now_ns=ms(5)) is False
    assert lim.reserve(now_ns=ms(5)) is None
    assert lim.reserve(now_ns=ms(5), prioritized=True) is None
    assert lim.try_acquire(now_ns=0) is False
    assert counts(lim, Event.PASS, Event.BLOCK, Event.OCCUPIED_PASS, now_ns=ms(5)) == (0, 4, 0)
    t0 = time.monotonic()
    with pytest.raises(BlockedError):
        lim.acquire(timeout=10)  # can never pass: raises at once
    assert time.monotonic() - t0 < 5
