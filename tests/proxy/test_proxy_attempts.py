"""Issue 8, finding 11: every request the proxy sends upstream is a recorded attempt, and
the consecutive-transport-error limit is exact (no silent resend on a reused connection)."""

from __future__ import annotations

import json

from proctor._http import HttpClient
from proctor.models import RetryPolicy
from proctor.proxy import InterceptionProxy, ProxySession
from proctor.testing import FakeClock, FakeModelServer, Fault

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()


async def post(http: HttpClient, session: ProxySession) -> int:
    headers = [("authorization", f"Bearer {session.secret}")]
    url = session.base_url + "/chat/completions"
    async with await http.request("POST", url, headers=headers, body=BODY) as resp:
        await resp.read()
        return resp.status


async def test_a_503_then_resets_make_as_many_upstream_requests_as_recorded_attempts() -> None:
    async with (
        FakeModelServer() as fake,
        InterceptionProxy(fake.url, clock=FakeClock()) as proxy,
        HttpClient() as http,
    ):
        session = proxy.open_session()
        fake.inject(Fault.status(503))
        fake.inject(Fault.reset(mid_body=False), times=11)
        assert await post(http, session) == 502
        attempts = session.turns[0]["attempts"]
        assert len(fake.requests) == len(attempts) == 11  # the default limit is 10 resets
        assert [a["cause"] for a in attempts] == ["server"] + ["transport"] * 10
        assert "may have received" in attempts[1]["error"]  # the reused connection's reset
        assert len(fake.pending_faults) == 1


async def test_the_transport_streak_is_exact_on_a_warm_pool() -> None:
    policy = RetryPolicy(max_transport=3)
    async with (
        FakeModelServer() as fake,
        InterceptionProxy(fake.url, retry=policy, clock=FakeClock()) as proxy,
        HttpClient() as http,
    ):
        session = proxy.open_session()
        assert await post(http, session) == 200  # leaves a pooled upstream connection
        fake.inject(Fault.reset(mid_body=False), times=2)
        assert await post(http, session) == 200
        assert len(fake.requests) == 1 + 3
        assert [a["cause"] for a in session.turns[1]["attempts"]] == [
            "transport",
            "transport",
            "ok",
        ]
        fake.inject(Fault.reset(mid_body=False), times=5)
        assert await post(http, session) == 502
        assert len(fake.requests) == 4 + 3
        assert [a["cause"] for a in session.turns[2]["attempts"]] == ["transport"] * 3
