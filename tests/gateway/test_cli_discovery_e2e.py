"""`sandgate approvals` and `sandgate run` find a running sandgate through the data dir's listen.json (as the SDK
does), so a sandgate on other ports than the configured ones is found without --api-url or --config."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from sandgate.transport import listen_url
from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import ROOT, Sandgate, gateway_cli


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A real `sandgate` command process, forked from the test process's zygote (tests/support/zygote.py)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SANDGATE_") and "PROXY" not in k.upper()}
    return gateway_cli(*args, timeout=120, cwd=ROOT, env={**clean, **(env or {})})


@pytest.mark.parametrize("api, url", [
    ("127.0.0.1:9001", "http://127.0.0.1:9001"), ("0.0.0.0:8700", "http://127.0.0.1:8700"),
    ("[::]:8700", "http://[::1]:8700"), ("[fd00::1]:8700", "http://[fd00::1]:8700"),
])
def test_listen_url(tmp_path, api, url):
    (tmp_path / "listen.json").write_text(json.dumps({"api": api, "proxy": "127.0.0.1:8080"}))
    assert listen_url(tmp_path) == url


@pytest.mark.parametrize("text", [None, "", "{}", '{"api": 5}', '{"api": "h:port"}'])
def test_no_usable_listen_file_is_none(tmp_path, text):
    if text is not None:
        (tmp_path / "listen.json").write_text(text)
    assert listen_url(tmp_path) is None


@pytest.mark.timeout(300)
def test_approvals_and_run_find_the_running_sandgate_through_its_data_dir(tmp_path):
    with Sandgate(tmp_path / "gw", LOOPBACK_CONFIG) as sg:       # random ports; no --config given below
        assert sg.api_port != 8700
        admin = sg.token("admin", "ops")
        sess = sg.session(allow=[])
        resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "deploy",
                                                      "args": {"target": "prod"}})
        aid = resp.json()["approval_id"]
        listed = cli("approvals", "ls", "--data-dir", str(sg.data_dir), "--token", admin)
        assert listed.returncode == 0, listed.stderr
        assert aid in listed.stdout
        ran = cli("run", "--data-dir", str(sg.data_dir), "--", "sh", "-c", "echo $HTTPS_PROXY")
        assert ran.returncode == 0, ran.stderr
        assert "embedded" not in ran.stderr
        assert f":{sg.proxy_port}" in ran.stdout
