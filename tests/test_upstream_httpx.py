"""slidewin.httpx against a real provider on loopback (tests/fake_provider.py) that enforces
its own buckets: the transports wait, send, observe, retry 429/503 after the pause within
`retries` and `deadline_s`; under the openai and anthropic clients with their retries off."""

import asyncio

import httpx
import pytest

from fake_provider import FakeProvider
from slidewin import BlockedError, Upstream
from slidewin.httpx import AsyncLimitedTransport, LimitedTransport

pytestmark = pytest.mark.server

BODY = {"model": "fake", "max_tokens": 50, "messages": [{"role": "user", "content": "x" * 40}]}


def estimate(request):
    return 10 + 50  # the prompt (40 chars / 4) and max_tokens


def test_the_transport_paces_and_settles_tokens():
    with FakeProvider(requests=20, tokens=2000, period_s=1, quantum=0.5) as p:
        api = Upstream(requests="20/second", tokens="2000/second", concurrency=4)
        with httpx.Client(transport=LimitedTransport(api, tokens=estimate)) as client:
            for _ in range(12):
                assert client.post(p.url + "/v1/chat/completions", json=BODY).status_code == 200
        assert p.counts()["429"] == 0
        s = api.stats()
        assert (s["sent"], s["estimated_tokens"], s["used_tokens"]) == (12, 720, 360)
        assert s["refunded_tokens"] == 360


def test_a_429_is_retried_after_the_pause_it_started():
    # the provider allows 2 at once then 1 every 100 ms; the budget is set 10x too high
    with FakeProvider(requests=10, tokens=10**6, period_s=1, quantum=0.2) as p:
        api = Upstream(requests="100/second")
        with httpx.Client(transport=LimitedTransport(api, retries=5)) as client:
            codes = [client.post(p.url + "/v1/chat/completions", json=BODY).status_code
                     for _ in range(6)]
        assert codes == [200] * 6
        s = api.stats()
        assert s["upstream_429"] == s["retried"] == p.counts()["429"]
        assert s["sent"] == 6 + s["retried"]


def test_past_the_deadline_the_last_response_is_returned():
    with FakeProvider(requests=1, tokens=10**6, period_s=30, quantum=1.0, style="bare") as p:
        api = Upstream(requests="100/second")
        with httpx.Client(transport=LimitedTransport(api, retries=3, deadline_s=2)) as client:
            assert client.post(p.url + "/v1/chat/completions", json=BODY).status_code == 200
            r = client.post(p.url + "/v1/chat/completions", json=BODY)  # Retry-After: 30
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        assert api.stats()["retried"] == 0  # the pause outlasts the deadline: not retried
        with httpx.Client(transport=LimitedTransport(api, deadline_s=2)) as client:
            with pytest.raises(BlockedError) as e:  # paused: refused before sending
                client.post(p.url + "/v1/chat/completions", json=BODY)
        assert e.value.retry_after > 20
        assert p.counts()["429"] == 1


def test_other_errors_are_returned_as_they_came():
    with FakeProvider(requests=100, tokens=10**6, period_s=1, fail_every=1) as p:
        api = Upstream(requests="100/second")
        with httpx.Client(transport=LimitedTransport(api)) as client:
            assert client.post(p.url + "/v1/chat/completions", json=BODY).status_code == 500
        assert api.stats()["upstream_5xx"] == 1 and api.stats()["retried"] == 0


def test_the_async_transport():
    with FakeProvider(requests=10, tokens=10**6, period_s=1, quantum=0.2) as p:
        api = Upstream(requests="100/second", concurrency=3)

        async def main():
            async with httpx.AsyncClient(transport=AsyncLimitedTransport(api)) as client:
                rs = await asyncio.gather(*(client.post(p.url + "/v1/chat/completions",
                                                        json=BODY) for _ in range(6)))
            return [r.status_code for r in rs]

        assert asyncio.run(main()) == [200] * 6
        assert api.stats()["sent"] == 6 + api.stats()["retried"]


def test_under_the_openai_client():
    openai = pytest.importorskip("openai")
    with FakeProvider(requests=10, tokens=5000, period_s=1, quantum=0.3) as p:
        api = Upstream(requests="20/second", tokens="10000/second")  # 2x too high
        client = openai.OpenAI(base_url=p.url + "/v1", api_key="test", max_retries=0,
                               http_client=httpx.Client(transport=LimitedTransport(
                                   api, tokens=estimate)))
        with client:
            for _ in range(8):
                reply = client.chat.completions.create(model="fake", max_tokens=50,
                                                       messages=BODY["messages"])
                assert reply.usage.total_tokens == 30
        assert api.stats()["used_tokens"] == 8 * 30
        assert p.counts()["ok"] == 8


def test_under_the_async_openai_client():
    openai = pytest.importorskip("openai")
    with FakeProvider(requests=10, tokens=5000, period_s=1, quantum=0.3) as p:
        api = Upstream(requests="20/second", concurrency=4)

        async def main():
            client = openai.AsyncOpenAI(
                base_url=p.url + "/v1", api_key="test", max_retries=0,
                http_client=httpx.AsyncClient(transport=AsyncLimitedTransport(api)))
            async with client:
                return await asyncio.gather(*(client.chat.completions.create(
                    model="fake", max_tokens=50, messages=BODY["messages"]) for _ in range(6)))

        assert len(asyncio.run(main())) == 6


def test_under_the_anthropic_client():
    anthropic = pytest.importorskip("anthropic")
    try:  # anthropic 2.x sends through httpx2, a fork of httpx with the same API
        import httpx2 as client_httpx
    except ImportError:
        client_httpx = httpx
    with FakeProvider(requests=10, tokens=5000, period_s=1, quantum=0.3,
                      style="anthropic") as p:
        api = Upstream(requests="20/second", tokens="10000/second")

        def make(mod):
            return anthropic.Anthropic(
                base_url=p.url, api_key="test", max_retries=0,
                http_client=mod.Client(transport=LimitedTransport(
                    api, tokens=estimate, transport=mod.HTTPTransport())))

        try:
            client = make(client_httpx)
        except TypeError:  # an anthropic of before httpx2
            client = make(httpx)
        with client:
            for _ in range(6):
                msg = client.messages.create(model="fake", max_tokens=50,
                                             messages=BODY["messages"])
                assert msg.usage.input_tokens + msg.usage.output_tokens == 30
        assert api.stats()["used_tokens"] == 6 * 30


@pytest.mark.parametrize("kw, exc, word", [
    (dict(tokens=5), TypeError, "tokens"),
    (dict(retries=-1), ValueError, "retries"),
    (dict(retries=1.5), TypeError, "retries"),
    (dict(deadline_s=0), ValueError, "deadline_s"),
    (dict(deadline_s="1"), TypeError, "deadline_s"),
    (dict(transport=object()), TypeError, "transport"),
])
def test_bad_transport_arguments_name_the_parameter(kw, exc, word):
    with pytest.raises(exc, match=word):
        LimitedTransport(Upstream(requests="5/second"), **kw)
    with pytest.raises(TypeError, match="upstream"):
        LimitedTransport(object())
