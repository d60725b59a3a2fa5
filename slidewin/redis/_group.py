"""all_of for Redis limiters: one decision over several limiters (and keyed limiters' keys)
of one client, in one round trip: one script over the members' keys decides every member
with its own rules, then writes all (admitted) or only the refusers' BLOCK counts.

    rpm = RedisLimiter(r, "{acct}.rpm", rate="500/minute")
    tpm = RedisLimiter(r, "{acct}.tpm", rate="30000/minute")
    both = all_of(rpm, tpm)            # AsyncRedisLimiter members: an async group
    both.try_acquire(1, 1200)          # one n per member (an int: the same for all)
    both.charge(0, 300)                # counted as admitted, no decision: what a reply used
    with both.entry(1, 1200, timeout=30): ...   # waits up to 30 s (without: refused at once)
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple

from .._admission import AsyncAdmission, SyncAdmission
from .._core import BlockedError
from .._limiter import _MISSING
from ._base import _awaited, _Base, _decorate, _Driven, _g_poll, _KeyedMixin, _wait_timeout
from ._scripts import GROUP_INDEX, SCRIPTS
from ._transport import _ERRORS, _is_cluster, _unrenew
from ._wire import (_OUT_BLOCK, _OUT_NONE, BLOCK, F_ENTRY, F_NO_BLOCK, F_TRY, NEVER,
                    PASS, RedisReplyError, _charge_reply, _check_n, _decision, _evalsha,
                    _time_args)

_SCRIPT = SCRIPTS["all_of"]
_CHARGE = str(GROUP_INDEX[SCRIPTS["charge"].sha])  # all_of's body that charges a member

__all__ = ["all_of", "RedisGroup", "AsyncRedisGroup"]


class _Member:
    """One member: a limiter, or a keyed limiter with one key; its Redis key and settings."""

    __slots__ = ("lim", "key", "rkey", "hkey", "cfg", "given")

    def __init__(self, given: Any) -> None:
        self.given = given
        if isinstance(given, tuple):
            if len(given) != 2 or not isinstance(given[0], _KeyedMixin):
                raise TypeError("an all_of member is a Redis limiter or a (RedisKeyedLimiter, "
                                "key) pair, not %.100r" % (given,))
            lim, key = given
        elif isinstance(given, _KeyedMixin):
            raise TypeError("a %s is an all_of member with one key: (limiter, key)"
                            % type(given).__name__)
        elif isinstance(given, _Base):
            lim, key = given, None
        else:
            raise TypeError("slidewin.redis.all_of takes Redis limiters (and (RedisKeyedLimiter,"
                            " key) pairs), not %s: slidewin.all_of groups in-process ones"
                            % type(given).__name__)
        # (a keyed limiter's: TypeError / ValueError for a bad key)
        self.rkey, self.hkey, self.cfg = lim._where(key)
        self.lim: Any = lim
        self.key = key

    def describe(self) -> str:
        key = " key %r" % (self.key,) if self.lim._keyed else ""
        return "%s %r%s" % (type(self.lim).__name__, self.lim.name, key)


def _pack_bodies(now_ns: Any, bodies: List[Tuple[_Member, str, List[Any]]]
                 ) -> Tuple[List[Any], bytes]:
    """(keys, all_of's EVALSHA): the time, then per member its body's index, arg count, args."""
    args: List[Any] = list(_time_args(now_ns))
    for _, index, a in bodies:
        args += [index, str(len(a))] + a
    keys = [m.rkey for m, _, _ in bodies]
    return keys, _evalsha(_SCRIPT.sha, keys, args)


class _Group:
    _on_block = None  # the decorator's: BlockedError unless on_block= is given
    _keyed = False

    def __init__(self, members: Sequence[_Member]) -> None:
        self._members = members
        self._t = members[0].lim._t  # the members' transport (one client, one kind)

    @property
    def members(self) -> Tuple[Any, ...]:
        """The members as given: limiters and (keyed limiter, key) pairs."""
        return tuple(m.given for m in self._members)

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join(m.describe() for m in self._members))

    def _ns(self, ns: Tuple[Any, ...]) -> List[int]:
        """One n per member: none given, 1 each; one int, that for all."""
        m = len(self._members)
        if not ns:
            return [1] * m
        if len(ns) == 1:
            return [_check_n(ns[0])] * m
        if len(ns) != m:
            raise TypeError("give one n for all members or one per member (%d), got %d"
                            % (m, len(ns)))
        return [_check_n(n) for n in ns]

    def _leases(self) -> List[str]:
        return [m.lim._lease_for(m.cfg) for m in self._members]

    def _timeout(self, ns: List[int], timeout: Any) -> Optional[float]:
        return _wait_timeout(timeout, [(m.cfg, n) for m, n in zip(self._members, ns)])

    def _g_once(self, ns: List[int], flags: int, now_ns: Any, leases: List[str]) -> Any:
        """One decision: the group's (verdict, wait_ns, retry_ns) and the members' verdicts;
        what this client holds and counts."""
        try:
            keys, packed = _pack_bodies(now_ns, [
                (m, str(GROUP_INDEX[m.cfg.script.sha]),
                 m.lim._args(m.cfg, n, flags, None, lease)[2:] + m.cfg.params)
                for m, n, lease in zip(self._members, ns, leases)])
            reply = yield _SCRIPT, keys[0], packed, keys
            if type(reply) is not list or len(reply) != len(self._members):
                raise RedisReplyError("unexpected reply from Redis for %r: %.200r" % (self, reply))
            verdicts = [_decision(r, m.lim._name, m.cfg.interval_ms, m.cfg.sample_count)
                        for m, r in zip(self._members, reply)]
        except _ERRORS as e:  # each member's on_error
            verdicts = [m.lim._failed(e, flags) for m in self._members]
        admitted = all(v == PASS for v, _, _ in verdicts)
        for m, n, lease, (v, _, _) in zip(self._members, ns, leases, verdicts):
            if admitted or (v != PASS and not flags & F_NO_BLOCK):  # a keyed one's totals
                m.lim._tally(PASS if admitted else BLOCK, n)
            if admitted and m.cfg.concurrency is not None and not flags & F_ENTRY:
                m.lim._hold(m.hkey, m.rkey, m.cfg, lease, n, now_ns)
        if admitted:
            return PASS, max(w for _, w, _ in verdicts), -1, verdicts
        if any(v == NEVER for v, _, _ in verdicts):
            return NEVER, 0, -1, verdicts
        retries = [r for v, _, r in verdicts if v != PASS]  # < 0: a refuser that cannot tell
        return BLOCK, 0, -1 if min(retries) < 0 else max(retries), verdicts

    def _g_admit(self, ns: Tuple[Any, ...], flags: int, now_ns: Any) -> Any:
        """try_acquire (F_TRY) and reserve: the wait (ns) when admitted, else None."""
        n = self._ns(ns)
        v, wait, _, _ = yield from self._g_once(n, flags, now_ns, self._leases())
        return wait if v == PASS else None

    def _g_wait(self, ns: List[int], timeout: Optional[float], flags: int,
                leases: List[str]) -> Any:
        def refused(res: Tuple[Any, ...], timed_out: bool) -> Any:
            v, _, retry, verdicts = res
            if timed_out:  # each refuser's BLOCK (the decisions with F_NO_BLOCK counted none)
                for m, n, r in zip(self._members, ns, verdicts):
                    if r[0] != PASS:
                        m.lim._tally(BLOCK, n)  # (a keyed limiter's local totals)
                        yield from m.lim._g_exit(m.rkey, m.cfg, n, _OUT_BLOCK, 0, [])
            who = ", ".join("%s (%s)" % (m.describe(), m.cfg.describe())
                            for m, (r, _, _) in zip(self._members, verdicts) if r != PASS)
            return BlockedError("all_of refused a request of %s: refused by %s"
                                % (ns, who or "on_error"), limiter=self,
                                retry_after=None if v == NEVER or retry < 0 else retry / 1e9)

        return (yield from _g_poll(lambda f: self._g_once(ns, f, None, leases), refused,
                                   timeout, flags))

    def _g_acquire(self, ns: Tuple[Any, ...], timeout: Any) -> Any:
        n = self._ns(ns)
        wait = yield from self._g_wait(n, self._timeout(n, timeout), 0, self._leases())
        if wait > 0:
            yield wait / 1e9

    def _g_charge(self, ns: Tuple[Any, ...], now_ns: Any) -> Any:
        """Checked as the in-process group's charge(): nothing is charged on a bad call."""
        count = len(self._members)
        if len(ns) != 1 and len(ns) != count:
            raise TypeError("charge() takes one n for every member or one n per member (%d "
                            "members), got %d" % (count, len(ns)))
        nums = [_check_n(n, 0) for n in (ns * count if len(ns) == 1 else ns)]
        _time_args(now_ns)
        for i, (mem, n) in enumerate(zip(self._members, nums)):
            if n > 0 and mem.cfg.concurrency is not None:
                raise ValueError("charge(): member %d is a concurrency limiter, which counts "
                                 "requests in flight, not amounts: charge it 0" % i)
        picks = [(mem, n) for mem, n in zip(self._members, nums) if n > 0]
        if not picks:
            return
        try:
            keys, packed = _pack_bodies(now_ns, [
                (m, _CHARGE, m.lim._charge_args(m.cfg, n, None)[2:]) for m, n in picks])
            reply = yield _SCRIPT, keys[0], packed, keys
            if type(reply) is not list or len(reply) != len(picks):
                raise RedisReplyError("unexpected reply from Redis to a charge of %r: %.200r"
                                      % (self, reply))
            for (mem, n), r in zip(picks, reply):
                _charge_reply(r, mem.lim.name, mem.cfg.interval_ms, mem.cfg.sample_count)
            for mem, n in picks:
                mem.lim._tally(PASS, n)  # (a keyed limiter's local totals)
        except _ERRORS as e:
            for mem, _ in picks:
                mem.lim._charge_failed(e, quiet=True)
            if any(mem.lim.on_error == "raise" for mem, _ in picks):
                raise

    def entry(self, *ns: int, timeout: Optional[float] = None) -> "_GroupEntry":
        """``with group.entry(): ...`` (``async with`` for an async group): admitted by all
        (their in-flight leases taken), then each member records the outcome and gives its
        lease back. With a timeout, wait as acquire(timeout=) does; without, refused at
        once."""
        n = self._ns(ns)
        return _GroupEntry(self, n, self._timeout(n, timeout))

    def __call__(self, func: Any = None, *, on_block: Any = _MISSING,
                 timeout: Optional[float] = None) -> Any:
        """``@group``: each call runs inside ``group.entry()`` (n=1 each; ``timeout=``:
        the entry's)."""
        return _decorate(self, "async all_of group" if self._t.is_async else "all_of group",
                         func, None, on_block, timeout)


class RedisGroup(_Group, SyncAdmission):
    """all_of over sync Redis limiters: admitted by all, or charged nothing."""

    def try_acquire(self, *ns: int, now_ns: Optional[int] = None) -> bool:
        """Admit now by every member, or refuse and charge none; never waits."""
        return self._t.drive(self._g_admit(ns, F_TRY, now_ns)) is not None

    def reserve(self, *ns: int, now_ns: Optional[int] = None) -> Optional[int]:
        """The wait in ns (the largest of the members'), already admitted; None: refused."""
        return self._t.drive(self._g_admit(ns, 0, now_ns))  # type: ignore[no-any-return]

    def acquire(self, *ns: int, timeout: Optional[float] = None) -> None:
        """One decision, sleeping its wait; with a timeout, decide again until admitted or
        the timeout passed. Raises BlockedError (retry_after: the largest refuser's)."""
        return self._t.drive(self._g_acquire(ns, timeout))  # type: ignore[no-any-return]

    def charge(self, *ns: int, now_ns: Optional[int] = None) -> None:
        """Count ns more as admitted now on the members, without a decision, in one round
        trip (slidewin.all_of's charge): one n for all or one per member, each >= 0 (0: not
        charged; a concurrency member only 0). Never refuses."""
        return self._t.drive(self._g_charge(ns, now_ns))  # type: ignore[no-any-return]


class AsyncRedisGroup(_Group, AsyncAdmission):
    """all_of over AsyncRedisLimiter members: the methods are coroutines."""

    async def try_acquire(self, *ns: int, now_ns: Optional[int] = None) -> bool:
        return await self._t.drive(self._g_admit(ns, F_TRY, now_ns)) is not None

    reserve = _awaited(RedisGroup.reserve)
    acquire = acquire_async = _awaited(RedisGroup.acquire)
    charge = _awaited(RedisGroup.charge)


class _GroupEntry(_Driven):
    __slots__ = ("n", "_leases", "_toks", "_timeout")

    def __init__(self, group: _Group, ns: List[int], timeout: Optional[float]) -> None:
        self._by, self.n = group, ns
        self._timeout = timeout  # checked (_Group._timeout): None, refused at once
        self._held = False

    def _give_back(self, outcome: int, rt_ms: int) -> Any:
        for tok in self._toks:
            _unrenew(tok)
        for m, n, lease in zip(self._by._members, self.n, self._leases):
            yield from m.lim._g_exit(m.rkey, m.cfg, n, outcome, rt_ms, [(lease, n)])

    def _admit(self) -> Any:
        g = self._by
        self._leases = [os.urandom(8).hex() for _ in g._members]
        wait_ns = yield from g._g_wait(self.n, self._timeout, F_ENTRY, self._leases)
        # renewed from the decision on: a throttle's wait may outlast the lease
        renewer = g._t.renewer()
        self._toks = [renewer.add(m.lim, m.rkey, m.cfg, lease)
                      for m, lease in zip(g._members, self._leases)]
        return wait_ns

    def _admit_held(self) -> int:
        """An Upstream's call admitted and held (leases renewed): its wait (ns) is the caller's."""
        wait_ns: int = self._by._t.drive(self._admit())
        self._held = True
        return wait_ns

    def _abort(self) -> None:
        """An Upstream's call given back before its body: nothing recorded."""
        self._held = False
        self._by._t.drive(self._give_back(_OUT_NONE, 0))


def all_of(*members: Any) -> Any:
    """One group over Redis limiters of one client (and ``(RedisKeyedLimiter, key)`` pairs):
    each decision is admitted by every member or charges none, in one round trip. Sync
    members give a RedisGroup, AsyncRedis* members an AsyncRedisGroup. On Redis Cluster the
    members' keys must share one hash slot: names with one hash tag ("{acct}.rpm")."""
    if not members:
        raise TypeError("all_of takes at least one member")
    ms = [_Member(x) for x in members]
    kinds = {bool(m.lim._is_async) for m in ms}
    if len(kinds) > 1:
        raise TypeError("all_of members are all sync Redis limiters or all AsyncRedis ones, "
                        "not a mix")
    client = ms[0].lim._client
    if any(m.lim._client is not client for m in ms):
        raise ValueError("all_of members share one Redis client (one round trip on one "
                         "connection): these use %d clients"
                         % len({id(m.lim._client) for m in ms}))
    for i, m in enumerate(ms):
        if any(o.rkey == m.rkey for o in ms[:i]):
            raise ValueError("all_of holds %s twice: a group may not hold one limiter twice"
                             % m.describe())
    if _is_cluster(client):
        from redis.crc import key_slot

        slots = {int(key_slot(m.rkey.encode() if isinstance(m.rkey, str) else m.rkey))
                 for m in ms}
        if len(slots) > 1:
            raise ValueError(
                "on Redis Cluster the members of all_of must share one hash slot (one "
                "script runs on one node): give their names one hash tag, as '{acct}.rpm' "
                "and '{acct}.tpm' (a keyed limiter's name too: its keys then share that "
                "slot); these are in slots %s" % sorted(slots))
    return (AsyncRedisGroup if kinds == {True} else RedisGroup)(ms)

