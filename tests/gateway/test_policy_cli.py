"""The shipped policies' Rego tests, run through the real CLI (`sandgate policy test`)."""
from __future__ import annotations

import subprocess
import sys

from tests.support.gateway import ROOT


def test_shipped_rego_tests_pass():
    proc = subprocess.run([sys.executable, "-m", "gateway", "policy", "test", str(ROOT / "policies")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout
    assert "PASS sandgate.egress_test." in proc.stdout


def test_policy_check_rejects_broken_policy(tmp_path):
    (tmp_path / "x.rego").write_text("package sandgate.egress\nimport rego.v1\ndecision := {\n")
    proc = subprocess.run([sys.executable, "-m", "gateway", "policy", "check", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
