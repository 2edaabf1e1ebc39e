"""OAuth2 secrets' shared state on real SQLite and real PostgreSQL, with a real token server on loopback: replicas
refresh one at a time and never burn one refresh token twice; a rotated refresh token whose source cannot be
written (env:) is kept sealed in the store, so a restart uses the newest. The clock is injected."""
from __future__ import annotations

import asyncio
import ssl
import uuid

import pytest

from broker.backends import CachedResolver, EnvBackend, LocalBackend
from broker.oauth2 import OAuth2Params, OAuth2Tokens
from gateway.egress.resolver import StaticResolver, SystemResolver
from gateway.egress.token_transport import VettedTransport
from gateway.net.addresses import parse_networks, vet_addresses
from gateway.store import Store
from gateway.store.oauth2 import StoreTokenState
from tests.conftest import need
from tests.support.oauth_server import OAuthServer
from tests.support.pg import PG_URL, pg_available
from tests.support.upstream import make_cert


class Clock:
    def __init__(self) -> None:
        self.now = 2_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sandgate.db'}"
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    return PG_URL


@pytest.fixture
def server(tmp_path):
    cert = make_cert(tmp_path / "certs", ["auth.test"])
    with OAuthServer(cert, "cid", "csecret", lifetime_s=100) as auth:
        yield auth, cert


async def replica(url, tmp_path, auth, cert, clock, name, refresh_env):
    store = Store(url)
    await store.open()
    loop = asyncio.get_running_loop()
    resolver = StaticResolver({"auth.test": ["127.0.0.1"]}, SystemResolver(loop.getaddrinfo))
    tls = ssl.create_default_context(cafile=cert.cert)

    def vet(addresses, port):
        return vet_addresses(addresses, port, private_allow=parse_networks(["127.0.0.0/8"]), own_listeners=[])
    secrets = CachedResolver({"env": EnvBackend({"ID": "cid", "SECRET": "csecret", "RT": refresh_env})})
    params = OAuth2Params(f"https://auth.test:{auth.port}/token", "refresh_token", "env:ID", "env:SECRET", "env:RT")
    state = StoreTokenState(store, *LocalBackend(tmp_path / "data").sealer(), clock=clock)
    tokens = OAuth2Tokens({name: params}, secrets, lambda: VettedTransport(resolver, vet, tls), state, clock=clock)
    return store, tokens


async def test_replicas_refresh_once_and_never_burn_a_refresh_token_twice(url, tmp_path, server):
    auth, cert = server
    clock = Clock()
    name = "crm_" + uuid.uuid4().hex[:8]
    first = auth.state.new_refresh_token()
    (s1, a), (s2, b) = [await replica(url, tmp_path, auth, cert, clock, name, first) for _ in range(2)]
    try:
        for round_ in range(3):
            got = await asyncio.gather(*(t.token(name) for t in (a, b) for _ in range(5)))
            assert len(set(got)) == 1                         # one token, shared by both replicas
            assert len(auth.state.grants) == round_ + 1 and auth.state.refused_grants == 0
            clock.now += 200                                  # past its refresh time
        # the rotated refresh token is kept sealed: the row never holds it (nor the access token) in clear
        rows = s1.driver_rows("SELECT access, refresh_token FROM oauth2_tokens WHERE name = "
                               + ("?" if url.startswith("sqlite") else "%s"), (name,))
        current = next(iter(auth.state.refresh_tokens))
        assert rows and current not in repr(rows) and got[0] not in repr(rows) and rows[0][1]
    finally:
        s1.close()
        s2.close()
    # a restart (a new process, the same configuration: the env still holds the first, now retired, token)
    s3, c = await replica(url, tmp_path, auth, cert, clock, name, first)
    try:
        clock.now += 200
        await c.token(name)
        assert auth.state.refused_grants == 0 and len(auth.state.grants) == 4
    finally:
        s3.close()


async def test_a_new_refresh_token_in_the_source_wins_over_a_refused_kept_one(url, tmp_path, server):
    auth, cert = server
    clock = Clock()
    name = "crm_" + uuid.uuid4().hex[:8]
    store, tokens = await replica(url, tmp_path, auth, cert, clock, name, auth.state.new_refresh_token())
    try:
        await tokens.token(name)                            # keeps a rotated token in the store
    finally:
        store.close()
    auth.state.revoke_refresh_tokens()                      # the grant was revoked; the operator authorised again
    store, tokens = await replica(url, tmp_path, auth, cert, clock, name, auth.state.new_refresh_token())
    try:
        clock.now += 200
        await tokens.token(name)
        assert len(auth.state.grants) == 2
    finally:
        store.close()
