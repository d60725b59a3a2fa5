"""slidewin.Upstream(redis=): one pause, one pace and one server's view for every host, on a
real server (tests/redis_servers.py), with two clients standing for two hosts."""

import asyncio

import pytest

from redis_servers import r, redis_server  # noqa: F401 (fixtures)
from slidewin import BlockedError, Upstream


@pytest.fixture
def other(redis_server):  # noqa: F811
    """A second client of the server, standing for a second host."""
    client = redis_server.client()
    yield client
    client.close()


def two_hosts(r, other, name, **limits):  # noqa: F811
    """The same Upstream on two hosts (two clients of one server)."""
    return Upstream(**limits, redis=r, name=name), Upstream(**limits, redis=other, name=name)


def test_a_429_seen_by_one_host_pauses_the_other(r, other):  # noqa: F811
    a, b = two_hosts(r, other, "llm", requests="1000/second")
    assert b.paused_until() is None
    with a.call() as c:
        c.observe(429, {"retry-after": "30"})
    assert 29 < b.paused_until() <= 30
    with pytest.raises(BlockedError) as e:
        with b.call(timeout=1):
            pass
    assert 29 < e.value.retry_after <= 30
    a._board.pause(1.0, 0)  # never shortened
    assert b.paused_until() > 28


def test_the_pace_is_one_for_both_hosts(r, other):  # noqa: F811
    a, b = two_hosts(r, other, "paced", requests="1/second")
    with a.call(timeout=0):
        pass
    with pytest.raises(BlockedError) as e:  # the other host's slot is 1 s out
        with b.call(timeout=0.1):
            pass
    assert 0.5 < e.value.retry_after <= 1.0


def test_the_server_view_is_shared_and_tokens_are_charged(r, other):  # noqa: F811
    a, b = two_hosts(r, other, "view", tokens="100000/second")
    with a.call(tokens=10) as c:
        c.observe(200, {"x-ratelimit-remaining-tokens": "0",
                        "x-ratelimit-reset-tokens": "20s"}, tokens=50)
    assert a.stats()["charged_tokens"] == 40
    with pytest.raises(BlockedError) as e:
        with b.call(tokens=10, timeout=1):
            pass
    assert 19 < e.value.retry_after <= 20


def test_async_calls_and_the_concurrency_lease(r):  # noqa: F811
    api = Upstream(requests="1000/second", concurrency=1, redis=r, name="conc")

    async def main():
        async with api.call(timeout=5) as c:
            with pytest.raises(BlockedError):
                async with api.call(timeout=0):
                    pass
            c.observe(200, {})
        async with api.call(timeout=5):
            pass

    asyncio.run(main())
    assert api.stats()["sent"] == 2
