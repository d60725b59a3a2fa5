"""The wire format of slidewin.redis: how a decision's arguments are encoded (RESP bytes,
names, keys, times) and how a reply is read and checked. A Redis reply is untrusted input:
whatever is not exactly what a slidewin script returns is a RedisReplyError (or the
server's error reply, named for what it is), never a wrong decision. No I/O here."""
from __future__ import annotations

import re
from typing import Any, List, Tuple, Union, cast

from .._core import Stats

try:  # redis-py is an optional extra: pip install "slidewin[redis]"
    import redis as redis
    from redis.exceptions import NoScriptError as NoScriptError
    from redis.exceptions import ReadOnlyError as ReadOnlyError
    from redis.exceptions import RedisClusterException as RedisClusterException
    from redis.exceptions import RedisError as RedisError
    from redis.exceptions import ResponseError as ResponseError
except ImportError:  # pragma: no cover - exercised only without the extra
    redis = None  # type: ignore[assignment]
    RedisError = type("RedisError", (Exception,), {})  # type: ignore[misc,assignment]
    NoScriptError = type("NoScriptError", (RedisError,), {})  # type: ignore[misc,assignment]
    ResponseError = type("ResponseError", (RedisError,), {})  # type: ignore[misc,assignment]
    ReadOnlyError = type("ReadOnlyError", (ResponseError,), {})  # type: ignore[misc,assignment]
    RedisClusterException = type(  # type: ignore[misc,assignment]
        "RedisClusterException", (Exception,), {})


# verdicts of the scripts (and of the C core)
BLOCK, PASS, NEVER, LAYOUT = 0, 1, 2, 3
# flags understood by the scripts
F_TRY, F_PRIO, F_NO_BLOCK, F_ENTRY, F_RETRY, F_LEAN, F_MINUTE = 1, 2, 4, 8, 16, 32, 64
# EXIT outcomes
_OUT_NONE, _OUT_SUCCESS, _OUT_EXCEPTION, _OUT_BLOCK, _OUT_RENEW = 0, 1, 2, 3, 4

_NS_MAX = 9223372036854774784  # the largest double below 2**63: the scripts saturate there
# a name: these characters, with at most one {hash tag} (its limiters' keys in one slot)
_NAME_RE = re.compile(r"[A-Za-z0-9._:/-]*(\{[A-Za-z0-9._:/-]+\})?[A-Za-z0-9._:/-]*\Z")


class RedisReplyError(RedisError):
    """Redis answered something a slidewin script never returns (a proxy in the way, a
    server of another kind): handled per ``on_error``."""


class RedisStateError(RedisReplyError, ResponseError):
    """The limiter's key holds a value no slidewin client wrote: another type (WRONGTYPE),
    or a string of another application. Handled per ``on_error``; ``reset()`` (or deleting
    the key) starts afresh. A ResponseError, as the server's error reply it comes from."""


MAX_KEY_BYTES = 1024  # a keyed limiter's key, encoded (str as UTF-8, int as its digits)


_MEMBER = re.compile(r" \(all_of member ([0-9]+)\)")


def _named(err: BaseException, key: Any) -> BaseException:
    """An error reply about the key's value as a RedisStateError (caused by err). `key`: the
    script's key, or all_of's list of them (its reply says which member's)."""
    if not isinstance(err, ResponseError) or isinstance(err, RedisStateError):
        return err
    text = str(err)
    if isinstance(key, list):
        m = _MEMBER.search(text)
        i = int(m.group(1)) - 1 if m else -1
        if not 0 <= i < len(key):
            return err  # no member named: the key is not guessed
        key = key[i]
    k = _text(key)
    if text.startswith("WRONGTYPE") or text.startswith("Operation against a key holding"):
        named = RedisStateError(
            "the key %r holds another type of value (WRONGTYPE), not a slidewin state: "
            "another application's key? Delete it, reset(), or use another name" % (k,))
    elif "holds no slidewin state" in text:
        named = RedisStateError(
            "the key %r holds no slidewin state (a value no slidewin client wrote: another "
            "application's key?); delete it, reset(), or use another name" % (k,))
    else:
        return err
    named.__cause__ = err
    return named


_WHAT: Tuple[Tuple[Any, str], ...] = (  # an error's meaning for a decision: the first that fits
    (RedisStateError, "found a value no slidewin client wrote under its key"),
    (ReadOnlyError, "was answered READONLY: the server is a replica (a failover?); the "
                    "connection is closed, the next decision connects anew"),
    (redis.exceptions.OutOfMemoryError if redis else (),
     "was refused: the Redis server is out of memory (maxmemory, OOM)"),
    (redis.exceptions.BusyLoadingError if redis else (),
     "was refused: the Redis server is loading its data set"),
    (NoScriptError, "was refused: the server does not keep slidewin's script (NOSCRIPT after "
                    "EVAL)"),
    (ResponseError, "was refused by Redis with an error reply"),
    (RedisReplyError, "got a reply no slidewin script returns"),
)


def _what(err: BaseException) -> str:
    """What an error means for a decision, in the log's words."""
    return next((text for cls, text in _WHAT if isinstance(err, cls)), "could not reach Redis")


def _bulk(x: Union[str, bytes]) -> bytes:
    b = x.encode() if isinstance(x, str) else x
    return b"$%d\r\n%s\r\n" % (len(b), b)


def _fmt(x: float) -> str:
    """A double for Lua's tonumber: repr round-trips exactly (strtod is correctly rounded)."""
    return str(x) if isinstance(x, int) else repr(float(x))


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError("name must be a str, not %s" % type(name).__name__)
    if not 1 <= len(name) <= 200 or not _NAME_RE.match(name):
        raise ValueError(
            "name must be 1 to 200 of [A-Za-z0-9._:/-], with at most one {hash tag} (as "
            "'{acct}.rpm': names sharing a tag share a Redis Cluster hash slot), got %r"
            % (name,)
        )
    return name


def _check_n(n: Any, least: int = 1) -> int:
    """A request's n: `least` to 2**63 - 1, as the in-process types."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError("n must be an int, not %s" % type(n).__name__)
    if n < least:
        raise ValueError("n must be >= %d, got %d" % (least, n))
    if n > 2**63 - 1:
        raise ValueError("n must be between %d and %d, got %d" % (least, 2**63 - 1, n))
    return n


def _ints(reply: Any, count: int) -> bool:
    """Whether a reply is a list of `count` integers (each script's reply is one)."""
    return type(reply) is list and len(reply) == count and all(type(x) is int for x in reply)


def _charge_reply(reply: Any, name: str, interval_ms: int, sample_count: int) -> None:
    """The CHARGE script's reply: exactly [1, 0, 0] (or the layout's ValueError)."""
    _check_layout(reply, name, interval_ms, sample_count)
    if not _ints(reply, 3) or reply != [PASS, 0, 0]:
        raise RedisReplyError("unexpected reply from Redis to a charge of %r: %.200r"
                              % (name, reply))


def _time_args(now_ns: Any) -> Tuple[str, str]:
    if now_ns is None:
        return "", ""
    if isinstance(now_ns, bool) or not isinstance(now_ns, int):
        raise TypeError("now_ns must be an int (ns since the epoch), not %s"
                        % type(now_ns).__name__)
    if now_ns < 0:
        raise ValueError("now_ns must be >= 0, got %d" % now_ns)
    if now_ns >= 2**62:
        raise ValueError("now_ns must be below 2**62, got %d" % now_ns)
    return str(now_ns // 1_000_000), str(now_ns % 1_000_000)


def _pack(parts: List[Any]) -> bytes:
    return b"*%d\r\n" % len(parts) + b"".join(_bulk(p) for p in parts)


def _evalsha(sha: str, keys: List[Any], args: List[Any]) -> bytes:
    return _pack(["EVALSHA", sha, str(len(keys))] + keys + args)


_ASKING = _pack(["ASKING"])
# an EVALSHA's "$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n" after its "*N\r\n"
_EVALSHA_LEN = 4 + 9 + 5 + 40 + 2


def _eval_of(packed: bytes, source: str) -> bytes:
    """The EVAL of a packed EVALSHA: the same keys and arguments, the script's source."""
    i = packed.index(b"\r\n") + 2
    return packed[:i] + b"$4\r\nEVAL\r\n" + _bulk(source) + packed[i + _EVALSHA_LEN:]


_SMALL = [_bulk(b"%d" % i) for i in range(256)]  # n and flags, packed once
_NO_TIME = b"$0\r\n\r\n$0\r\n\r\n"  # now_ms and sub empty: the server's TIME


class _Incomplete(Exception):
    pass


try:  # redis-py's own mapping of error replies to its exceptions (READONLY, OOM, NOSCRIPT...)
    from redis._parsers.base import BaseParser as _BaseParser
except ImportError:  # pragma: no cover - without the extra (no fast path to read replies)
    _BaseParser = None  # type: ignore[assignment,misc]


_MAX_DEPTH = 8  # arrays in arrays: a slidewin script's reply is at most 2 deep (all_of)


def _parse(buf: bytes, pos: int, depth: int = 0) -> Tuple[Any, int]:
    """One RESP reply at buf[pos:]: (value, end). An error reply is a ResponseError instance
    (returned, not raised: the connection is still in step). Raises _Incomplete when more
    bytes are needed, RedisReplyError on what no slidewin script returns."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    t = buf[pos]
    if t == 58:  # ':' integer
        return int(buf[pos + 1:end]), end + 2
    if t == 42:  # '*' array
        if depth >= _MAX_DEPTH:
            raise RedisReplyError("a reply from Redis nested deeper than %d arrays"
                                  % _MAX_DEPTH)
        n = int(buf[pos + 1:end])
        pos = end + 2
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            v, pos = _parse(buf, pos, depth + 1)
            items.append(v)
        return items, pos
    if t == 36:  # '$' bulk string
        n = int(buf[pos + 1:end])
        if n < 0:
            return None, end + 2
        stop = end + 2 + n
        if len(buf) < stop + 2:
            raise _Incomplete
        return buf[end + 2:stop], stop + 2
    if t == 45:  # '-' error, as redis-py's parser gives it (ReadOnlyError, NoScriptError...)
        text = buf[pos + 1:end].decode("utf-8", "replace")
        return _BaseParser.parse_error(text), end + 2  # type: ignore[no-untyped-call]
    if t == 43:  # '+' simple string
        return buf[pos + 1:end], end + 2
    if t == 95:  # '_' RESP3 null
        return None, end + 2
    raise RedisReplyError("unexpected RESP type %r from Redis" % (chr(t),))


def _text(x: Any) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)


def _encode_key(key: Any) -> bytes:
    """Type-tagged, so "1", b"1" and 1 are different keys (as KeyedLimiter)."""
    if isinstance(key, str):
        body = key.encode("utf-8", "surrogatepass")
        tag = b"s"
    elif isinstance(key, bytes):
        body, tag = key, b"b"
    elif isinstance(key, int) and not isinstance(key, bool):
        if key.bit_length() > 3500:  # far beyond the cap, and str() has a digit limit
            raise ValueError("key must be at most %d bytes once encoded (an int: its "
                             "digits), got an int of %d bits" % (MAX_KEY_BYTES,
                                                                 key.bit_length()))
        body, tag = str(key).encode(), b"i"
    else:
        raise TypeError("a key must be str, bytes or int, not %s" % type(key).__name__)
    if len(body) > MAX_KEY_BYTES:
        # it is stored (in the Redis key's name) and sent with every decision
        raise ValueError("key must be at most %d bytes once encoded (str as UTF-8, int as "
                         "its digits), got %d bytes" % (MAX_KEY_BYTES, len(body)))
    return tag + body


def _check_exit_reply(reply: Any, name: str) -> int:
    """The EXIT script's reply [1, count, 0]: the count (released or renewed)."""
    if not _ints(reply, 3) or reply[0] != 1 or reply[1] < 0:
        raise RedisReplyError("unexpected reply from Redis for %r: %.200r" % (name, reply))
    return cast(int, reply[1])


def _limiter_key(name: str) -> str:
    """The Redis key of a limiter's state: the name is its hash tag, or the name's own
    {tag} is (then the key is told apart by "t:": no other name's key is the same)."""
    return "slidewin:t:" + name if "{" in name else "slidewin:{%s}" % name


def _keyed_prefix(name: str) -> bytes:
    """What a keyed limiter's Redis keys start with: each key its own hash tag (name and
    key), or every key in the slot of the name's own {tag}."""
    return (b"slidewin:k:t:" if "{" in name else b"slidewin:k:{") + name.encode() + b":"


def _decision(reply: Any, name: str, interval_ms: int, sample_count: int) -> Tuple[int, int, int]:
    """A decision script's reply [verdict, wait_ns, retry_ns], checked (or the layout's
    ValueError)."""
    if type(reply) is list and len(reply) == 3:  # the usual reply, checked quickly
        v, wait, retry = reply
        if (type(v) is int and type(wait) is int and type(retry) is int
                and 0 <= v <= 2 and wait >= 0 and retry >= -1):
            return v, wait, retry
    _check_layout(reply, name, interval_ms, sample_count)
    raise RedisReplyError("unexpected reply from Redis for %r: %.200r" % (name, reply))


def _check_layout(reply: Any, name: str, interval_ms: int, sample_count: int) -> None:
    """[LAYOUT, "iv/sc"]: the ValueError of a name used with another layout."""
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == LAYOUT:
        raise ValueError(
            "the Redis limiter %r holds interval_ms/sample_count %s, this client asks "
            "for interval_ms=%d, sample_count=%d: use the same layout on every client, "
            "another name, or delete the key once no client uses it"
            % (name, _text(reply[1]), interval_ms, sample_count))


def _stats_reply(reply: Any, name: str, interval_ms: int, sample_count: int) -> Stats:
    if not _ints(reply, 9) or min(reply) < 0:
        _check_layout(reply, name, interval_ms, sample_count)
        raise RedisReplyError("unexpected stats reply from Redis for %r: %.200r"
                              % (name, reply))
    if max(reply) >= _NS_MAX:  # saturated by the script: the core's int64 maximum
        reply = [2**63 - 1 if x >= _NS_MAX else x for x in reply]
    p, b, x, u, rt, o, m, inflight, waiting = reply
    sec = interval_ms / 1000.0
    return Stats((p / sec, b / sec, u / sec, x / sec, rt / u if u else 0.0, float(m),
                  inflight, waiting, o / sec))
