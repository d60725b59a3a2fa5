"""slidewin.redis's wire format alone, without a server: the RESP bytes a decision sends, the
reader of replies, and the checks of every reply (a Redis reply is untrusted input: anything
a slidewin script never returns is a RedisReplyError, never a decision)."""

import socket
import threading
from importlib.resources import files

import pytest

pytest.importorskip("redis")

from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: E402
from redis.exceptions import NoScriptError, ReadOnlyError, ResponseError  # noqa: E402

from slidewin.redis import RedisLimiter, RedisReplyError, RedisStateError  # noqa: E402
from slidewin.redis import _fast, _scripts, _transport, _wire  # noqa: E402


# -- encoding ---------------------------------------------------------------------------------


def test_bulk_and_pack_are_resp():
    assert _wire._bulk("ab") == b"$2\r\nab\r\n"
    assert _wire._bulk(b"") == b"$0\r\n\r\n"
    assert _wire._bulk("é") == b"$2\r\n\xc3\xa9\r\n"  # a length in bytes
    assert _wire._pack(["GET", "k"]) == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    assert all(_wire._SMALL[i] == _wire._bulk(str(i)) for i in (0, 9, 10, 255))


def test_doubles_round_trip_for_lua():
    for x in (0.1, 1 / 3, 1e-300, 2.0**60, 123456.789):
        assert float(_wire._fmt(x)) == x
    assert _wire._fmt(7) == "7"


def test_time_is_split_into_ms_and_the_ns_within():
    assert _wire._time_args(None) == ("", "")
    assert _wire._time_args(1_700_000_000_123_456_789) == ("1700000000123", "456789")
    for bad, err in ((-1, ValueError), (2**62, ValueError), (1.5, TypeError),
                     (True, TypeError), ("1", TypeError)):
        with pytest.raises(err, match="now_ns"):
            _wire._time_args(bad)


def test_n_and_names_are_checked():
    assert _wire._check_n(3) == 3
    for bad, err in ((0, ValueError), (2**63, ValueError), (True, TypeError), (1.0, TypeError)):
        with pytest.raises(err, match="n must"):
            _wire._check_n(bad)
    assert _wire._check_name("api.v1:users/-_") == "api.v1:users/-_"
    for bad in ("", "a b", "x" * 201, "{a}}", "a\n"):
        with pytest.raises(ValueError, match="name"):
            _wire._check_name(bad)
    with pytest.raises(TypeError, match="name"):
        _wire._check_name(b"api")


def test_keys_are_type_tagged_and_capped():
    enc = _wire._encode_key
    assert (enc("1"), enc(b"1"), enc(1)) == (b"s1", b"b1", b"i1")
    assert enc("\ud800") == b"s\xed\xa0\x80"  # a lone surrogate is a key too
    assert len(enc("x" * _wire.MAX_KEY_BYTES)) == _wire.MAX_KEY_BYTES + 1
    with pytest.raises(ValueError, match="at most"):
        enc("x" * (_wire.MAX_KEY_BYTES + 1))
    with pytest.raises(ValueError, match="at most"):
        enc(10**2000)
    for bad in (True, 1.5, None, ("a",)):
        with pytest.raises(TypeError, match="key"):
            enc(bad)
    assert _wire._limiter_key("api") == "slidewin:{api}"
    assert _wire._keyed_prefix("per-user") == b"slidewin:k:{per-user:"


def test_eval_of_an_evalsha_carries_the_source_and_the_same_arguments():
    script = _scripts.SCRIPTS["reject"]
    packed = _wire._pack(["EVALSHA", script.sha, "1", "k", "a", "b"])
    assert _wire._eval_of(packed, script.source) == _wire._pack(
        ["EVAL", script.source, "1", "k", "a", "b"])


class _NoClient:
    """Constructing contacts no server: a client object is all a limiter holds."""


@pytest.mark.parametrize("kw", [dict(qps=5), dict(qps=5, behavior="throttle"),
                                dict(qps=50, behavior="warm_up_throttle"),
                                dict(concurrency=3), dict(rate="100/minute")])
@pytest.mark.parametrize("now_ns", [None, 1_700_000_000_123_456_789])
@pytest.mark.parametrize("n", [1, 300])
def test_the_prepacked_decision_is_the_plain_command(kw, now_ns, n):
    """The decision's bytes, packed once per setting and joined per call, are exactly the
    EVALSHA of its arguments as redis-py would send them."""
    lim = RedisLimiter(_NoClient(), "w", **kw)
    cfg = lim._cfg
    for flags in (0, _wire.F_TRY, _wire.F_ENTRY | _wire.F_RETRY | _wire.F_NO_BLOCK):
        plain = _wire._pack(["EVALSHA", cfg.script.sha, "1", lim.key]
                            + lim._args(cfg, n, flags, now_ns, "lease") + cfg.params)
        assert next(lim._g_decide(lim.key, cfg, n, flags, now_ns, "lease"))[2] == plain


# -- reading replies --------------------------------------------------------------------------


def test_parse_each_resp_type():
    p = _wire._parse
    assert p(b":42\r\n", 0) == (42, 5)
    assert p(b"$3\r\nabc\r\n", 0) == (b"abc", 9)
    assert p(b"$-1\r\n", 0) == (None, 5)
    assert p(b"+OK\r\n", 0) == (b"OK", 5)
    assert p(b"_\r\n", 0) == (None, 3)
    assert p(b"*2\r\n:1\r\n*1\r\n:-1\r\n", 0) == ([1, [-1]], 17)
    raw = b"-NOSCRIPT No matching script\r\n"
    err, end = p(raw, 0)
    assert isinstance(err, NoScriptError) and end == len(raw)
    assert isinstance(p(b"-READONLY You can't write\r\n", 0)[0], ReadOnlyError)
    assert type(p(b"-ERR boom\r\n", 0)[0]) is ResponseError
    for part in (b":4", b"$3\r\nab", b"*2\r\n:1\r\n"):
        with pytest.raises(_wire._Incomplete):
            p(part, 0)
    with pytest.raises(RedisReplyError, match="RESP type"):
        p(b"%1\r\n", 0)


def _served(chunks, close=True):
    """A socket whose peer sends these chunks (one at a time, as separate reads may see
    them), then closes: the reply reader against a real socket, without a server."""
    a, b = socket.socketpair()
    a.settimeout(10)

    def peer():
        b.recv(65536)  # the request
        for c in chunks:
            b.sendall(c)
            threading.Event().wait(0.01)
        if close:
            b.close()

    t = threading.Thread(target=peer, daemon=True)
    t.start()
    return a, b, t


def test_exchange_reads_a_reply_split_over_reads_and_checks_its_end():
    a, b, t = _served([b"*3\r\n:1", b"\r\n:0\r\n:-", b"1\r\n"], close=False)
    assert _fast._exchange(a, b"x", 1) == [[1, 0, -1]]
    t.join()
    a.close()
    b.close()
    a, b, t = _served([b":1\r\n:2\r\n"], close=False)  # more than one reply asked for
    with pytest.raises(RedisReplyError, match="more than one"):
        _fast._exchange(a, b"x", 1)
    t.join()
    a.close()
    b.close()
    a, b, t = _served([b"*3\r\n:1\r\n"])  # closed mid-reply
    with pytest.raises(RedisConnectionError):
        _fast._exchange(a, b"x", 1)
    t.join()
    a.close()
    a, b, t = _served([b"$x\r\n"], close=False)  # a garbled length
    with pytest.raises(RedisReplyError, match="unreadable"):
        _fast._exchange(a, b"x", 1)
    t.join()
    a.close()
    b.close()


# -- checking replies -------------------------------------------------------------------------


def test_decision_replies_are_checked():
    d = _wire._decision
    assert d([1, 0, -1], "a", 1000, 2) == (1, 0, -1)
    assert d([0, 0, 12345], "a", 1000, 2) == (0, 0, 12345)
    assert d([2, 0, -1], "a", 1000, 2) == (2, 0, -1)
    with pytest.raises(ValueError, match="holds interval_ms/sample_count 60000/60"):
        d([3, b"60000/60"], "a", 1000, 2)
    for bad in (None, b"OK", [], [1, 0], [1, 0, -1, 0], [3, 0, 0], [-1, 0, 0], [1, -1, 0],
                [1, 0, -2], [True, 0, 0], [1, b"0", 0], [1.0, 0, 0], [[1], 0, 0], {1: 0}):
        with pytest.raises(RedisReplyError, match="unexpected reply"):
            d(bad, "a", 1000, 2)


def test_stats_replies_are_checked_and_saturate():
    s = _wire._stats_reply([4, 2, 0, 4, 40, 0, 10, 1, 0], "a", 2000, 2)
    assert (s.pass_qps, s.block_qps, s.success_qps, s.avg_rt_ms, s.concurrency) == (
        2.0, 1.0, 2.0, 10.0, 1)
    big = _wire._stats_reply([_wire._NS_MAX] + [0] * 8, "a", 1000, 2)
    assert big.pass_qps == float(2**63 - 1)
    with pytest.raises(ValueError, match="holds interval_ms/sample_count"):
        _wire._stats_reply([3, b"1000/2"], "a", 60000, 60)
    for bad in (None, [0] * 8, [0] * 10, [-1] + [0] * 8, [True] + [0] * 8, [b"1"] + [0] * 8):
        with pytest.raises(RedisReplyError, match="unexpected stats reply"):
            _wire._stats_reply(bad, "a", 1000, 2)


def test_exit_replies_are_checked():
    assert _wire._check_exit_reply([1, 2, 0], "a") == 2
    for bad in (None, [1, 2], [0, 2, 0], [1, -1, 0], [1, True, 0], [1, b"2", 0]):
        with pytest.raises(RedisReplyError):
            _wire._check_exit_reply(bad, "a")


def test_error_replies_about_the_key_are_named():
    key = "slidewin:{a}"
    wrong = _wire._named(ResponseError("WRONGTYPE Operation against a key holding the wrong "
                                       "kind of value"), key)
    assert isinstance(wrong, RedisStateError) and "WRONGTYPE" in str(wrong)
    alien = _wire._named(ResponseError("slidewin: slidewin:{a} holds no slidewin state"), key)
    assert isinstance(alien, RedisStateError) and "no slidewin client wrote" in str(alien)
    other = ResponseError("OOM command not allowed")
    assert _wire._named(other, key) is other
    assert isinstance(RedisStateError("x"), ResponseError)


# -- the scripts, package resources ----------------------------------------------------------


def test_the_scripts_are_package_resources():
    lua = files("slidewin.redis") / "lua"
    names = sorted(p.name for p in lua.iterdir() if p.name.endswith(".lua"))
    assert "head.lua" in names and "reject.lua" in names and "exit.lua" in names
    assert "all_of.lua" in names
    for name, script in _scripts.SCRIPTS.items():
        assert script.source.startswith("\n-- slidewin.redis: " + (
            "all_of" if name == "all_of" else "one decision"))
        assert len(script.sha) == 40 and "%(cond)s" not in script.source
    # all_of holds every decision script, as a function, and knows each by its index
    group = _scripts.SCRIPTS["all_of"].source
    for name, i in zip(_scripts.GROUP_ORDER, range(1, 5)):
        assert _scripts.GROUP_INDEX[_scripts.SCRIPTS[name].sha] == i
        assert "BODIES[%d] = function(KEYS, ARGV, redis)\n%s\nend\n" % (
            i, _scripts.SOURCES[name]) in group
    assert _scripts.SCRIPTS["reject"].source.count("(tonumber(ARGV[11]) > 0)") == 0
    assert "local FAST_PATH = tonumber(ARGV[11]) > 0\n" in _scripts.SCRIPTS["reject"].source
    assert "and FAST_PATH then" in _scripts.SCRIPTS["reject"].source
    # the state is only viewed by stats (each script declares which, once, before generic)
    for name, script in _scripts.SCRIPTS.items():
        if name != "all_of":
            assert script.source.count("local VIEW_ONLY = ") == 1
            assert ("local VIEW_ONLY = true\n" in script.source) == (name == "stats")
