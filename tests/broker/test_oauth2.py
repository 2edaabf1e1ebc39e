"""broker/oauth2.py: the OAuth2 keys, token answers, and the minter against a real token server on loopback (TLS),
through the gateway's vetted transport. The clock is injected: no timing assertions."""
from __future__ import annotations

import asyncio
import time
import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.backends import CachedResolver, EnvBackend, LocalBackend
from broker.oauth2 import (KEPT_FOR_SCRUB, MAX_CACHE_S, MAX_TOKEN_CHARS, REFRESH_FAILED, GitHubAppParams, MemoryTokenState,
                           OAuth2Params, OAuth2Tokens, parse_oauth2, parse_token_response, refresh_margin)
from broker.sources import SecretUnavailable
from broker.specs import parse_secret_specs
from gateway.egress.resolver import StaticResolver, SystemResolver
from gateway.egress.token_transport import VettedTransport
from gateway.net.addresses import parse_networks, vet_addresses
from gateway.net.hosts import normalise_host
from tests.support.cli import run_cli
from tests.support.oauth_server import OAuthServer
from tests.support.upstream import make_cert

URL = "https://auth.example/token"


# -- configuration -------------------------------------------------------------------------------
def test_client_credentials_spec():
    specs = parse_secret_specs({"crm": {"kind": "oauth2", "token_url": URL, "client_id": "env:ID",
                                        "client_secret": "vault:secret/crm#cs", "scope": "read write",
                                        "hosts": ["api.crm.example"]}}, normalise_host)
    spec = specs["crm"]
    assert spec.kind == "oauth2" and spec.source == "" and spec.env == "CRM"
    assert spec.oauth2 == OAuth2Params(URL, "client_credentials", "env:ID", "vault:secret/crm#cs", "", "read write")


@pytest.mark.parametrize("table, match", [
    ({"token_url": "http://auth.example/token", "client_id": "env:I", "client_secret": "env:S"}, "https"),
    ({"token_url": "https://u:p@auth.example/t", "client_id": "env:I", "client_secret": "env:S"}, "https"),
    ({"token_url": URL, "client_id": "env:I"}, "client_secret"),
    ({"token_url": URL, "grant": "refresh_token", "client_id": "env:I"}, "refresh_token"),
    ({"token_url": URL, "grant": "password", "client_id": "env:I", "client_secret": "env:S"}, "grant"),
    ({"token_url": URL, "client_id": "plain-id", "client_secret": "env:S"}, "client_id"),
    ({"token_url": URL, "client_id": "env:I", "client_secret": "env:S", "source": "env:X"}, "source"),
    ({"token_url": URL, "client_id": "env:I", "client_secret": "env:S", "allow_plaintext": True}, "TLS"),
    ({"token_url": URL, "client_id": "env:I", "client_secret": "env:S", "scope": 3}, "scope"),
])
def test_bad_oauth2_tables_refuse_to_start(table, match):
    with pytest.raises(ValueError, match=match):
        parse_secret_specs({"crm": {"kind": "oauth2", "hosts": ["api.example"], **table}}, normalise_host)


def test_oauth2_keys_belong_to_oauth2_secrets_only():
    with pytest.raises(ValueError, match="unknown keys"):
        parse_secret_specs({"t": {"source": "env:T", "hosts": ["a.example"], "token_url": URL}}, normalise_host)
    with pytest.raises(ValueError, match="kind"):
        parse_secret_specs({"t": {"kind": "magic", "source": "env:T", "hosts": ["a.example"]}}, normalise_host)


def test_refresh_grant_without_client_secret_is_a_public_client():
    p = parse_oauth2("x", {"token_url": URL, "grant": "refresh_token", "client_id": "env:I",
                           "refresh_token": "local:rt"})
    assert p.sources() == ("env:I", "local:rt")


# -- token answers -------------------------------------------------------------------------------
def test_a_token_is_used_until_shortly_before_it_expires():
    t = parse_token_response({"access_token": "abc", "token_type": "Bearer", "expires_in": 3600}, 1000.0)
    assert t.refresh_at == 1000.0 + 3600 - 60 and t.refresh_token is None
    t = parse_token_response({"access_token": "abc", "token_type": "bearer", "expires_in": 2, "refresh_token": "r"},
                             0.0)
    assert t.refresh_at == pytest.approx(1.6) and t.refresh_token == "r"
    t = parse_token_response({"access_token": "abc", "expires_in": 10 ** 9}, 0.0)
    assert t.refresh_at == MAX_CACHE_S - 60                     # the cache is capped
    assert parse_token_response({"access_token": "abc", "expires_in": "30"}, 0.0).refresh_at == 24


@pytest.mark.parametrize("doc", [
    None, [], {}, {"access_token": ""}, {"access_token": 5}, {"access_token": "a b"},
    {"access_token": "a" * (MAX_TOKEN_CHARS + 1)}, {"access_token": "abc", "token_type": "mac"},
    {"access_token": "abc", "expires_in": 0}, {"access_token": "abc", "expires_in": -5},
    {"access_token": "abc", "expires_in": True}, {"access_token": "abc", "expires_in": "soon"},
    {"access_token": "abc", "refresh_token": ""}, {"access_token": "é"},
])
def test_unusable_answers_are_refused(doc):
    with pytest.raises(ValueError):
        parse_token_response(doc, 0.0)


@given(lifetime=st.floats(min_value=0.001, max_value=1e7, allow_nan=False), now=st.floats(0, 2e9))
def test_property_a_token_is_never_used_past_its_expiry(lifetime, now):
    t = parse_token_response({"access_token": "abc", "expires_in": lifetime}, now)
    assert now < t.refresh_at <= now + min(lifetime, MAX_CACHE_S)
    assert 0 < refresh_margin(lifetime) <= 60


@given(doc=st.dictionaries(st.sampled_from(["access_token", "token_type", "expires_in", "refresh_token", "x"]),
                           st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))))
def test_property_parsing_raises_only_value_error(doc):
    try:
        parse_token_response(doc, 0.0)
    except ValueError:
        pass


# -- the minter against a real token server ------------------------------------------------------
class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server(tmp_path):
    cert = make_cert(tmp_path / "certs", ["auth.test"])
    with OAuthServer(cert, "cid", "csecret", lifetime_s=100) as auth:
        yield auth, cert


def minter(auth, cert, tmp_path, clock, grant="client_credentials", refresh="", private=("127.0.0.0/8",)):
    loop = asyncio.get_running_loop()
    resolver = StaticResolver({"auth.test": ["127.0.0.1"]}, SystemResolver(loop.getaddrinfo))
    tls = ssl.create_default_context(cafile=cert.cert)

    def vet(addresses, port):
        return vet_addresses(addresses, port, private_allow=parse_networks(list(private)), own_listeners=[])
    secrets = CachedResolver({"env": EnvBackend({"ID": "cid", "SECRET": "csecret"}),
                              "local": LocalBackend(tmp_path / "data")})
    params = OAuth2Params(f"https://auth.test:{auth.port}/token", grant, "env:ID", "env:SECRET", refresh)
    return OAuth2Tokens({"crm": params}, secrets, lambda: VettedTransport(resolver, vet, tls), MemoryTokenState(),
                        clock=clock)


async def test_tokens_are_cached_then_refreshed_and_concurrent_callers_share_one_refresh(server, tmp_path):
    auth, cert = server
    clock = Clock()
    tokens = minter(auth, cert, tmp_path, clock)
    assert tokens.fresh("crm") is None
    got = await asyncio.gather(*(tokens.token("crm") for _ in range(10)))
    assert len(set(got)) == 1 and auth.state.grants == ["client_credentials"]        # single-flight
    assert tokens.fresh("crm") == got[0]
    clock.now += 79
    assert await tokens.token("crm") == got[0] and len(auth.state.grants) == 1        # still fresh
    clock.now += 2                                                                     # past 100 - 20
    second = await tokens.token("crm")
    assert second != got[0] and len(auth.state.grants) == 2
    assert tokens.recent("crm") == [got[0], second]


async def test_a_refused_token_is_never_used_again(server, tmp_path):
    auth, cert = server
    tokens = minter(auth, cert, tmp_path, Clock())
    first = await tokens.token("crm")
    tokens.invalidate("crm", first)
    assert tokens.fresh("crm") is None
    assert await tokens.token("crm") != first


async def test_recent_tokens_are_capped(server, tmp_path):
    auth, cert = server
    tokens = minter(auth, cert, tmp_path, Clock())
    for _ in range(KEPT_FOR_SCRUB + 3):
        tokens.invalidate("crm", await tokens.token("crm"))
    assert len(tokens.recent("crm")) == KEPT_FOR_SCRUB


async def test_rotated_refresh_tokens_go_back_to_a_local_source(server, tmp_path):
    auth, cert = server
    first = auth.state.new_refresh_token()
    await LocalBackend(tmp_path / "data").put("rt", first, [])
    clock = Clock()
    tokens = minter(auth, cert, tmp_path, clock, grant="refresh_token", refresh="local:rt")
    await tokens.token("crm")
    stored = await LocalBackend(tmp_path / "data").get("rt")
    assert stored != first and stored in auth.state.refresh_tokens
    clock.now += 1000
    await tokens.token("crm")                          # uses the rotated one (the first is retired)
    assert auth.state.refused_grants == 0 and auth.state.grants == ["refresh_token", "refresh_token"]


async def test_refusals_and_unreachable_endpoints_are_refresh_failed(server, tmp_path):
    auth, cert = server
    auth.state.new_refresh_token()
    await LocalBackend(tmp_path / "data").put("rt", "rt-revoked", [])
    tokens = minter(auth, cert, tmp_path, Clock(), grant="refresh_token", refresh="local:rt")
    with pytest.raises(SecretUnavailable) as exc:
        await tokens.token("crm")
    assert exc.value.code == REFRESH_FAILED and "rt-revoked" not in str(exc.value)
    # the token endpoint's address fails the address check (loopback not allowed): never dialled
    tokens = minter(auth, cert, tmp_path, Clock(), private=())
    with pytest.raises(SecretUnavailable) as exc:
        await tokens.token("crm")
    assert exc.value.code == REFRESH_FAILED and auth.state.grants == []


# -- GitHub App installation tokens --------------------------------------------------------------
def test_github_app_spec():
    spec = parse_secret_specs({"gh": {"kind": "github_app", "app_id": 12345, "installation_id": "678",
                                      "private_key": "vault:secret/gh#key", "hosts": ["api.github.com"]}},
                              normalise_host)["gh"]
    assert spec.kind == "github_app" and spec.oauth2 == GitHubAppParams("12345", "678", "vault:secret/gh#key")
    assert spec.oauth2.token_url == "https://api.github.com/app/installations/678/access_tokens"


@pytest.mark.parametrize("table, match", [
    ({"app_id": "x1", "installation_id": 1, "private_key": "env:K"}, "app_id"),
    ({"app_id": "0", "installation_id": 1, "private_key": "env:K"}, "app_id"),
    ({"app_id": 0, "installation_id": 1, "private_key": "env:K"}, "app_id"),
    ({"app_id": -3, "installation_id": 1, "private_key": "env:K"}, "app_id"),
    ({"app_id": "007", "installation_id": 1, "private_key": "env:K"}, "app_id"),
    ({"app_id": str(2 ** 63), "installation_id": 1, "private_key": "env:K"}, "app_id"),
    ({"app_id": 1, "installation_id": "0", "private_key": "env:K"}, "installation_id"),
    ({"app_id": 1, "installation_id": True, "private_key": "env:K"}, "installation_id"),
    ({"app_id": 1, "installation_id": 2, "private_key": "-----BEGIN"}, "private_key"),
    ({"app_id": 1, "installation_id": 2, "private_key": "env:K", "api_url": "http://ghe.corp/api/v3"}, "api_url"),
    ({"app_id": 1, "installation_id": 2, "private_key": "env:K", "client_id": "env:I"}, "unknown"),
])
def test_bad_github_app_tables_refuse_to_start(table, match):
    with pytest.raises(ValueError, match=match):
        parse_secret_specs({"gh": {"kind": "github_app", "hosts": ["api.github.com"], **table}}, normalise_host)


@pytest.mark.parametrize("app_id", ['"0"', "0", '"00"'])
def test_serve_refuses_a_github_app_whose_app_id_is_not_an_id(tmp_path, app_id):
    # `sandgate serve` in this process (tests/support/cli.py): refused at config load, before anything is made
    (tmp_path / "sandgate.toml").write_text(f"""[secrets.gh]
kind = "github_app"
app_id = {app_id}
installation_id = 678
private_key = "env:GH_APP_KEY"
hosts = ["api.github.com"]
""")
    proc = run_cli("serve", "--config", str(tmp_path / "sandgate.toml"), "--data-dir", str(tmp_path / "data"))
    assert proc.returncode == 2 and "secrets.gh.app_id: a positive integer" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "data").exists()


def app_key():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


async def test_installation_tokens_are_minted_with_the_apps_jwt_and_cached(server, tmp_path):
    auth, cert = server
    private, public = app_key()
    auth.state.app_id, auth.state.installation_id, auth.state.app_public_key = "4242", "99", public
    loop = asyncio.get_running_loop()
    resolver = StaticResolver({"auth.test": ["127.0.0.1"]}, SystemResolver(loop.getaddrinfo))
    tls = ssl.create_default_context(cafile=cert.cert)

    def vet(addresses, port):
        return vet_addresses(addresses, port, private_allow=parse_networks(["127.0.0.0/8"]), own_listeners=[])
    clock = Clock(time.time())                     # the server checks the JWT's iat and exp against its clock
    params = GitHubAppParams("4242", "99", "env:KEY", f"https://auth.test:{auth.port}")
    tokens = OAuth2Tokens({"gh": params}, CachedResolver({"env": EnvBackend({"KEY": private})}),
                          lambda: VettedTransport(resolver, vet, tls), MemoryTokenState(), clock=clock)
    first = await tokens.token("gh")
    assert first.startswith("ghs_") and auth.state.grants == ["github_app"]
    assert await tokens.token("gh") == first                      # cached (the token lives 100 s here)
    clock.now += 10
    assert await tokens.token("gh") == first
    tokens.invalidate("gh", first)                                # (a fake clock past the real one would make the
    assert await tokens.token("gh") != first and auth.state.grants == ["github_app"] * 2   # JWT's iat a future one)
    # another app's key: refused, and said so without details
    other, _ = app_key()
    bad = OAuth2Tokens({"gh": params}, CachedResolver({"env": EnvBackend({"KEY": other})}),
                       lambda: VettedTransport(resolver, vet, tls), MemoryTokenState(), clock=clock)
    with pytest.raises(SecretUnavailable) as exc:
        await bad.token("gh")
    assert exc.value.code == REFRESH_FAILED and auth.state.refused_grants == 1


async def test_rotated_refresh_tokens_go_back_to_vault_kv(server, tmp_path, bao_server):
    from broker.vault import VaultBackend

    auth, cert = server
    vault = VaultBackend(url=bao_server.addr, token=bao_server.token)
    first = auth.state.new_refresh_token()
    await vault.put("secret/crm-oauth#refresh", first)
    await vault.put("secret/crm-oauth#other", "kept-" + "K" * 10)
    loop = asyncio.get_running_loop()
    resolver = StaticResolver({"auth.test": ["127.0.0.1"]}, SystemResolver(loop.getaddrinfo))
    tls = ssl.create_default_context(cafile=cert.cert)

    def vet(addresses, port):
        return vet_addresses(addresses, port, private_allow=parse_networks(["127.0.0.0/8"]), own_listeners=[])
    secrets = CachedResolver({"env": EnvBackend({"ID": "cid", "SECRET": "csecret"}), "vault": vault})
    params = OAuth2Params(f"https://auth.test:{auth.port}/token", "refresh_token", "env:ID", "env:SECRET",
                          "vault:secret/crm-oauth#refresh")
    clock = Clock()
    tokens = OAuth2Tokens({"crm": params}, secrets, lambda: VettedTransport(resolver, vet, tls), MemoryTokenState(),
                          clock=clock)
    await tokens.token("crm")
    stored = await vault.get("secret/crm-oauth#refresh")
    assert stored != first and stored in auth.state.refresh_tokens
    assert await vault.get("secret/crm-oauth#other") == "kept-" + "K" * 10          # the secret's other keys stay
    # a new process (nothing kept but what Vault holds) refreshes with the rotated token
    fresh = OAuth2Tokens({"crm": params}, CachedResolver({"env": EnvBackend({"ID": "cid", "SECRET": "csecret"}),
                                                          "vault": vault}),
                         lambda: VettedTransport(resolver, vet, tls), MemoryTokenState(), clock=clock)
    await fresh.token("crm")
    assert auth.state.refused_grants == 0 and len(auth.state.grants) == 2
