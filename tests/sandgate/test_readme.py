"""The README's agent loop runs as printed, against a real sandgate."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.gateway import ROOT, Sandgate


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- agent-loop:[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert match, "the agent-loop block is missing from README.md"
    return match.group(1)


def test_agent_loop_is_short():
    assert len(readme_block().strip().splitlines()) < 30


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("readme")) as g:
        yield g


@pytest.mark.e2e
def test_agent_loop_runs(sg, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(readme_block())
    env = {**os.environ, "SANDGATE_API_URL": sg.api, "SANDGATE_TOKEN": sg.harness_token}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "ran: hello from the sandbox"
    assert lines[1].startswith("refused: rm -rf / - ") and len(lines) == 2
    sessions = sg.call("GET", "/v1/sessions").json()
    assert sessions and all(s["status"] == "deleted" for s in sessions)
