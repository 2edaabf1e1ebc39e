"""The shipped policies and MCP tool calls: toolcall.rego's partial sets combine with toolcall_mcp.rego's, and
its name-based rules leave tool calls with `input.mcp` to toolcall_mcp.rego."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.support.gateway import ROOT, Sandgate


def test_toolcall_mcp_rego_tests_pass_in_the_shipped_policies():
    proc = subprocess.run([sys.executable, "-m", "gateway", "policy", "test", str(ROOT / "policies"), "-v",
                           "--run", "toolcall_mcp"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_read_only_hint_does_not_allow" in proc.stdout and " 0 failed" in proc.stdout
    assert "10 passed" in proc.stdout


@pytest.mark.e2e
def test_shipped_policies_decide_mcp_tool_calls(tmp_path):
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    data_path = policies / "sandgate" / "config" / "toolcall" / "data.json"
    data = json.loads(data_path.read_text())
    data.update(mcp_allow=["fs/read_*"], mcp_deny=["fs/format_disk"])
    data_path.write_text(json.dumps(data))
    with Sandgate(tmp_path / "gw", {"policy": {"dir": str(policies)}}) as sg:
        sid = sg.session()["id"]

        def decide(tool, annotations=None):
            body = {"session": sid, "tool": tool, "args": {"path": "/workspace/a"},
                    "mcp": {"server": "fs", "annotations": annotations or {}}}
            return sg.call("POST", "/v1/toolcalls", json=body).json()

        assert decide("read_text")["decision"] == "allow"
        assert decide("write_text", {"readOnlyHint": True})["decision"] == "ask"
        assert decide("format_disk")["decision"] == "deny"
        assert "toolcall.mcp_unlisted" in decide("write_text")["codes"]
