"""`sandgate packages load|check|allow` as a user runs them: a directory and a zip of OSV records loaded, the shipped
Shai-Hulud record checked, an exception allowed and withdrawn (audited), bad input refused without a traceback."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import zipfile

import pytest

from tests.support.gateway import gateway_cli

pytestmark = pytest.mark.timeout(600)        # a dozen CLI processes; on a loaded machine each takes seconds


def cli(data, *args: str) -> subprocess.CompletedProcess:
    """A real `sandgate packages` process, forked from the test process's zygote (its imports already done:
    tests/support/zygote.py), exec'd where it cannot be."""
    return gateway_cli("packages", *args, "--data-dir", str(data), timeout=60)


@pytest.fixture
def osv(tmp_path):
    root = tmp_path / "osv" / "osv" / "malicious"
    (root / "pypi" / "evil").mkdir(parents=True)
    (root / "pypi" / "evil" / "MAL-T-1.json").write_text(json.dumps({
        "id": "MAL-T-1", "summary": "Malicious code in evil (PyPI)",
        "affected": [{"package": {"ecosystem": "PyPI", "name": "Evil"}, "versions": ["0.1"]}]}))
    archive = tmp_path / "more.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("npm/x/MAL-T-2.json", json.dumps({
            "id": "MAL-T-2", "summary": "Malicious code in @x/y (npm)", "affected": [
                {"package": {"ecosystem": "npm", "name": "@x/y"},
                 "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}]}]}]}))
        zf.writestr("bad.json", "[1, 2]")
    return tmp_path / "osv", archive


def test_load_check_allow(tmp_path, osv):
    data = tmp_path / "data"
    directory, archive = osv
    load = cli(data, "load", str(directory), str(archive))
    assert load.returncode == 0, load.stderr
    assert "2 package entries from 4 records in 3 files stored as revision 1" in load.stdout
    assert "2 not OSV records" in load.stdout
    shai = cli(data, "check", "npm", "@ctrl/tinycolor", "4.1.1")              # the shipped record
    assert shai.returncode == 1
    assert shai.stdout.splitlines() == ["npm @ctrl/tinycolor 4.1.1: listed as malicious by 1 advisory",
                                        "  MAL-2025-47141  Malicious code in @ctrl/tinycolor (npm)"]
    assert cli(data, "check", "npm", "@X%2FY", "9.9.9").returncode == 1        # every version, any spelling
    assert cli(data, "check", "PyPI", "EVIL", "0.1.0").returncode == 1
    clean = cli(data, "check", "pypi", "evil", "0.2")
    assert clean.returncode == 0 and clean.stdout.strip() == "PyPI evil 0.2: no advisory lists it"
    allow = cli(data, "allow", "PyPI", "evil", "0.1", "--reason", "our fork")
    assert allow.returncode == 0 and "allowed as a site exception (revision 2)" in allow.stdout
    assert cli(data, "check", "PyPI", "evil", "0.1").returncode == 0
    assert cli(data, "allow", "PyPI", "evil", "0.1", "--remove").returncode == 0
    assert cli(data, "check", "PyPI", "evil", "0.1").returncode == 1
    db = sqlite3.connect(data / "sandgate.db")
    rows = db.execute("SELECT kind, action, detail FROM events WHERE kind LIKE 'package.%' ORDER BY id").fetchall()
    assert [(k, a) for k, a, _ in rows] == [("package.load", "load"), ("package.allow", "allow"),
                                            ("package.allow", "revoke")]
    detail = json.loads(rows[1][2])
    assert detail["reason"] == "our fork" and detail["name"] == "evil" and detail["by"].startswith("cli:")


@pytest.mark.parametrize("args, text", [
    (("check", "maven", "x", "1"), "unknown ecosystem"),
    (("load", "/nonexistent/osv"), "no such file or directory"),
    (("allow", "npm", " ", "1.0.0"), "not a package name"),
])
def test_bad_input_is_one_line(tmp_path, args, text):
    out = cli(tmp_path / "data", *args)
    assert out.returncode == 2 and text in out.stderr and "Traceback" not in out.stderr
