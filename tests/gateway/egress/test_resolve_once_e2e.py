"""One resolution per client connection and host within the vetted TTL, through the real proxy socket: the
request's address check resolves, the upstream dial reuses what was vetted (resolver.VettedResolver)."""
from __future__ import annotations

import asyncio
import base64
import http.client
import json
from contextlib import AsyncExitStack

from gateway.app import open_gateway
from gateway.config import load_config
from gateway.egress.resolver import StaticResolver, VettedResolver
from gateway.net.addresses import AddressVerdict
from tests.support.services import NoDns
from tests.support.upstream import Upstream


class CountingResolver:
    """The static test names, counting every resolution by name."""

    def __init__(self, names: dict[str, list[str]]):
        self.inner = StaticResolver(names, NoDns())
        self.calls: dict[str, int] = {}

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls[host] = self.calls.get(host, 0) + 1
        return await self.inner.resolve(host, port)


def _get(conn: http.client.HTTPConnection, url: str, token: str) -> int:
    auth = "Basic " + base64.b64encode(f"x:{token}".encode()).decode()
    conn.request("GET", url, headers={"Proxy-Authorization": auth})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def _session(api: tuple[str, int], harness: str) -> str:
    conn = http.client.HTTPConnection(*api, timeout=10)
    conn.request("POST", "/v1/sessions", body=json.dumps({"allow": ["allowed.test", "other.test"]}),
                 headers={"Authorization": f"Bearer {harness}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 201
    return json.loads(resp.read())["token"]


async def test_a_connection_resolves_each_host_once(tmp_path):
    resolver = CountingResolver({"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    cfg = load_config(None, tmp_path / "data", environ={}, overrides={
        "proxy": {"listen": "127.0.0.1:0"}, "api": {"listen": "127.0.0.1:0"},
        "egress": {"private_allow": ["127.0.0.0/8"]}, "policy": {"isolation": "thread", "workers": 1}})
    with Upstream() as up:
        async with AsyncExitStack() as stack:
            listening = await open_gateway(cfg, stack, resolver=resolver)
            harness = (cfg.data_dir / "harness.token").read_text().strip()

            def client() -> None:
                token = _session(listening.api, harness)
                conn = http.client.HTTPConnection(*listening.proxy, timeout=10)
                for i in range(5):
                    assert _get(conn, f"http://allowed.test:{up.port}/r{i}", token) == 200
                assert resolver.calls == {"allowed.test": 1}, "the dial reused the vetted address"
                assert _get(conn, f"http://other.test:{up.port}/o", token) == 200
                assert resolver.calls == {"allowed.test": 1, "other.test": 1}
                conn.close()
                again = http.client.HTTPConnection(*listening.proxy, timeout=10)     # a new connection vets anew
                assert _get(again, f"http://allowed.test:{up.port}/n", token) == 200
                assert resolver.calls == {"allowed.test": 2, "other.test": 1}
                again.close()

            await asyncio.to_thread(client)
    assert len([r for r in up.recorder.requests if r.path.startswith("/r")]) == 5


class Fallback:
    def __init__(self) -> None:
        self.calls = 0

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls += 1
        return ["127.0.0.2"]


async def test_vetted_resolver_reuses_only_a_fresh_allowed_verdict():
    ok = AddressVerdict(True, "loopback", "", "", ("127.0.0.1",))
    refused = AddressVerdict(False, "private", "address.private", "no", ())
    now = [100.0]
    vetted = {("a.test", 80): (ok, 130.0), ("b.test", 80): (refused, 130.0)}
    fallback = Fallback()
    r = VettedResolver(vetted, fallback, clock=lambda: now[0])
    assert await r.resolve("a.test", 80) == ["127.0.0.1"] and fallback.calls == 0
    assert await r.resolve("a.test", 443) == ["127.0.0.2"] and fallback.calls == 1      # another port
    assert await r.resolve("b.test", 80) == ["127.0.0.2"] and fallback.calls == 2      # refused: ask again
    now[0] = 131.0
    assert await r.resolve("a.test", 80) == ["127.0.0.2"] and fallback.calls == 3      # expired
