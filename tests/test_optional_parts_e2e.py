"""`make test` on a machine without an optional system tool: the tests that need it skip, and under CI=true they
fail. Shown on `nft` (the part a clean clone here lacked), by running a real test of the suite in a pytest
process whose PATH holds every command of this one's except `nft`."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gateway import gateway_cli

ROOT = Path(__file__).resolve().parents[1]
ISOLATE_TEST = "tests/gateway/test_run_e2e.py::test_isolate_needs_a_sandgate_with_a_transparent_listener"


def path_without(tmp: Path, missing: str) -> str:
    """A PATH of one directory with a link to each command on this PATH except `missing`."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if entry.name == missing or link.exists() or link.is_symlink():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    return str(bin_dir)


def run_suite_test(node: str, path: str, ci: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PATH": path}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", "-n", "0",
                           node], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def no_nft(tmp_path_factory) -> str:
    path = path_without(tmp_path_factory.mktemp("path"), "nft")
    assert subprocess.run(["sh", "-c", "command -v nft"], env={"PATH": path}).returncode != 0
    return path


def test_without_nft_the_isolate_test_skips_on_a_users_machine(no_nft):
    out = run_suite_test(ISOLATE_TEST, no_nft, ci=False)
    if os.geteuid() != 0:                    # not root: --isolate is refused for that first; nft is not asked for
        assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr
        return
    assert out.returncode == 0 and "1 skipped" in out.stdout, out.stdout + out.stderr
    assert "missing: the nft binary" in out.stdout


def test_without_nft_the_isolate_test_fails_under_ci(no_nft):
    out = run_suite_test(ISOLATE_TEST, no_nft, ci=True)
    if os.geteuid() != 0:
        assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr
        return
    assert out.returncode == 1 and "1 failed" in out.stdout, out.stdout + out.stderr
    assert "required in CI: the nft binary" in out.stdout


def test_without_nft_isolate_names_the_missing_command(no_nft, tmp_path):
    """What a user without nft sees (and what the isolate test got before it asked for nft): the command and its
    package, exit 2, before any server is asked."""
    env = {**os.environ, "PATH": no_nft, "SANDGATE_TOKEN": "unused"}
    out = gateway_cli("run", "--api-url", "http://127.0.0.1:9", "--isolate", "--", "true", cwd=tmp_path, env=env,
                      timeout=60)
    assert out.returncode == 2, out.stderr
    if os.geteuid() == 0:
        assert "--isolate needs the nft command (package nftables)" in out.stderr
    else:
        assert "--isolate needs root" in out.stderr
