"""`api.harness_token_file`: the harness token is the one in that file, not DATA_DIR/harness.token (DESIGN: "On
start it writes DATA_DIR/harness.token ... unless `api.harness_token_file` names one").

Before: the key was accepted and only stopped serve from writing harness.token; nothing read the file, so a
typo'd path, a token of another data dir's key or an approver's token started a sandgate whose harness had no
working token, and `sandgate run` / `sandgate mcp` still looked for the harness.token that was never written.
Now serve refuses to start (exit 2, naming the key) unless the file holds a harness token this data dir's key
signed and not expired, and the harness commands read their token from it.
"""
from __future__ import annotations

import os
import socket

import pytest

from gateway.auth.tokens import TokenSigner, load_or_create_key, write_private
from tests.conftest import LOOPBACK_CONFIG
from tests.support.cli import run_cli
from tests.support.gateway import Sandgate, write_toml


def minted(data_dir, role: str = "harness", ttl_s: float = 3600, key: bytes | None = None) -> str:
    data_dir.mkdir(parents=True, exist_ok=True)
    return TokenSigner(key or load_or_create_key(data_dir)).mint(role, "ci", ttl_s)


def test_serve_uses_the_token_in_the_file_and_run_reads_it(tmp_path):
    data = tmp_path / "gw" / "data"
    token_file = tmp_path / "harness-token"
    write_private(token_file, minted(data).encode() + b"\n")
    cfg = {**LOOPBACK_CONFIG, "api": {"harness_token_file": str(token_file)}}
    with Sandgate(tmp_path / "gw", cfg) as sg:
        assert not (sg.data_dir / "harness.token").exists()            # not written: the file's token is it
        assert sg.harness_token == token_file.read_text().strip()
        sid = sg.session()["id"]
        assert sg.call("GET", f"/v1/sessions/{sid}").json()["created_by"] == "harness:ci"
        # `sandgate run` with the same configuration and no --token / SANDGATE_TOKEN: the file's token
        env = {"SANDGATE_TOKEN": ""}
        before = {s["id"] for s in sg.call("GET", "/v1/sessions").json()}
        out = run_cli("run", "--config", str(sg.config_path), "--data-dir", str(sg.data_dir), "--", "true", env=env)
        assert out.returncode == 0, out.stderr
        created = [s for s in sg.call("GET", "/v1/sessions").json() if s["id"] not in before]
        assert len(created) == 1 and created[0]["created_by"] == "harness:ci"


def _serve(tmp_path, token_file) -> object:
    config = tmp_path / "sandgate.toml"
    with socket.socket() as taken:              # were the file not refused, serve would fail to listen (exit 1)
        taken.bind(("127.0.0.1", 0))            # rather than serve for ever in this process
        taken.listen()
        write_toml(config, {"api": {"harness_token_file": str(token_file),
                                    "listen": f"127.0.0.1:{taken.getsockname()[1]}"}})
        return run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path / "data"))


@pytest.mark.parametrize("content, named", [
    pytest.param(None, "cannot read", id="missing"),
    pytest.param("", "does not hold a token", id="empty"),
    pytest.param("not-a-token", "is not valid here", id="garbage"),
    pytest.param("OTHER_KEY", "is not valid here", id="another-key"),
    pytest.param("EXPIRED", "is not valid here", id="expired"),
    pytest.param("APPROVER", "is not a harness token (role approver)", id="approver"),
])
def test_serve_refuses_a_token_file_the_api_would_refuse(tmp_path, content, named):
    # in this process (tests/support/cli.py): the refusal comes before anything is served
    token_file = tmp_path / "harness-token"
    data = tmp_path / "data"
    special = {"OTHER_KEY": lambda: minted(data, key=os.urandom(32).hex().encode()),
               "EXPIRED": lambda: minted(data, ttl_s=-60), "APPROVER": lambda: minted(data, role="approver")}
    if content is not None:
        token_file.write_text(special[content]() if content in special else content)
    proc = _serve(tmp_path, token_file)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "configuration error: api.harness_token_file: " in proc.stderr and named in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (data / "listen.json").exists() and not (data / "harness.token").exists()
