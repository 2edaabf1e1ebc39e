"""yamllint (strict) over every YAML file in deploy/, and hadolint over the Dockerfile, both from PyPI."""
from __future__ import annotations

import subprocess
import sys

from tests.deploy.recipes import DEPLOY, tool, yaml_files


def yamllint(*paths) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yamllint", "--strict", "-f", "parsable",
                           "-c", str(DEPLOY / ".yamllint.yaml"), *map(str, paths)],
                          capture_output=True, text=True, timeout=60)


def test_every_deploy_yaml_file_passes_yamllint():
    files = yaml_files()
    assert {p.name for p in files} >= {"compose.yaml", "deployment.yaml", "networkpolicy.yaml"}
    out = yamllint(*files)
    assert out.returncode == 0, out.stdout + out.stderr


def test_yamllint_with_this_config_does_catch_mistakes(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\na: 2\nb:   [x,y]\n")       # duplicate key, bad spacing
    out = yamllint(bad)
    assert out.returncode != 0
    assert "key-duplicates" in out.stdout


def test_dockerfile_passes_hadolint():
    out = subprocess.run([tool("hadolint"), "--no-color", "--failure-threshold", "info",
                          str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_does_catch_mistakes(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nADD https://example.com/x.tgz /x\nRUN cd /x && pip install foo\n")
    out = subprocess.run([tool("hadolint"), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "DL3006" in out.stdout     # untagged base image
