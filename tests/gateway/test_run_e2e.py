"""`sandgate run -- CMD` end to end: real curl and pip through a real sandgate, exit codes, denial lines, the
session ended afterwards, and an embedded sandgate when none answers."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import socket
import ssl
import subprocess
import sys
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import LOOPBACK_CONFIG, need_binary
from tests.support.gateway import Sandgate, gateway_cli, write_toml
from tests.support.upstream import Upstream, free_port, make_cert


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    cert = make_cert(tmp / "certs", ["index.test", "secure.test"])
    cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                      "resolve": {**LOOPBACK_CONFIG["egress"]["resolve"], "index.test": ["127.0.0.1"]}}}
    with Sandgate(tmp / "gw", cfg) as sg, Upstream() as up:
        sg.cert = cert
        yield sg, up


def sandgate_run(sg, *args, token=None, extra_env=None, timeout=90):
    """A real `sandgate run` process, forked from the test process's zygote (its imports already done:
    tests/support/zygote.py); the embedded-sandgate test below runs the command exec'd. It leaves without tearing
    its modules down (gateway_cli's default, SANDGATE_TEST_QUICK_EXIT, docs/testing.md): what it made (its
    session, its CA file) it removes before it returns its status."""
    env = {**os.environ, "SANDGATE_TOKEN": token or sg.harness_token, **(extra_env or {})}
    env.pop("HTTPS_PROXY", None)
    env.pop("HTTP_PROXY", None)
    return gateway_cli("run", "--api-url", sg.api, *args, timeout=timeout, env=env)


def new_sessions(sg, before: set[str]) -> list[dict]:
    return [s for s in sg.call("GET", "/v1/sessions").json() if s["id"] not in before]


def session_ids(sg) -> set[str]:
    return {s["id"] for s in sg.call("GET", "/v1/sessions").json()}


def test_curl_through_run_and_session_ended_afterwards(env):
    sg, up = env
    curl = need_binary("curl")
    before = session_ids(sg)
    out = sandgate_run(sg, "--allow", "allowed.test", "--", curl, "-s", "-w", " %{http_code}",
                       f"http://allowed.test:{up.port}/hello")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello from upstream\n 200"
    assert "sandgate: denied" not in out.stderr
    (created,) = new_sessions(sg, before)
    assert created["status"] == "deleted" and created["allow"] == ["allowed.test"]
    assert up.recorder.requests[-1].path == "/hello"


def test_https_uses_the_written_ca_bundle(env, tmp_path):
    sg, _ = env
    curl = need_binary("curl")
    with Upstream(tls=sg.cert) as tls_up:
        out = sandgate_run(sg, "--allow", "secure.test", "--", "sh", "-c",
                           f'test -s "$CURL_CA_BUNDLE" && grep -q "BEGIN CERTIFICATE" "$SSL_CERT_FILE" && '
                           f'{curl} -s -w " %{{http_code}}" https://secure.test:{tls_up.port}/tls')
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello from upstream\n 200"


@pytest.mark.parametrize("script,code", [("exit 0", 0), ("exit 7", 7), ("exit 255", 255), ("kill -TERM $$", 143),
                                         ("kill -KILL $$", 137)])
def test_exit_code_passed_through(env, script, code):
    sg, _ = env
    before = session_ids(sg)
    out = sandgate_run(sg, "--", "sh", "-c", script)
    assert out.returncode == code, out.stderr
    assert [s["status"] for s in new_sessions(sg, before)] == ["deleted"]


def test_missing_command_127(env):
    sg, _ = env
    out = sandgate_run(sg, "--", "/nonexistent/cmd")
    assert out.returncode == 127 and "cannot run /nonexistent/cmd" in out.stderr


def test_one_denial_line_per_refused_destination(env):
    sg, up = env
    curl = need_binary("curl")
    script = (f"{curl} -s -o /dev/null http://other.test:{up.port}/a; {curl} -s -o /dev/null http://other.test:{up.port}/b;"
              f" {curl} -s -o /dev/null https://denied.test/; {curl} -s -o /dev/null http://allowed.test:{up.port}/ok")
    out = sandgate_run(sg, "--allow", "allowed.test", "--", "sh", "-c", script)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("sandgate: ")]
    assert len(lines) == 2, out.stderr
    assert lines[0].startswith("sandgate: denied other.test: ") and "allow list" in lines[0]
    assert lines[1].startswith("sandgate: denied denied.test: ")


def test_harness_credentials_do_not_reach_the_command(env):
    sg, _ = env
    out = sandgate_run(sg, "--", "sh", "-c", 'echo "[$SANDGATE_TOKEN][$VAULT_TOKEN]"; env | grep -c "^SANDGATE_" || true',
                       extra_env={"VAULT_TOKEN": "hvs.real"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[][]", "0"]
    assert sg.harness_token not in out.stdout


def test_persistent_workload_ttl_and_secrets_reach_the_session(env):
    sg, _ = env
    before = session_ids(sg)
    out = sandgate_run(sg, "--workload", "persistent", "--ttl-s", "120", "--allow", "a.test", "--allow", "b.test",
                       "--", "true")
    assert out.returncode == 0, out.stderr
    (created,) = new_sessions(sg, before)
    assert created["workload"] == "persistent" and created["allow"] == ["a.test", "b.test"]
    bad = sandgate_run(sg, "--secret", "nope", "--", "true")
    assert bad.returncode == 2 and "unknown secrets: nope" in bad.stderr


def test_no_sandgate_at_an_explicit_url_is_an_error(env):
    sg, _ = env
    out = gateway_cli("run", "--api-url", f"http://127.0.0.1:{free_port()}", "--token", "x", "--", "true", timeout=60)
    assert out.returncode == 2 and "no sandgate answers" in out.stderr


def test_isolate_needs_a_sandgate_with_a_transparent_listener(request):
    if os.geteuid() == 0:                                # as root, --isolate first asks for ip and nft
        need_binary("ip")
        need_binary("nft")
    # the module's sandgate only once the tools are there: tests/test_optional_parts_e2e.py runs this test alone
    # without nft (it skips, or fails under CI) and need not start one
    sg, _ = request.getfixturevalue("env")
    before = session_ids(sg)
    out = sandgate_run(sg, "--isolate", "--", "true")
    assert out.returncode == 2
    if os.geteuid() == 0:
        assert "has no transparent listener" in out.stderr and "proxy.transparent_listen" in out.stderr
    else:
        assert "--isolate needs root" in out.stderr
    assert session_ids(sg) == before                     # refused before any session or namespace was made


# -- pip against a local index -------------------------------------------------------------------------
def build_wheel(directory: Path, name: str = "sgdemo", version: str = "0.1") -> Path:
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  b"Tag: py3-none-any\n"}
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for p, d in files.items()) + f"{name}-{version}.dist-info/RECORD,,\n"
    files[f"{name}-{version}.dist-info/RECORD"] = record.encode()
    path = directory / f"{name}-{version}-py3-none-any.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p, d in files.items():
            zf.writestr(p, d)
    path.write_bytes(buf.getvalue())
    return path


@pytest.fixture
def https_index(env, tmp_path):
    sg, _ = env
    root = tmp_path / "index"
    (root / "simple" / "sgdemo").mkdir(parents=True)
    wheel = build_wheel(root / "simple" / "sgdemo")
    (root / "simple" / "sgdemo" / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    (root / "simple" / "index.html").write_text('<a href="sgdemo/">sgdemo</a>\n')

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sg.cert.cert, sg.cert.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_pip_install_from_a_local_index_through_run(env, https_index, tmp_path):
    sg, _ = env
    target = tmp_path / "target"
    pip = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--no-deps",
           "--target", str(target), "--index-url", f"https://index.test:{https_index}/simple/", "sgdemo"]
    out = sandgate_run(sg, "--allow", "index.test", "--", *pip, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (target / "sgdemo" / "__init__.py").read_text() == "VALUE = 42\n"
    refused = sandgate_run(sg, "--", *pip[:-3], "--index-url", f"https://index.test:{https_index}/simple/",
                           "--retries", "0", "--timeout", "5", "sgdemo", timeout=180)
    assert refused.returncode != 0
    assert f"sandgate: denied index.test: " in refused.stderr


# -- embedded ----------------------------------------------------------------------------------------
def test_embedded_sandgate_when_none_answers(tmp_path):
    curl = need_binary("curl")
    api_port = free_port()
    config = tmp_path / "sandgate.toml"
    write_toml(config, {"api": {"listen": f"127.0.0.1:{api_port}"}})
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDGATE_") and "PROXY" not in k.upper()}
    script = (f'echo "$HTTPS_PROXY" > {tmp_path}/proxy; {curl} -s -o /dev/null -w "%{{http_code}}" '
              f'http://nothere.test/; exit 5')
    out = subprocess.run([sys.executable, "-m", "gateway", "run", "--config", str(config), "--data-dir",   # exec'd
                          str(tmp_path / "unused"), "--", "sh", "-c", script],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 5, out.stderr
    assert out.stdout == "403"
    assert "sandgate: denied nothere.test: " in out.stderr
    assert f"no sandgate answers at http://127.0.0.1:{api_port}: starting an embedded one" in out.stderr
    proxy = (tmp_path / "proxy").read_text().strip()
    port = int(proxy.rsplit(":", 1)[1])
    with pytest.raises(OSError):       # the embedded sandgate is gone
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert not (tmp_path / "unused").exists()
