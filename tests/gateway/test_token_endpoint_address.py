"""A token endpoint is an endpoint the operator configured (DESIGN: operator endpoints): sandgate dials it at the
address its name resolves to, private or not, without `egress.private_allow` (an internal identity provider must
not open private ranges to every sandbox); sandgate's own listeners stay refused. Real loopback server, real
transport as the app builds it."""
from __future__ import annotations

import ssl

import httpx2 as httpx
import pytest
from aiohttp import web

from gateway.app import _token_transport
from gateway.config import load_config
from gateway.egress.resolver import StaticResolver


class NoDns:
    async def resolve(self, host: str, port: int) -> list[str]:
        raise AssertionError(f"no DNS in this test: {host}")


@pytest.fixture
async def token_server():
    async def token(request: web.Request) -> web.Response:
        return web.json_response({"access_token": "t", "token_type": "Bearer", "expires_in": 60})
    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield site._server.sockets[0].getsockname()[1]
    await runner.cleanup()


def _config(tmp_path):
    path = tmp_path / "sandgate.toml"
    path.write_text("[egress]\nprivate_allow = []\n")
    return load_config(path, data_dir=tmp_path)


async def test_a_private_token_endpoint_is_dialled_without_private_allow(tmp_path, token_server):
    cfg = _config(tmp_path)
    assert not cfg.egress.private_allow
    resolver = StaticResolver({"idp.internal": ["127.0.0.1"]}, NoDns())
    transport = _token_transport(cfg, resolver, [("127.0.0.1", token_server + 1)], None)()
    async with httpx.AsyncClient(transport=transport) as client:
        answer = await client.post(f"http://idp.internal:{token_server}/token")
    assert answer.status_code == 200 and answer.json()["access_token"] == "t"


async def test_sandgates_own_listener_is_still_refused(tmp_path, token_server):
    cfg = _config(tmp_path)
    resolver = StaticResolver({"idp.internal": ["127.0.0.1"]}, NoDns())
    transport = _token_transport(cfg, resolver, [("127.0.0.1", token_server)], None)()
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError, match="address.own_listener"):
            await client.post(f"http://idp.internal:{token_server}/token")


def _configured(tmp_path, toml: str):
    path = tmp_path / "sandgate.toml"
    path.write_text(toml)
    return load_config(path, data_dir=tmp_path)


OAUTH2_SECRET = ('[secrets.crm]\nkind = "oauth2"\ntoken_url = "https://idp.internal/token"\nclient_id = "env:ID"\n'
                 'client_secret = "env:CS"\nhosts = ["api.crm.example"]\n')


def test_the_tls_context_is_made_at_start_only_where_a_token_request_or_the_operators_bundle_needs_it(tmp_path):
    """The context (public roots plus egress.upstream_ca) writes DATA_DIR/upstream-ca.pem as it is made. Without an
    OAuth2 secret no transport is ever asked for: made only if one is, once; with an OAuth2 secret it is made at
    start, as is one with an upstream_ca, which fails the start when OpenSSL cannot load it."""
    bundle = tmp_path / "upstream-ca.pem"
    resolver = StaticResolver({}, NoDns())
    lazy = _token_transport(_configured(tmp_path, ""), resolver, [], None)
    assert not bundle.exists()
    first, second = lazy(), lazy()
    assert bundle.exists() and first._tls is second._tls
    bundle.unlink()
    _token_transport(_configured(tmp_path, OAUTH2_SECRET), resolver, [], None)
    assert bundle.exists()
    bundle.unlink()
    corrupt = tmp_path / "ca.pem"
    corrupt.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    with pytest.raises(ssl.SSLError):
        _token_transport(_configured(tmp_path, f'[egress]\nupstream_ca = "{corrupt}"\n'), resolver, [], None)
