"""Worked examples of docs/design.md §2-3 and the Metric surface of the README's API."""

import pytest

import slidewin
from slidewin import Event, Metric

MS = 1_000_000  # ns per ms


def ms(t):
    return t * MS


# -- docs/design.md §2 example --------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "expected"),
    [(600, 7), (999, 7), (1000, 4), (1499, 4), (1500, 0)],
)
def test_design_example_sum(t, expected):
    m = Metric(1000, 2)
    m.add(Event.PASS, 3, now_ns=ms(100))
    m.add(Event.PASS, 4, now_ns=ms(600))
    assert m.sum(Event.PASS, now_ns=ms(t)) == expected


def test_design_example_all_reads_in_sequence():
    m = Metric(1000, 2)
    m.add(Event.PASS, 3, now_ns=ms(100))
    m.add(Event.PASS, 4, now_ns=ms(600))
    assert m.sum(Event.PASS, now_ns=ms(600)) == 7
    assert m.current(Event.PASS, now_ns=ms(600)) == 4
    assert m.previous(Event.PASS, now_ns=ms(600)) == 3
    assert m.sum(Event.PASS, now_ns=ms(999)) == 7
    assert m.sum(Event.PASS, now_ns=ms(1000)) == 4
    assert m.current(Event.PASS, now_ns=ms(1000)) == 0
    assert m.previous(Event.PASS, now_ns=ms(1000)) == 4
    assert m.sum(Event.PASS, now_ns=ms(1499)) == 4
    assert m.sum(Event.PASS, now_ns=ms(1500)) == 0
    assert m.previous(Event.PASS, now_ns=ms(1500)) == 0


def test_sub_millisecond_now_is_truncated():
    m = Metric(1000, 2)
    m.add(Event.PASS, 1, now_ns=ms(500) - 1)  # 499.999999 ms: bucket 0
    m.add(Event.PASS, 2, now_ns=ms(500))  # bucket 500
    assert m.previous(Event.PASS, now_ns=ms(500)) == 1
    assert m.current(Event.PASS, now_ns=ms(500) + 999_999) == 2
    assert m.sum(Event.PASS, now_ns=ms(1000) - 1) == 3
    assert m.sum(Event.PASS, now_ns=ms(1000)) == 2


def test_rate():
    m = Metric(2000, 4)
    m.add("pass", 5, now_ns=ms(100))
    assert m.rate("pass", now_ns=ms(100)) == pytest.approx(2.5)
    assert isinstance(m.rate("pass", now_ns=ms(100)), float)
    m2 = Metric(500, 1)
    m2.add("pass", 5, now_ns=ms(100))
    assert m2.rate("pass", now_ns=ms(100)) == pytest.approx(10.0)


def test_sum_returns_int():
    m = Metric(1000, 2)
    m.add(Event.BLOCK, now_ns=ms(1))
    for f in (m.sum, m.current, m.previous):
        assert type(f(Event.BLOCK, now_ns=ms(1))) is int


def test_add_default_n_is_one_and_zero_is_allowed():
    m = Metric(1000, 2)
    m.add(Event.PASS, now_ns=ms(10))
    m.add(Event.PASS, 0, now_ns=ms(10))
    m.add(Event.PASS, n=2, now_ns=ms(10))
    assert m.sum(Event.PASS, now_ns=ms(10)) == 3


def test_large_counts_are_64_bit():
    m = Metric(1000, 2)
    big = 2**40
    m.add(Event.PASS, big, now_ns=ms(10))
    m.add(Event.PASS, big, now_ns=ms(600))
    assert m.sum(Event.PASS, now_ns=ms(700)) == 2 * big


# -- events --------------------------------------------------------------------------------


def test_event_enum():
    assert issubclass(Event, int)
    names = ["PASS", "BLOCK", "EXCEPTION", "SUCCESS", "RT", "OCCUPIED_PASS"]
    assert [e.name for e in Event] == names
    assert [int(e) for e in Event] == list(range(6))


@pytest.mark.parametrize("idx", range(6))
def test_event_index_name_and_enum_are_equivalent(idx):
    e = Event(idx)
    name = e.name.lower()
    m = Metric(1000, 2)
    m.add(e, 1, now_ns=ms(5))
    m.add(idx, 2, now_ns=ms(5))
    m.add(name, 4, now_ns=ms(5))
    for key in (e, idx, name):
        assert m.sum(key, now_ns=ms(5)) == 7
        assert m.current(key, now_ns=ms(5)) == 7
    for other in range(6):
        if other != idx:
            assert m.sum(other, now_ns=ms(5)) == 0


@pytest.mark.parametrize("bad", ["nope", "PASS_", "", 6, -1, 100])
def test_unknown_event_raises_value_error(bad):
    m = Metric(1000, 2)
    with pytest.raises(ValueError, match="event"):
        m.add(bad, now_ns=ms(1))
    with pytest.raises(ValueError, match="event"):
        m.sum(bad, now_ns=ms(1))


def test_custom_events():
    m = Metric(1000, 2, events=("sent", "dropped", "retried"))
    m.add("sent", 3, now_ns=ms(100))
    m.add(1, 2, now_ns=ms(100))
    m.add("retried", now_ns=ms(600))
    assert m.sum("sent", now_ns=ms(700)) == 3
    assert m.sum(0, now_ns=ms(700)) == 3
    assert m.sum("dropped", now_ns=ms(700)) == 2
    assert m.sum(2, now_ns=ms(700)) == 1
    assert m.previous("sent", now_ns=ms(700)) == 3
    assert m.current("retried", now_ns=ms(700)) == 1
    assert m.rate("sent", now_ns=ms(700)) == pytest.approx(3.0)
    bs = m.buckets(now_ns=ms(700))
    assert [b.start_ms for b in bs] == [0, 500]
    assert [tuple(b.counts) for b in bs] == [(3, 2, 0), (0, 0, 1)]
    assert m.sum("sent", now_ns=ms(1100)) == 0


def test_custom_events_reject_default_names_and_bad_indexes():
    m = Metric(1000, 2, events=("sent", "dropped"))
    for bad in ("pass", "rt", 2, -1):
        with pytest.raises(ValueError, match="event"):
            m.add(bad, now_ns=ms(1))
        with pytest.raises(ValueError, match="event"):
            m.sum(bad, now_ns=ms(1))


def test_custom_events_have_no_rt():
    m = Metric(1000, 2, events=("sent", "dropped"))
    with pytest.raises(ValueError):
        m.add_rt(5, now_ns=ms(1))
    with pytest.raises(ValueError):
        m.min_rt(now_ns=ms(1))
    with pytest.raises(ValueError):
        m.avg_rt(now_ns=ms(1))
    # the failed add_rt counted nothing
    assert m.sum("sent", now_ns=ms(1)) == 0
    assert m.sum("dropped", now_ns=ms(1)) == 0


def test_custom_events_may_reuse_default_names_in_any_order():
    m = Metric(1000, 2, events=("success", "pass"))
    m.add("pass", 2, now_ns=ms(1))
    assert m.sum(1, now_ns=ms(1)) == 2
    assert m.sum("success", now_ns=ms(1)) == 0


# -- RT ------------------------------------------------------------------------------------


def test_rt_empty():
    m = Metric(1000, 2)
    assert m.min_rt(now_ns=ms(1)) == 5000
    assert m.avg_rt(now_ns=ms(1)) == 0.0
    assert isinstance(m.avg_rt(now_ns=ms(1)), float)
    assert type(m.min_rt(now_ns=ms(1))) is int


def test_rt_min_and_avg():
    m = Metric(1000, 2)
    m.add_rt(12, now_ns=ms(100))
    m.add_rt(30, now_ns=ms(600))
    # no SUCCESS counted yet: avg is 0.0 even with an RT sum
    assert m.avg_rt(now_ns=ms(600)) == 0.0
    assert m.sum(Event.RT, now_ns=ms(600)) == 42
    m.add(Event.SUCCESS, 2, now_ns=ms(600))
    assert m.min_rt(now_ns=ms(600)) == 12
    assert m.avg_rt(now_ns=ms(600)) == pytest.approx(21.0)
    # the bucket holding 12 slides out
    assert m.min_rt(now_ns=ms(1000)) == 30
    assert m.avg_rt(now_ns=ms(1000)) == pytest.approx(15.0)
    assert m.min_rt(now_ns=ms(1500)) == 5000
    assert m.avg_rt(now_ns=ms(1500)) == 0.0


def test_min_rt_never_below_one_and_never_above_5000():
    m = Metric(1000, 2)
    m.add_rt(0, now_ns=ms(100))
    assert m.min_rt(now_ns=ms(100)) == 1
    m2 = Metric(1000, 2)
    m2.add_rt(7000, now_ns=ms(100))
    assert m2.min_rt(now_ns=ms(100)) == 5000
    assert m2.sum(Event.RT, now_ns=ms(100)) == 7000


def test_bucket_min_rt():
    m = Metric(1000, 2)
    m.add_rt(40, now_ns=ms(100))
    m.add_rt(9, now_ns=ms(200))
    m.add_rt(70, now_ns=ms(300))
    bs = m.buckets(now_ns=ms(600))
    assert [b.min_rt for b in bs] == [9, 5000]
    assert bs[0].counts[Event.RT] == 119


# -- buckets -------------------------------------------------------------------------------


def test_buckets_dense_oldest_first():
    m = Metric(1000, 4)  # 4 x 250 ms
    m.add(Event.PASS, 1, now_ns=ms(300))
    m.add(Event.BLOCK, 2, now_ns=ms(800))
    bs = m.buckets(now_ns=ms(1100))
    assert [b.start_ms for b in bs] == [250, 500, 750, 1000]
    assert [tuple(b.counts) for b in bs] == [
        (1, 0, 0, 0, 0, 0),
        (0, 0, 0, 0, 0, 0),
        (0, 2, 0, 0, 0, 0),
        (0, 0, 0, 0, 0, 0),
    ]
    assert [b.min_rt for b in bs] == [5000] * 4
    assert all(type(b.start_ms) is int for b in bs)
    assert all(isinstance(b.counts, tuple) for b in bs)


def test_buckets_fewer_only_where_start_would_be_negative():
    m = Metric(1000, 4)
    assert [b.start_ms for b in m.buckets(now_ns=ms(10))] == [0]
    assert [b.start_ms for b in m.buckets(now_ns=ms(600))] == [0, 250, 500]
    assert [b.start_ms for b in m.buckets(now_ns=ms(750))] == [0, 250, 500, 750]
    assert [b.start_ms for b in m.buckets(now_ns=ms(1000))] == [250, 500, 750, 1000]


def test_buckets_independent_of_read_history():
    def fill(m):
        m.add(Event.PASS, 1, now_ns=ms(100))
        m.add(Event.PASS, 2, now_ns=ms(600))
        m.add(Event.PASS, 4, now_ns=ms(1100))

    a = Metric(1000, 2)
    fill(a)
    b = Metric(1000, 2)
    fill(b)
    for t in (1100, 1200, 1300):  # extra reads on b only
        b.sum(Event.PASS, now_ns=ms(t))
        b.current(Event.PASS, now_ns=ms(t))
    ra = [(x.start_ms, tuple(x.counts), x.min_rt) for x in a.buckets(now_ns=ms(1400))]
    rb = [(x.start_ms, tuple(x.counts), x.min_rt) for x in b.buckets(now_ns=ms(1400))]
    assert ra == rb
    assert [x[0] for x in ra] == [500, 1000]
    assert [x[1][0] for x in ra] == [2, 4]


def test_buckets_after_a_long_gap_are_zero():
    m = Metric(1000, 2)
    m.add(Event.PASS, 5, now_ns=ms(100))
    bs = m.buckets(now_ns=ms(100_000))
    assert [b.start_ms for b in bs] == [99_500, 100_000]
    assert [b.counts[0] for b in bs] == [0, 0]


# -- sample_count == 1 -------------------------------------------------------------------


def test_sample_count_one_previous_is_the_real_previous_bucket():
    m = Metric(1000, 1)
    m.add(Event.PASS, 3, now_ns=ms(100))
    # previous() does not refresh: the slot still holds bucket 0 when asked at 1500
    assert m.previous(Event.PASS, now_ns=ms(1500)) == 3
    assert m.sum(Event.PASS, now_ns=ms(1500)) == 0
    # the read at 1500 refreshed the shared slot: bucket 0 is gone
    assert m.previous(Event.PASS, now_ns=ms(1500)) == 0
    assert m.current(Event.PASS, now_ns=ms(1500)) == 0


def test_sample_count_one_previous_never_returns_current():
    m = Metric(1000, 1)
    m.add(Event.PASS, 3, now_ns=ms(100))
    assert m.current(Event.PASS, now_ns=ms(100)) == 3
    assert m.previous(Event.PASS, now_ns=ms(100)) == 0  # Sentinel #3309 would say 3


def test_sample_count_one_previous_after_gap_is_zero():
    m = Metric(1000, 1)
    m.add(Event.PASS, 3, now_ns=ms(100))
    assert m.previous(Event.PASS, now_ns=ms(2100)) == 0


# -- clamp of earlier times (docs/design.md §2; §8, "late times are clamped") ------------


def test_earlier_write_lands_in_newest_bucket():
    m = Metric(1000, 2)
    m.add(Event.PASS, 1, now_ns=ms(1700))
    m.add(Event.PASS, 2, now_ns=ms(100))  # far behind: counted in bucket 1500
    assert m.current(Event.PASS, now_ns=ms(1700)) == 3
    assert m.sum(Event.PASS, now_ns=ms(1700)) == 3
    bs = m.buckets(now_ns=ms(1700))
    assert [(b.start_ms, b.counts[0]) for b in bs] == [(1000, 0), (1500, 3)]


def test_earlier_write_within_the_window_is_not_lost():
    m = Metric(1000, 2)
    m.add(Event.PASS, 1, now_ns=ms(1600))
    m.add(Event.PASS, 5, now_ns=ms(1200))  # previous bucket by its own time: clamped
    assert m.current(Event.PASS, now_ns=ms(1600)) == 6
    assert m.previous(Event.PASS, now_ns=ms(1600)) == 0
    assert m.sum(Event.PASS, now_ns=ms(1999)) == 6
    assert m.sum(Event.PASS, now_ns=ms(2000)) == 6
    assert m.sum(Event.PASS, now_ns=ms(2500)) == 0


def test_earlier_read_is_clamped_too():
    m = Metric(1000, 2)
    m.add(Event.PASS, 2, now_ns=ms(100))
    m.add(Event.PASS, 3, now_ns=ms(2600))
    # a read at 100 is clamped to 2500: it sees the newest bucket, not bucket 0
    assert m.sum(Event.PASS, now_ns=ms(100)) == 3
    assert m.current(Event.PASS, now_ns=ms(100)) == 3
    assert m.previous(Event.PASS, now_ns=ms(100)) == 0


def test_reads_advance_the_floor():
    m = Metric(1000, 2)
    assert m.sum(Event.PASS, now_ns=ms(5200)) == 0  # a read at 5200 is the newest time
    m.add(Event.PASS, 4, now_ns=ms(100))  # lands in bucket 5000
    assert m.current(Event.PASS, now_ns=ms(5000)) == 4
    assert m.sum(Event.PASS, now_ns=ms(5499)) == 4
    assert m.sum(Event.PASS, now_ns=ms(6000)) == 0


def test_many_adds_at_decreasing_times_lose_nothing():
    m = Metric(1000, 10)
    total = 0
    for i in range(200):
        m.add(Event.PASS, i, now_ns=ms(5000 - i * 7))
        total += i
    assert m.sum(Event.PASS, now_ns=ms(5000)) == total


# -- reset -----------------------------------------------------------------------------


def test_reset_forgets_counts():
    m = Metric(1000, 2)
    m.add(Event.PASS, 3, now_ns=ms(100))
    m.add_rt(5, now_ns=ms(100))
    m.reset()
    assert m.sum(Event.PASS, now_ns=ms(100)) == 0
    assert m.sum(Event.RT, now_ns=ms(100)) == 0
    assert m.min_rt(now_ns=ms(100)) == 5000
    assert all(b.counts == (0,) * 6 for b in m.buckets(now_ns=ms(600)))


def test_reset_forgets_the_newest_time():
    m = Metric(1000, 2)
    m.add(Event.PASS, 1, now_ns=ms(10_000))
    m.reset()
    m.add(Event.PASS, 2, now_ns=ms(100))  # not clamped to 10_000 any more
    assert m.sum(Event.PASS, now_ns=ms(100)) == 2
    assert [(b.start_ms, b.counts[0]) for b in m.buckets(now_ns=ms(600))] == [(0, 2), (500, 0)]


def test_reset_of_custom_metric():
    m = Metric(1000, 2, events=("a",))
    m.add("a", 3, now_ns=ms(10_000))
    m.reset()
    assert m.sum("a", now_ns=ms(0)) == 0


# -- configuration ---------------------------------------------------------------------


def test_properties():
    m = Metric(1000, 2)
    assert (m.interval_ms, m.sample_count, m.window_ms) == (1000, 2, 500)
    m = Metric(interval_ms=60_000, sample_count=60)
    assert (m.interval_ms, m.sample_count, m.window_ms) == (60_000, 60, 1000)
    m = Metric(7, 7)
    assert m.window_ms == 1


def test_defaults():
    m = Metric()
    assert (m.interval_ms, m.sample_count, m.window_ms) == (1000, 2, 500)


@pytest.mark.parametrize("attr", ["interval_ms", "sample_count", "window_ms"])
def test_properties_are_read_only(attr):
    m = Metric(1000, 2)
    with pytest.raises(AttributeError):
        setattr(m, attr, 10)
    with pytest.raises(AttributeError):
        delattr(m, attr)
    assert m.interval_ms == 1000 and m.sample_count == 2


def test_repr_shows_config():
    r = repr(Metric(2000, 4))
    assert r.startswith("Metric(") or "Metric" in r
    assert "2000" in r and "4" in r
    r2 = repr(Metric(1000, 2, events=("sent", "dropped")))
    assert "sent" in r2 and "dropped" in r2


def test_events_keyword_only():
    with pytest.raises(TypeError):
        Metric(1000, 2, ("a", "b"))


def test_now_ns_keyword_only():
    m = Metric(1000, 2)
    with pytest.raises(TypeError):
        m.add(Event.PASS, 1, ms(5))
    with pytest.raises(TypeError):
        m.sum(Event.PASS, ms(5))


def test_default_clock_is_monotonic_ns():
    import time

    m = Metric(60_000, 60)
    m.add(Event.PASS, 3)
    now = time.monotonic_ns()
    # written with the library's clock, read back at the caller's monotonic time
    assert m.sum(Event.PASS, now_ns=now) == 3
    assert m.sum(Event.PASS) == 3


def test_module_surface():
    for name in ("Metric", "Event", "Limiter", "BlockedError", "limit"):
        assert hasattr(slidewin, name)
        assert name in slidewin.__all__
    assert isinstance(slidewin.__version__, str)
    assert slidewin._core is not None
    slidewin._core._noop()
