"""Secret backends against real servers and files: OpenBao (dev server) and the local store.

The Vault and local backends run the same suite (`store` fixture). Broker spec
parsing and placeholder issuing live here too: they are the backends' callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
import uuid
from pathlib import Path

import pytest

from broker.backends import (FORBIDDEN, INVALID, NOT_FOUND, UNAVAILABLE, CachedResolver, EnvBackend,
                             LocalBackend, SecretUnavailable, Source, VaultBackend, VaultRef, parse_source)
from broker.broker import Broker, SecretSpec
from broker.broker import parse_secret_specs as _parse_secret_specs
from gateway.net.hosts import normalise_host
from broker.placeholders import PlaceholderFormat, parse_format


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class VaultStore:
    kind = "vault"

    def __init__(self, control) -> None:
        self.control = control
        self.backend = VaultBackend(url=control.addr, token=control.token, timeout_s=2.0)
        self.prefix = f"sandgate-test/{uuid.uuid4().hex}"

    def source(self, name: str) -> str:
        return f"vault:secret/{self.prefix}/{name}#token"

    async def put(self, name: str, value: str) -> None:
        await self.backend.put(parse_source(self.source(name)).ref, value)

    @contextlib.contextmanager
    def outage(self):
        self.control.stop()
        try:
            yield
        finally:
            self.control.start()


class LocalStore:
    kind = "local"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.backend = LocalBackend(data_dir)

    def source(self, name: str) -> str:
        return f"local:{name}"

    async def put(self, name: str, value: str) -> None:
        await self.backend.put(name, value, hosts=["api.example.com"])

    @contextlib.contextmanager
    def outage(self):
        path = self.data_dir / "secrets.json"
        saved = path.read_bytes()
        path.write_bytes(b"\x00 not json")
        try:
            yield
        finally:
            path.write_bytes(saved)


@pytest.fixture(params=["vault", "local"])
def store(request, tmp_path):
    if request.param == "vault":
        return VaultStore(request.getfixturevalue("openbao_control"))
    return LocalStore(tmp_path / "data")


def resolver_for(store, ttl_s: float = 30.0, clock=time.monotonic) -> CachedResolver:
    return CachedResolver({store.kind: store.backend}, ttl_s=ttl_s, clock=clock)


# ---------------------------------------------------------------- the shared suite

async def test_put_then_read(store):
    await store.put("github", "ghp_realvalue123")
    assert await resolver_for(store).get(store.source("github")) == "ghp_realvalue123"


async def test_rotation_is_seen_only_after_the_ttl(store):
    clock = ManualClock()
    resolver = resolver_for(store, ttl_s=30.0, clock=clock)
    await store.put("token", "first-value-0001")
    assert await resolver.get(store.source("token")) == "first-value-0001"
    await store.put("token", "second-value-0002")
    clock.now += 29.0
    assert await resolver.get(store.source("token")) == "first-value-0001"
    clock.now += 1.0
    assert await resolver.get(store.source("token")) == "second-value-0002"


async def test_rotation_with_a_tiny_real_ttl(store):
    resolver = resolver_for(store, ttl_s=0.2)
    await store.put("token", "first-value-0001")
    assert await resolver.get(store.source("token")) == "first-value-0001"
    await store.put("token", "second-value-0002")
    await asyncio.sleep(0.25)
    assert await resolver.get(store.source("token")) == "second-value-0002"


async def test_missing_secret_is_not_found(store):
    await store.put("present", "some-value-123")
    with pytest.raises(SecretUnavailable) as info:
        await resolver_for(store).get(store.source("absent"))
    assert info.value.code == NOT_FOUND


async def test_outage_is_unavailable_and_never_serves_a_stale_value(store):
    clock = ManualClock()
    resolver = resolver_for(store, ttl_s=5.0, clock=clock)
    await store.put("token", "cached-value-xyz")
    assert await resolver.get(store.source("token")) == "cached-value-xyz"
    with store.outage():
        assert await resolver.get(store.source("token")) == "cached-value-xyz"  # within the TTL
        clock.now += 5.0
        started = time.monotonic()
        with pytest.raises(SecretUnavailable) as info:
            await resolver.get(store.source("token"))
        assert time.monotonic() - started < 5.0
    assert info.value.code == UNAVAILABLE
    assert "cached-value-xyz" not in str(info.value)


async def test_concurrent_misses_share_one_read(store):
    await store.put("token", "shared-value-42")
    calls = 0
    real_get = store.backend.get

    async def counting_get(ref):
        nonlocal calls
        calls += 1
        return await real_get(ref)

    store.backend.get = counting_get
    resolver = resolver_for(store)
    values = await asyncio.gather(*(resolver.get(store.source("token")) for _ in range(10)))
    assert values == ["shared-value-42"] * 10 and calls == 1


# ---------------------------------------------------------------- Vault specifics

async def test_vault_missing_key_and_env_fallback(openbao_control):
    backend = VaultBackend(environ={"VAULT_ADDR": openbao_control.addr, "VAULT_TOKEN": openbao_control.token})
    ref = VaultRef("secret", f"sandgate-test/{uuid.uuid4().hex}", "token")
    await backend.put(ref, "v-123456789")
    assert await backend.get(ref) == "v-123456789"
    with pytest.raises(SecretUnavailable) as info:
        await backend.get(ref._replace(key="other"))
    assert info.value.code == NOT_FOUND


async def test_vault_bad_token_is_forbidden(openbao_control):
    backend = VaultBackend(url=openbao_control.addr, token="not-a-token")
    with pytest.raises(SecretUnavailable) as info:
        await backend.get(VaultRef("secret", "anything", "token"))
    assert info.value.code == FORBIDDEN


async def test_vault_approle_login(openbao_control):
    import hvac

    root = hvac.Client(url=openbao_control.addr, token=openbao_control.token)
    if "approle/" not in root.sys.list_auth_methods()["data"]:
        root.sys.enable_auth_method("approle")
    path = f"sandgate-test/{uuid.uuid4().hex}"
    root.sys.create_or_update_policy("sandgate-read", f'path "secret/data/{path}" {{ capabilities = ["read"] }}')
    root.auth.approle.create_or_update_approle("sandgate", token_policies=["sandgate-read"])
    role_id = root.auth.approle.read_role_id("sandgate")["data"]["role_id"]
    secret_id = root.auth.approle.generate_secret_id("sandgate")["data"]["secret_id"]
    root.secrets.kv.v2.create_or_update_secret(path=path, secret={"token": "approle-value-1"})
    backend = VaultBackend(url=openbao_control.addr, role_id=role_id, secret_id=secret_id, environ={})
    assert await backend.get(VaultRef("secret", path, "token")) == "approle-value-1"


def test_vault_needs_an_address_and_credentials():
    with pytest.raises(ValueError):
        VaultBackend(environ={})
    with pytest.raises(ValueError):
        VaultBackend(url="http://127.0.0.1:1", environ={})
    assert VaultBackend.from_config({"url": "", "token": ""}, environ={
        "VAULT_ADDR": "http://127.0.0.1:1", "VAULT_TOKEN": "t"}).url == "http://127.0.0.1:1"


# ---------------------------------------------------------------- local specifics

async def test_local_files_are_private_and_hold_no_plaintext(tmp_path):
    data_dir = tmp_path / "data"
    backend = LocalBackend(data_dir)
    value = "ghp_PLAINTEXT_must_never_hit_disk_0123456789"
    await backend.put("github", value, hosts=["api.github.com", "github.com"])
    await backend.put("other", "second-plaintext-value-98765", hosts=["example.com"])
    for name in ("secrets.json", "secrets.key"):
        assert stat.S_IMODE(os.stat(data_dir / name).st_mode) == 0o600
    for path in data_dir.rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            assert value.encode() not in blob and b"second-plaintext-value" not in blob, path
    assert await backend.list() == [{"name": "github", "hosts": ["api.github.com", "github.com"]},
                                    {"name": "other", "hosts": ["example.com"]}]
    await backend.delete("other")
    assert [e["name"] for e in await backend.list()] == ["github"]
    with pytest.raises(SecretUnavailable) as info:
        await backend.delete("other")
    assert info.value.code == NOT_FOUND
    assert await LocalBackend(data_dir).get("github") == value  # a fresh instance reads the same key


async def test_local_missing_or_loose_key_fails_closed(tmp_path):
    backend = LocalBackend(tmp_path)
    await backend.put("github", "value-abcdef-123")
    key = tmp_path / "secrets.key"
    os.chmod(key, 0o644)
    with pytest.raises(SecretUnavailable) as info:
        await backend.get("github")
    assert info.value.code == UNAVAILABLE
    key.unlink()
    with pytest.raises(SecretUnavailable) as info:
        await backend.get("github")
    assert info.value.code == UNAVAILABLE
    with pytest.raises(SecretUnavailable):
        await backend.put("new", "value-that-needs-the-old-key")  # would orphan "github"


async def test_local_ciphertext_moved_to_another_name_is_refused(tmp_path):
    import json

    backend = LocalBackend(tmp_path)
    await backend.put("a", "value-of-a-123")
    await backend.put("b", "value-of-b-456")
    doc = json.loads((tmp_path / "secrets.json").read_text())
    doc["secrets"]["b"]["ciphertext"] = doc["secrets"]["a"]["ciphertext"]
    (tmp_path / "secrets.json").write_text(json.dumps(doc))
    with pytest.raises(SecretUnavailable) as info:
        await backend.get("b")
    assert info.value.code == INVALID


async def test_local_rejects_bad_names(tmp_path):
    with pytest.raises(ValueError):
        await LocalBackend(tmp_path).put("../escape", "value")


async def test_env_backend_and_unknown_kind():
    resolver = CachedResolver({"env": EnvBackend({"GH": "env-value-1"})})
    assert await resolver.get("env:GH") == "env-value-1"
    with pytest.raises(SecretUnavailable) as info:
        await resolver.get("env:MISSING")
    assert info.value.code == NOT_FOUND
    with pytest.raises(SecretUnavailable) as info:
        await resolver.get("local:github")
    assert info.value.code == UNAVAILABLE


# ---------------------------------------------------------------- sources and specs

@pytest.mark.parametrize("text, expected", [
    ("vault:secret/github#token", Source("vault", VaultRef("secret", "github", "token"))),
    ("vault:kv/team/a/b#api_key", Source("vault", VaultRef("kv", "team/a/b", "api_key"))),
    ("local:github", Source("local", "github")),
    ("env:GITHUB_TOKEN", Source("env", "GITHUB_TOKEN")),
])
def test_parse_source(text, expected):
    assert parse_source(text) == expected


@pytest.mark.parametrize("text", [
    "", "github", "vault:secret#token", "vault:secret/github", "vault:secret/github#", "vault:/github#t",
    "vault:secret//x#t", "vault:secret/../x#t", "local:", "local:../x", "env:1BAD", "env:A-B", "s3:bucket/key",
    "vault:secret/git hub#t",
])
def test_parse_source_rejects(text):
    with pytest.raises(ValueError):
        parse_source(text)


def parse_secret_specs(tables):
    return _parse_secret_specs(tables, normalise_host)


def test_parse_secret_specs_defaults_and_normalisation():
    specs = parse_secret_specs({
        "github": {"source": "vault:secret/github#token", "hosts": ["API.GitHub.com.", "github.com"]},
        "openai-key": {"source": "env:OPENAI", "hosts": ["api.openai.com"], "inject_in": ["header", "body"],
                       "format": "sk-:51", "env": "OPENAI_API_KEY"},
    })
    gh = specs["github"]
    assert gh == SecretSpec(name="github", source="vault:secret/github#token",
                            hosts=("api.github.com", "github.com"), inject_in=frozenset({"header", "query"}),
                            env="GITHUB", format=None)
    assert specs["openai-key"].format == PlaceholderFormat(prefix="sk-", length=51)
    assert specs["openai-key"].inject_in == {"header", "body"}
    assert parse_secret_specs({"my-token": {"source": "local:t", "hosts": ["x.io"]}})["my-token"].env == "MY_TOKEN"
    assert gh.allow_plaintext is False and gh.ports == frozenset()
    odd = parse_secret_specs({"o": {"source": "local:o", "hosts": ["Bücher.example.", "[::1]", "*.Corp.test"],
                                    "allow_plaintext": True, "ports": [443, 8443]}})["o"]
    assert odd.hosts == ("xn--bcher-kva.example", "::1", "*.corp.test")
    assert odd.allow_plaintext is True and odd.ports == {443, 8443}


@pytest.mark.parametrize("table", [
    {"hosts": ["a.com"]},
    {"source": "local:x", "hosts": []},
    {"source": "local:x", "hosts": "a.com"},
    {"source": "local:x"},
    {"source": "local:x", "hosts": ["https://a.com"]},
    {"source": "local:x", "hosts": ["a.com:443"]},
    {"source": "local:x", "hosts": ["a.com/path"]},
    {"source": "local:x", "hosts": ["a.com"], "inject_in": ["cookie"]},
    {"source": "local:x", "hosts": ["a.com"], "inject_in": []},
    {"source": "local:x", "hosts": ["a.com"], "env": "HTTPS_PROXY"},
    {"source": "local:x", "hosts": ["a.com"], "env": "1X"},
    {"source": "local:x", "hosts": ["a.com"], "format": "ghp_:10"},
    {"source": "local:x", "hosts": ["a.com"], "color": "red"},
    {"source": "nope:x", "hosts": ["a.com"]},
    {"source": "local:x", "hosts": ["a.com"], "allow_plaintext": "yes"},
    {"source": "local:x", "hosts": ["a.com"], "ports": [0]},
    {"source": "local:x", "hosts": ["a.com"], "ports": [70000]},
    {"source": "local:x", "hosts": ["a.com"], "ports": "443"},
    {"source": "local:x", "hosts": ["a.com"], "ports": [True]},
    {"source": "local:x", "hosts": ["a com"]},
    {"source": "local:x", "hosts": ["*"]},
])
def test_parse_secret_specs_rejects(table):
    with pytest.raises(ValueError):
        parse_secret_specs({"x": table})


def test_parse_secret_specs_rejects_duplicate_env_and_bad_names():
    with pytest.raises(ValueError):
        parse_secret_specs({"a": {"source": "local:a", "hosts": ["a.io"], "env": "TOKEN"},
                            "b": {"source": "local:b", "hosts": ["b.io"], "env": "TOKEN"}})
    with pytest.raises(ValueError):
        parse_secret_specs({"no spaces": {"source": "local:a", "hosts": ["a.io"]}})
    with pytest.raises(ValueError):
        parse_secret_specs({"http_proxy": {"source": "local:a", "hosts": ["a.io"]}})


# ---------------------------------------------------------------- the broker

def make_broker(tmp_path, secrets: dict, ttl_s: float = 30.0) -> Broker:
    return Broker.from_config(secrets, vault=None, data_dir=tmp_path, cache_ttl_s=ttl_s, environ={},
                              normalise_host=normalise_host)


async def test_broker_placeholders_copy_the_shape(tmp_path):
    broker = make_broker(tmp_path, {
        "github": {"source": "local:github", "hosts": ["api.github.com"], "format": "ghp_"},
        "plain": {"source": "local:plain", "hosts": ["x.io"]},
        "shaped": {"source": "local:missing", "hosts": ["x.io"], "format": "sk-:51"},
        "short": {"source": "local:short", "hosts": ["x.io"]},
    })
    real = "ghp_" + "R" * 36
    await LocalBackend(tmp_path).put("github", real)
    await LocalBackend(tmp_path).put("plain", "p" * 64)
    await LocalBackend(tmp_path).put("short", "hunter2")
    phs = await broker.new_placeholders(["github", "plain", "shaped", "short", "github"])
    assert list(phs) == ["github", "plain", "shaped", "short"]
    assert phs["github"].startswith("ghp_") and len(phs["github"]) == len(real) and phs["github"] != real
    assert len(phs["plain"]) == 64
    assert phs["shaped"].startswith("sk-") and len(phs["shaped"]) == 51  # backend has no value: format
    assert phs["short"].startswith("sgph_")  # too short to copy safely: the default shape
    again = await broker.new_placeholders(["github"])
    assert again["github"] != phs["github"]
    assert broker.env(phs) == {"GITHUB": phs["github"], "PLAIN": phs["plain"], "SHAPED": phs["shaped"],
                               "SHORT": phs["short"]}


async def test_broker_issues_placeholders_when_vault_is_down(tmp_path, openbao_control):
    broker = Broker.from_config(
        {"github": {"source": "vault:secret/github#token", "hosts": ["api.github.com"]}},
        vault={"url": openbao_control.addr, "token": openbao_control.token}, data_dir=tmp_path, environ={},
        normalise_host=normalise_host)
    with VaultStore(openbao_control).outage():
        phs = await broker.new_placeholders(["github"])
        assert phs["github"].startswith("sgph_") and len(phs["github"]) == 45
        with pytest.raises(SecretUnavailable) as info:
            await broker.binding("github", phs["github"])
        assert info.value.code == UNAVAILABLE


async def test_broker_binding(tmp_path):
    broker = make_broker(tmp_path, {"github": {"source": "local:github", "hosts": ["api.github.com"],
                                               "inject_in": ["header"]}})
    await LocalBackend(tmp_path).put("github", "ghp_real_value_0123456789")
    phs = await broker.new_placeholders(["github"])
    binding = await broker.binding("github", phs["github"])
    assert binding.value == "ghp_real_value_0123456789" and binding.hosts == {"api.github.com"}
    assert binding.inject_in == {"header"} and "ghp_real_value" not in repr(binding)
    assert await broker.bindings(phs) == [binding]
    with pytest.raises(ValueError):
        await broker.new_placeholders(["unknown"])


def test_broker_refuses_vault_specs_without_vault(tmp_path):
    with pytest.raises(ValueError):
        Broker.from_config({"g": {"source": "vault:secret/g#t", "hosts": ["a.io"]}}, vault={"url": ""},
                           data_dir=tmp_path, environ={}, normalise_host=normalise_host)
    assert parse_format("") is None


class CountingBackend:
    """An env-like backend that counts its reads and can go down."""

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)
        self.reads = 0
        self.down = False

    async def get(self, ref: str) -> str:
        self.reads += 1
        if self.down:
            raise SecretUnavailable(UNAVAILABLE, "down")
        if ref not in self.values:
            raise SecretUnavailable(NOT_FOUND, ref)
        return self.values[ref]


def counted_broker(values: dict[str, str], clock: ManualClock, ttl_s: float = 30.0) -> tuple[Broker, CountingBackend]:
    backend = CountingBackend(values)
    specs = _parse_secret_specs({
        "github": {"source": "env:GH", "hosts": ["api.github.com"], "inject_in": ["header", "query"]},
        "npm": {"source": "env:NPM", "hosts": ["registry.npmjs.org"]},
        "gone": {"source": "env:GONE", "hosts": ["x.io"]},
    }, normalise_host)
    return Broker(specs, CachedResolver({"env": backend}, ttl_s=ttl_s, clock=clock),
                  normalise_host=normalise_host), backend


async def test_fresh_lookups_answer_as_the_lookups_do_while_the_cache_holds_the_values():
    """fresh_bindings / fresh_scrub_replacements (no await) equal bindings / scrub_replacements whenever every
    value is fresh in the cache, and give way (None) in every other case: not read yet, TTL run out, an unknown
    secret, a value equal to its placeholder. They never read a backend."""
    clock = ManualClock()
    broker, backend = counted_broker({"GH": "ghp_real_value_0123456789", "NPM": "npm_real_value_0123456789"},
                                     clock)
    phs = {"github": "ghp_placeholder_000000000", "npm": "npm_placeholder_000000000"}
    assert broker.fresh_bindings(phs) is None and broker.fresh_scrub_replacements(phs) is None   # not read yet
    assert backend.reads == 0
    expected_bindings = await broker.bindings(phs)
    expected_scrub = await broker.scrub_replacements({**phs, "undefined": "x"})
    reads = backend.reads
    assert broker.fresh_bindings(phs) == expected_bindings
    assert broker.fresh_scrub_replacements({**phs, "undefined": "x"}) == expected_scrub
    assert broker.fresh_bindings({"github": phs["github"]}) == await broker.bindings({"github": phs["github"]})
    assert broker.fresh_bindings({}) == [] and broker.fresh_scrub_replacements({}) == {}
    assert broker.fresh_bindings({**phs, "undefined": "x"}) is None          # bindings raises for it
    assert broker.fresh_bindings({"github": "ghp_real_value_0123456789"}) is None   # bindings raises for it
    same = {"github": "ghp_real_value_0123456789"}
    assert broker.fresh_scrub_replacements(same) == await broker.scrub_replacements(same) == {}
    assert backend.reads == reads
    clock.now += 29.0
    assert broker.fresh_bindings(phs) == expected_bindings
    clock.now += 1.0                                                         # the TTL ran out
    assert broker.fresh_bindings(phs) is None and broker.fresh_scrub_replacements(phs) is None
    assert backend.reads == reads


async def test_injection_reads_the_backend_again_once_the_ttl_ran_out(tmp_path, monkeypatch):
    """The request path takes fresh values without awaiting, but a value past its TTL is read again: rotation is
    seen, and a backend that is down then refuses injection (503) while scrubbing keeps the last value."""
    from contextlib import AsyncExitStack

    from mitmproxy import http
    from mitmproxy.test import taddons, tflow

    from gateway.config import EgressSettings
    from gateway.egress.flows import flow_state
    from gateway.net.addresses import parse_networks
    from tests.support.services import egress_addons, open_services
    import base64

    clock = ManualClock()
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path, secrets={
            "github": {"source": "env:GH", "hosts": ["api.github.test"], "inject_in": ["header"]}},
            environ={"GH": "ghp_" + "A" * 36})
        backend = CountingBackend({"GH": "ghp_" + "A" * 36})
        svc.broker.resolver = CachedResolver({"env": backend}, ttl_s=30.0, clock=clock)
        addons = await egress_addons(stack, svc, EgressSettings(private_allow=parse_networks(["127.0.0.0/8"])),
                                     {"api.github.test": ["127.0.0.1"]})
        session, token = await svc.session(allow=["api.github.test"], secrets=["github"])
        ph = session["placeholders"]["github"]
        auth = "Basic " + base64.b64encode(f"x:{token}".encode()).decode()

        async def send() -> http.HTTPFlow:
            f = tflow.tflow(req=http.Request.make("GET", "https://api.github.test/user", b"",
                                                  {"Proxy-Authorization": auth, "Authorization": f"token {ph}"}))
            f.client_conn.sni = None
            with taddons.context(*addons.chain()):
                await addons.egress.requestheaders(f)
                await addons.injection.requestheaders(f)
                await addons.egress.request(f)
                await addons.injection.request(f)
            return f

        first = await send()
        assert first.response is None and first.request.headers["Authorization"] == "token ghp_" + "A" * 36
        reads = backend.reads
        second = await send()
        assert second.request.headers["Authorization"] == "token ghp_" + "A" * 36 and backend.reads == reads
        backend.values["GH"] = "ghp_" + "B" * 36                              # rotated
        clock.now += 30.0
        third = await send()
        assert third.request.headers["Authorization"] == "token ghp_" + "B" * 36 and backend.reads > reads
        assert flow_state(third).scrub == {("ghp_" + "B" * 36).encode(): ph.encode()}
        backend.down = True
        clock.now += 30.0
        fourth = await send()
        assert fourth.response is not None and fourth.response.status_code == 503
        assert b"secret.backend_unavailable" in fourth.response.content
