"""The shipped policies' Rego tests, run through the real CLI (`sandgate policy test`)."""
from __future__ import annotations

import subprocess
import sys

from tests.support.gateway import ROOT


def test_shipped_rego_tests_pass():
    proc = subprocess.run([sys.executable, "-m", "gateway", "policy", "test", "-v", str(ROOT / "policies")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout
    assert "PASS data.sandgate.egress_test." in proc.stdout


def test_policy_check_rejects_broken_policy(tmp_path):
    (tmp_path / "x.rego").write_text("package sandgate.egress\nimport rego.v1\ndecision := {\n")
    proc = subprocess.run([sys.executable, "-m", "gateway", "policy", "check", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr


def test_policy_eval_cli(tmp_path):
    doc = {"kind": "egress", "session": {"id": "s", "workload": "ephemeral", "allow": ["pypi.org"]},
           "request": {"method": "DELETE", "host": "pypi.org", "port": 443, "path": "/x", "ip_class": ""}}
    path = tmp_path / "input.json"
    import json

    path.write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, "-m", "gateway", "policy", "eval", "--kind", "egress", "--input",
                           str(path), "--policies", str(ROOT / "policies")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"action": "ask", "reasons": ["DELETE requests need approval"],
                                       "codes": ["egress.method_ask"]}
