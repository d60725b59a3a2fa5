"""Rate strings as flask-limiter, slowapi and django-ratelimit users write them: the short
units, "per", several rates at once, a positional rate, and a KeyedLimiter's rate= memory."""
import asyncio
import os

import pytest

import slidewin
from slidewin import BlockedError, KeyedLimiter, Limiter, limit, rate_limiter
from slidewin._rate import Rate, parse_rate, parse_rates

S = 10**9
MS = 10**6
T0 = 2 * 86_400 * S  # a whole number of days: every period's step divides it

FORMS = [  # as written by users of the peers: (text, count, period_ms)
    ("5/m", 5, 60_000),                   # django-ratelimit
    ("5/min", 5, 60_000),
    ("5/s", 5, 1000),
    ("5/sec", 5, 1000),
    ("5/h", 5, 3_600_000),
    ("5/d", 5, 86_400_000),
    ("5/10m", 5, 600_000),                # django-ratelimit's "5 per 10 minutes"
    ("100 per minute", 100, 60_000),      # flask-limiter, slowapi
    ("100/minute", 100, 60_000),
    ("100 per 1 minute", 100, 60_000),
    ("10 per 5 minutes", 10, 300_000),
    ("30/5minutes", 30, 300_000),
    ("100/Hour", 100, 3_600_000),
    (" 7 / day ", 7, 86_400_000),
]


@pytest.mark.parametrize("text,count,period_ms", FORMS)
def test_rate_forms_of_flask_limiter_slowapi_and_django_ratelimit(text, count, period_ms):
    assert parse_rate(text) == (count, period_ms)
    assert parse_rates(text) == [Rate(count, period_ms, text.strip())]
    for lim in (Limiter(rate=text), KeyedLimiter(rate=text), limit(rate=text)):
        assert lim.interval_ms == period_ms and lim.rate == text
    lim = Limiter(rate=text)
    assert sum(lim.try_acquire(now_ns=T0) for _ in range(count + 1)) == count


@pytest.mark.parametrize("sep", [";", ",", "|", " ; "])
def test_several_rates_parse_with_semicolon_comma_or_bar(sep):
    text = sep.join(["10/second", "100 per minute", "1000/h"])
    assert parse_rates(text) == [Rate(10, 1000, "10/second"),
                                 Rate(100, 60_000, "100 per minute"),
                                 Rate(1000, 3_600_000, "1000/h")]


@pytest.mark.parametrize("make", [
    lambda r: Limiter(rate=r), lambda r: KeyedLimiter(rate=r), lambda r: limit(rate=r),
    lambda r: Limiter(r), lambda r: KeyedLimiter(r), lambda r: Limiter(rate="1/s").update(rate=r),
])
def test_several_rates_in_rate_is_a_valueerror_pointing_at_all_of(make):
    with pytest.raises(ValueError) as e:
        make("10/second;100/minute")
    text = str(e.value)
    assert "'10/second;100/minute'" in text and "all_of" in text
    # a keyed one: all_of over (KeyedLimiter, key) pairs, not rate_limiter's unkeyed Limiters
    assert ("(limiter, key)" if "KeyedLimiter" in text else "rate_limiter") in text


@pytest.mark.parametrize("text,words", [
    ("", ["rates=''", "empty"]),
    ("10/second;", ["rates='10/second;'", "empty"]),
    ("10/second;5/fortnight", ["'5/fortnight'", "10/second;5/fortnight", "second, minute"]),
    ("1.5/s", ["'1.5/s'", "<count>/<period>"]),
])
def test_bad_rate_strings_name_the_parameter_the_value_and_the_forms(text, words):
    with pytest.raises(ValueError) as e:
        parse_rates(text)
    for w in words:
        assert w in str(e.value)
    with pytest.raises(TypeError, match="rates must be a str"):
        parse_rates(5)
    with pytest.raises(ValueError) as e:
        Limiter(rate="5/fortnight")
    assert "rate must be" in str(e.value) and "'5/fortnight'" in str(e.value) \
        and '"5/m"' in str(e.value)


def test_a_str_first_argument_is_the_rate():
    for lim in (Limiter("100/minute"), limit("100/minute")):
        assert (lim.rate, lim.interval_ms, lim.sample_count) == ("100/minute", 60_000, 60)
        assert repr(lim) == "Limiter(rate='100/minute', sample_count=60)"
    per_key = KeyedLimiter("5/second")
    assert (per_key.rate, per_key.interval_ms) == ("5/second", 1000)
    assert sum(per_key.try_acquire("a", now_ns=T0) for _ in range(6)) == 5
    assert Limiter(5).qps == 5.0 and Limiter(5).rate is None       # a number stays qps
    with pytest.raises(ValueError, match="give it once"):
        Limiter("5/second", rate="5/second")
    with pytest.raises(ValueError, match="rate must be"):
        Limiter("5/fortnight")
    with pytest.raises(TypeError, match="qps must be an int or float.*'100/minute'"):
        Limiter("fast")                                          # not a rate: qps's error


def test_rate_limiter_of_one_rate_is_a_limiter():
    lim = rate_limiter("5/s", behavior="throttle", name="one")
    assert type(lim) is Limiter
    assert (lim.rate, lim.behavior, lim.name) == ("5/s", "throttle", "one")


def test_rate_limiter_of_several_rates_decides_them_together():
    both = rate_limiter("2/second;3/minute")
    assert isinstance(both, slidewin.Group)
    per_s, per_m = both.members
    assert (per_s.rate, per_m.rate) == ("2/second", "3/minute")
    assert [both.try_acquire(now_ns=T0) for _ in range(3)] == [True, True, False]
    # the refusal by the second limit charged nothing to the minute limit
    assert per_m.totals()["pass"] == 2 and per_s.totals()["block"] == 1
    assert per_m.totals()["block"] == 0
    assert both.try_acquire(now_ns=T0 + S)                    # the second slid, 3rd a minute
    with pytest.raises(BlockedError) as e:
        both.acquire()
    assert e.value.limiter is per_m or e.value.limiter is per_s
    assert not both.try_acquire(now_ns=T0 + 2 * S)            # the minute is spent


def test_rate_limiter_names_and_shares_each_member(tmp_path):
    both = rate_limiter("10/second;100/minute", shared=str(tmp_path / "site"), name="api")
    assert [m.name for m in both.members] == ["api[10/second]", "api[100/minute]"]
    assert sorted(os.listdir(tmp_path)) == ["site.10-per-1000ms", "site.100-per-60000ms"]
    for bad in ("qps", "rate", "concurrency", "interval_ms"):
        with pytest.raises(TypeError, match=bad):
            rate_limiter("1/s", **{bad: 5})
    with pytest.raises(ValueError, match="twice"):
        rate_limiter("1/s;1/second")


def test_rate_limiter_takes_none_as_the_default():
    lim = rate_limiter("5/s", interval_ms=None, qps=None, rate=None, concurrency=None)
    assert (lim.rate, lim.interval_ms) == ("5/s", 1000)
    both = rate_limiter("10/second;100/minute", interval_ms=None)
    assert [m.interval_ms for m in both.members] == [1000, 60_000]


def _region_bytes(path, **kw):
    KeyedLimiter(max_keys=65_536, shared=str(path), **kw)
    return os.path.getsize(path)


@pytest.mark.parametrize("rate,steps", [("5/second", 5), ("5/minute", 6), ("5/5minutes", 6),
                                        ("5/hour", 6), ("5/day", 6), ("5/7s", 5)])
def test_keyed_rate_table_is_within_twice_the_bytes_of_qps(tmp_path, rate, steps):
    per_key_rate = KeyedLimiter(rate=rate)
    assert per_key_rate.sample_count == steps
    by_qps = _region_bytes(tmp_path / "qps", qps=5)
    by_rate = _region_bytes(tmp_path / "rate", rate=rate)
    assert by_rate <= 2 * by_qps, (by_rate, by_qps)
    # given, sample_count is kept: a Limiter's finer steps, at their memory
    fine = _region_bytes(tmp_path / "fine", rate=rate,
                         sample_count=Limiter(rate=rate).sample_count)
    assert fine > 5 * by_qps


def test_keyed_rate_steps_bound_every_span_of_the_period_less_one_step():
    import random

    rnd = random.Random(29)
    per_key = KeyedLimiter(rate="10/second")        # 5 steps of 200 ms
    step = 200 * MS
    t, admitted = T0, []
    for _ in range(4000):
        t += rnd.randrange(0, 60 * MS)
        if per_key.try_acquire("k", now_ns=t):
            admitted.append(t)
    assert len(admitted) > 100
    j = 0
    for i, at in enumerate(admitted):                # any span shorter than 800 ms: <= 10
        while admitted[j] <= at - (S - step):
            j += 1
        assert i - j + 1 <= 10
    private = Limiter(rate="10/second", sample_count=5)
    replay = [private.try_acquire(now_ns=x) for x in admitted]
    assert all(replay)                               # each key as a private Limiter


def test_redis_keyed_limiters_take_the_same_rate_forms_and_steps():
    redis = pytest.importorskip("redis")
    from slidewin.redis import AsyncRedisKeyedLimiter, RedisKeyedLimiter, RedisLimiter

    client = redis.Redis()  # constructing contacts no server
    assert RedisLimiter(client, "a", "5/m").interval_ms == 60_000
    assert RedisKeyedLimiter(client, "b", "5/s").sample_count == 5
    assert RedisKeyedLimiter(client, "c", rate="5/minute").sample_count == 6
    assert RedisKeyedLimiter(client, "d", rate="5/minute", sample_count=60).sample_count == 60

    async def made_in_a_loop():  # redis.asyncio before Python 3.10 needs a loop to construct
        return AsyncRedisKeyedLimiter(redis.asyncio.Redis(), "e", "10 per minute")

    assert asyncio.run(made_in_a_loop()).sample_count == 6
    with pytest.raises(ValueError, match="all_of"):
        RedisLimiter(client, "f", rate="1/s;2/m")


def test_keyed_limiter_with_several_rates_points_at_all_of_over_keyed_pairs():
    with pytest.raises(ValueError, match=r"one KeyedLimiter per rate") as e:
        KeyedLimiter("10/second;100/minute")
    assert "rate_limiter" not in str(e.value)
    assert "(limiter, key)" in str(e.value)
    with pytest.raises(ValueError, match=r"rate_limiter\('10/second;100/minute'\)"):
        Limiter("10/second;100/minute")


@pytest.mark.parametrize("text", ["5/min;", "5/min; ", ";5/min", "5/min;;1/s", "5/min,"])
def test_an_empty_rate_between_separators_is_one_clear_error_everywhere(text):
    for build in (lambda: Limiter(rate=text), lambda: Limiter(text),
                  lambda: KeyedLimiter(rate=text), lambda: rate_limiter(text),
                  lambda: parse_rates(text, "rate")):
        with pytest.raises(ValueError, match="has an empty rate") as e:
            build()
        assert "holds several rates" not in str(e.value)


def test_positional_rate_with_qps_is_the_value_error_naming_both():
    for cls in (Limiter, KeyedLimiter):
        with pytest.raises(ValueError, match=r"rate='5/m' and qps=3"):
            cls("5/m", qps=3)
        with pytest.raises(ValueError, match=r"rate='5/m' and qps=3"):
            cls(rate="5/m", qps=3)
        with pytest.raises(TypeError, match="qps"):
            cls(3, qps=4)
        assert cls(3).qps == cls(qps=3).qps == 3


def test_fractional_qps_window_admits_the_floor_of_qps_times_the_window():
    lim = Limiter(qps=1.5)  # a 1 s window: floor(1.5) = 1 a window
    assert [lim.try_acquire(now_ns=T0) for _ in range(2)] == [True, False]
    lim = Limiter(qps=1.5, interval_ms=2000)  # floor(1.5 * 2) = 3 a 2 s window
    assert [lim.try_acquire(now_ns=T0) for _ in range(4)] == [True, True, True, False]
    lim = Limiter(rate="3/2s")
    assert [lim.try_acquire(now_ns=T0) for _ in range(4)] == [True, True, True, False]
    with pytest.raises(ValueError, match="qps"):
        Limiter(qps=0.5)


def test_a_str_subclass_as_rate_is_its_plain_text():
    import enum

    class R(str, enum.Enum):
        FIVE = "5/second"
        TEN = "10/second"

    class S(str):
        pass

    for make in (lambda r: Limiter(rate=r), lambda r: KeyedLimiter(rate=r), rate_limiter):
        for first, second in ((R.FIVE, R.TEN), (S("5/second"), S("10/second"))):
            lim = make(first)
            assert type(lim.rate) is str and lim.rate == "5/second"
            assert "rate='5/second'" in repr(lim)
            if hasattr(lim, "update"):
                lim.update(rate=second)
                assert type(lim.rate) is str and lim.rate == "10/second" and lim.qps == 10


def test_limiter_acquire_with_n_names_no_key():
    lim = Limiter(qps=1)
    lim.acquire()
    for call in (lambda: lim.acquire(1), lambda: lim.acquire(n=1, timeout=0)):
        with pytest.raises(BlockedError) as e:
            call()
        assert "key" not in str(e.value) and "refused n=1" in str(e.value)
